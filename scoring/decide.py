"""The decision ladder (DESIGN §3.1): the one definition of a case's status, pass/fail and gate.

`decide` reads a case's `Signals` (what the facts amount to once the spec's panel policy has been
applied) and the spec. `score_case` calls it for every case and `rescore_run` for every case it
scores columnar, so each rule is stated here and nowhere else. `explain` words a decision for
`CaseScore.gate_reason`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from evaledger.domain.spec import Gate, JudgeErrorPolicy, ScoringSpec, Severity
from evaledger.scoring.facts import CaseFacts, OutcomeFact
from evaledger.scoring.models import CaseStatus, GateRule
from evaledger.scoring.named import score_gate

__all__ = [
    "BLOCKERS_ALL_PASSED",
    "BLOCKERS_ANY",
    "OUTCOMES_ALL_PASSED",
    "OUTCOMES_ANY",
    "Decision",
    "Evidence",
    "Signals",
    "decide",
    "explain",
    "outcome_bits",
    "recorded",
]

# What the gate reads of a case's outcome results, as bits (the columnar rescore stores them).
OUTCOMES_ANY = 1
OUTCOMES_ALL_PASSED = 2
BLOCKERS_ANY = 4
BLOCKERS_ALL_PASSED = 8

# Enum members bound once: the columnar rescore decides every case of a run per spec, and a
# member looked up through its class is a Python-level call on every use.
_PASSED, _FAILED, _PENDING = CaseStatus.PASSED, CaseStatus.FAILED, CaseStatus.PENDING
_ERRORED, _CANCELED, _UNSCORED = CaseStatus.ERRORED, CaseStatus.CANCELED, CaseStatus.UNSCORED
_SKIPPED = CaseStatus.SKIPPED
_SCORE_ZERO = JudgeErrorPolicy.SCORE_ZERO
_BLOCKERS_GATE = Gate.BLOCKERS


class Signals(NamedTuple):
    """What the ladder reads of one case (spec-dependent parts already applied)."""

    errored: bool
    """The execution errored (checked before cancellation: it still errored)."""
    canceled: bool
    recorded: bool
    """Anything beyond the opening is recorded (see `recorded`)."""
    has_turns: bool
    """The transcript has at least one turn."""
    named_scores: Mapping[str, float] | None
    judged: bool
    """An active verdict counts under the panel policy (valid or an error verdict)."""
    judge_error: bool
    """Verdicts are active but none is valid under the spec."""
    outcomes: int
    """`outcome_bits` of the outcome results that enter the gate."""
    panel_overall: float | None
    """The counted verdicts' overall score (None without a valid verdict)."""
    forced: bool | None
    """A human override forcing pass/fail on a counted verdict (the latest wins), else None."""
    skipped: bool = False
    """Not an execution (ExecutionSkipped: a skipped or xfailed test)."""


class Decision(NamedTuple):
    """Where a case stands under a spec, and which rule put it there."""

    status: CaseStatus
    passed: bool | None
    gate: GateRule
    overall: float | None
    """overall_score: the panel's, 0.0 for a judge error under score_zero, None if it errored."""


class Evidence(NamedTuple):
    """What `explain` quotes beyond the signals (only `score_case` words its decisions)."""

    has_transcript: bool
    error_message: str | None
    judge_error: str | None
    outcomes: Sequence[OutcomeFact]
    override_reason: str | None
    score_overrides: Mapping[str, str]
    """Named scores a human overrode, with the reason (`ScoreOverridden`)."""
    skipped: str | None = None
    """How the test runner reported a case that was not an execution (skipped, xfailed...)."""


def recorded(facts: CaseFacts) -> bool:
    """Whether anything beyond the case's opening is recorded (else it has not run yet)."""
    return bool(
        facts.has_transcript
        or facts.verdicts
        or facts.outcome_evaluations
        or facts.claims
        or facts.checks
        or facts.named_scores
    )


def outcome_bits(outcomes: Sequence[OutcomeFact]) -> int:
    """What the gate reads of outcome results: any, all passed, any blocker, every blocker."""
    blockers = [o.passed for o in outcomes if o.severity is Severity.BLOCKER]
    return (
        (OUTCOMES_ANY if outcomes else 0)
        | (OUTCOMES_ALL_PASSED if all(o.passed for o in outcomes) else 0)
        | (BLOCKERS_ANY if blockers else 0)
        | (BLOCKERS_ALL_PASSED if all(blockers) else 0)
    )


def decide(case: Signals, spec: ScoringSpec) -> Decision:
    """A case's status, pass/fail, gate rule and overall score under the spec.

    Precedence: execution error, not an execution (skipped), cancellation, the spec's score
    gates, not run yet (pending), no transcript, judge error, not judged yet (pending), then the
    spec's gate. A human override on a counted verdict has the last word over the judge error and
    the gate, never over the execution facts (error, skip, cancellation, not run, no transcript)
    nor over the score gates.
    """
    if case.errored:
        return Decision(_ERRORED, False, GateRule.EXECUTION_ERROR, None)
    if case.skipped:
        return Decision(_SKIPPED, None, GateRule.SKIPPED, None)
    if case.canceled:
        return Decision(_CANCELED, None, GateRule.CANCELED, None)
    overall = case.panel_overall
    score_zero = spec.judge_errors is _SCORE_ZERO
    if case.judge_error and case.has_turns and score_zero:
        # The error verdict is a 0.0 that drags the run's metric mean down (reference behaviour).
        # Without a transcript there was nothing to judge, so no 0.0 is invented for it.
        overall = 0.0
    gated = score_gate(case.named_scores, spec) if case.named_scores else None
    if gated is not None:
        # The spec's explicit rule on the peer's own scores: a scored case ran, transcript or not.
        return _by_pass(gated[0], GateRule.SCORE_GATE, overall)
    if not case.recorded:
        # Opened, nothing reported yet (queued or still running): no result to fail.
        return Decision(_PENDING, None, GateRule.NONE, overall)
    if not case.has_turns:
        # Failed, not errored: the execution ran but produced no turn to judge.
        return Decision(_FAILED, False, GateRule.NO_TRANSCRIPT, overall)
    outcomes = case.outcomes
    if case.judge_error:
        decision = (
            Decision(_FAILED, False, GateRule.JUDGE_ERROR, overall)
            if score_zero
            else Decision(_UNSCORED, None, GateRule.JUDGE_ERROR, overall)
        )
    elif not case.judged and not outcomes & OUTCOMES_ANY:
        return Decision(_PENDING, None, GateRule.NONE, overall)
    elif spec.gate is _BLOCKERS_GATE:
        # No blocker outcomes: nothing blocks, so the gate passes.
        passed = not outcomes & BLOCKERS_ANY or bool(outcomes & BLOCKERS_ALL_PASSED)
        decision = _by_pass(passed, GateRule.BLOCKERS, overall)
    elif outcomes & OUTCOMES_ANY:
        # The checklist overrides the score in both directions (Connexity).
        passed = bool(outcomes & OUTCOMES_ALL_PASSED)
        decision = _by_pass(passed, GateRule.EXPECTED_OUTCOMES, overall)
    elif overall is not None:
        decision = _by_pass(overall >= spec.pass_threshold, GateRule.SCORE_THRESHOLD, overall)
    else:  # pragma: no cover - a counted valid verdict always has an overall score
        return Decision(_PENDING, None, GateRule.NONE, overall)
    if case.forced is not None:
        return _by_pass(case.forced, GateRule.OVERRIDE, overall)
    return decision


def _by_pass(passed: bool, gate: GateRule, overall: float | None) -> Decision:
    return Decision(_PASSED if passed else _FAILED, passed, gate, overall)


# ---------------------------------------------------------------------------------------------
# Reasons


def explain(decision: Decision, case: Signals, spec: ScoringSpec, evidence: Evidence) -> str:
    """The decision in words (`CaseScore.gate_reason`)."""
    gate = decision.gate
    if gate is GateRule.EXECUTION_ERROR:
        detail = f": {evidence.error_message}" if evidence.error_message else ""
        return f"execution error{detail}"
    if gate is GateRule.CANCELED:
        return "canceled before it ran"
    if gate is GateRule.SKIPPED:
        why = f": {evidence.skipped}" if evidence.skipped else ""
        return f"not an execution{why}; out of total_executions and the pass rate"
    if gate is GateRule.SCORE_GATE:
        gated = score_gate(case.named_scores or {}, spec)
        assert gated is not None
        overridden = [
            f"{name} overridden by a human: {why}"
            for name, why in evidence.score_overrides.items()
            if any(g.score == name for g in spec.score_gates)
        ]
        return "; ".join([gated[1], *overridden])
    if gate is GateRule.NO_TRANSCRIPT:
        if evidence.has_transcript:
            return "the recorded transcript has no turns"
        return "no transcript was recorded"
    if gate is GateRule.OVERRIDE:
        why = f": {evidence.override_reason}" if evidence.override_reason else ""
        return f"overridden by a human to {'pass' if decision.passed else 'fail'}{why}"
    if gate is GateRule.JUDGE_ERROR:
        if spec.judge_errors is JudgeErrorPolicy.SCORE_ZERO:
            return (
                f"{evidence.judge_error}; counted as overall_score 0.0 (judge_errors: score_zero)"
            )
        return f"{evidence.judge_error}; left unscored (judge_errors: unscored)"
    if gate is GateRule.BLOCKERS:
        blockers = [o for o in evidence.outcomes if o.severity is Severity.BLOCKER]
        if blockers:
            return _tally(blockers, "blocker outcomes")
        return "no blocker outcomes, so the blockers gate passes"
    if gate is GateRule.EXPECTED_OUTCOMES:
        return _tally(evidence.outcomes, "expected outcomes")
    if gate is GateRule.SCORE_THRESHOLD:
        sign = ">=" if decision.passed else "<"
        return f"overall_score {decision.overall} {sign} pass_threshold {spec.pass_threshold}"
    if not case.recorded:
        return "not run yet: no transcript, verdict, outcome, claim or check recorded"
    return "no verdict, outcome or check recorded yet"


def _tally(outcomes: Sequence[OutcomeFact], what: str) -> str:
    failed = [o.statement for o in outcomes if not o.passed]
    text = f"{len(outcomes) - len(failed)} of {len(outcomes)} {what} passed"
    if failed:
        text += ": " + ", ".join(repr(s) for s in failed) + " failed"
    return text
