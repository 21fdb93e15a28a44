"""The decision ladder (`scoring.decide`): precedence of its rungs, exact results."""

from __future__ import annotations

from evaledger.domain.spec import Gate, JudgeErrorPolicy, RunConfig, ScoreGate, resolve_spec
from evaledger.scoring.decide import (
    BLOCKERS_ALL_PASSED,
    BLOCKERS_ANY,
    OUTCOMES_ALL_PASSED,
    OUTCOMES_ANY,
    Decision,
    Signals,
    decide,
)
from evaledger.scoring.models import CaseStatus, GateRule

SPEC = resolve_spec(RunConfig())
JUDGED = Signals(
    errored=False,
    canceled=False,
    recorded=True,
    has_turns=True,
    named_scores=None,
    judged=True,
    judge_error=False,
    outcomes=OUTCOMES_ALL_PASSED | BLOCKERS_ALL_PASSED,  # all() of nothing holds
    panel_overall=80.0,
    forced=None,
)


def test_a_judged_case_is_decided_by_the_threshold() -> None:
    assert decide(JUDGED, SPEC) == Decision(CaseStatus.PASSED, True, GateRule.SCORE_THRESHOLD, 80.0)
    low = JUDGED._replace(panel_overall=10.0)
    assert decide(low, SPEC) == Decision(CaseStatus.FAILED, False, GateRule.SCORE_THRESHOLD, 10.0)


def test_an_execution_error_beats_cancellation_and_every_judgement() -> None:
    case = JUDGED._replace(errored=True, canceled=True, forced=True)
    assert decide(case, SPEC) == Decision(CaseStatus.ERRORED, False, GateRule.EXECUTION_ERROR, None)
    canceled = JUDGED._replace(canceled=True, forced=True)
    assert decide(canceled, SPEC) == Decision(CaseStatus.CANCELED, None, GateRule.CANCELED, None)


def test_an_override_has_the_last_word_over_the_gate_but_not_over_a_missing_transcript() -> None:
    forced = JUDGED._replace(panel_overall=10.0, forced=True)
    assert decide(forced, SPEC) == Decision(CaseStatus.PASSED, True, GateRule.OVERRIDE, 10.0)
    no_turns = forced._replace(has_turns=False)
    assert decide(no_turns, SPEC) == Decision(
        CaseStatus.FAILED, False, GateRule.NO_TRANSCRIPT, 10.0
    )


def test_a_judge_error_counts_zero_only_with_a_transcript_and_under_score_zero() -> None:
    error = JUDGED._replace(judge_error=True, panel_overall=None)
    assert decide(error, SPEC) == Decision(CaseStatus.FAILED, False, GateRule.JUDGE_ERROR, 0.0)
    unscored = SPEC.model_copy(update={"judge_errors": JudgeErrorPolicy.UNSCORED})
    assert decide(error, unscored) == Decision(
        CaseStatus.UNSCORED, None, GateRule.JUDGE_ERROR, None
    )
    assert decide(error._replace(has_turns=False), SPEC).overall is None


def test_outcomes_override_the_score_and_the_blockers_gate_reads_only_blockers() -> None:
    failing = JUDGED._replace(outcomes=OUTCOMES_ANY | BLOCKERS_ANY | BLOCKERS_ALL_PASSED)
    assert decide(failing, SPEC) == Decision(
        CaseStatus.FAILED, False, GateRule.EXPECTED_OUTCOMES, 80.0
    )
    blockers = SPEC.model_copy(update={"gate": Gate.BLOCKERS})
    assert decide(failing, blockers) == Decision(CaseStatus.PASSED, True, GateRule.BLOCKERS, 80.0)
    assert decide(JUDGED._replace(outcomes=0), blockers).passed is True  # no blocker: passes


def test_score_gates_decide_before_pending_and_nothing_recorded_is_pending() -> None:
    gated = SPEC.model_copy(update={"score_gates": (ScoreGate(score="accuracy", value=0.5),)})
    bare = JUDGED._replace(has_turns=False, judged=False, panel_overall=None, outcomes=0)
    assert decide(bare._replace(named_scores={"accuracy": 0.7}), gated) == Decision(
        CaseStatus.PASSED, True, GateRule.SCORE_GATE, None
    )
    assert decide(bare._replace(recorded=False), gated) == Decision(
        CaseStatus.PENDING, None, GateRule.NONE, None
    )
    waiting = bare._replace(has_turns=True)
    assert decide(waiting, SPEC) == Decision(CaseStatus.PENDING, None, GateRule.NONE, None)
