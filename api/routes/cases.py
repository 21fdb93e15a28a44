"""Cases: record facts (transcript, verdicts, outcomes, claims, checks, errors, overrides)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any
from uuid import UUID, uuid5

from fastapi import APIRouter, Query

from evaledger.api.audit import case_history, run_history
from evaledger.api.deps import ContextDep, ServicesDep, SyncedDep
from evaledger.api.schemas import (
    ClaimsBody,
    ErrorBody,
    InvalidateBody,
    OverrideBody,
    ReasonBody,
    TranscriptBody,
    Written,
)
from evaledger.domain.bundle import BundleCheck, BundleOutcomes, BundleVerdict
from evaledger.domain.events import (
    CaseEvent,
    ClaimsVerified,
    ExecutionCanceled,
    ExecutionErrored,
    JudgeVerdictRecorded,
    OutcomeEvaluated,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
    request_digest,
)
from evaledger.domain.ledger import Context, jsonable, verdict_fields

router = APIRouter(tags=["cases"])


def _record(
    services: Any, case_id: UUID, cls: type[CaseEvent], ctx: Context, body: dict[str, Any]
) -> Written:
    if ctx.idempotency_key is None:
        # Without a client key, the same body re-sent is the same fact: make it a no-op.
        key = f"auto:{cls.topic_name}:{request_digest(jsonable(body))}"
        ctx = dataclasses.replace(ctx, idempotency_key=key)
    return Written.of(services.ledger.record(case_id, cls, ctx, body))


@router.post("/cases/{case_id}/transcript", status_code=201)
def record_transcript(
    case_id: UUID, body: TranscriptBody, services: ServicesDep, ctx: ContextDep
) -> Written:
    """Record the conversation."""
    return _record(services, case_id, TranscriptRecorded, ctx, dict(body))


@router.post("/cases/{case_id}/verdicts", status_code=201)
def record_verdict(
    case_id: UUID, body: BundleVerdict, services: ServicesDep, ctx: ContextDep
) -> Written:
    """Record one judge verdict (prompt and raw reply verbatim)."""
    vid = body.verdict_id or uuid5(
        case_id, "verdict\x1f" + request_digest(body.model_dump(mode="json"))
    )
    return _record(services, case_id, JudgeVerdictRecorded, ctx, verdict_fields(body, vid))


@router.post("/cases/{case_id}/outcomes", status_code=201)
def record_outcomes(
    case_id: UUID, body: BundleOutcomes, services: ServicesDep, ctx: ContextDep
) -> Written:
    """Record expected-outcome results decided outside a metric verdict."""
    return _record(
        services, case_id, OutcomeEvaluated, ctx, {"results": body.results, "judge": body.judge}
    )


@router.post("/cases/{case_id}/claims", status_code=201)
def record_claims(
    case_id: UUID, body: ClaimsBody, services: ServicesDep, ctx: ContextDep
) -> Written:
    """Record a claim decomposition with each claim's support."""
    return _record(
        services, case_id, ClaimsVerified, ctx, {"claims": body.claims, "judge": body.judge}
    )


@router.post("/cases/{case_id}/checks", status_code=201)
def record_check(
    case_id: UUID, body: BundleCheck, services: ServicesDep, ctx: ContextDep
) -> Written:
    """Record a structural check (inconclusive when its hook is missing)."""
    return _record(
        services,
        case_id,
        StructuralCheckRecorded,
        ctx,
        {"check": body.check, "status": body.status, "evidence": body.evidence},
    )


@router.post("/cases/{case_id}/error", status_code=201)
def record_error(case_id: UUID, body: ErrorBody, services: ServicesDep, ctx: ContextDep) -> Written:
    """Record an execution error (a system error, not a judge failure)."""
    return _record(
        services, case_id, ExecutionErrored, ctx, {"message": body.message, "kind": body.kind}
    )


@router.post("/cases/{case_id}/cancel", status_code=201)
def cancel_case(
    case_id: UUID, services: ServicesDep, ctx: ContextDep, body: ReasonBody | None = None
) -> Written:
    """Cancel the case."""
    return _record(
        services, case_id, ExecutionCanceled, ctx, {"reason": body.reason if body else None}
    )


@router.post("/cases/{case_id}/overrides", status_code=201)
def override_verdict(
    case_id: UUID, body: OverrideBody, services: ServicesDep, ctx: ContextDep
) -> Written:
    """A human correction of a verdict; the original stays in the history."""
    return _record(services, case_id, VerdictOverridden, ctx, dict(body))


@router.post("/cases/{case_id}/invalidations", status_code=201)
def invalidate_verdict(
    case_id: UUID, body: InvalidateBody, services: ServicesDep, ctx: ContextDep
) -> Written:
    """Rule a verdict out; it stays in the history."""
    return _record(services, case_id, VerdictInvalidated, ctx, dict(body))


@router.get("/cases/{case_id}")
def get_case(case_id: UUID, services: SyncedDep) -> dict[str, Any]:
    """A case's facts and its score under the run's own spec."""
    facts, score = services.reads.case_score(case_id)
    return {"facts": facts.model_dump(mode="json"), "score": score.model_dump(mode="json")}


@router.get("/cases/{case_id}/history")
def history(
    case_id: UUID,
    services: ServicesDep,
    version: Annotated[int | None, Query(ge=1, description="State as of this version.")] = None,
) -> dict[str, Any]:
    """Every event of the case in order, and the case's state as of a version."""
    return case_history(services, case_id, version)


@router.get("/runs/{run_id}/history")
def history_of_run(run_id: UUID, services: ServicesDep) -> dict[str, Any]:
    """Every event of the run aggregate in order."""
    return run_history(services, run_id)
