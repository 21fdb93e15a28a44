"""Export a run from its events back to a run bundle (the inverse of import)."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid5

from evaledger.domain.bundle import (
    BUNDLE_FORMAT,
    BundleCase,
    BundleCaseStatus,
    BundleCheck,
    BundleError,
    BundleNamedScores,
    BundleOutcomes,
    BundleOverride,
    BundleRun,
    BundleRunStatus,
    BundleSkip,
    BundleVerdict,
    RunBundle,
)
from evaledger.domain.events import (
    CaseOpened,
    ClaimsVerified,
    ExecutionCanceled,
    ExecutionErrored,
    ExecutionSkipped,
    JudgeVerdictRecorded,
    NamedScoresRecorded,
    OutcomeEvaluated,
    ParseStatus,
    RunCanceled,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunStarted,
    SourceResultsRecorded,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.ledger import Ledger

_RUN_STATUS = {
    RunStarted: BundleRunStatus.RUNNING,
    RunCompleted: BundleRunStatus.COMPLETED,
    RunCanceled: BundleRunStatus.CANCELED,
    RunFailed: BundleRunStatus.FAILED,
}


def export_bundle(ledger: Ledger, run_id: UUID) -> RunBundle:
    """The run and every case of it, rebuilt from the events."""
    run = ledger.get_run(run_id)
    created: RunCreated = run.created
    status = BundleRunStatus.CREATED
    completed_at = None
    reason = None
    labels, config = created.labels, created.config
    for event in ledger.events_of(run_id):
        if isinstance(event, SourceResultsRecorded):
            labels = {**labels, **event.labels}
            config = config.model_copy(update={"scorers": event.scorers})
        if type(event) in _RUN_STATUS:
            status = _RUN_STATUS[type(event)]
        if isinstance(event, RunCompleted):
            completed_at = event.completed_at
        if isinstance(event, RunCanceled | RunFailed):
            reason = event.reason
    bundle_run = BundleRun(
        key=created.run_key,
        name=created.name,
        project=created.project,
        suite=created.suite,
        agent=created.agent,
        labels=labels,
        config=config,
        status=status,
        reason=reason,
        created_at=created.created_at,
        completed_at=completed_at,
        dataset=created.dataset,
    )
    return RunBundle(
        format=BUNDLE_FORMAT,
        run=bundle_run,
        cases=[export_case(ledger, cid) for cid in run.case_ids],
    )


def _opened_fields(event: CaseOpened) -> dict[str, Any]:
    """A bundle case's fields from its opening: the added ones only when set (stable bytes)."""
    fields: dict[str, Any] = {"test_case": event.test_case, "repetition": event.repetition}
    if event.subject is not None:
        fields["subject"] = event.subject
    if event.cached:
        fields["cached"] = True
    return fields


def export_case(ledger: Ledger, case_id: UUID) -> BundleCase:
    """One case as a bundle case."""
    fields: dict[str, Any] = {
        "verdicts": [],
        "outcomes": [],
        "claims": [],
        "checks": [],
        "overrides": [],
        "named_scores": [],
    }
    status = BundleCaseStatus.COMPLETED
    for event in ledger.events_of(case_id):
        if isinstance(event, CaseOpened):
            fields.update(_opened_fields(event))
        elif isinstance(event, TranscriptRecorded):
            fields.update(
                transcript=event.turns,
                usage=event.usage,
                cost_usd=event.cost_usd,
                started_at=event.started_at,
                ended_at=event.ended_at,
            )
        elif isinstance(event, ExecutionErrored):
            status = BundleCaseStatus.ERRORED
            fields["error"] = BundleError(message=event.message, kind=event.kind)
        elif isinstance(event, ExecutionCanceled):
            status = BundleCaseStatus.CANCELED
        elif isinstance(event, ExecutionSkipped):
            status = BundleCaseStatus.SKIPPED
            fields["skipped"] = BundleSkip(outcome=event.outcome, reason=event.reason)
        elif isinstance(event, JudgeVerdictRecorded):
            fields["verdicts"].append(_bundle_verdict(event, case_id, len(fields["verdicts"])))
        elif isinstance(event, NamedScoresRecorded):
            fields["named_scores"].append(
                BundleNamedScores.model_validate(
                    event.model_dump(include=set(BundleNamedScores.model_fields))
                )
            )
        elif isinstance(event, OutcomeEvaluated):
            fields["outcomes"].append(BundleOutcomes(results=event.results, judge=event.judge))
        elif isinstance(event, ClaimsVerified):
            fields["claims"].extend(event.claims)
        elif isinstance(event, StructuralCheckRecorded):
            fields["checks"].append(
                BundleCheck(check=event.check, status=event.status, evidence=event.evidence)
            )
        elif isinstance(event, VerdictOverridden | VerdictInvalidated):
            fields["overrides"].append(_bundle_override(event))
    if status is BundleCaseStatus.COMPLETED and not (
        "transcript" in fields
        or any(fields[k] for k in ("verdicts", "outcomes", "claims", "checks", "overrides"))
    ):
        # Only CaseOpened: not run yet (or still running). Import records a completed case's
        # transcript even when it is empty, so this is never a completed case.
        status = BundleCaseStatus.PENDING
    return BundleCase(status=status, **fields)


def _bundle_verdict(event: JudgeVerdictRecorded, case_id: UUID, index: int) -> BundleVerdict:
    """A recorded verdict as the bundle verdict importing gives it (derived values left out)."""
    derived = uuid5(case_id, f"verdict\x1f{index}")
    return BundleVerdict(
        verdict_id=None if event.verdict_id == derived else event.verdict_id,
        judge=event.judge,
        template_id=event.template_id,
        template_hash=event.template_hash,
        metric_scores=event.metric_scores,
        expected_outcomes=event.expected_outcomes,
        prompt=event.prompt,
        raw_output=event.raw_output,
        # Left out when it is what import derives, so re-imports stay idempotent.
        parse_status=None
        if event.parse_status
        == (ParseStatus.PARSED if event.error is None else ParseStatus.UNPARSEABLE)
        else event.parse_status,
        latency_ms=event.latency_ms,
        usage=event.usage,
        cost_usd=event.cost_usd,
        error=event.error,
    )


def _bundle_override(event: VerdictOverridden | VerdictInvalidated) -> BundleOverride:
    """A correction as a bundle override, keeping who made it."""
    if isinstance(event, VerdictInvalidated):
        return BundleOverride(
            kind="invalidate",
            verdict_id=event.verdict_id,
            reason=event.reason,
            actor=event.actor,
        )
    return BundleOverride(
        kind="override",
        verdict_id=event.verdict_id,
        metric_scores=event.metric_scores,
        expected_outcomes=event.expected_outcomes,
        passed=event.passed,
        reason=event.reason,
        actor=event.actor,
    )


def bundle_to_json(bundle: RunBundle) -> dict[str, Any]:
    """JSON form of a bundle with the defaults left out and bare blocker outcomes as strings."""
    data: dict[str, Any] = bundle.model_dump(mode="json", exclude_none=False)
    for case in data["cases"]:
        case["test_case"]["expected_outcomes"] = [
            o["statement"] if o["severity"] == "blocker" else o
            for o in case["test_case"]["expected_outcomes"]
        ]
    return data
