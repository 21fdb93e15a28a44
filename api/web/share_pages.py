"""Share links on the web (issue 36): open a shared page without a token; make and revoke one.

`GET /share/<id>.<signature>` renders the one page the link was made for (a run's page, or
two runs' compare page) with the link's project as a read-only viewer, without a token or a
session; any other path under a link is a 404, and the page's own links lead to pages that
ask for a sign-in as before. A shared page shows no form, no run picker and no share button
(`Viewer.shared`). `POST /ui/share` (the button on the run and compare pages, CSRF-checked,
write scope) makes a link and shows it; `POST /ui/share/<id>/revoke` revokes one.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from evaledger.api.bootstrap import Services
from evaledger.api.deps import SyncedDep
from evaledger.api.share_key import share_key
from evaledger.api.web import compare_pages, pages
from evaledger.api.web.pages import error_page, render, resolve_run
from evaledger.api.web.session import Viewer, ViewerDep
from evaledger.application import sharing
from evaledger.domain.errors import EvaledgerError, ValidationError
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from evaledger.domain.tokens import Principal

public = APIRouter(include_in_schema=False)
router = APIRouter(prefix="/ui", include_in_schema=False)


def _refused(request: Request, error: EvaledgerError) -> Response:
    return error_page(request, 404, error.detail, error.code)


@public.get("/share/{token}", response_class=HTMLResponse)
def shared_page(request: Request, token: str, services: SyncedDep) -> Response:
    """The page a share link was made for, read-only, to anyone holding the link."""
    try:
        created = sharing.open_share(services, share_key(services.engine), token)
    except EvaledgerError as e:
        return _refused(request, e)
    principal = Principal(project=created.project, scope=TokenScope.READ, actor=None)
    viewer = Viewer(principal, csrf="", signed_in=False, shared=True)
    request.state.viewer = viewer
    runs = [str(r) for r in created.run_ids]
    if created.page == "run":
        return pages.run_page(request, runs[0], services, viewer)
    return compare_pages.compare_page(
        request, services, viewer, baseline=runs[0], candidate=runs[1]
    )


@public.api_route(
    "/share/{token}/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
)
def nothing_else(request: Request, token: str, rest: str) -> Response:
    """Nothing is reachable through a link but its page."""
    return error_page(request, 404, "not found", "not_found")


def _context(viewer: Viewer) -> Context:
    p = viewer.principal
    return Context(actor=p.actor or "web", project=p.project, scope=p.scope)


def _run_ids(services: Services, viewer: Viewer, page: str, runs: str) -> list[UUID]:
    given = [r.strip() for r in runs.split(",") if r.strip()]
    if page not in sharing.PAGES:
        raise ValidationError(f"page: one of {', '.join(sharing.PAGES)}", field="page")
    return [resolve_run(services, viewer, r, "runs") for r in given]


@router.post("/share", response_class=HTMLResponse)
def create_share(
    request: Request,
    services: SyncedDep,
    viewer: ViewerDep,
    page: Annotated[str, Form()],
    runs: Annotated[str, Form()],
    expires: Annotated[str, Form()] = sharing.DEFAULT_EXPIRY,
) -> Response:
    """Make a read-only link to a run's page or a compare page, and show it."""

    def build() -> dict[str, Any]:
        lasts = sharing.expiry(expires)
        ids = _run_ids(services, viewer, page, runs)
        made = sharing.share_page(
            services, share_key(services.engine), page, ids, _context(viewer), lasts
        )
        public = request.app.state.settings.public_url  # behind a proxy: its public address
        base = (public or str(request.base_url)).rstrip("/")
        return {"title": "Share link", "made": made, "url": base + made.path, "revoked": False}

    return render(request, "share.html", build)


@router.post("/share/{link_id}/revoke", response_class=HTMLResponse)
def revoke_share(
    request: Request,
    link_id: str,
    services: SyncedDep,
    viewer: ViewerDep,
    reason: Annotated[str, Form()] = "",
) -> Response:
    """Revoke a link: it opens nothing from now on."""

    def build() -> dict[str, Any]:
        sharing.revoke_share(services, link_id, _context(viewer), reason or None)
        return {"title": "Share link revoked", "made": None, "link_id": link_id, "revoked": True}

    return render(request, "share.html", build)
