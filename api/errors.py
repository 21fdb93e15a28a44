"""Domain errors → HTTP, in one place. Every error body is `{detail, code, status}`."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from evaledger.api.bootstrap import infrastructure_error
from evaledger.api.otlp_errors import is_otlp, status_response
from evaledger.api.responses import OrjsonResponse
from evaledger.domain.errors import (
    AuthenticationError,
    ConflictError,
    EvaledgerError,
    InfrastructureError,
    NotFoundError,
    PermissionDeniedError,
    StateError,
    ValidationError,
)

log = logging.getLogger("evaledger.api")


STATUS: dict[type[EvaledgerError], int] = {
    ValidationError: 422,
    NotFoundError: 404,
    ConflictError: 409,
    StateError: 400,
    AuthenticationError: 401,
    PermissionDeniedError: 403,
    InfrastructureError: 503,
}
HTTP_CODES = {413: "payload_too_large", 422: "invalid"}
"""Codes of errors the framework raises itself (others: http_error)."""


def status_of(error: EvaledgerError) -> int:
    """HTTP status of a domain error."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


def error_body(detail: Any, code: str, status: int) -> dict[str, Any]:
    """The one error shape of the API."""
    return {"detail": detail, "code": code, "status": status}


def describe_validation(errors: list[dict[str, Any]]) -> str:
    """`body.cases.0.transcript: Input should be ...; ...` — names every offending field."""
    parts = []
    for e in errors:
        loc = ".".join(str(x) for x in e.get("loc", ()))
        parts.append(f"{loc}: {e.get('msg', 'invalid')}")
    return "; ".join(parts)


def answer(
    request: Request, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Response:
    """An error body as the path answers it: the API's shape, or OTLP's Status on its paths."""
    if is_otlp(request.scope):
        return status_response(body["status"], str(body["detail"]), request.headers)
    return OrjsonResponse(body, status_code=body["status"], headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers."""

    @app.exception_handler(EvaledgerError)
    async def _domain(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, EvaledgerError)
        status = status_of(exc)
        body = error_body(exc.detail, exc.code, status)
        if exc.field:
            body["field"] = exc.field
        return answer(request, body)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        body = error_body(describe_validation(errors), "invalid", 422)
        body["errors"] = errors
        return answer(request, body)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        # The cause goes to the server log, never to the client.
        services = getattr(request.app.state, "services", None)
        infra = infrastructure_error(exc, services.settings.db if services else "")
        if infra is not None:
            log.error("store unavailable: %s", infra.detail)
            body = error_body("the store is unavailable; retry later", infra.code, 503)
            return answer(request, body, headers={"Retry-After": "5"})
        log.exception("unhandled error", exc_info=exc)
        return answer(request, error_body("internal server error", "internal", 500))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = HTTP_CODES.get(exc.status_code, "http_error")
        return answer(request, error_body(exc.detail, code, exc.status_code))
