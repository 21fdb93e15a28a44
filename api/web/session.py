"""Who is looking at /ui: signed-in web sessions, their CSRF tokens, and the same-origin check.

A person signs in with an API token; the server keeps the session (the SHA-256 of a random id,
the token's public id, a CSRF token) in `web_sessions_v1` in the read-model database and gives
the browser only the random id, in an HttpOnly, SameSite=Strict cookie. Every request looks the
token up again, so a revoked token's session ends on its next request. A server without tokens
(open loopback serving) keeps serving the store's owner without a sign-in, as before.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated
from urllib.parse import urlencode

import sqlalchemy as sa
from fastapi import Depends, Request
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.engine import Engine

from evaledger.api.bootstrap import Services
from evaledger.api.security import origin_of, request_origins
from evaledger.application import projects
from evaledger.domain.errors import (
    AuthenticationError,
    InfrastructureError,
    PermissionDeniedError,
)
from evaledger.domain.events import TokenScope
from evaledger.domain.tokens import OPEN, Principal

SESSION_COOKIE = "evaledger_session"
CSRF_FIELD = "csrf_token"
SESSION_LIFETIME = timedelta(hours=12)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

metadata = sa.MetaData()
# Its own metadata: a projection rebuild drops and refills read models, never the sessions.
web_sessions = sa.Table(
    "web_sessions_v1",
    metadata,
    sa.Column("session_sha256", sa.String(64), primary_key=True),
    sa.Column("token_id", sa.String(32), nullable=False),
    sa.Column("csrf", sa.String(64), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)
_created: set[int] = set()


class SignInRequired(AuthenticationError):
    """A page needs a signed-in person: answered with a redirect to the sign-in form."""


@dataclass(frozen=True)
class Viewer:
    """The person behind a /ui request: their principal, CSRF token, and whether signed in."""

    principal: Principal
    csrf: str
    signed_in: bool
    shared: bool = False
    """A share link's reader (issue 36): one page, read-only, no forms."""

    @property
    def can_write(self) -> bool:
        """May add human labels (write scope)."""
        return self.principal.scope.allows(TokenScope.WRITE)

    @property
    def is_admin(self) -> bool:
        """May override and invalidate verdicts (admin scope)."""
        return self.principal.scope.allows(TokenScope.ADMIN)


def _table(engine: Engine) -> sa.Table:
    if id(engine) not in _created:
        try:
            metadata.create_all(engine, checkfirst=True)
        except sa.exc.ProgrammingError as e:  # a two-role app role may not create tables
            raise InfrastructureError(
                f"{web_sessions.name} is missing and this role cannot create it; run "
                "`evaledger migrate` as the database owner"
            ) from e
        _created.add(id(engine))
    return web_sessions


def migrate_sessions(engine: Engine, app_role: str | None) -> None:
    """Create the sessions table (as the owner) and let the app role use it (issue 29)."""
    metadata.create_all(engine, checkfirst=True)
    if app_role is not None and engine.dialect.name == "postgresql":
        # lazy: psycopg and eventsourcing's recorder (domain/store/postgres), PostgreSQL only
        from evaledger.domain.store.postgres import quote_role

        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{web_sessions.name}" '
                    f"TO {quote_role(app_role)}"
                )
            )


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _now() -> datetime:
    return datetime.now(UTC)


def open_session(services: Services, token_id: str) -> str:
    """Start a session for a token: always a fresh random id (a planted id is never reused)."""
    session_id = secrets.token_urlsafe(32)
    table = _table(services.engine)
    with services.engine.begin() as conn:
        conn.execute(table.delete().where(table.c.expires_at < _now()))
        conn.execute(
            table.insert().values(
                session_sha256=_digest(session_id),
                token_id=token_id,
                csrf=secrets.token_urlsafe(32),
                expires_at=_now() + SESSION_LIFETIME,
            )
        )
    return session_id


def end_session(services: Services, session_id: str | None) -> None:
    """Forget a session (sign-out, or a session whose token was revoked)."""
    if not session_id:
        return
    table = _table(services.engine)
    with services.engine.begin() as conn:
        conn.execute(table.delete().where(table.c.session_sha256 == _digest(session_id)))


def _session(services: Services, session_id: str) -> Viewer | None:
    table = _table(services.engine)
    with services.engine.connect() as conn:
        row = conn.execute(
            sa.select(table.c.token_id, table.c.csrf, table.c.expires_at).where(
                table.c.session_sha256 == _digest(session_id)
            )
        ).first()
    if row is None:
        return None
    expires = row.expires_at if row.expires_at.tzinfo else row.expires_at.replace(tzinfo=UTC)
    principal = projects.session_principal(services, row.token_id)
    if principal is None or expires < _now():
        end_session(services, session_id)
        return None
    return Viewer(principal, row.csrf, signed_in=True)


def open_csrf(request: Request) -> str:
    """The CSRF token of pages served without a session: keyed per server process."""
    key: bytes = request.app.state.web_csrf_key
    return hmac.new(key, b"open", hashlib.sha256).hexdigest()


def get_viewer(request: Request) -> Viewer:
    """The viewer of a /ui page (kept on `request.state` for the templates)."""
    viewer = _viewer(request)
    request.state.viewer = viewer
    return viewer


def _viewer(request: Request) -> Viewer:
    services: Services = request.app.state.services
    scheme, token = get_authorization_scheme_param(request.headers.get("authorization"))
    if scheme.lower() == "bearer" and token:
        principal = projects.authenticate(services, token)
        if principal is None:
            raise AuthenticationError("the token is unknown, malformed or revoked")
        # A bearer header is not sent by a browser on its own: no CSRF to fear.
        return Viewer(principal, open_csrf(request), signed_in=False)
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        viewer = _session(services, session_id)
        if viewer is not None:
            return viewer
    if request.app.state.tokens_required:
        raise SignInRequired("sign in with an API token to see this page")
    return Viewer(OPEN, open_csrf(request), signed_in=False)


ViewerDep = Annotated[Viewer, Depends(get_viewer)]


def same_origin(request: Request) -> bool:
    """The request comes from a page of this server.

    `Origin` (else `Referer`) is the request's own origin (its scheme as a trusted proxy
    reports it) or the configured public URL.
    """
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return False
    return origin_of(source) in request_origins(request)


def secure_cookies(request: Request) -> bool:
    """Cookies marked Secure: the request came over https, or the public URL is https."""
    public = request.app.state.settings.public_url
    return request.url.scheme == "https" or (public or "").startswith("https://")


async def check_form(request: Request, viewer: ViewerDep) -> None:
    """A state-changing /ui request: same origin, and the form's CSRF token is the viewer's."""
    if request.method in SAFE_METHODS:
        if not viewer.principal.scope.allows(TokenScope.READ):
            raise PermissionDeniedError("this token cannot read")
        return
    if not same_origin(request):
        raise PermissionDeniedError("the form was not sent from a page of this server (Origin)")
    form = await request.form()
    sent = form.get(CSRF_FIELD)
    if not isinstance(sent, str) or not hmac.compare_digest(sent, viewer.csrf):
        raise PermissionDeniedError(
            f"{CSRF_FIELD}: missing or stale; reload the page and send the form again"
        )


def sign_in_url(request: Request) -> str:
    """The sign-in form, coming back to this page afterwards."""
    return "/ui/signin?" + urlencode({"next": request.url.path + _query(request)})


def _query(request: Request) -> str:
    return f"?{request.url.query}" if request.url.query else ""


def safe_next(value: str) -> str:
    """Where to go after signing in: a page of this report only (no open redirect)."""
    if value.startswith("/ui/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/ui/"
