"""Browser-safe serving: the Host allow-list, the open-mode origin rule and the loopback guard.

A server without tokens (open mode, loopback only) is reachable by every web page the user
opens: a page can post forms cross-origin, and DNS rebinding lets it read answers under its own
name. This ASGI middleware, installed by `create_app` so every launcher (`evaledger serve`,
`uvicorn --factory`) gets it, refuses:
- a `Host` not in the allow-list (loopback names, the public URL's host, plus
  `EVALEDGER_ALLOWED_HOSTS` / `--allowed-hosts`; `*` allows any): 421, with or without tokens;
- in open mode, a client that is not on this machine (the loopback guard);
- in open mode, a state-changing request without a token that a browser sent (it carries
  `Origin`, `Referer` or `Sec-Fetch-Site`) unless it is same-origin and, outside `/ui/`, JSON.
  Forms under `/ui/` carry the web pages' session-bound CSRF token, checked there.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from evaledger.api.errors import error_body
from evaledger.api.otlp_errors import is_otlp, scope_headers, status_response
from evaledger.api.responses import OrjsonResponse

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ANY_HOST = "*"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: only this machine can connect."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _hostname(authority: str) -> str:
    """The name of a `Host` header value, without port or IPv6 brackets, lower-cased."""
    return (urlsplit(f"//{authority}").hostname or "").lower()


class BrowserGuard:
    """ASGI middleware applying the rules above (open mode read from `app.state`)."""

    def __init__(
        self, app: ASGIApp, allowed_hosts: tuple[str, ...] = (), public_url: str | None = None
    ) -> None:
        self.app = app
        self.any_host = ANY_HOST in allowed_hosts
        self.allowed = LOOPBACK_NAMES | {h.lower() for h in allowed_hosts}
        self.public_url = public_url
        if public_url is not None:
            self.allowed |= {_hostname(urlsplit(public_url).netloc)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a refused request in the one error shape (OTLP's on its paths); pass the rest."""
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                status, code, detail = refusal
                response = (
                    status_response(status, detail, scope_headers(scope))
                    if is_otlp(scope)
                    else OrjsonResponse(error_body(detail, code, status), status)
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        state = scope["app"].state if "app" in scope else None
        open_mode = state is not None and getattr(state, "tokens_required", True) is False
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if not self.any_host and _hostname(host) not in self.allowed:
            return 421, "bad_host", f"Host {host!r} is not served here (allow it: --allowed-hosts)"
        if not open_mode:
            return None
        client = (scope.get("client") or ("", 0))[0]
        if _is_ip(client) and not is_loopback(client):
            return 403, "forbidden", "serving without tokens answers this machine only"
        if scope["method"] not in UNSAFE_METHODS or "authorization" in headers:
            return None
        origins = {f"{scope.get('scheme', 'http')}://{host.lower()}"}
        if self.public_url is not None:
            origins.add(self.public_url)
        return _browser_refusal(scope["path"], origins, headers)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of a URL (an Origin or Referer header), lower-cased."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _browser_refusal(
    path: str, origins: set[str], headers: dict[str, str]
) -> tuple[int, str, str] | None:
    """A browser's token-less write must be same-origin, and JSON outside `/ui/`."""
    origin = headers.get("origin") or headers.get("referer")
    if origin is None and "sec-fetch-site" not in headers:
        return None  # not a browser: curl, the Python client, the CLI
    if origin is None or origin == "null" or origin_of(origin) not in origins:
        return 403, "cross_origin", "a token-less write must come from this server's own pages"
    if path.startswith("/ui/"):
        return None  # the web pages' forms carry a session-bound CSRF token, checked there
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        return (
            415,
            "unsupported_media_type",
            "a token-less write needs Content-Type: application/json",
        )
    return None


def request_origins(request: Request) -> set[str]:
    """The origins of this server's own pages.

    The request's own (its scheme as a trusted proxy reports it) and the configured public URL.
    """
    own = {origin_of(f"{request.url.scheme}://{request.url.netloc}")}
    settings = getattr(request.app.state, "settings", None)
    public: str | None = None if settings is None else settings.public_url
    return own | {public} if public else own


def cross_site(headers: Mapping[str, str], origins: set[str]) -> bool:
    """Whether a browser sent the request from a page of another site.

    `Sec-Fetch-Site` (every current browser sends it) other than same-origin or none (typed in
    the address bar), or an `Origin`/`Referer` outside `origins`. No such header: not a browser.
    """
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    source = headers.get("origin") or headers.get("referer")
    return source is not None and (source == "null" or origin_of(source) not in origins)
