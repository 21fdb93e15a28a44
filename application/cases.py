"""Case use cases: one per fact a caller records about a case (issue 31).

The HTTP routes (`api/routes/cases.py`), the web review forms (`api/web/review.py`) and every
other entry point record a case's facts through these functions, so each gets the same rules:

- without a client idempotency key, the same body re-sent is the same fact and writes nothing
  (its key is `auto:{topic}:{digest of the body}`; a flag or unflag names the case's version
  instead, since it toggles);
- a correction, an invalidation or a score override needs the admin scope; a label or a flag
  the write scope (the domain checks both);
- a case of a closed run takes no execution facts (transcript, verdicts, outcomes, claims,
  checks, errors, cancellation); corrections, labels and flags are still allowed.

Each returns what the ledger wrote (`Written`: the case id, the log position, how many events)
and raises the domain's typed errors (`evaledger.domain.errors`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID, uuid5

from evaledger.application.ports import Services
from evaledger.domain.bundle import BundleCheck, BundleOutcomes, BundleVerdict, verdict_fields
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    Claim,
    JudgeIdentity,
    MetricScore,
    OutcomeResult,
    ScoreLabel,
    Turn,
    Usage,
    request_digest,
)
from evaledger.domain.ledger import Context, Written, require_reason
from evaledger.scoring.facts import CaseFacts
from evaledger.scoring.models import CaseScore

__all__ = [
    "cancel_execution",
    "flag_case",
    "invalidate_verdict",
    "label_case",
    "override_score",
    "override_verdict",
    "override_verdict_metric",
    "record_check",
    "record_claims",
    "record_execution_error",
    "record_outcomes",
    "record_transcript",
    "record_verdict",
    "show_case",
    "unflag_case",
]


@dataclass(frozen=True)
class CaseView:
    """One case as the read models hold it: its facts and its score under the run's own spec."""

    facts: CaseFacts
    score: CaseScore


def show_case(services: Services, case_id: UUID) -> CaseView:
    """A case's facts and own-spec score (read after the caller's sync)."""
    facts, score = services.reads.case_score(case_id)
    return CaseView(facts=facts, score=score)


def record_transcript(
    services: Services,
    case_id: UUID,
    ctx: Context,
    *,
    turns: Sequence[Turn],
    usage: Usage | None = None,
    cost_usd: float | None = None,
    started_at: datetime | None = None,
    ended_at: datetime | None = None,
    duration_ms: float | None = None,
) -> Written:
    """Record the case's conversation (once; a second one is a conflict)."""
    return services.ledger.record_transcript(
        case_id,
        ctx,
        turns=turns,
        usage=usage,
        cost_usd=cost_usd,
        started_at=started_at,
        ended_at=ended_at,
        duration_ms=duration_ms,
        auto_key=True,
    )


def record_verdict(
    services: Services, case_id: UUID, verdict: BundleVerdict, ctx: Context
) -> Written:
    """Record one judge verdict, prompt and raw reply verbatim.

    A verdict without an id gets one derived from its body: the same verdict sent again names
    the same verdict.
    """
    vid = verdict.verdict_id or uuid5(
        case_id, "verdict\x1f" + request_digest(verdict.model_dump(mode="json"))
    )
    fields = verdict_fields(verdict, vid)
    return services.ledger.record_verdict(case_id, ctx, auto_key=True, **fields)


def record_outcomes(
    services: Services, case_id: UUID, outcomes: BundleOutcomes, ctx: Context
) -> Written:
    """Record expected-outcome results decided outside a metric verdict."""
    return services.ledger.record_outcomes(
        case_id, ctx, results=outcomes.results, judge=outcomes.judge, auto_key=True
    )


def record_claims(
    services: Services,
    case_id: UUID,
    ctx: Context,
    *,
    claims: Sequence[Claim],
    judge: JudgeIdentity | None = None,
) -> Written:
    """Record a claim decomposition with each claim's support."""
    return services.ledger.record_claims(case_id, ctx, claims=claims, judge=judge, auto_key=True)


def record_check(services: Services, case_id: UUID, check: BundleCheck, ctx: Context) -> Written:
    """Record a structural check (inconclusive when its hook is missing)."""
    return services.ledger.record_check(
        case_id, ctx, check=check.check, status=check.status, evidence=check.evidence, auto_key=True
    )


def record_execution_error(
    services: Services, case_id: UUID, ctx: Context, *, message: str, kind: str | None = None
) -> Written:
    """Record an execution error (a system error of the agent or harness, not a judge's)."""
    return services.ledger.record_execution_error(
        case_id, ctx, message=message, kind=kind, auto_key=True
    )


def cancel_execution(
    services: Services, case_id: UUID, ctx: Context, *, reason: str | None = None
) -> Written:
    """Cancel the case's execution."""
    return services.ledger.cancel_execution(case_id, ctx, reason=reason, auto_key=True)


def override_verdict(
    services: Services,
    case_id: UUID,
    ctx: Context,
    *,
    verdict_id: UUID,
    reason: str,
    metric_scores: Sequence[MetricScore] | None = None,
    expected_outcomes: Sequence[OutcomeResult] | None = None,
    passed: bool | None = None,
) -> Written:
    """An admin corrects one verdict (scores, outcomes or a forced pass/fail); it stays."""
    return services.ledger.override_verdict(
        case_id,
        ctx,
        verdict_id=verdict_id,
        reason=reason,
        metric_scores=metric_scores,
        expected_outcomes=expected_outcomes,
        passed=passed,
        auto_key=True,
    )


def override_verdict_metric(
    services: Services,
    case_id: UUID,
    ctx: Context,
    *,
    verdict_id: UUID,
    reason: str,
    passed: bool | None = None,
    metric_score: MetricScore | None = None,
) -> Written:
    """An admin forces a verdict's pass/fail, or one metric's value among its scores, or both.

    An override replaces a verdict's metric scores as a whole: the verdict's other metrics are
    kept as it scored them (metric and value), `metric_score` replaces its own metric.
    """
    scores = None
    if metric_score is not None:
        facts, _ = services.reads.case_score(case_id)
        verdict = next((v for v in facts.verdicts if v.verdict_id == verdict_id), None)
        if verdict is None:
            raise ValidationError(
                f"verdict_id: no verdict {verdict_id} in this case", field="verdict_id"
            )
        kept = [
            MetricScore.model_validate(m.model_dump(include={"metric", "score", "passed"}))
            for m in verdict.metric_scores
            if m.metric != metric_score.metric
        ]
        scores = [*kept, metric_score]
    if passed is None and scores is None:
        raise ValidationError("passed: choose pass or fail, or a metric and its score")
    return services.ledger.override_verdict(
        case_id,
        ctx,
        verdict_id=verdict_id,
        reason=reason,
        metric_scores=scores,
        passed=passed,
        auto_key=True,
    )


def invalidate_verdict(
    services: Services, case_id: UUID, ctx: Context, *, verdict_id: UUID, reason: str
) -> Written:
    """An admin rules a verdict out: it stops counting and stays in the history."""
    return services.ledger.invalidate_verdict(
        case_id, ctx, verdict_id=verdict_id, reason=reason, auto_key=True
    )


def override_score(
    services: Services, case_id: UUID, ctx: Context, *, score: str, value: float, reason: str
) -> Written:
    """An admin corrects a source scorer's verdict (Inspect's `match`, a promptfoo assertion).

    The case's named score reads `value` from then on: its pass/fail under the score gates and
    the run's source metrics change; the scorer's own reading stays in the history.
    """
    why = require_reason(reason, "a score override")
    return services.ledger.override_score(
        case_id, ctx, score=score, value=value, reason=why, auto_key=True
    )


def label_case(
    services: Services,
    case_id: UUID,
    ctx: Context,
    *,
    passed: bool,
    metric_scores: Sequence[MetricScore] = (),
    comment: str | None = None,
    named_scores: Sequence[ScoreLabel] = (),
) -> Written:
    """A reviewer's own label (pass/fail, metric scores, readings of the case's scorers, a note).

    It scores nothing; it feeds judge-vs-human agreement.
    """
    return services.ledger.label_case(
        case_id,
        ctx,
        passed=passed,
        metric_scores=metric_scores,
        comment=comment,
        named_scores=named_scores,
        auto_key=True,
    )


def flag_case(services: Services, case_id: UUID, ctx: Context, *, reason: str) -> Written:
    """Flag the case for review, saying why: it joins the run's review queue."""
    why = require_reason(reason, "a flag")
    return services.ledger.flag_case(case_id, ctx, reason=why, auto_key=True)


def unflag_case(
    services: Services, case_id: UUID, ctx: Context, *, reason: str | None = None
) -> Written:
    """Clear the case's flag (a conflict when it is not flagged)."""
    return services.ledger.unflag_case(case_id, ctx, reason=reason, auto_key=True)
