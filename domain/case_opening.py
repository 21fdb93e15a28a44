"""A recorded case's events, built on its Case aggregate from one case of a run bundle.

The order of the events is part of the stored log (and of every hash over it): the transcript,
the verdicts, named scores, outcomes, claims, checks, corrections, and how the execution ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast
from uuid import UUID, uuid5

from evaledger.domain.aggregates import Case, Meta
from evaledger.domain.bundle import BundleCase, BundleCaseStatus, BundleSkip, BundleVerdict
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    ClaimsVerified,
    ExecutionCanceled,
    ExecutionErrored,
    ExecutionSkipped,
    JudgeVerdictRecorded,
    NamedScoresRecorded,
    OutcomeEvaluated,
    ParseStatus,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.metrics import MetricDefinition

Catalogue = Mapping[str, MetricDefinition]


def open_recorded_case(
    case_id: UUID,
    run_id: UUID,
    bc: BundleCase,
    meta: Meta,
    catalogue: Catalogue,
    *,
    bundle_authors: bool,
    dumped: Mapping[str, Any] | None = None,
) -> Case:
    """Open a case with every fact its bundle case holds (unsaved).

    `meta` is the opening's; the facts follow at its time by its actor. `bundle_authors`: an
    override's own `actor` is kept (an export keeps authors; a token's caller may not name one).
    `dumped` (the case's python-mode dump) gives each event's value objects already dumped: every
    state is encoded from it (`DomainEvent.encode_with`), not dumped again.
    """
    d = bc.model_dump() if dumped is None else dumped
    case = Case.open(
        case_id,
        meta,
        run_id=run_id,
        test_case=bc.test_case,
        repetition=bc.repetition,
        variant=bc.variant,
        dumped={"test_case": d["test_case"]},
    )
    follow = Meta(timestamp=meta.timestamp, actor=meta.actor)
    _record_transcript(case, bc, d, follow, catalogue)
    verdict_ids = _record_verdicts(case, bc, d, follow, catalogue)
    _record_scores_and_checks(case, bc, d, follow, catalogue)
    _record_corrections(case, bc, d, follow, catalogue, verdict_ids, bundle_authors)
    _record_ending(case, bc, follow, catalogue)
    return case


def _record_transcript(
    case: Case, bc: BundleCase, d: Mapping[str, Any], follow: Meta, catalogue: Catalogue
) -> None:
    # A completed case always records its transcript, even an empty one: that is what tells
    # "completed with no turns" (failed) from "pending" (only CaseOpened) in the events.
    if bc.status is BundleCaseStatus.COMPLETED or (
        bc.transcript or bc.usage is not None or bc.cost_usd is not None
    ):
        case.record(
            TranscriptRecorded,
            follow,
            catalogue,
            turns=bc.transcript,
            usage=bc.usage,
            cost_usd=bc.cost_usd,
            started_at=bc.started_at,
            ended_at=bc.ended_at,
            dumped={"turns": d["transcript"], "usage": d["usage"]},
        )


def _record_verdicts(
    case: Case, bc: BundleCase, d: Mapping[str, Any], follow: Meta, catalogue: Catalogue
) -> list[UUID]:
    """Record the judges' verdicts; their ids, in order (overrides may name them by index)."""
    verdict_ids: list[UUID] = []
    for i, v in enumerate(bc.verdicts):
        vid = v.verdict_id or uuid5(case.id, f"verdict\x1f{i}")
        verdict_ids.append(vid)
        vd = d["verdicts"][i]
        nested = {k: vd[k] for k in ("judge", "metric_scores", "expected_outcomes", "usage")}
        try:
            case.record(
                JudgeVerdictRecorded, follow, catalogue, dumped=nested, **verdict_fields(v, vid)
            )
        except ValidationError as e:
            raise ValidationError(
                f"verdicts[{i}].{e.detail}", field=f"verdicts[{i}].{e.field}"
            ) from None
    return verdict_ids


def _record_scores_and_checks(
    case: Case, bc: BundleCase, d: Mapping[str, Any], follow: Meta, catalogue: Catalogue
) -> None:
    for k, named in enumerate(bc.named_scores):
        nd = d["named_scores"][k]
        case.record(
            NamedScoresRecorded,
            follow,
            catalogue,
            dumped={f: nd[f] for f in ("scores", "grader", "metadata", "usage")},
            **dict(named),
        )
    for k, outcome in enumerate(bc.outcomes):
        od = d["outcomes"][k]
        case.record(
            OutcomeEvaluated,
            follow,
            catalogue,
            dumped={"results": od["results"], "judge": od["judge"]},
            results=outcome.results,
            judge=outcome.judge,
        )
    if bc.claims:
        case.record(
            ClaimsVerified, follow, catalogue, dumped={"claims": d["claims"]}, claims=bc.claims
        )
    for c in bc.checks:
        case.record(
            StructuralCheckRecorded,
            follow,
            catalogue,
            check=c.check,
            status=c.status,
            evidence=c.evidence,
            dumped={},
        )


def _record_corrections(
    case: Case,
    bc: BundleCase,
    d: Mapping[str, Any],
    follow: Meta,
    catalogue: Catalogue,
    verdict_ids: list[UUID],
    bundle_authors: bool,
) -> None:
    for i, o in enumerate(bc.overrides):
        if o.verdict_index is not None and o.verdict_index >= len(verdict_ids):
            raise ValidationError(
                f"overrides[{i}].verdict_index: no verdict {o.verdict_index}",
                field=f"overrides[{i}].verdict_index",
            )
        vid = o.verdict_id or verdict_ids[cast(int, o.verdict_index)]
        author = o.actor if o.actor and bundle_authors else follow.actor
        who = Meta(timestamp=follow.timestamp, actor=author)
        if o.kind == "invalidate":
            case.record(
                VerdictInvalidated, who, catalogue, dumped={}, verdict_id=vid, reason=o.reason
            )
        else:
            od = d["overrides"][i]
            case.record(
                VerdictOverridden,
                who,
                catalogue,
                dumped={f: od[f] for f in ("metric_scores", "expected_outcomes")},
                verdict_id=vid,
                metric_scores=o.metric_scores,
                expected_outcomes=o.expected_outcomes,
                passed=o.passed,
                reason=o.reason,
            )


def _record_ending(case: Case, bc: BundleCase, follow: Meta, catalogue: Catalogue) -> None:
    if bc.status is BundleCaseStatus.ERRORED:
        assert bc.error is not None
        case.record(
            ExecutionErrored,
            follow,
            catalogue,
            dumped={},
            message=bc.error.message,
            kind=bc.error.kind,
        )
    elif bc.status is BundleCaseStatus.CANCELED:
        case.record(ExecutionCanceled, follow, catalogue, dumped={}, reason=None)
    elif bc.status is BundleCaseStatus.SKIPPED:
        skip = bc.skipped or BundleSkip()
        case.record(
            ExecutionSkipped, follow, catalogue, dumped={}, outcome=skip.outcome, reason=skip.reason
        )


def verdict_fields(v: BundleVerdict, verdict_id: UUID) -> dict[str, Any]:
    """The fields of JudgeVerdictRecorded for a bundle verdict."""
    status = v.parse_status or (ParseStatus.PARSED if v.error is None else ParseStatus.UNPARSEABLE)
    return {
        "verdict_id": verdict_id,
        "judge": v.judge,
        "template_id": v.template_id,
        "template_hash": v.template_hash,
        "prompt": v.prompt,
        "raw_output": v.raw_output,
        "parse_status": status,
        "metric_scores": v.metric_scores,
        "expected_outcomes": v.expected_outcomes,
        "latency_ms": v.latency_ms,
        "usage": v.usage,
        "cost_usd": v.cost_usd,
        "error": v.error,
    }
