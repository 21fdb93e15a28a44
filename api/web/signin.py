"""Signing in to and out of /ui, the favicon, and HTML error pages for every /ui request."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from evaledger.api.bootstrap import Services
from evaledger.api.errors import HTTP_CODES, describe_validation, status_of
from evaledger.api.web.pages import HERE, error_page, templates
from evaledger.api.web.session import (
    CSRF_FIELD,
    SESSION_COOKIE,
    SESSION_LIFETIME,
    SignInRequired,
    end_session,
    get_viewer,
    open_csrf,
    open_session,
    safe_next,
    same_origin,
    secure_cookies,
    sign_in_url,
)
from evaledger.application import projects
from evaledger.domain.errors import EvaledgerError

FAVICON = HERE / "static" / "favicon.svg"


def _form(request: Request, next_page: str, error: str | None, status: int = 200) -> Response:
    context = {
        "title": "Sign in",
        "next": safe_next(next_page),
        "error": error,
        "csrf": open_csrf(request),
        "tokens_required": request.app.state.tokens_required,
    }
    return templates.TemplateResponse(request, "signin.html", context, status_code=status)


def signin_page(request: Request, next: str = "/ui/") -> Response:
    """The sign-in form (an API token, typed or pasted; it never goes into a URL)."""
    return _form(request, next, None)


def sign_in(
    request: Request,
    token: Annotated[str, Form(max_length=200)] = "",
    csrf_token: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/ui/",
) -> Response:
    """Check the token, start a fresh session (never a presented one) and go back to the page."""
    if not same_origin(request) or csrf_token != open_csrf(request):
        return error_page(request, 403, f"{CSRF_FIELD}: the form did not come from here", "csrf")
    services: Services = request.app.state.services
    principal = projects.authenticate(services, token.strip())
    if principal is None or principal.token_id is None:
        return _form(request, next, "token: unknown, malformed or revoked", status=401)
    # Whatever session id the browser presented is dropped: no fixation.
    end_session(services, request.cookies.get(SESSION_COOKIE))
    session_id = open_session(services, principal.token_id)
    response = RedirectResponse(safe_next(next), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=int(SESSION_LIFETIME.total_seconds()),
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request),
    )
    return response


def sign_out(request: Request, csrf_token: Annotated[str, Form(max_length=200)] = "") -> Response:
    """End the session (server side and the cookie)."""
    try:
        viewer = get_viewer(request)
    except SignInRequired:
        viewer = None
    if viewer is not None and (not same_origin(request) or csrf_token != viewer.csrf):
        return error_page(request, 403, f"{CSRF_FIELD}: the form did not come from here", "csrf")
    end_session(request.app.state.services, request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/ui/signin", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


def favicon() -> Response:
    """The site's icon (browsers ask for /favicon.ico whatever the page links)."""
    return FileResponse(FAVICON, media_type="image/svg+xml")


def install(app: FastAPI) -> None:
    """Routes without a session check, and HTML error pages for /ui."""
    app.add_api_route("/ui/signin", signin_page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/signin", sign_in, methods=["POST"], include_in_schema=False)
    app.add_api_route("/ui/signout", sign_out, methods=["POST"], include_in_schema=False)
    app.add_api_route("/favicon.ico", favicon, methods=["GET"], include_in_schema=False)
    _html_errors(app)


async def _delegate(handler: Any, request: Request, exc: Exception) -> Response:
    response: Response = await handler(request, exc)
    return response


def _html_errors(app: FastAPI) -> None:
    """Under /ui every error is a page with its message and status; elsewhere JSON as before."""
    json_handlers = dict(app.exception_handlers)

    async def domain(request: Request, exc: Exception) -> Response:
        if not request.url.path.startswith("/ui"):
            return await _delegate(json_handlers[EvaledgerError], request, exc)
        if isinstance(exc, SignInRequired) and request.method == "GET":
            return RedirectResponse(sign_in_url(request), status_code=303)
        assert isinstance(exc, EvaledgerError)
        return error_page(request, status_of(exc), exc.detail, exc.code)

    async def invalid(request: Request, exc: Exception) -> Response:
        if not request.url.path.startswith("/ui"):
            return await _delegate(json_handlers[RequestValidationError], request, exc)
        assert isinstance(exc, RequestValidationError)
        return error_page(request, 422, describe_validation(list(exc.errors())), "invalid")

    async def http(request: Request, exc: Exception) -> Response:
        if not request.url.path.startswith("/ui"):
            return await _delegate(json_handlers[StarletteHTTPException], request, exc)
        assert isinstance(exc, StarletteHTTPException)
        code = HTTP_CODES.get(exc.status_code, "http_error")
        return error_page(request, exc.status_code, str(exc.detail), code)

    app.add_exception_handler(EvaledgerError, domain)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http)
