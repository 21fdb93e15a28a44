"""Human review: verdict corrections (admin), labels and flags (write), a run's review queue.

An admin overrides or invalidates a judge verdict, or overrides a source scorer's verdict (an
imported case's own `match`, a promptfoo assertion); a write-scope reviewer labels (in the case's
own terms: its scorers, and the rubric metrics when a judge scored them) or flags a case.

Each form goes through the Ledger's own command with the signed-in principal as actor (a token's
actor; the open local user is the server's default actor), then back to the case page, whose
history shows the new event at once (the page reads after a sync).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import urlencode
from uuid import UUID

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from evaledger.api.bootstrap import Services
from evaledger.api.deps import SyncedDep
from evaledger.api.web.pages import check_scope, guarded, queue_of, render, viewed_run
from evaledger.api.web.session import Viewer, ViewerDep
from evaledger.application import cases
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import MetricScore, ScoreLabel
from evaledger.domain.ledger import Context, Written, require_reason

router = APIRouter(prefix="/ui", include_in_schema=False)

Text = Annotated[str, Form(max_length=4000)]
SCORE_MAX = 5


def _context(services: Services, viewer: Viewer) -> Context:
    return Context.of(viewer.principal, services.settings.default_actor)


def _verdict_id(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise ValidationError(
            f"verdict_id: not a verdict id: {value!r}", field="verdict_id"
        ) from None


def _passed(value: str) -> bool | None:
    choices = {"": None, "pass": True, "fail": False}
    if value not in choices:
        raise ValidationError("passed: one of pass, fail or empty", field="passed")
    return choices[value]


def _score(metric: str, value: str, field: str = "score") -> MetricScore:
    """One metric's value as typed: pass or fail (a binary metric), else an integer 0-5."""
    if value in ("pass", "fail"):
        return MetricScore.model_validate({"metric": metric, "passed": value == "pass"})
    try:
        score = int(value)
    except ValueError:
        raise ValidationError(
            f"{field}: 0-{SCORE_MAX}, pass or fail; got {value!r}", field=field
        ) from None
    if not 0 <= score <= SCORE_MAX:
        raise ValidationError(f"{field}: 0-{SCORE_MAX}, got {value}", field=field)
    return MetricScore.model_validate({"metric": metric, "score": score})


def _reading(value: str, field: str) -> float:
    """A named score's reading as typed: pass (1) or fail (0), else a finite number."""
    text = value.strip().lower()
    if text in ("pass", "fail"):
        return 1.0 if text == "pass" else 0.0
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ValidationError(f"{field}: pass, fail or a number; got {value!r}", field=field)
    return number


Act = Callable[[Services, Context], Written]
"""One review act: a use case of `application/cases.py` given the store and the viewer's context."""


def _write(
    request: Request,
    case_id: UUID,
    build: Callable[[], Act],
    viewer: Viewer,
    queue: str,
    anchor: str,
) -> Response:
    """Parse the form (`build`), record the act, then back to the case (or the error page)."""
    services: Services = request.app.state.services

    def act() -> Response:
        check_scope(services, viewer, case_id, "case")
        build()(services, _context(services, viewer))
        back = f"?{urlencode({'queue': queue})}" if queue else ""
        return RedirectResponse(f"/ui/cases/{case_id}{back}#{anchor}", status_code=303)

    return guarded(request, act)


CORRECTIONS = "corr-h"
"""The case page's corrections section (overrides, invalidations)."""
LABELS = "labels-h"
"""The case page's labels section (labels and flags)."""


@router.post("/cases/{case_id}/override")
def override_case(
    request: Request,
    case_id: UUID,
    viewer: ViewerDep,
    verdict_id: Text = "",
    passed: Text = "",
    metric: Text = "",
    score: Text = "",
    reason: Text = "",
    queue: Text = "",
) -> Response:
    """An admin forces a verdict's pass/fail or a metric's score, saying why."""

    def build() -> Act:
        vid = _verdict_id(verdict_id)
        why = require_reason(reason, "an override")
        forced = _passed(passed)
        scored = _score(metric, score) if metric else None
        return lambda services, ctx: cases.override_verdict_metric(
            services, case_id, ctx, verdict_id=vid, reason=why, passed=forced, metric_score=scored
        )

    return _write(request, case_id, build, viewer, queue, CORRECTIONS)


@router.post("/cases/{case_id}/score-override")
def override_score(
    request: Request,
    case_id: UUID,
    viewer: ViewerDep,
    score: Text = "",
    value: Text = "",
    reason: Text = "",
    queue: Text = "",
) -> Response:
    """An admin corrects a source scorer's verdict on the case, saying why."""

    def build() -> Act:
        if not score.strip():
            raise ValidationError("score: choose one of the case's scores", field="score")
        reading = _reading(value, "value")
        why = require_reason(reason, "a score override")
        name = score.strip()
        return lambda services, ctx: cases.override_score(
            services, case_id, ctx, score=name, value=reading, reason=why
        )

    return _write(request, case_id, build, viewer, queue, CORRECTIONS)


@router.post("/cases/{case_id}/invalidate")
def invalidate_case_verdict(
    request: Request,
    case_id: UUID,
    viewer: ViewerDep,
    verdict_id: Text = "",
    reason: Text = "",
    queue: Text = "",
) -> Response:
    """An admin rules a judge verdict out, saying why."""

    def build() -> Act:
        vid = _verdict_id(verdict_id)
        why = require_reason(reason, "an invalidation")
        return lambda services, ctx: cases.invalidate_verdict(
            services, case_id, ctx, verdict_id=vid, reason=why
        )

    return _write(request, case_id, build, viewer, queue, CORRECTIONS)


async def _form(request: Request) -> FormData:
    """The posted form (already read and cached by the CSRF check)."""
    return await request.form()


SCORE_FIELD = "score."
"""A label form's metric score fields: `score.<metric id>` (blank: not scored)."""
NAMED_FIELD = "named."
"""A label form's scorer fields: `named.<named score>` (pass, fail or a number; blank: none)."""


@router.post("/cases/{case_id}/label")
def label_case(
    request: Request,
    case_id: UUID,
    viewer: ViewerDep,
    form: Annotated[FormData, Depends(_form)],
    passed: Text = "",
    comment: Text = "",
    queue: Text = "",
) -> Response:
    """A write-scope reviewer labels the case: pass/fail, optional metric scores, a comment."""

    def build() -> Act:
        verdict = _passed(passed)
        if verdict is None:
            raise ValidationError("passed: choose pass or fail", field="passed")
        scores = [
            _score(name.removeprefix(SCORE_FIELD), value.strip(), name)
            for name, value in form.multi_items()
            if name.startswith(SCORE_FIELD) and isinstance(value, str) and value.strip()
        ]
        named = [
            ScoreLabel(score=name.removeprefix(NAMED_FIELD), value=_reading(value, name))
            for name, value in form.multi_items()
            if name.startswith(NAMED_FIELD) and isinstance(value, str) and value.strip()
        ]
        note = comment.strip() or None
        return lambda services, ctx: cases.label_case(
            services,
            case_id,
            ctx,
            passed=verdict,
            metric_scores=scores,
            comment=note,
            named_scores=named,
        )

    return _write(request, case_id, build, viewer, queue, LABELS)


@router.post("/cases/{case_id}/flag")
@router.post("/cases/{case_id}/unflag")
def flag_case(
    request: Request, case_id: UUID, viewer: ViewerDep, reason: Text = "", queue: Text = ""
) -> Response:
    """A write-scope reviewer flags the case, saying why (it joins the queue), or clears it.

    One handler for both forms: they post the same fields (a reason: required to flag, optional
    to clear).
    """
    flagging = request.url.path.endswith("/flag")

    def build() -> Act:
        if flagging:
            why = require_reason(reason, "a flag")
            return lambda services, ctx: cases.flag_case(services, case_id, ctx, reason=why)
        cleared = reason.strip() or None
        return lambda services, ctx: cases.unflag_case(services, case_id, ctx, reason=cleared)

    return _write(request, case_id, build, viewer, queue, LABELS)


@router.get("/runs/{run_id}/queue", response_class=HTMLResponse)
def queue_page(request: Request, run_id: str, services: SyncedDep, viewer: ViewerDep) -> Response:
    """What needs a person in a run, walked with the keyboard (j/k, Enter opens, then decide)."""

    def build() -> dict[str, Any]:
        rid, run = viewed_run(services, viewer, run_id)
        items = queue_of(services, rid)
        return {
            "title": f"Review queue: {run.name or run.run_key}",
            "run": run,
            "items": items,
            "open": sum(1 for i in items if not i.reviewed),
        }

    return render(request, "queue.html", build)
