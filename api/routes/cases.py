"""Cases: record facts (transcript, verdicts, outcomes, claims, checks, errors, overrides).

Each POST parses its body, calls one use case of `application/cases.py` and renders what it
wrote (201, or 200 when an idempotent re-send wrote nothing).
"""

from __future__ import annotations

from typing import Annotated, TypeVar
from uuid import UUID

from fastapi import APIRouter, Query, Response

from evaledger.api.audit import case_history, run_history
from evaledger.api.deps import ContextDep, ServicesDep, SyncedDep
from evaledger.api.responses import created, replayed
from evaledger.api.schemas import (
    CaseDetail,
    CaseHistory,
    ClaimsBody,
    ErrorBody,
    FlagBody,
    InvalidateBody,
    LabelBody,
    OverrideBody,
    ReasonBody,
    RunHistory,
    ScoreOverrideBody,
    TranscriptBody,
    Written,
)
from evaledger.application import cases
from evaledger.domain.bundle import BundleCheck, BundleOutcomes, BundleVerdict
from evaledger.domain.ledger import Written as LedgerWritten

router = APIRouter(tags=["cases"])


def _written(case_id: UUID, written: LedgerWritten, response: Response) -> Written:
    created(response, f"/cases/{case_id}", written.events)
    return Written.of(written)


@router.post("/cases/{case_id}/transcript", status_code=201, responses=replayed(Written))
def record_transcript(
    case_id: UUID, body: TranscriptBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record the conversation."""
    written = cases.record_transcript(
        services,
        case_id,
        ctx,
        turns=body.turns,
        usage=body.usage,
        cost_usd=body.cost_usd,
        started_at=body.started_at,
        ended_at=body.ended_at,
        duration_ms=body.duration_ms,
    )
    return _written(case_id, written, response)


@router.post("/cases/{case_id}/verdicts", status_code=201, responses=replayed(Written))
def record_verdict(
    case_id: UUID, body: BundleVerdict, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record one judge verdict (prompt and raw reply verbatim)."""
    return _written(case_id, cases.record_verdict(services, case_id, body, ctx), response)


@router.post("/cases/{case_id}/outcomes", status_code=201, responses=replayed(Written))
def record_outcomes(
    case_id: UUID, body: BundleOutcomes, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record expected-outcome results decided outside a metric verdict."""
    return _written(case_id, cases.record_outcomes(services, case_id, body, ctx), response)


@router.post("/cases/{case_id}/claims", status_code=201, responses=replayed(Written))
def record_claims(
    case_id: UUID, body: ClaimsBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record a claim decomposition with each claim's support."""
    written = cases.record_claims(services, case_id, ctx, claims=body.claims, judge=body.judge)
    return _written(case_id, written, response)


@router.post("/cases/{case_id}/checks", status_code=201, responses=replayed(Written))
def record_check(
    case_id: UUID, body: BundleCheck, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record a structural check (inconclusive when its hook is missing)."""
    return _written(case_id, cases.record_check(services, case_id, body, ctx), response)


@router.post("/cases/{case_id}/error", status_code=201, responses=replayed(Written))
def record_error(
    case_id: UUID, body: ErrorBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record an execution error (a system error, not a judge failure)."""
    written = cases.record_execution_error(
        services, case_id, ctx, message=body.message, kind=body.kind
    )
    return _written(case_id, written, response)


@router.post("/cases/{case_id}/cancel", status_code=201, responses=replayed(Written))
def cancel_case(
    case_id: UUID,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    body: ReasonBody | None = None,
) -> Written:
    """Cancel the case."""
    reason = body.reason if body else None
    return _written(
        case_id, cases.cancel_execution(services, case_id, ctx, reason=reason), response
    )


@router.post("/cases/{case_id}/overrides", status_code=201, responses=replayed(Written))
def override_verdict(
    case_id: UUID, body: OverrideBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """A human correction of a verdict; the original stays in the history."""
    written = cases.override_verdict(
        services,
        case_id,
        ctx,
        verdict_id=body.verdict_id,
        reason=body.reason,
        metric_scores=body.metric_scores,
        expected_outcomes=body.expected_outcomes,
        passed=body.passed,
    )
    return _written(case_id, written, response)


@router.post("/cases/{case_id}/score-overrides", status_code=201, responses=replayed(Written))
def override_score(
    case_id: UUID,
    body: ScoreOverrideBody,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
) -> Written:
    """An admin corrects a source scorer's verdict (Inspect's `match`, a promptfoo assertion).

    The case's named score reads `value` from then on: its pass/fail under the score gates and
    the run's source metrics change; the scorer's own reading stays in the history.
    """
    written = cases.override_score(
        services, case_id, ctx, score=body.score, value=body.value, reason=body.reason
    )
    return _written(case_id, written, response)


@router.post("/cases/{case_id}/invalidations", status_code=201, responses=replayed(Written))
def invalidate_verdict(
    case_id: UUID, body: InvalidateBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Rule a verdict out; it stays in the history."""
    written = cases.invalidate_verdict(
        services, case_id, ctx, verdict_id=body.verdict_id, reason=body.reason
    )
    return _written(case_id, written, response)


@router.post("/cases/{case_id}/labels", status_code=201, responses=replayed(Written))
def label_case(
    case_id: UUID, body: LabelBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """A reviewer's own label (pass/fail, metric scores, a comment); feeds judge-vs-human."""
    written = cases.label_case(
        services,
        case_id,
        ctx,
        passed=body.passed,
        metric_scores=body.metric_scores,
        comment=body.comment,
        named_scores=body.named_scores,
    )
    return _written(case_id, written, response)


@router.post("/cases/{case_id}/flag", status_code=201, responses=replayed(Written))
def flag_case(
    case_id: UUID, body: FlagBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Flag the case for review with a reason: it joins the run's review queue."""
    return _written(case_id, cases.flag_case(services, case_id, ctx, reason=body.reason), response)


@router.post("/cases/{case_id}/unflag", status_code=201, responses=replayed(Written))
def unflag_case(
    case_id: UUID,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    body: ReasonBody | None = None,
) -> Written:
    """Clear the case's flag (409 when it is not flagged)."""
    reason = body.reason if body else None
    return _written(case_id, cases.unflag_case(services, case_id, ctx, reason=reason), response)


@router.get("/cases/{case_id}")
def get_case(case_id: UUID, services: SyncedDep) -> CaseDetail:
    """A case's facts and its score under the run's own spec."""
    shown = cases.show_case(services, case_id)
    return CaseDetail(facts=shown.facts, score=shown.score)


HistoryLimit = Annotated[
    int | None, Query(ge=1, le=10_000, description="At most this many events (default: all).")
]
HistoryOffset = Annotated[int, Query(ge=0, le=2**31, description="Events skipped first.")]


@router.get("/cases/{case_id}/history")
def get_case_history(
    case_id: UUID,
    services: ServicesDep,
    version: Annotated[int | None, Query(ge=1, description="State as of this version.")] = None,
    limit: HistoryLimit = None,
    offset: HistoryOffset = 0,
) -> CaseHistory:
    """Every event of the case in order (a page of them), and its state as of a version."""
    return _paged(
        CaseHistory.model_validate(case_history(services, case_id, version)), limit, offset
    )


@router.get("/runs/{run_id}/history", tags=["runs"])
def get_run_history(
    run_id: UUID, services: ServicesDep, limit: HistoryLimit = None, offset: HistoryOffset = 0
) -> RunHistory:
    """Every event of the run aggregate in order (a page of them)."""
    return _paged(RunHistory.model_validate(run_history(services, run_id)), limit, offset)


H = TypeVar("H", CaseHistory, RunHistory)


def _paged(history: H, limit: int | None, offset: int) -> H:
    events = history.events
    page = events[offset:] if limit is None else events[offset : offset + limit]
    return history.model_copy(
        update={"events": page, "total": len(events), "limit": limit, "offset": offset}
    )
