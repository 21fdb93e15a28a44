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
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    CaseEvent,
    CaseFlagged,
    CaseUnflagged,
    HumanLabelRecorded,
    ScoreOverridden,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.ledger import Context, require_reason

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


def _score(metric: str, value: str, field: str = "score") -> dict[str, Any]:
    """One metric's value as typed: pass or fail (a binary metric), else an integer 0-5."""
    if value in ("pass", "fail"):
        return {"metric": metric, "passed": value == "pass"}
    try:
        score = int(value)
    except ValueError:
        raise ValidationError(
            f"{field}: 0-{SCORE_MAX}, pass or fail; got {value!r}", field=field
        ) from None
    if not 0 <= score <= SCORE_MAX:
        raise ValidationError(f"{field}: 0-{SCORE_MAX}, got {value}", field=field)
    return {"metric": metric, "score": score}


def _metric_scores(
    services: Services, case_id: UUID, verdict_id: UUID, metric: str, value: str
) -> list[dict[str, Any]] | None:
    """The verdict's metric scores with `metric` set to `value` (an override replaces them all)."""
    if not metric:
        return None
    facts, _ = services.reads.case_score(case_id)
    verdict = next((v for v in facts.verdicts if v.verdict_id == verdict_id), None)
    if verdict is None:
        raise ValidationError(
            f"verdict_id: no verdict {verdict_id} in this case", field="verdict_id"
        )
    scores = [m.model_dump(include={"metric", "score", "passed"}) for m in verdict.metric_scores]
    kept = [m for m in scores if m["metric"] != metric]
    return [*kept, _score(metric, value)]


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


def _write(
    request: Request,
    services: Services,
    case_id: UUID,
    cls: type[CaseEvent],
    build: Any,
    viewer: Viewer,
    queue: str,
) -> Response:
    """Record one review act through the ledger, then back to the case (or the error page)."""

    def act() -> Response:
        check_scope(services, viewer, case_id, "case")
        services.ledger.record(case_id, cls, _context(services, viewer), build())
        back = f"?{urlencode({'queue': queue})}" if queue else ""
        anchor = "labels-h" if cls in _REVIEWER_ACTS else "corr-h"
        return RedirectResponse(f"/ui/cases/{case_id}{back}#{anchor}", status_code=303)

    return guarded(request, act)


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
    services: Services = request.app.state.services

    def build() -> dict[str, Any]:
        vid = _verdict_id(verdict_id)
        why = require_reason(reason, "an override")
        forced = _passed(passed)
        scores = _metric_scores(services, case_id, vid, metric, score)
        if forced is None and scores is None:
            raise ValidationError("passed: choose pass or fail, or a metric and its score")
        body: dict[str, Any] = {"verdict_id": vid, "reason": why, "passed": forced}
        if scores is not None:
            body["metric_scores"] = scores
        return body

    return _write(request, services, case_id, VerdictOverridden, build, viewer, queue)


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
    services: Services = request.app.state.services

    def build() -> dict[str, Any]:
        if not score.strip():
            raise ValidationError("score: choose one of the case's scores", field="score")
        return {
            "score": score.strip(),
            "value": _reading(value, "value"),
            "reason": require_reason(reason, "a score override"),
        }

    return _write(request, services, case_id, ScoreOverridden, build, viewer, queue)


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
    services: Services = request.app.state.services

    def build() -> dict[str, Any]:
        return {
            "verdict_id": _verdict_id(verdict_id),
            "reason": require_reason(reason, "an invalidation"),
        }

    return _write(request, services, case_id, VerdictInvalidated, build, viewer, queue)


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
    services: Services = request.app.state.services

    def build() -> dict[str, Any]:
        verdict = _passed(passed)
        if verdict is None:
            raise ValidationError("passed: choose pass or fail", field="passed")
        scores = [
            _score(name.removeprefix(SCORE_FIELD), value.strip(), name)
            for name, value in form.multi_items()
            if name.startswith(SCORE_FIELD) and isinstance(value, str) and value.strip()
        ]
        named = [
            {"score": name.removeprefix(NAMED_FIELD), "value": _reading(value, name)}
            for name, value in form.multi_items()
            if name.startswith(NAMED_FIELD) and isinstance(value, str) and value.strip()
        ]
        body: dict[str, Any] = {"passed": verdict, "metric_scores": scores}
        if named:
            body["named_scores"] = named
        if comment.strip():
            body["comment"] = comment.strip()
        return body

    return _write(request, services, case_id, HumanLabelRecorded, build, viewer, queue)


_REVIEWER_ACTS = (HumanLabelRecorded, CaseFlagged, CaseUnflagged)


@router.post("/cases/{case_id}/flag")
def flag_case(
    request: Request, case_id: UUID, viewer: ViewerDep, reason: Text = "", queue: Text = ""
) -> Response:
    """A write-scope reviewer flags the case for review, saying why (it joins the queue)."""
    services: Services = request.app.state.services

    def build() -> dict[str, Any]:
        return {"reason": require_reason(reason, "a flag")}

    return _write(request, services, case_id, CaseFlagged, build, viewer, queue)


@router.post("/cases/{case_id}/unflag")
def unflag_case(
    request: Request, case_id: UUID, viewer: ViewerDep, reason: Text = "", queue: Text = ""
) -> Response:
    """A write-scope reviewer clears the case's flag."""
    services: Services = request.app.state.services

    def build() -> dict[str, Any]:
        return {"reason": reason.strip() or None}

    return _write(request, services, case_id, CaseUnflagged, build, viewer, queue)


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
