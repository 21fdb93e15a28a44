"""The reference fold: a case's validated pydantic events folded into its facts.

This was the product's fold before every case topic was folded from its stored state dict
(`projections/fold.py`). It reads the events as validation gives them, so it is the oracle the
state-dict fold is held to (tests/projections/test_fold.py, test_rebuild_property.py); the
judge votes' rows have their reference here too. Never imported by product code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from evaledger.domain.events import (
    CaseOpened,
    ClaimsVerified,
    DomainEvent,
    ExecutionCanceled,
    ExecutionErrored,
    ExecutionSkipped,
    JudgeVerdictRecorded,
    NamedScoresRecorded,
    OutcomeEvaluated,
    OutcomeResult,
    ParseStatus,
    ScoreOverridden,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.spec import Severity
from evaledger.projections import encoding, projectors, votes
from evaledger.projections.decode import Decoded
from evaledger.scoring.facts import (
    CaseFacts,
    CheckFact,
    MessageFact,
    MetricFact,
    OutcomeFact,
    VerdictFact,
)


def _outcomes(results: list[OutcomeResult], declared: dict[str, Severity]) -> list[OutcomeFact]:
    return [
        OutcomeFact(
            statement=r.statement,
            passed=r.passed,
            severity=r.severity or declared.get(r.statement, Severity.BLOCKER),
        )
        for r in results
    ]


def opened_facts(event: CaseOpened, agent_provider: str | None = None) -> CaseFacts:
    """The facts of a case that was just opened."""
    tc = event.test_case
    return CaseFacts(
        case_id=event.originator_id,
        run_id=event.run_id,
        test_case_key=tc.key,
        test_id=tc.test_id or tc.key,
        name=tc.name,
        repetition=event.repetition,
        variant=event.variant,
        configuration=tc.configuration,
        persona=tc.persona,
        scenario=tc.scenario,
        category=tc.category,
        tags=list(tc.tags),
        weight=tc.weight,
        evaluation_method=tc.evaluation_method,
        expected_outcomes=[
            OutcomeFact(statement=o.statement, passed=False, severity=o.severity)
            for o in tc.expected_outcomes
        ],
        agent_provider=agent_provider,
        cached=event.cached,
        last_version=event.originator_version,
    )


def apply_fact(facts: CaseFacts, event: DomainEvent) -> None:
    """Fold one case event (after CaseOpened) into the facts, in place."""
    declared = {o.statement: o.severity for o in facts.expected_outcomes}
    if isinstance(event, TranscriptRecorded):
        facts.has_transcript = True
        facts.turn_count = len(event.turns)
        facts.messages = [
            MessageFact(
                role=t.role,
                latency_ms=t.latency_ms,
                tokens=(t.usage.prompt_tokens + t.usage.completion_tokens) if t.usage else None,
                cost_usd=t.cost_usd,
                metrics=dict(t.metrics),
            )
            for t in event.turns
        ]
        if event.usage is not None:
            facts.prompt_tokens = event.usage.prompt_tokens
            facts.completion_tokens = event.usage.completion_tokens
        facts.cost_usd = event.cost_usd
        facts.duration_ms = event.duration_ms
    elif isinstance(event, ExecutionErrored):
        facts.errored = True
        facts.error_message = event.message
        facts.error_kind = event.kind
    elif isinstance(event, ExecutionCanceled):
        facts.canceled = True
    elif isinstance(event, ExecutionSkipped):
        facts.skipped = event.outcome
    elif isinstance(event, JudgeVerdictRecorded):
        facts.verdicts.append(
            VerdictFact(
                verdict_id=event.verdict_id,
                position=len(facts.verdicts),
                judge_kind=event.judge.kind,
                judge_provider=event.judge.provider,
                judge_model=event.judge.model,
                parse_status=event.parse_status,
                error=event.error,
                metric_scores=[
                    MetricFact(
                        metric=m.metric,
                        score=m.score,
                        passed=m.passed,
                        failure_code=m.failure_code or None,
                        turns=list(m.turns),
                    )
                    for m in event.metric_scores
                ],
                expected_outcomes=_outcomes(event.expected_outcomes, declared),
                latency_ms=event.latency_ms,
                cost_usd=event.cost_usd,
                tokens=(event.usage.prompt_tokens + event.usage.completion_tokens)
                if event.usage
                else 0,
                template_hash=event.template_hash,
                judge_version=event.judge.version,
            )
        )
    elif isinstance(event, NamedScoresRecorded):
        # Labels have no numeric reading; they stay in the event.
        for s in event.scores:
            if s.number is not None:
                facts.named_scores[s.name] = s.number
                facts.score_overrides.pop(s.name, None)
    elif isinstance(event, ScoreOverridden):
        facts.named_scores[event.score] = event.value
        facts.score_overrides[event.score] = event.reason
    elif isinstance(event, OutcomeEvaluated):
        facts.outcome_evaluations.append(_outcomes(event.results, declared))
    elif isinstance(event, ClaimsVerified):
        facts.claims.extend(c.support for c in event.claims)
    elif isinstance(event, StructuralCheckRecorded):
        facts.checks.append(CheckFact(check=event.check, status=event.status))
    elif isinstance(event, VerdictOverridden | VerdictInvalidated):
        for v in facts.verdicts:
            if v.verdict_id != event.verdict_id:
                continue
            v.override_reasons.append(event.reason)
            if isinstance(event, VerdictInvalidated):
                v.invalidated = True
                continue
            v.overridden = True
            if event.metric_scores is not None:
                v.metric_scores = [
                    MetricFact(
                        metric=m.metric,
                        score=m.score,
                        passed=m.passed,
                        failure_code=m.failure_code or None,
                        turns=list(m.turns),
                    )
                    for m in event.metric_scores
                ]
                v.error = None
                v.parse_status = ParseStatus.PARSED
            if event.expected_outcomes is not None:
                v.expected_outcomes = _outcomes(event.expected_outcomes, declared)
            if event.passed is not None:
                v.forced_passed = event.passed
    facts.last_version = event.originator_version


def fold_reference(events: Sequence[DomainEvent], agent_provider: str | None) -> CaseFacts:
    """A case's facts from its validated events in order (the first is its CaseOpened)."""
    first, *rest = events
    assert isinstance(first, CaseOpened)
    facts = opened_facts(first, agent_provider)
    for event in rest:
        apply_fact(facts, event)
    return facts


def vote_row(event: JudgeVerdictRecorded, run_id: str, position: int) -> dict[str, Any]:
    """A verdict's `judge_votes_v1` row from the validated event."""
    return {
        "verdict_id": str(event.verdict_id),
        "case_id": str(event.originator_id),
        "run_id": run_id,
        "judge": votes.judge_label(event.judge),
        "panel_id": None if event.panel_id is None else str(event.panel_id),
        "self_judged": event.self_judged,
        "valid": event.error is None and event.parse_status is ParseStatus.PARSED,
        "invalidated": False,
        "metric_scores": encoding.dumps(
            [
                {"metric": m.metric, "score": m.score, "passed": m.passed}
                for m in event.metric_scores
            ]
        ),
        "outcomes": encoding.dumps(
            [{"statement": o.statement, "passed": o.passed} for o in event.expected_outcomes]
        ),
        "human_scores": None,
        "human_passed": None,
        "position": position,
    }


def correction_values(event: DomainEvent) -> dict[str, Any]:
    """What a validated correction changes of its verdict's vote row."""
    if isinstance(event, VerdictInvalidated):
        return {"invalidated": True}
    assert isinstance(event, VerdictOverridden)
    values: dict[str, Any] = {}
    if event.metric_scores is not None:
        values["human_scores"] = encoding.dumps(
            [
                {"metric": m.metric, "score": m.score, "passed": m.passed}
                for m in event.metric_scores
            ]
        )
    if event.passed is not None:
        values["human_passed"] = event.passed
    return values


def use_reference_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the projections fold every case event through its validated pydantic event."""

    def open_case(opened: Decoded, agent_provider: str | None = None) -> CaseFacts:
        event = opened.event
        assert isinstance(event, CaseOpened)
        return opened_facts(event, agent_provider)

    def fold_event(facts: CaseFacts, event: Decoded) -> None:
        apply_fact(facts, event.event)

    def reference_vote_row(verdict: Decoded, run_id: str, position: int) -> dict[str, Any]:
        event = verdict.event
        assert isinstance(event, JudgeVerdictRecorded)
        return vote_row(event, run_id, position)

    def reference_correction(correction: Decoded) -> dict[str, Any]:
        return correction_values(correction.event)

    monkeypatch.setattr(projectors, "open_case", open_case)
    monkeypatch.setattr(projectors, "fold_event", fold_event)
    monkeypatch.setattr(votes, "vote_row", reference_vote_row)
    monkeypatch.setattr(votes, "correction_values", reference_correction)
