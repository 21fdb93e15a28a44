"""Cases: record facts (transcript, verdicts, outcomes, claims, checks, errors, overrides)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, TypeVar
from uuid import UUID, uuid5

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
from evaledger.domain.bundle import BundleCheck, BundleOutcomes, BundleVerdict
from evaledger.domain.case_opening import verdict_fields
from evaledger.domain.events import (
    CaseEvent,
    CaseFlagged,
    CaseUnflagged,
    ClaimsVerified,
    ExecutionCanceled,
    ExecutionErrored,
    HumanLabelRecorded,
    JudgeVerdictRecorded,
    OutcomeEvaluated,
    ScoreOverridden,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
    request_digest,
)
from evaledger.domain.ledger import Context, jsonable, require_reason

router = APIRouter(tags=["cases"])


def _record(
    services: Any,
    case_id: UUID,
    cls: type[CaseEvent],
    ctx: Context,
    body: dict[str, Any],
    response: Response,
) -> Written:
    if ctx.idempotency_key is None:
        # Without a client key, the same body re-sent is the same fact: make it a no-op.
        key = f"auto:{cls.topic_name}:{request_digest(jsonable(body))}"
        ctx = dataclasses.replace(ctx, idempotency_key=key)
    written = Written.of(services.ledger.record(case_id, cls, ctx, body))
    created(response, f"/cases/{case_id}", written.events)
    return written


@router.post("/cases/{case_id}/transcript", status_code=201, responses=replayed(Written))
def record_transcript(
    case_id: UUID, body: TranscriptBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record the conversation."""
    return _record(services, case_id, TranscriptRecorded, ctx, dict(body), response)


@router.post("/cases/{case_id}/verdicts", status_code=201, responses=replayed(Written))
def record_verdict(
    case_id: UUID, body: BundleVerdict, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record one judge verdict (prompt and raw reply verbatim)."""
    vid = body.verdict_id or uuid5(
        case_id, "verdict\x1f" + request_digest(body.model_dump(mode="json"))
    )
    fields = verdict_fields(body, vid)
    return _record(services, case_id, JudgeVerdictRecorded, ctx, fields, response)


@router.post("/cases/{case_id}/outcomes", status_code=201, responses=replayed(Written))
def record_outcomes(
    case_id: UUID, body: BundleOutcomes, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record expected-outcome results decided outside a metric verdict."""
    fields = {"results": body.results, "judge": body.judge}
    return _record(services, case_id, OutcomeEvaluated, ctx, fields, response)


@router.post("/cases/{case_id}/claims", status_code=201, responses=replayed(Written))
def record_claims(
    case_id: UUID, body: ClaimsBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record a claim decomposition with each claim's support."""
    fields = {"claims": body.claims, "judge": body.judge}
    return _record(services, case_id, ClaimsVerified, ctx, fields, response)


@router.post("/cases/{case_id}/checks", status_code=201, responses=replayed(Written))
def record_check(
    case_id: UUID, body: BundleCheck, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record a structural check (inconclusive when its hook is missing)."""
    fields = {"check": body.check, "status": body.status, "evidence": body.evidence}
    return _record(services, case_id, StructuralCheckRecorded, ctx, fields, response)


@router.post("/cases/{case_id}/error", status_code=201, responses=replayed(Written))
def record_error(
    case_id: UUID, body: ErrorBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Record an execution error (a system error, not a judge failure)."""
    fields = {"message": body.message, "kind": body.kind}
    return _record(services, case_id, ExecutionErrored, ctx, fields, response)


@router.post("/cases/{case_id}/cancel", status_code=201, responses=replayed(Written))
def cancel_case(
    case_id: UUID,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    body: ReasonBody | None = None,
) -> Written:
    """Cancel the case."""
    fields = {"reason": body.reason if body else None}
    return _record(services, case_id, ExecutionCanceled, ctx, fields, response)


@router.post("/cases/{case_id}/overrides", status_code=201, responses=replayed(Written))
def override_verdict(
    case_id: UUID, body: OverrideBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """A human correction of a verdict; the original stays in the history."""
    return _record(services, case_id, VerdictOverridden, ctx, dict(body), response)


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
    fields = {
        "score": body.score,
        "value": body.value,
        "reason": require_reason(body.reason, "a score override"),
    }
    return _record(services, case_id, ScoreOverridden, ctx, fields, response)


@router.post("/cases/{case_id}/invalidations", status_code=201, responses=replayed(Written))
def invalidate_verdict(
    case_id: UUID, body: InvalidateBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Rule a verdict out; it stays in the history."""
    return _record(services, case_id, VerdictInvalidated, ctx, dict(body), response)


@router.post("/cases/{case_id}/labels", status_code=201, responses=replayed(Written))
def label_case(
    case_id: UUID, body: LabelBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """A reviewer's own label (pass/fail, metric scores, a comment); feeds judge-vs-human."""
    fields = body.model_dump(exclude_none=True, exclude={"named_scores"})
    fields["metric_scores"] = body.metric_scores
    if body.named_scores:
        fields["named_scores"] = body.named_scores
    return _record(services, case_id, HumanLabelRecorded, ctx, fields, response)


@router.post("/cases/{case_id}/flag", status_code=201, responses=replayed(Written))
def flag_case(
    case_id: UUID, body: FlagBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Flag the case for review with a reason: it joins the run's review queue."""
    fields = {"reason": require_reason(body.reason, "a flag")}
    return _record(
        services, case_id, CaseFlagged, _toggle(services, case_id, ctx), fields, response
    )


@router.post("/cases/{case_id}/unflag", status_code=201, responses=replayed(Written))
def unflag_case(
    case_id: UUID,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    body: ReasonBody | None = None,
) -> Written:
    """Clear the case's flag (409 when it is not flagged)."""
    fields = {"reason": body.reason if body else None}
    ctx = _toggle(services, case_id, ctx)
    return _record(services, case_id, CaseUnflagged, ctx, fields, response)


def _toggle(services: Any, case_id: UUID, ctx: Context) -> Context:
    """The derived idempotency key of a flag or unflag: it names the case's version.

    A flag toggles, so without a client key the same body sent again after an unflag is a new
    act; a resent request meets the flag it made (409), never a silent replay.
    """
    if ctx.idempotency_key is not None:
        return ctx
    version = services.ledger.get_case(case_id).version
    return dataclasses.replace(ctx, idempotency_key=f"auto:toggle:{case_id}:v{version}")


@router.get("/cases/{case_id}")
def get_case(case_id: UUID, services: SyncedDep) -> CaseDetail:
    """A case's facts and its score under the run's own spec."""
    facts, score = services.reads.case_score(case_id)
    return CaseDetail(facts=facts, score=score)


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
