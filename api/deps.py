"""FastAPI dependencies: the wired services, who is calling, what they may touch.

Every router is included with `AUTH` (see `api/app.py`): a bearer token is authenticated,
its scope checked against the method (GET reads, anything else writes), every run or case the
request names (`run_id`, `case_id`, `baseline_run_id`, `candidate_run_id`, `noise_run_id`, in
the path or the query) must belong to the token's project, and no input may hold what a store
cannot keep.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import Depends, Header, Query, Request, Security
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from evaledger.api.bootstrap import Services
from evaledger.application import projects, review
from evaledger.domain.errors import (
    AuthenticationError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from evaledger.domain.tokens import OPEN, Principal
from evaledger.domain.types import MAX_KEY_CHARS, SUSPECT_JSON, unstorable

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SCOPED_IDS = ("run_id", "case_id", "baseline_run_id", "candidate_run_id", "noise_run_id")
"""Path or query parameters naming a run or a case: checked against the token's project."""
COOKIE = "evaledger_token"

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="An API token from `evaledger token create` (scoped to one project).",
)
cookie = APIKeyCookie(
    name=COOKIE,
    auto_error=False,
    scheme_name="cookie",
    description="The same token as a cookie, for GET requests only (the web report).",
)


def get_services(request: Request) -> Services:
    """The services built at start-up (lifespan)."""
    services: Services = request.app.state.services
    return services


def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    cookie_token: Annotated[str | None, Security(cookie)],
) -> Principal:
    """Who the request acts as: a token's principal, or the open local user."""
    # A cookie rides along on cross-site requests: it may read, never write (no CSRF).
    token = credentials.credentials if credentials is not None else None
    if token is None and request.method in SAFE_METHODS:
        token = cookie_token
    services: Services = request.app.state.services
    if token is not None:
        principal = projects.authenticate(services, token)
        if principal is None:
            raise AuthenticationError("the token is unknown, malformed or revoked")
        return principal
    if request.app.state.tokens_required:
        raise AuthenticationError(
            "this server requires an API token: send `Authorization: Bearer <token>` "
            "(create one with `evaledger token create`)"
        )
    return OPEN


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def authorize(request: Request, principal: PrincipalDep) -> None:
    """The token's scope covers the method, and every run or case named is in its project."""
    needed = TokenScope.READ if request.method in SAFE_METHODS else TokenScope.WRITE
    if not principal.scope.allows(needed):
        raise PermissionDeniedError(
            f"{request.method} needs a token with the {needed.value} scope "
            f"(this one is {principal.scope.value})"
        )
    services: Services = request.app.state.services
    _check_kinds(request, services)
    _check_blind(request, services, principal)
    if principal.project is None:
        return
    for name in SCOPED_IDS:
        values = [request.path_params[name]] if name in request.path_params else []
        values += request.query_params.getlist(name)
        for value in values:
            try:
                aggregate_id = UUID(value)
            except ValueError:
                continue  # the route's own validation names it
            project = projects.project_of(services, aggregate_id)
            if project is not None and project != principal.project:
                what = "case" if name == "case_id" else "run"
                raise NotFoundError(f"no {what} {aggregate_id}")


def _check_blind(request: Request, services: Services, principal: Principal) -> None:
    """A blind reviewer reads no result of a run or case they still have to label (403).

    The review routes themselves show them the item without its verdict (`/review/...`).
    """
    if request.url.path.startswith("/review/"):
        return
    actor = principal.actor or request.headers.get("x-actor") or services.settings.default_actor
    for name in SCOPED_IDS:
        values = [request.path_params[name]] if name in request.path_params else []
        for value in values + request.query_params.getlist(name):
            try:
                aggregate_id = value if isinstance(value, UUID) else UUID(str(value))
            except ValueError:
                continue  # the route's own validation names it
            review.check_not_blind(services, aggregate_id, actor, principal.project)


def _check_kinds(request: Request, services: Services) -> None:
    """A `{run_id}` names a run and a `{case_id}` a case: any other aggregate is a 404.

    The web pages (`/ui/`) answer a missing run with their own HTML page, so they keep theirs.
    """
    if request.url.path.startswith("/ui/"):
        return
    for name, kind in (("run_id", "run"), ("case_id", "case")):
        value = request.path_params.get(name)
        try:
            aggregate_id = UUID(value) if isinstance(value, str) else value
        except ValueError:
            continue  # the route's own validation names it
        if (
            isinstance(aggregate_id, UUID)
            and projects.aggregate_kind(services, aggregate_id) != kind
        ):
            raise NotFoundError(f"no {kind} {aggregate_id}")


async def check_input(request: Request) -> None:
    """Nothing a store cannot keep gets past the edge: NUL, lone surrogates, huge integers."""
    for name, value in request.query_params.multi_items():
        _refuse(unstorable(value), f"query.{name}")
    for name in ("x-actor", "idempotency-key"):
        header = request.headers.get(name)
        if header is not None:
            _refuse(unstorable(header), f"header.{name}")
            if len(header) > MAX_KEY_CHARS:
                raise ValidationError(
                    f"header.{name}: at most {MAX_KEY_CHARS} characters, got {len(header)}",
                    field=f"header.{name}",
                )
    if request.method in SAFE_METHODS or "json" not in request.headers.get("content-type", ""):
        return
    body = await request.body()
    if not SUSPECT_JSON.search(body):
        return
    try:
        data = await request.json()  # parsed once: FastAPI reuses it
    except ValueError:
        return  # malformed JSON: the route's own validation reports it
    _refuse(unstorable(data), "body")


def _refuse(found: tuple[str, str] | None, where: str) -> None:
    if found is not None:
        path, why = found
        field = f"{where}.{path}" if path else where
        raise ValidationError(f"{field}: {why}", field=field)


AUTH = [Depends(authorize), Depends(check_input)]
"""Router-level dependencies: `app.include_router(router, dependencies=AUTH)`."""


def get_project(
    principal: PrincipalDep,
    project: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_KEY_CHARS,
            description="Project (a token's own project when omitted).",
        ),
    ] = None,
) -> str | None:
    """The project a request reads or writes: a token's own; open serving: as asked (or all)."""
    if principal.project is None:
        return project
    if project is not None and project != principal.project:
        raise PermissionDeniedError(
            f"project: this token is for project {principal.project!r}", field="project"
        )
    return principal.project


def get_context(
    principal: PrincipalDep,
    request: Request,
    x_actor: Annotated[
        str | None,
        Header(
            description="Who sends the command (open local serving only; a token's own "
            "principal is the actor otherwise)."
        ),
    ] = None,
    idempotency_key: Annotated[str | None, Header(description="Client idempotency key.")] = None,
) -> Context:
    """Actor, project, scope and idempotency key of a command."""
    services: Services = request.app.state.services
    return Context.of(principal, x_actor or services.settings.default_actor, idempotency_key)


def get_synced(request: Request) -> Services:
    """Services whose read models reflect every write so far (read-your-writes)."""
    services: Services = request.app.state.services
    services.sync()
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
SyncedDep = Annotated[Services, Depends(get_synced)]
ContextDep = Annotated[Context, Depends(get_context)]
ProjectDep = Annotated[str | None, Depends(get_project)]
