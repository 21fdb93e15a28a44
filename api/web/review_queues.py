"""Review queues in the web report (issue 35): the queues, one queue, a reviewer's items.

`/ui/review` lists the queues; `/ui/review/{name}` shows one (progress, agreement between
reviewers, the items the viewer may see); its "Next" button (`/ui/review/{name}/next`) opens the
viewer's next item, whose forms label, skip or adjudicate it under the signed-in principal. In a
blind queue the item page gets nothing of the verdict or the other labels before the viewer's own
label: the use case (`application/review.py`) leaves them out, not the template.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote
from uuid import UUID

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from evaledger.api.bootstrap import Services
from evaledger.api.deps import SyncedDep
from evaledger.api.web.pages import guarded, render
from evaledger.api.web.session import Viewer, ViewerDep
from evaledger.application import review
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context

router = APIRouter(prefix="/ui", include_in_schema=False)

Text = Annotated[str, Form(max_length=4000)]


def _context(services: Services, viewer: Viewer) -> Context:
    return Context.of(viewer.principal, services.settings.default_actor)


def _item_url(name: str, case_id: UUID) -> str:
    return f"/ui/review/{quote(name, safe='')}/items/{case_id}"


@router.get("/review", response_class=HTMLResponse)
def queues_page(request: Request, services: SyncedDep, viewer: ViewerDep) -> Response:
    """Every review queue the viewer may see."""

    def build() -> dict[str, Any]:
        ctx = _context(services, viewer)
        return {"title": "Review queues", "queues": review.list_review_queues(services, ctx)}

    return render(request, "review_queues.html", build)


@router.get("/review/{name}", response_class=HTMLResponse)
def queue_page(
    request: Request, name: str, services: SyncedDep, viewer: ViewerDep, done: str = ""
) -> Response:
    """One queue: its rule, progress, agreement between reviewers, and its items."""

    def build() -> dict[str, Any]:
        view = review.queue_view(services, name, _context(services, viewer))
        lines = [review.agreement_line(m) for m in view.agreement]
        return {"title": f"Review: {name}", "q": view, "agreement": lines, "done": bool(done)}

    return render(request, "review_queue.html", build)


@router.get("/review/{name}/next")
def next_page(request: Request, name: str, services: SyncedDep, viewer: ViewerDep) -> Response:
    """The viewer's next item; back to the queue when nothing is left for them."""

    def act() -> Response:
        found = review.next_item(services, name, _context(services, viewer))
        if found is None:
            return RedirectResponse(f"/ui/review/{quote(name, safe='')}?done=1", status_code=303)
        return RedirectResponse(_item_url(name, found), status_code=303)

    return guarded(request, act)


@router.get("/review/{name}/items/{case_id}", response_class=HTMLResponse)
def item_page(
    request: Request, name: str, case_id: UUID, services: SyncedDep, viewer: ViewerDep
) -> Response:
    """One item as the viewer may see it, with its label, skip and adjudication forms."""

    def build() -> dict[str, Any]:
        item = review.review_item(services, name, case_id, _context(services, viewer))
        return {"title": f"Review {item.key}", "item": item}

    return render(request, "review_item.html", build)


def _verdict(passed: str) -> bool:
    if passed not in ("pass", "fail"):
        raise ValidationError("passed: choose pass or fail", field="passed")
    return passed == "pass"


def _score(score: str) -> float | None:
    text = score.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 5:
        raise ValidationError(f"score: 0-5 or empty, got {score!r}", field="score")
    return value


def _post(
    request: Request,
    name: str,
    case_id: UUID,
    viewer: Viewer,
    act: Callable[[Services, Context], object],
    then_next: bool,
) -> Response:
    services: Services = request.app.state.services

    def run() -> Response:
        act(services, _context(services, viewer))
        target = (
            f"/ui/review/{quote(name, safe='')}/next" if then_next else _item_url(name, case_id)
        )
        return RedirectResponse(target, status_code=303)

    return guarded(request, run)


@router.post("/review/{name}/items/{case_id}/label")
def label_form(
    request: Request,
    name: str,
    case_id: UUID,
    viewer: ViewerDep,
    passed: Text = "",
    score: Text = "",
    comment: Text = "",
) -> Response:
    """The viewer labels an item given to them; back to it (now showing the verdict)."""

    def act(services: Services, ctx: Context) -> object:
        verdict, value, note = _verdict(passed), _score(score), comment.strip() or None
        return review.label_item(
            services, name, case_id, ctx, passed=verdict, score=value, comment=note
        )

    return _post(request, name, case_id, viewer, act, then_next=False)


@router.post("/review/{name}/items/{case_id}/skip")
def skip_form(
    request: Request, name: str, case_id: UUID, viewer: ViewerDep, reason: Text = ""
) -> Response:
    """The viewer passes on an item; on to their next one."""

    def act(services: Services, ctx: Context) -> object:
        return review.skip_item(services, name, case_id, ctx, reason=reason.strip() or None)

    return _post(request, name, case_id, viewer, act, then_next=True)


@router.post("/review/{name}/items/{case_id}/adjudicate")
def adjudicate_form(
    request: Request,
    name: str,
    case_id: UUID,
    viewer: ViewerDep,
    passed: Text = "",
    score: Text = "",
    reason: Text = "",
) -> Response:
    """An adjudicator (or an admin) fixes the item's gold label, saying why."""

    def act(services: Services, ctx: Context) -> object:
        verdict, value = _verdict(passed), _score(score)
        return review.adjudicate_item(
            services, name, case_id, ctx, passed=verdict, score=value, reason=reason
        )

    return _post(request, name, case_id, viewer, act, then_next=False)
