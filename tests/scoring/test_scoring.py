"""Scoring rules (DESIGN §3.1-3.2): case scores, run aggregates and repetition reducers.

Every test builds CaseFacts directly, scores them under a spec resolved from a RunConfig, and
asserts exact numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid5

import pytest

from evaledger.domain.events import (
    CheckStatus,
    ClaimSupport,
    MetricScore,
    ParseStatus,
    Role,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.metrics import DEFAULT_METRIC_NAMES
from evaledger.domain.spec import (
    Gate,
    JudgeConfig,
    JudgeErrorPolicy,
    MetricSelection,
    PanelPolicy,
    PassReducer,
    Reducers,
    RunConfig,
    ScoreReducer,
    ScoringSpec,
    Severity,
    SeverityWeights,
    resolve_spec,
)
from evaledger.scoring.case import reduce_repetitions, score_case, score_run, summarize_run
from evaledger.scoring.facts import (
    CaseFacts,
    CheckFact,
    MessageFact,
    MetricFact,
    OutcomeFact,
    VerdictFact,
)
from evaledger.scoring.models import CaseScore, CaseStatus, GateRule
from evaledger.scoring.rollups import RollupInput, rollup
from evaledger.scoring.stats import percentile
from tests.oracles.fold import apply_fact

RUN_ID = UUID("00000000-0000-0000-0000-0000000000a1")
DEFAULTS = list(DEFAULT_METRIC_NAMES)

# ---------------------------------------------------------------------------------------------
# Builders


def spec(
    metrics: Mapping[str, float | None] | None = None,
    *,
    pass_threshold: float = 75.0,
    **policy: Any,
) -> ScoringSpec:
    """A spec resolved from a RunConfig; `metrics` maps metric → explicit weight (None: default)."""
    selection = (
        None
        if metrics is None
        else [MetricSelection(metric=name, weight=w) for name, w in metrics.items()]
    )
    config = RunConfig(
        judge=JudgeConfig(metrics=selection, pass_threshold=pass_threshold), **policy
    )
    return resolve_spec(config)


def uid(*parts: object) -> UUID:
    return uuid5(RUN_ID, "/".join(str(p) for p in parts))


def verdict(
    scores: dict[str, int | bool | None] | int | None = None,
    *,
    outcomes: Sequence[tuple[str, bool] | tuple[str, bool, Severity]] = (),
    error: str | None = None,
    parse_status: ParseStatus = ParseStatus.PARSED,
    invalidated: bool = False,
    forced_passed: bool | None = None,
    reasons: Sequence[str] = (),
    provider: str | None = None,
    cost: float | None = None,
    failure_codes: dict[str, str] | None = None,
    turns: dict[str, list[int]] | None = None,
) -> VerdictFact:
    """A judge verdict; an int for `scores` gives every default metric that score."""
    if scores is None:
        scores = {}
    elif isinstance(scores, int):
        scores = dict.fromkeys(DEFAULTS, scores)
    metric_facts = [
        MetricFact(
            metric=name,
            score=value if not isinstance(value, bool) else None,
            passed=value if isinstance(value, bool) else None,
            failure_code=(failure_codes or {}).get(name),
            turns=(turns or {}).get(name, []),
        )
        for name, value in scores.items()
    ]
    return VerdictFact(
        verdict_id=uid("unplaced verdict"),  # `case` gives each verdict its id and position
        position=0,
        judge_provider=provider,
        parse_status=parse_status,
        error=error,
        metric_scores=metric_facts,
        expected_outcomes=[_outcome(o) for o in outcomes],
        invalidated=invalidated,
        overridden=forced_passed is not None,
        forced_passed=forced_passed,
        override_reasons=list(reasons),
        cost_usd=cost,
    )


def _outcome(o: tuple[str, bool] | tuple[str, bool, Severity]) -> OutcomeFact:
    severity = o[2] if len(o) == 3 else Severity.BLOCKER
    return OutcomeFact(statement=o[0], passed=o[1], severity=severity)


def case(
    key: str = "tc-1",
    *,
    repetition: int = 0,
    verdicts: Sequence[VerdictFact] = (),
    transcript: bool = True,
    latencies: Sequence[float] = (),
    errored: bool = False,
    canceled: bool = False,
    evaluations: Sequence[Sequence[tuple[str, bool] | tuple[str, bool, Severity]]] = (),
    checks: Sequence[tuple[str, CheckStatus]] = (),
    claims: Sequence[ClaimSupport] = (),
    agent_provider: str | None = None,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    cost: float | None = None,
    turns: int | None = None,
) -> CaseFacts:
    """The facts of one case; each assistant latency comes with a user turn that must not count.

    A transcript without latencies is one user and one assistant turn (no latency);
    `transcript=False` is no transcript at all; `turns=0` a recorded transcript with no turns.
    """
    messages: list[MessageFact] = []
    for latency in latencies:
        messages.append(MessageFact(role=Role.USER, latency_ms=99_999.0))
        messages.append(MessageFact(role=Role.ASSISTANT, latency_ms=latency))
    if transcript and not latencies and turns is None:
        messages = [MessageFact(role=Role.USER), MessageFact(role=Role.ASSISTANT)]
    if turns is not None:
        messages = messages[:turns]
    return CaseFacts(
        case_id=uid("case", key, repetition),
        run_id=RUN_ID,
        test_case_key=key,
        test_id=key,
        repetition=repetition,
        has_transcript=transcript,
        turn_count=len(messages),
        messages=messages,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost,
        errored=errored,
        error_message="agent timed out" if errored else None,
        canceled=canceled,
        verdicts=[
            v.model_copy(update={"position": i, "verdict_id": uid("verdict", key, repetition, i)})
            for i, v in enumerate(verdicts)
        ],
        outcome_evaluations=[[_outcome(o) for o in ev] for ev in evaluations],
        claims=list(claims),
        checks=[CheckFact(check=name, status=status) for name, status in checks],
        agent_provider=agent_provider,
    )


def scored_case(
    overall_pair: tuple[int, int], key: str = "tc-1", repetition: int = 0, **kw: Any
) -> CaseFacts:
    """A case judged on tool_routing and parameter_extraction (weights 1:1, see PAIR)."""
    tr, pe = overall_pair
    return case(
        key,
        repetition=repetition,
        verdicts=[verdict({"tool_routing": tr, "parameter_extraction": pe})],
        **kw,
    )


PAIR = {"tool_routing": 1.0, "parameter_extraction": 1.0}
"""Two equal metrics: (5, 5) → 100, (5, 4) → 90, (4, 4) → 80, (4, 3) → 70, (3, 3) → 60."""


# ---------------------------------------------------------------------------------------------
# overall_score and the score gate


def test_all_eight_default_metrics_at_5_score_100_and_pass() -> None:
    # given a case judged 5 on every default metric
    facts = case(verdicts=[verdict(5)])
    # when it is scored under the default spec
    score = score_case(facts, spec())
    # then
    assert score.overall_score == 100.0
    assert score.passed is True
    assert score.status is CaseStatus.PASSED
    assert score.gate is GateRule.SCORE_THRESHOLD
    assert score.gate_reason == "overall_score 100.0 >= pass_threshold 75.0"
    assert score.scored is True
    assert score.errored is False
    assert [m.metric for m in score.metric_scores] == DEFAULTS
    assert {m.label for m in score.metric_scores} == {"excellent"}
    assert [m.weight for m in score.metric_scores] == pytest.approx(
        [0.15, 0.15, 0.15, 0.125, 0.125, 0.10, 0.10, 0.10]
    )
    assert [m.contribution for m in score.metric_scores] == pytest.approx(
        [15.0, 15.0, 15.0, 12.5, 12.5, 10.0, 10.0, 10.0]
    )


def test_all_eight_default_metrics_at_3_score_60_and_fail_at_75() -> None:
    score = score_case(case(verdicts=[verdict(3)]), spec())
    assert score.overall_score == 60.0
    assert score.passed is False
    assert score.status is CaseStatus.FAILED
    assert score.gate_reason == "overall_score 60.0 < pass_threshold 75.0"
    assert {m.label for m in score.metric_scores} == {"acceptable"}


def test_overall_score_weights_each_metric_by_its_default_weight() -> None:
    # grounding_fidelity (12.5%) at 3 loses 12.5 * 2/5 = 5 points; tool_routing (15%) at 0 loses 15
    scores: dict[str, int | bool | None] = dict.fromkeys(DEFAULTS, 5)
    scores |= {"grounding_fidelity": 3, "tool_routing": 0}
    score = score_case(case(verdicts=[verdict(scores)]), spec())
    assert score.overall_score == 80.0
    by_metric = {m.metric: m for m in score.metric_scores}
    assert by_metric["tool_routing"].label == "critical_fail"
    assert by_metric["tool_routing"].contribution == 0.0
    assert by_metric["grounding_fidelity"].contribution == pytest.approx(7.5)
    # a metric at 0 does not fail the case on its own
    assert score.passed is True


@pytest.mark.parametrize(
    ("score_value", "label"),
    list(enumerate(["critical_fail", "fail", "poor", "acceptable", "good", "excellent"])),
)
def test_metric_labels_follow_the_0_to_5_scale(score_value: int, label: str) -> None:
    score = score_case(case(verdicts=[verdict(score_value)]), spec())
    assert {m.label for m in score.metric_scores} == {label}
    assert score.overall_score == pytest.approx(score_value * 20.0)


@pytest.mark.parametrize(
    ("task_passed", "overall", "label"), [(True, 100.0, "pass"), (False, 66.67, "fail")]
)
def test_selection_renormalises_weights_and_binary_counts_5_or_0(
    task_passed: bool, overall: float, label: str
) -> None:
    # given tool_routing 1.0 + task_completion 0.5 → normalised 2/3 and 1/3
    s = spec({"tool_routing": 1.0, "task_completion": 0.5})
    assert [m.weight for m in s.metrics] == pytest.approx([2 / 3, 1 / 3])
    facts = case(verdicts=[verdict({"tool_routing": 5, "task_completion": task_passed})])
    # when
    score = score_case(facts, s)
    # then
    assert score.overall_score == overall
    task = score.metric_scores[1]
    assert task.metric == "task_completion"
    assert task.passed is task_passed
    assert task.label == label
    assert task.score == (5.0 if task_passed else 0.0)
    assert score.metric_scores[0].passed is None  # scored metrics have no pass/fail


def test_contribution_is_unrounded_and_overall_is_rounded_to_2dp() -> None:
    s = spec({"tool_routing": 1.0, "task_completion": 0.5})
    score = score_case(case(verdicts=[verdict({"tool_routing": 5, "task_completion": False})]), s)
    assert score.metric_scores[0].contribution == pytest.approx(200 / 3)
    assert score.metric_scores[0].contribution != 66.67
    assert score.overall_score == 66.67


def test_explicit_weight_0_is_allowed_and_contributes_nothing() -> None:
    s = spec({"tool_routing": 1.0, "response_delivery": 0.0})
    score = score_case(case(verdicts=[verdict({"tool_routing": 5, "response_delivery": 0})]), s)
    assert score.overall_score == 100.0
    assert score.metric_scores[1].weight == 0.0
    assert score.metric_scores[1].contribution == 0.0


def test_a_selected_metric_with_weight_0_is_still_required_from_the_judge() -> None:
    s = spec({"tool_routing": 1.0, "response_delivery": 0.0})
    score = score_case(case(verdicts=[verdict({"tool_routing": 5})]), s)
    assert score.judge_error is True
    assert score.judge_error_message == "Judge evaluation failed: missing metric response_delivery"


def test_metrics_the_spec_did_not_select_are_ignored() -> None:
    score = score_case(
        case(verdicts=[verdict({"tool_routing": 5, "parameter_extraction": 0})]),
        spec({"tool_routing": None}),
    )
    assert score.overall_score == 100.0
    assert [m.metric for m in score.metric_scores] == ["tool_routing"]


def test_exactly_on_pass_threshold_passes() -> None:
    # tool_routing 3 : parameter_extraction 1 → 5 and 0 give exactly 75.0
    s = spec({"tool_routing": 3.0, "parameter_extraction": 1.0})
    score = score_case(case(verdicts=[verdict({"tool_routing": 5, "parameter_extraction": 0})]), s)
    assert score.overall_score == 75.0
    assert score.passed is True
    assert score.gate_reason == "overall_score 75.0 >= pass_threshold 75.0"


def test_pass_threshold_comes_from_the_spec() -> None:
    score = score_case(scored_case((5, 4)), spec(PAIR, pass_threshold=95.0))
    assert score.overall_score == 90.0
    assert score.passed is False
    assert score.gate_reason == "overall_score 90.0 < pass_threshold 95.0"


def test_failure_code_and_turns_are_kept_from_the_verdict() -> None:
    v = verdict(
        {"tool_routing": 1, "parameter_extraction": 5},
        failure_codes={"tool_routing": "wrong_tool_selected"},
        turns={"tool_routing": [2, 4]},
    )
    score = score_case(case(verdicts=[v]), spec(PAIR))
    assert score.metric_scores[0].failure_code == "wrong_tool_selected"
    assert score.metric_scores[0].turns == [2, 4]
    assert score.metric_scores[1].failure_code is None
    assert score.metric_scores[1].turns == []


# ---------------------------------------------------------------------------------------------
# Expected outcomes gate


def test_a_case_whose_outcomes_all_pass_passes_at_overall_40() -> None:
    facts = case(verdicts=[verdict(2, outcomes=[("Greets the caller", True), ("Books", True)])])
    score = score_case(facts, spec())
    assert score.overall_score == 40.0
    assert score.passed is True
    assert score.gate is GateRule.EXPECTED_OUTCOMES
    assert score.gate_reason == "2 of 2 expected outcomes passed"


def test_one_failing_outcome_fails_the_case_at_95() -> None:
    scores: dict[str, int | bool | None] = dict.fromkeys(DEFAULTS, 5)
    scores["grounding_fidelity"] = 3
    facts = case(
        verdicts=[
            verdict(
                scores,
                outcomes=[("Greets the caller", True), ("Refund issued", False), ("Bye", True)],
            )
        ]
    )
    score = score_case(facts, spec())
    assert score.overall_score == 95.0
    assert score.passed is False
    assert score.status is CaseStatus.FAILED
    assert score.gate is GateRule.EXPECTED_OUTCOMES
    assert score.gate_reason == "2 of 3 expected outcomes passed: 'Refund issued' failed"


def test_outcome_evaluations_replace_verdict_outcomes_for_the_same_statement() -> None:
    # given the judge failed "Refund issued", then two later evaluations re-decided it
    facts = case(
        verdicts=[verdict(5, outcomes=[("Refund issued", False), ("Greets", True)])],
        evaluations=[[("Refund issued", False), ("Says bye", False)], [("Refund issued", True)]],
    )
    score = score_case(facts, spec())
    # then the latest result counts, in first-seen order
    assert [(o.statement, o.passed) for o in score.outcome_results] == [
        ("Refund issued", True),
        ("Greets", True),
        ("Says bye", False),
    ]
    assert score.passed is False
    assert score.gate_reason == "2 of 3 expected outcomes passed: 'Says bye' failed"


def test_two_results_with_the_same_statement_are_two_results() -> None:
    # given the judge answered "Books" twice: once passed, once failed
    facts = case(verdicts=[verdict(5, outcomes=[("Books", True), ("Books", False)])])
    score = score_case(facts, spec())
    # then both count: the failing one does not vanish behind the passing one
    assert [(o.statement, o.passed) for o in score.outcome_results] == [
        ("Books", True),
        ("Books", False),
    ]
    assert (score.status, score.passed) == (CaseStatus.FAILED, False)
    assert score.gate_reason == "1 of 2 expected outcomes passed: 'Books' failed"
    assert score.assertion_score == 50.0  # two blockers (4 + 4), one passed


def test_the_last_of_two_same_statement_results_failing_also_fails_the_case() -> None:
    facts = case(verdicts=[verdict(5, outcomes=[("Books", False), ("Books", True)])])
    score = score_case(facts, spec())
    assert score.passed is False
    assert score.gate_reason == "1 of 2 expected outcomes passed: 'Books' failed"


def test_a_later_evaluation_supersedes_same_statement_results_occurrence_by_occurrence() -> None:
    judged = [("Books", True), ("Books", False)]
    # one re-evaluation replaces the first "Books" only: the second still fails
    once = score_case(
        case(verdicts=[verdict(5, outcomes=judged)], evaluations=[[judged[0]]]), spec()
    )
    assert [o.passed for o in once.outcome_results] == [True, False]
    assert once.passed is False
    # a re-evaluation that answers "Books" twice replaces both
    twice = score_case(
        case(verdicts=[verdict(5, outcomes=judged)], evaluations=[[("Books", True)] * 2]), spec()
    )
    assert [o.passed for o in twice.outcome_results] == [True, True]
    assert twice.passed is True
    assert twice.gate_reason == "2 of 2 expected outcomes passed"


def test_panel_majority_is_taken_per_result_when_a_statement_repeats() -> None:
    # occurrence 0: T, T, F → pass; occurrence 1: F, T, F → fail
    facts = case(
        verdicts=[
            verdict(5, outcomes=[("Books", True), ("Books", False)]),
            verdict(5, outcomes=[("Books", True), ("Books", True)]),
            verdict(5, outcomes=[("Books", False), ("Books", False)]),
        ]
    )
    score = score_case(facts, spec(panel=PanelPolicy.MEAN))
    assert [o.passed for o in score.outcome_results] == [True, False]
    assert score.passed is False


def test_outcome_evaluations_alone_decide_a_case_without_a_verdict() -> None:
    score = score_case(case(evaluations=[[("Books", True)]]), spec())
    assert score.passed is True
    assert score.gate is GateRule.EXPECTED_OUTCOMES
    assert score.overall_score is None
    assert score.scored is False
    assert score.verdict_ids == []


def test_structural_checks_join_the_outcomes_as_blockers_and_inconclusive_ones_are_skipped() -> (
    None
):
    facts = case(
        verdicts=[verdict(5)],
        checks=[
            ("schema", CheckStatus.PASSED),
            ("no_pii", CheckStatus.INCONCLUSIVE),
            ("latency", CheckStatus.FAILED),
            ("latency", CheckStatus.PASSED),  # re-run: the latest result counts
        ],
    )
    score = score_case(facts, spec())
    assert [(o.statement, o.passed, o.severity) for o in score.outcome_results] == [
        ("check:schema", True, "blocker"),
        ("check:latency", True, "blocker"),
    ]
    assert (score.checks_passed, score.checks_failed, score.checks_inconclusive) == (2, 0, 1)
    assert score.passed is True
    assert score.gate_reason == "2 of 2 expected outcomes passed"


def test_a_failed_structural_check_fails_the_case_despite_a_perfect_score() -> None:
    score = score_case(case(verdicts=[verdict(5)], checks=[("schema", CheckStatus.FAILED)]), spec())
    assert score.overall_score == 100.0
    assert score.passed is False
    assert score.gate_reason == "0 of 1 expected outcomes passed: 'check:schema' failed"
    assert score.checks_failed == 1


def test_only_inconclusive_checks_leave_the_score_gate_in_charge() -> None:
    score = score_case(
        case(verdicts=[verdict(3)], checks=[("no_pii", CheckStatus.INCONCLUSIVE)]), spec()
    )
    assert score.outcome_results == []
    assert score.gate is GateRule.SCORE_THRESHOLD
    assert score.passed is False


# ---------------------------------------------------------------------------------------------
# Assertion score (Voxli severities) and the blockers gate


def severities_case(*, blocker: bool, medium: bool, low: bool, overall: int = 1) -> CaseFacts:
    return case(
        verdicts=[
            verdict(
                overall,
                outcomes=[
                    ("Verifies identity", blocker, Severity.BLOCKER),
                    ("Offers upgrade", medium, Severity.MEDIUM),
                    ("Says goodbye", low, Severity.LOW),
                ],
            )
        ]
    )


def test_assertion_score_weights_blocker_4_medium_2_low_1() -> None:
    score = score_case(severities_case(blocker=True, medium=False, low=True), spec())
    # (4 + 1) / (4 + 2 + 1) = 5/7, stored unrounded
    assert score.assertion_score == pytest.approx(500 / 7)
    assert score.assertion_score is not None
    assert round(score.assertion_score, 2) == 71.43
    assert score.blockers_passed is True
    assert [o.severity for o in score.outcome_results] == ["blocker", "medium", "low"]
    # under the default gate every outcome must pass
    assert score.passed is False


def test_assertion_score_uses_the_spec_severity_weights() -> None:
    s = spec(severity_weights=SeverityWeights(blocker=1.0, medium=1.0, low=2.0))
    score = score_case(severities_case(blocker=True, medium=False, low=True), s)
    assert score.assertion_score == 75.0


def test_assertion_score_is_none_without_results_or_when_all_weights_are_0() -> None:
    assert score_case(case(verdicts=[verdict(5)]), spec()).assertion_score is None
    assert score_case(case(verdicts=[verdict(5)]), spec()).blockers_passed is None
    zero = spec(severity_weights=SeverityWeights(blocker=0.0, medium=0.0, low=0.0))
    score = score_case(severities_case(blocker=True, medium=True, low=True), zero)
    assert score.assertion_score is None
    assert score.blockers_passed is True


def test_blockers_gate_passes_when_every_blocker_passes_even_at_a_low_score() -> None:
    score = score_case(
        severities_case(blocker=True, medium=False, low=False), spec(gate=Gate.BLOCKERS)
    )
    assert score.overall_score == 20.0
    assert score.passed is True
    assert score.gate is GateRule.BLOCKERS
    assert score.gate_reason == "1 of 1 blocker outcomes passed"


def test_blockers_gate_fails_when_a_blocker_fails() -> None:
    score = score_case(
        severities_case(blocker=False, medium=True, low=True, overall=5), spec(gate=Gate.BLOCKERS)
    )
    assert score.passed is False
    assert score.blockers_passed is False
    assert score.assertion_score == pytest.approx(300 / 7)
    assert score.gate_reason == "0 of 1 blocker outcomes passed: 'Verifies identity' failed"


def test_blockers_gate_without_blockers_passes() -> None:
    facts = case(verdicts=[verdict(0, outcomes=[("Offers upgrade", False, Severity.MEDIUM)])])
    score = score_case(facts, spec(gate=Gate.BLOCKERS))
    assert score.passed is True
    assert score.blockers_passed is True
    assert score.gate_reason == "no blocker outcomes, so the blockers gate passes"


def test_blockers_gate_without_any_outcome_passes() -> None:
    score = score_case(case(verdicts=[verdict(0)]), spec(gate=Gate.BLOCKERS))
    assert score.overall_score == 0.0
    assert score.passed is True
    assert score.blockers_passed is None


# ---------------------------------------------------------------------------------------------
# Execution states: no transcript, errored, canceled, pending


def test_an_empty_transcript_fails_without_erroring() -> None:
    score = score_case(case(turns=0), spec())
    assert score.status is CaseStatus.FAILED
    assert score.passed is False
    assert score.errored is False
    assert score.gate is GateRule.NO_TRANSCRIPT
    assert score.gate_reason == "the recorded transcript has no turns"
    assert score.overall_score is None
    assert score.scored is False


def test_nothing_recorded_beyond_the_opening_is_pending_not_failed() -> None:
    score = score_case(case(transcript=False), spec())
    assert score.status is CaseStatus.PENDING
    assert score.passed is None
    assert score.errored is False
    assert score.gate is GateRule.NONE
    assert score.gate_reason == (
        "not run yet: no transcript, verdict, outcome, claim or check recorded"
    )
    assert score.overall_score is None
    assert score.scored is False


@pytest.mark.parametrize(
    "extra",
    [
        {"prompt_tokens": 120, "completion_tokens": 30},
        {"cost": 0.0042},
        {"verdicts": [verdict(5)]},
        {"verdicts": [verdict(5, outcomes=[("Books", True)])]},
        {"verdicts": [verdict(5)], "cost": 0.0042, "prompt_tokens": 10},
    ],
    ids=["usage", "cost", "verdict", "passing-outcome", "all"],
)
def test_an_empty_transcript_fails_even_with_usage_cost_or_a_verdict(
    extra: dict[str, Any],
) -> None:
    score = score_case(case(turns=0, **extra), spec())
    assert (score.status, score.passed, score.errored) == (CaseStatus.FAILED, False, False)
    assert score.gate is GateRule.NO_TRANSCRIPT
    assert score.gate_reason == "the recorded transcript has no turns"


def test_no_transcript_keeps_a_valid_verdicts_score_but_still_fails() -> None:
    score = score_case(case(transcript=False, verdicts=[verdict(5)]), spec())
    assert score.overall_score == 100.0
    assert score.scored is True
    assert score.passed is False
    assert score.gate is GateRule.NO_TRANSCRIPT


def test_no_transcript_is_not_given_a_0_for_a_judge_error() -> None:
    score = score_case(case(transcript=False, verdicts=[verdict(error="no transcript")]), spec())
    assert score.overall_score is None
    assert score.scored is False
    assert score.judge_error is True
    assert score.gate is GateRule.NO_TRANSCRIPT


def test_no_transcript_beats_passing_outcomes_and_overrides() -> None:
    facts = case(
        transcript=False, verdicts=[verdict(5, outcomes=[("Books", True)], forced_passed=True)]
    )
    score = score_case(facts, spec())
    assert score.passed is False
    assert score.gate is GateRule.NO_TRANSCRIPT


def test_execution_error_fails_and_errors() -> None:
    score = score_case(case(errored=True, verdicts=[verdict(5)], latencies=[120.0]), spec())
    assert score.status is CaseStatus.ERRORED
    assert score.passed is False
    assert score.errored is True
    assert score.overall_score is None
    assert score.scored is False
    assert score.gate is GateRule.EXECUTION_ERROR
    assert score.gate_reason == "execution error: agent timed out"
    assert score.metric_scores == []
    assert score.verdict_ids == []
    assert score.latency_p50_ms == 120  # observations are still reported


def test_execution_error_wins_over_cancellation() -> None:
    score = score_case(case(errored=True, canceled=True), spec())
    assert score.status is CaseStatus.ERRORED
    assert score.passed is False
    assert score.errored is True
    assert score.canceled is True
    assert score.gate is GateRule.EXECUTION_ERROR


def test_canceled_is_neither_passed_nor_failed() -> None:
    score = score_case(case(canceled=True, transcript=False), spec())
    assert score.status is CaseStatus.CANCELED
    assert score.passed is None
    assert score.errored is False
    assert score.canceled is True
    assert score.overall_score is None
    assert score.scored is False
    assert score.gate is GateRule.CANCELED


def test_transcript_without_verdict_or_outcome_is_pending() -> None:
    score = score_case(case(claims=[ClaimSupport.SUPPORTED]), spec())
    assert score.status is CaseStatus.PENDING
    assert score.passed is None
    assert score.scored is False
    assert score.gate is GateRule.NONE
    assert score.overall_score is None


def test_a_case_whose_only_verdict_was_invalidated_is_pending() -> None:
    score = score_case(case(verdicts=[verdict(5, invalidated=True)]), spec())
    assert score.status is CaseStatus.PENDING
    assert score.verdict_ids == []


# ---------------------------------------------------------------------------------------------
# Judge error verdicts


@pytest.mark.parametrize(
    ("bad_verdict", "message"),
    [
        (verdict(error="provider timeout"), "Judge evaluation failed: provider timeout"),
        (
            verdict(error="Judge evaluation failed: rate limited"),
            "Judge evaluation failed: rate limited",
        ),
        (
            verdict(5, parse_status=ParseStatus.UNPARSEABLE),
            "Judge evaluation failed: unparseable reply",
        ),
        (
            verdict(parse_status=ParseStatus.MISSING_METRICS),
            "Judge evaluation failed: missing metric block",
        ),
        (
            verdict(parse_status=ParseStatus.PROVIDER_ERROR),
            "Judge evaluation failed: provider error",
        ),
        (
            verdict({"tool_routing": 5, "task_completion": True}),
            "Judge evaluation failed: missing metric parameter_extraction",
        ),
        (
            verdict({"tool_routing": None, "parameter_extraction": 5, "task_completion": True}),
            "Judge evaluation failed: metric tool_routing has no score",
        ),
        (
            verdict({"tool_routing": 5, "parameter_extraction": 5, "task_completion": None}),
            "Judge evaluation failed: metric task_completion has no pass/fail",
        ),
    ],
)
def test_judge_error_verdict_scores_0_and_fails_by_default(
    bad_verdict: VerdictFact, message: str
) -> None:
    s = spec({"tool_routing": 1.0, "parameter_extraction": 1.0, "task_completion": 1.0})
    score = score_case(case(verdicts=[bad_verdict], latencies=[100.0]), s)
    assert score.judge_error is True
    assert score.judge_error_message == message
    assert score.overall_score == 0.0
    assert score.passed is False
    assert score.scored is True
    assert score.status is CaseStatus.FAILED
    assert score.gate is GateRule.JUDGE_ERROR
    assert (
        score.gate_reason == f"{message}; counted as overall_score 0.0 (judge_errors: score_zero)"
    )
    assert score.metric_scores == []
    assert score.errored is False


def test_judge_error_verdict_is_left_unscored_under_the_unscored_policy() -> None:
    score = score_case(
        case(verdicts=[verdict(error="boom")]), spec(judge_errors=JudgeErrorPolicy.UNSCORED)
    )
    assert score.judge_error is True
    assert score.judge_error_message == "Judge evaluation failed: boom"
    assert score.overall_score is None
    assert score.passed is None
    assert score.scored is False
    assert score.status is CaseStatus.UNSCORED
    assert score.gate is GateRule.JUDGE_ERROR


def test_judge_error_decides_even_when_outcome_evaluations_pass() -> None:
    facts = case(verdicts=[verdict(error="boom")], evaluations=[[("Books", True)]])
    score = score_case(facts, spec())
    assert score.passed is False
    assert score.gate is GateRule.JUDGE_ERROR
    assert [o.statement for o in score.outcome_results] == ["Books"]  # still reported


def test_a_valid_verdict_after_an_error_verdict_is_the_one_that_counts() -> None:
    facts = case(verdicts=[verdict(error="boom"), verdict(4)])
    score = score_case(facts, spec())
    assert score.judge_error is False
    assert score.judge_error_message is None
    assert score.overall_score == 80.0
    assert score.verdict_ids == [facts.verdicts[1].verdict_id]


def test_an_error_verdict_is_not_a_panel_vote() -> None:
    facts = case(verdicts=[verdict(1), verdict(error="boom"), verdict(5)])
    score = score_case(facts, spec(panel=PanelPolicy.MEAN))
    assert score.overall_score == 60.0
    assert score.verdict_ids == [facts.verdicts[0].verdict_id, facts.verdicts[2].verdict_id]


def test_judge_error_message_comes_from_the_first_error_verdict() -> None:
    facts = case(verdicts=[verdict(error="first"), verdict(error="second")])
    for panel in PanelPolicy:
        score = score_case(facts, spec(panel=panel))
        assert score.judge_error_message == "Judge evaluation failed: first"
    assert len(score_case(facts, spec()).verdict_ids) == 1
    assert len(score_case(facts, spec(panel=PanelPolicy.MEAN)).verdict_ids) == 2


# ---------------------------------------------------------------------------------------------
# Panels


def panel_score(votes: Sequence[int], panel: PanelPolicy) -> CaseScore:
    """tool_routing alone: overall = 20 * combined score."""
    facts = case(verdicts=[verdict({"tool_routing": v}) for v in votes])
    return score_case(facts, spec({"tool_routing": None}, panel=panel))


@pytest.mark.parametrize(
    ("panel", "votes", "combined"),
    [
        (PanelPolicy.FIRST, [5, 1], 5.0),
        (PanelPolicy.FIRST, [1, 5], 1.0),
        (PanelPolicy.MEAN, [5, 4], 4.5),
        (PanelPolicy.MEAN, [5, 4, 4], 13 / 3),
        (PanelPolicy.MEDIAN, [5, 1, 4], 4.0),
        (PanelPolicy.MEDIAN, [5, 4], 4.5),
        (PanelPolicy.MAJORITY, [5, 5, 3], 5.0),
        (PanelPolicy.MAJORITY, [5, 3], 3.0),  # tie → the lower score
        (PanelPolicy.MAJORITY, [4, 2, 4, 2, 1], 2.0),
        (PanelPolicy.STRICT_MAJORITY, [5, 4, 3], 4.0),
        (PanelPolicy.STRICT_MAJORITY, [5, 3], 3.0),
        (PanelPolicy.STRICT_MAJORITY, [5, 5, 1, 1], 1.0),
        (PanelPolicy.STRICT_MAJORITY, [5, 5, 5, 0], 5.0),
    ],
)
def test_panel_policies_combine_scored_metrics(
    panel: PanelPolicy, votes: list[int], combined: float
) -> None:
    score = panel_score(votes, panel)
    assert score.metric_scores[0].score == pytest.approx(combined)
    assert score.overall_score == round(20 * combined, 2)


def test_mean_panel_label_truncates_the_combined_score() -> None:
    score = panel_score([5, 4, 4], PanelPolicy.MEAN)
    assert score.overall_score == 86.67
    assert score.metric_scores[0].label == "good"


@pytest.mark.parametrize(
    ("panel", "votes", "passed", "points"),
    [
        (PanelPolicy.FIRST, [False, True], False, 0.0),
        (PanelPolicy.MAJORITY, [True, False], False, 0.0),  # tie → fail
        (PanelPolicy.MAJORITY, [True, True, False], True, 5.0),
        (PanelPolicy.STRICT_MAJORITY, [True, False], False, 0.0),
        (PanelPolicy.STRICT_MAJORITY, [True, True, False], True, 5.0),
        (PanelPolicy.MEAN, [True, True, False], True, 10 / 3),
        (PanelPolicy.MEAN, [True, False], False, 2.5),
        (PanelPolicy.MEDIAN, [True, True, False], True, 5.0),
        (PanelPolicy.MEDIAN, [True, False], False, 2.5),
    ],
)
def test_panel_policies_combine_binary_metrics(
    panel: PanelPolicy, votes: list[bool], passed: bool, points: float
) -> None:
    facts = case(verdicts=[verdict({"task_completion": v}) for v in votes])
    score = score_case(facts, spec({"task_completion": 1.0}, panel=panel))
    metric = score.metric_scores[0]
    assert metric.passed is passed
    assert metric.label == ("pass" if passed else "fail")
    assert metric.score == pytest.approx(points)
    assert score.overall_score == round(20 * points, 2)


def test_panel_outcomes_take_a_per_statement_majority_and_ties_fail() -> None:
    facts = case(
        verdicts=[
            verdict(5, outcomes=[("Books", True), ("Greets", True)]),
            verdict(5, outcomes=[("Books", False), ("Greets", True)]),
            verdict(5, outcomes=[("Greets", False), ("Says bye", True)]),
        ]
    )
    score = score_case(facts, spec(panel=PanelPolicy.MEAN))
    # Books 1-1 (tie → failed), Greets 2-1, Says bye 1-0
    assert [(o.statement, o.passed) for o in score.outcome_results] == [
        ("Books", False),
        ("Greets", True),
        ("Says bye", True),
    ]
    assert score.passed is False


def test_first_panel_takes_the_first_verdicts_outcomes() -> None:
    facts = case(
        verdicts=[verdict(5, outcomes=[("Books", True)]), verdict(5, outcomes=[("Books", False)])]
    )
    score = score_case(facts, spec())
    assert [(o.statement, o.passed) for o in score.outcome_results] == [("Books", True)]
    assert score.passed is True


def test_panel_keeps_the_failure_code_of_the_first_verdict_that_has_one() -> None:
    facts = case(
        verdicts=[
            verdict({"tool_routing": 4}),
            verdict(
                {"tool_routing": 1},
                failure_codes={"tool_routing": "wrong_tool"},
                turns={"tool_routing": [3]},
            ),
            verdict({"tool_routing": 2}, failure_codes={"tool_routing": "missing_call"}),
        ]
    )
    score = score_case(facts, spec({"tool_routing": None}, panel=PanelPolicy.MEDIAN))
    assert score.metric_scores[0].score == 2.0
    assert score.metric_scores[0].failure_code == "wrong_tool"
    assert score.metric_scores[0].turns == [3]


def test_a_panel_counts_every_valid_verdict() -> None:
    facts = case(verdicts=[verdict(5), verdict(3)])
    assert len(score_case(facts, spec(panel=PanelPolicy.MEDIAN)).verdict_ids) == 2
    assert score_case(facts, spec()).verdict_ids == [facts.verdicts[0].verdict_id]


# ---------------------------------------------------------------------------------------------
# Human overrides and invalidations


def test_an_override_replacing_metric_scores_is_what_gets_scored() -> None:
    # given an unparseable verdict, corrected by a human with full scores
    facts = case(verdicts=[verdict(parse_status=ParseStatus.UNPARSEABLE)])
    override = VerdictOverridden(
        originator_id=facts.case_id,
        originator_version=5,
        timestamp=datetime(2025, 1, 2, tzinfo=UTC),
        actor="reviewer",
        prev_hash="0" * 64,
        verdict_id=facts.verdicts[0].verdict_id,
        metric_scores=[MetricScore(metric=m, score=4) for m in DEFAULTS],
        reason="judge reply was truncated; scored by hand",
    )
    # when the override is folded in and the case is scored
    assert score_case(facts, spec()).judge_error is True
    apply_fact(facts, override)
    score = score_case(facts, spec())
    # then the human's scores count and the verdict is no longer an error verdict
    assert score.judge_error is False
    assert score.overall_score == 80.0
    assert score.passed is True
    assert score.gate is GateRule.SCORE_THRESHOLD


def test_an_invalidated_verdict_is_ignored() -> None:
    facts = case(verdicts=[verdict(1), verdict(5)])
    invalidation = VerdictInvalidated(
        originator_id=facts.case_id,
        originator_version=6,
        timestamp=datetime(2025, 1, 2, tzinfo=UTC),
        actor="reviewer",
        prev_hash="0" * 64,
        verdict_id=facts.verdicts[0].verdict_id,
        reason="wrong rubric",
    )
    assert score_case(facts, spec()).overall_score == 20.0
    apply_fact(facts, invalidation)
    score = score_case(facts, spec())
    assert score.overall_score == 100.0
    assert score.verdict_ids == [facts.verdicts[1].verdict_id]


def test_a_forced_pass_overrides_a_failing_score() -> None:
    facts = case(verdicts=[verdict(3, forced_passed=True, reasons=["accent confused the judge"])])
    score = score_case(facts, spec())
    assert score.overall_score == 60.0
    assert score.passed is True
    assert score.status is CaseStatus.PASSED
    assert score.gate is GateRule.OVERRIDE
    assert score.gate_reason == "overridden by a human to pass: accent confused the judge"


def test_a_forced_fail_overrides_passing_outcomes() -> None:
    facts = case(verdicts=[verdict(5, outcomes=[("Books", True)], forced_passed=False)])
    score = score_case(facts, spec())
    assert score.passed is False
    assert score.gate is GateRule.OVERRIDE
    assert score.gate_reason == "overridden by a human to fail"


def test_the_last_forced_verdict_of_a_panel_wins() -> None:
    facts = case(
        verdicts=[verdict(5, forced_passed=True), verdict(5), verdict(5, forced_passed=False)]
    )
    assert score_case(facts, spec(panel=PanelPolicy.MEAN)).passed is False
    # under `first` only the first verdict counts, so only its override does
    assert score_case(facts, spec()).passed is True


def test_a_forced_pass_on_an_invalidated_verdict_is_ignored() -> None:
    facts = case(verdicts=[verdict(5, forced_passed=True, invalidated=True), verdict(2)])
    score = score_case(facts, spec())
    assert score.passed is False
    assert score.gate is GateRule.SCORE_THRESHOLD


def test_a_forced_pass_on_an_error_verdict_decides_the_case() -> None:
    score = score_case(case(verdicts=[verdict(error="boom", forced_passed=True)]), spec())
    assert score.passed is True
    assert score.gate is GateRule.OVERRIDE
    assert score.overall_score == 0.0
    assert score.judge_error is True


# ---------------------------------------------------------------------------------------------
# Observations: latency, usage, claims, self-judging


def test_case_latency_p50_is_int_median_of_assistant_turns() -> None:
    score = score_case(case(verdicts=[verdict(5)], latencies=[100.0, 201.0]), spec())
    assert score.latency_p50_ms == 150  # int(150.5); the user turns' 99,999 ms are ignored
    assert score.latency_p95_ms == 201.0


def test_case_latency_p95_is_max_below_20_turns() -> None:
    score = score_case(case(latencies=[10.0 * i for i in range(1, 20)]), spec())
    assert score.latency_p50_ms == 100
    assert score.latency_p95_ms == 190.0


def test_case_latency_p95_is_the_linear_95th_percentile_from_20_turns() -> None:
    # 10 … 200 ms: h = 19 × 0.95 = 18.05 → 190 + 0.05 × 10 (one definition: stats.percentile)
    score = score_case(case(latencies=[10.0 * i for i in range(1, 21)]), spec())
    assert score.latency_p50_ms == 105
    assert score.latency_p95_ms == 190.5


def test_case_without_assistant_latency_has_none() -> None:
    score = score_case(case(), spec())
    assert score.latency_p50_ms is None
    assert score.latency_p95_ms is None


def test_usage_cost_and_claims_are_reported() -> None:
    facts = case(
        verdicts=[verdict(5, cost=0.01), verdict(5, cost=0.02, invalidated=True)],
        prompt_tokens=1200,
        completion_tokens=300,
        cost=0.05,
        claims=[
            ClaimSupport.SUPPORTED,
            ClaimSupport.SUPPORTED,
            ClaimSupport.UNSUPPORTED,
            ClaimSupport.CONTRADICTED,
        ],
    )
    score = score_case(facts, spec())
    assert (score.prompt_tokens, score.completion_tokens, score.cost_usd) == (1200, 300, 0.05)
    assert (score.claims_total, score.claims_supported, score.hallucinations) == (4, 2, 2)
    assert score.judge_cost_usd == pytest.approx(0.03)  # invalidated calls were paid for too


@pytest.mark.parametrize(
    ("agent", "judge", "self_judged"),
    [
        ("openai", "openai", True),
        ("openai", "anthropic", False),
        (None, None, False),
        ("openai", None, False),
    ],
)
def test_self_judged_flags_a_judge_from_the_agents_provider(
    agent: str | None, judge: str | None, self_judged: bool
) -> None:
    facts = case(verdicts=[verdict(5, provider=judge)], agent_provider=agent)
    assert score_case(facts, spec()).self_judged is self_judged


def test_self_judged_only_looks_at_counted_verdicts() -> None:
    facts = case(
        verdicts=[verdict(5, provider="anthropic"), verdict(5, provider="openai")],
        agent_provider="openai",
    )
    assert score_case(facts, spec()).self_judged is False
    assert score_case(facts, spec(panel=PanelPolicy.MEAN)).self_judged is True


# ---------------------------------------------------------------------------------------------
# Run aggregate (Connexity AggregateMetrics)


def test_two_cases_at_80_and_90_pass_both_run_thresholds() -> None:
    # given two passing cases, metrics threshold 80 and cases threshold 100 (the defaults)
    facts = [scored_case((4, 4), "a"), scored_case((5, 4), "b")]
    # when
    scores, run = score_run(facts, spec(PAIR))
    # then
    assert [s.overall_score for s in scores] == [80.0, 90.0]
    assert run.weighted_metrics_score_pct == 85.0
    assert run.avg_overall_score == 85.0
    assert run.metrics_pass_threshold == 80.0
    assert run.metrics_passed is True
    assert run.cases_pass_rate_pct == 100.0
    assert run.cases_pass_threshold == 100.0
    assert run.cases_passed is True
    assert run.pass_rate == 1.0
    assert (run.total_executions, run.unique_test_case_count, run.passed_count) == (2, 2, 2)


def test_metrics_pass_threshold_90_fails_a_mean_of_85() -> None:
    facts = [scored_case((4, 4), "a"), scored_case((5, 4), "b")]
    _, run = score_run(facts, spec(PAIR, metrics_pass_threshold=90.0))
    assert run.metrics_passed is False
    assert run.cases_passed is True


def test_run_thresholds_pass_exactly_on_threshold() -> None:
    # 85.0 mean against 85; 50 % of cases passing against 50
    facts = [
        scored_case((4, 4), "a"),
        case(
            "b",
            verdicts=[
                verdict({"tool_routing": 5, "parameter_extraction": 4}, outcomes=[("Books", False)])
            ],
        ),
    ]
    _, run = score_run(facts, spec(PAIR, metrics_pass_threshold=85.0, cases_pass_threshold=50.0))
    assert run.weighted_metrics_score_pct == 85.0
    assert run.metrics_passed is True
    assert run.cases_pass_rate_pct == 50.0
    assert run.cases_passed is True
    _, strict = score_run(facts, spec(PAIR, cases_pass_threshold=50.01))
    assert strict.cases_passed is False


def test_a_judge_error_counts_0_in_the_metric_mean_by_default() -> None:
    facts = [scored_case((4, 4), "a"), case("b", verdicts=[verdict(error="boom")])]
    _, run = score_run(facts, spec(PAIR))
    assert run.weighted_metrics_score_pct == 40.0
    assert run.metrics_passed is False
    assert run.coverage.scored == 2
    assert run.coverage.unscored == 0
    assert (run.passed_count, run.failed_count, run.error_count) == (1, 1, 0)


def test_a_judge_error_is_left_out_of_the_mean_under_the_unscored_policy() -> None:
    facts = [scored_case((4, 4), "a"), case("b", verdicts=[verdict(error="boom")])]
    _, run = score_run(facts, spec(PAIR, judge_errors=JudgeErrorPolicy.UNSCORED))
    assert run.weighted_metrics_score_pct == 80.0
    assert run.metrics_passed is True
    assert run.coverage.scored == 1
    assert run.coverage.unscored == 1
    # neither passed nor failed, yet still an execution in the denominator
    assert (run.passed_count, run.failed_count, run.total_executions) == (1, 0, 2)
    assert run.pass_rate == 0.5
    assert run.cases_passed is False


def test_a_run_with_no_executions_has_zero_counts_and_null_flags() -> None:
    scores, run = score_run([], spec())
    assert scores == []
    assert (run.total_executions, run.unique_test_case_count) == (0, 0)
    assert (run.passed_count, run.failed_count, run.error_count, run.canceled_count) == (0, 0, 0, 0)
    assert run.pass_rate == 0.0  # the seed's value (DESIGN §3.2; issue 29 restores it)
    assert run.weighted_metrics_score_pct is None
    assert run.avg_overall_score is None
    assert run.metrics_passed is None
    assert run.cases_pass_rate_pct is None
    assert run.cases_passed is None
    assert run.latency_p50_ms is None
    assert run.per_metric_means == {}
    assert run.metrics_pass_threshold == 80.0
    assert run.cases_pass_threshold == 100.0


def test_errored_canceled_and_pending_cases_stay_in_the_denominator() -> None:
    facts = [
        scored_case((5, 5), "passed"),
        scored_case((3, 3), "failed"),
        case("errored", errored=True),
        case("canceled", canceled=True, transcript=False),
        case("pending"),
        case("no-transcript", turns=0),
        case("not-run", transcript=False),
    ]
    scores, run = score_run(facts, spec(PAIR))
    assert [s.status for s in scores] == [
        CaseStatus.PASSED,
        CaseStatus.FAILED,
        CaseStatus.ERRORED,
        CaseStatus.CANCELED,
        CaseStatus.PENDING,
        CaseStatus.FAILED,
        CaseStatus.PENDING,
    ]
    assert run.total_executions == 7
    assert run.passed_count == 1
    # the errored case is counted as an error, the two pending ones are not failures
    assert run.failed_count == 2
    assert run.error_count == 1
    assert run.canceled_count == 1
    assert run.pass_rate == pytest.approx(1 / 7)
    assert run.cases_pass_rate_pct == pytest.approx(100 / 7)
    assert run.weighted_metrics_score_pct == 80.0  # over the two scored cases only
    cov = run.coverage
    assert (cov.scored, cov.unscored, cov.errored, cov.pending, cov.canceled) == (2, 0, 1, 2, 1)


def test_run_latency_leaves_errored_cases_out_but_cost_and_tokens_count_them() -> None:
    # given two completed cases (p50 100 and 200 ms) and one that crashed after a 30 s turn
    facts = [
        case(
            "a", verdicts=[verdict(5, cost=0.001)], latencies=[100.0], cost=0.01, prompt_tokens=10
        ),
        case(
            "b", verdicts=[verdict(5, cost=0.002)], latencies=[200.0], cost=0.02, prompt_tokens=20
        ),
        case("crash", errored=True, latencies=[30_000.0], cost=0.03, prompt_tokens=30),
    ]
    scores, run = score_run(facts, spec())
    # the errored case keeps its own observed p50 …
    assert scores[2].latency_p50_ms == 30_000
    # … but the run's latency is over the cases that did not error
    assert (run.latency_p50_ms, run.latency_avg_ms, run.latency_max_ms) == (150.0, 150.0, 200.0)
    # the agent spent the crash's tokens and money: agent cost and tokens include it
    assert run.total_cost_usd == pytest.approx(0.06)
    assert run.total_prompt_tokens == 60
    # judge calls are reported apart, never in total_cost_usd
    assert run.judge_cost_usd == pytest.approx(0.003)


def test_a_run_of_errored_cases_only_has_no_latency() -> None:
    _, run = score_run([case("crash", errored=True, latencies=[500.0])], spec())
    assert (run.latency_p50_ms, run.latency_avg_ms, run.latency_max_ms) == (None, None, None)
    assert run.latency_p95_ms is None


def test_unique_test_case_count_counts_keys_not_repetitions() -> None:
    facts = [scored_case((5, 5), "a", 0), scored_case((5, 5), "a", 1), scored_case((5, 5), "b")]
    _, run = score_run(facts, spec(PAIR))
    assert (run.unique_test_case_count, run.total_executions) == (2, 3)


@pytest.mark.parametrize(("cases", "p95"), [(19, None), (20, 1905.0)])
def test_run_latency_is_over_per_case_p50_and_p95_needs_20_cases(
    cases: int, p95: float | None
) -> None:
    # case i has turns i*100 and i*100 + 1 → per-case p50 int(i*100 + 0.5) = i*100
    facts = [case(f"c{i:02}", latencies=[i * 100.0, i * 100.0 + 1]) for i in range(1, cases + 1)]
    _, run = score_run(facts, spec())
    assert run.latency_p50_ms == (1000.0 if cases == 19 else 1050.0)
    assert run.latency_avg_ms == (1000.0 if cases == 19 else 1050.0)
    assert run.latency_max_ms == cases * 100.0
    if p95 is None:
        assert run.latency_p95_ms is None
    else:
        assert run.latency_p95_ms == pytest.approx(p95)


def test_run_totals_tokens_costs_and_self_judged() -> None:
    facts = [
        case(
            "a",
            verdicts=[verdict(5, cost=0.002, provider="openai")],
            prompt_tokens=100,
            completion_tokens=20,
            cost=0.01,
            agent_provider="openai",
        ),
        case("b", verdicts=[verdict(5, cost=0.003)], prompt_tokens=50, completion_tokens=5),
        case("c", errored=True, prompt_tokens=7, cost=0.5),
    ]
    _, run = score_run(facts, spec())
    assert (run.total_prompt_tokens, run.total_completion_tokens, run.total_tokens) == (
        157,
        25,
        182,
    )
    assert run.total_cost_usd == pytest.approx(0.51)
    assert run.judge_cost_usd == pytest.approx(0.005)
    assert run.self_judged_count == 1


def test_per_metric_means_are_0_to_5_for_scored_and_a_fraction_for_binary() -> None:
    s = spec({"tool_routing": 1.0, "task_completion": 1.0})
    facts = [
        case("a", verdicts=[verdict({"tool_routing": 5, "task_completion": True})]),
        case("b", verdicts=[verdict({"tool_routing": 2, "task_completion": False})]),
        case("c", verdicts=[verdict({"tool_routing": 2, "task_completion": True})]),
        case("d", verdicts=[verdict(error="boom")]),  # scored (0.0) but has no metric scores
        case("e", errored=True),
    ]
    _, run = score_run(facts, s)
    assert run.per_metric_means == {"tool_routing": 3.0, "task_completion": pytest.approx(2 / 3)}
    # overall: 100, 20, 70, 0 → 47.5
    assert run.weighted_metrics_score_pct == 47.5


def test_summarize_run_matches_score_run() -> None:
    facts = [scored_case((4, 4), "a"), scored_case((3, 3), "b")]
    s = spec(PAIR)
    scores, run = score_run(facts, s)
    assert summarize_run(scores, s) == run
    assert scores == [score_case(f, s) for f in facts]


# ---------------------------------------------------------------------------------------------
# Repetitions


def repetitions(key: str, pairs: Sequence[tuple[int, int]], **kw: Any) -> list[CaseFacts]:
    return [scored_case(p, key, i, **kw) for i, p in enumerate(pairs)]


def reduced(
    facts: Sequence[CaseFacts],
    score: ScoreReducer = ScoreReducer.MEAN,
    passed: PassReducer = PassReducer.ALL,
    k: int = 1,
    metrics: Mapping[str, float | None] | None = None,
) -> list[Any]:
    s = spec(metrics or PAIR, reducers=Reducers(score=score, passed=passed, k=k))
    return reduce_repetitions([score_case(f, s) for f in facts], s)


@pytest.mark.parametrize(
    ("reducer", "expected"),
    [
        (ScoreReducer.MEAN, 80.0),
        (ScoreReducer.MEDIAN, 90.0),
        (ScoreReducer.MIN, 60.0),
        (ScoreReducer.MAX, 90.0),
    ],
)
def test_score_reducers_over_scored_repetitions(reducer: ScoreReducer, expected: float) -> None:
    # 60, 90, 90 and a pending repetition that has no score
    facts = [*repetitions("a", [(3, 3), (5, 4), (5, 4)]), case("a", repetition=3)]
    [result] = reduced(facts, score=reducer)
    assert result.score == pytest.approx(expected)
    assert result.repetitions == 4


@pytest.mark.parametrize(
    ("reducer", "k", "expected"),
    [
        (PassReducer.ALL, 1, False),
        (PassReducer.ANY, 1, True),
        (PassReducer.MAJORITY, 1, True),
        (PassReducer.AT_LEAST_K, 2, True),
        (PassReducer.AT_LEAST_K, 3, False),
    ],
)
def test_pass_reducers(reducer: PassReducer, k: int, expected: bool) -> None:
    facts = repetitions("a", [(5, 5), (3, 3), (4, 4)])  # pass, fail, pass
    [result] = reduced(facts, passed=reducer, k=k)
    assert result.passed is expected
    assert (result.passes, result.decided) == (2, 3)


def test_majority_tie_fails() -> None:
    [result] = reduced(repetitions("a", [(5, 5), (3, 3)]), passed=PassReducer.MAJORITY)
    assert result.passed is False


def test_canceled_and_pending_repetitions_do_not_vote() -> None:
    facts = [
        *repetitions("a", [(5, 5)]),
        case("a", repetition=1, canceled=True),
        case("a", repetition=2),
    ]
    [result] = reduced(facts)
    assert (result.passed, result.decided, result.passes) == (True, 1, 1)
    assert result.flaky is False


def test_a_key_with_no_decided_repetition_has_no_pass_or_score() -> None:
    [result] = reduced([case("a", canceled=True)])
    assert result.passed is None
    assert result.score is None
    assert result.pass_at_k is None


@pytest.mark.parametrize(
    ("k", "pass_at_k", "pass_hat_k"),
    [(1, 0.4, 0.4), (2, 0.7, 0.1), (3, 0.9, 0.0), (5, 1.0, 0.0), (6, None, None)],
)
def test_pass_at_k_and_pass_hat_k(
    k: int, pass_at_k: float | None, pass_hat_k: float | None
) -> None:
    # n = 5 decided repetitions, c = 2 passes: k = 2 → 1 - C(3,2)/C(5,2) = 0.7, C(2,2)/C(5,2) = 0.1
    facts = repetitions("a", [(5, 5), (3, 3), (3, 3), (4, 4), (3, 3)])
    [result] = reduced(facts, k=k)
    assert (result.decided, result.passes) == (5, 2)
    if pass_at_k is None:
        assert result.pass_at_k is None
        assert result.pass_hat_k is None
    else:
        assert result.pass_at_k == pytest.approx(pass_at_k)
        assert result.pass_hat_k == pytest.approx(pass_hat_k)


def test_flaky_when_decided_repetitions_disagree() -> None:
    [flaky, steady] = reduced(
        [*repetitions("a", [(5, 5), (3, 3)]), *repetitions("b", [(3, 3), (3, 3)])]
    )
    assert flaky.flaky is True
    assert steady.flaky is False
    assert steady.passed is False


def test_errored_only_when_every_repetition_errored() -> None:
    facts = [
        case("a", errored=True),
        case("a", repetition=1, errored=True),
        case("b", errored=True),
        scored_case((5, 5), "b", 1),
    ]
    [all_errored, one_errored] = reduced(facts)
    assert (all_errored.errored, all_errored.any_errored) == (True, True)
    assert all_errored.passed is False
    assert all_errored.score is None
    assert (one_errored.errored, one_errored.any_errored) == (False, True)
    assert one_errored.flaky is True


def test_results_are_sorted_by_key_with_case_ids_in_repetition_order() -> None:
    b = repetitions("b", [(5, 5), (4, 4)])
    a = repetitions("a", [(5, 5)])
    results = reduced([b[1], a[0], b[0]])
    assert [r.test_case_key for r in results] == ["a", "b"]
    assert results[1].case_ids == [b[0].case_id, b[1].case_id]


def test_repetition_latency_metrics_and_cost() -> None:
    s_metrics: dict[str, float | None] = {"tool_routing": 1.0, "task_completion": 1.0}
    facts = [
        case(
            "a",
            verdicts=[verdict({"tool_routing": 5, "task_completion": True})],
            latencies=[100.0],
            cost=0.01,
        ),
        case(
            "a",
            repetition=1,
            verdicts=[verdict({"tool_routing": 2, "task_completion": False})],
            latencies=[301.0],
            cost=0.03,
        ),
        case("a", repetition=2, verdicts=[verdict({"tool_routing": 4, "task_completion": True})]),
    ]
    [result] = reduced(facts, metrics=s_metrics, passed=PassReducer.MAJORITY)
    assert result.latency_p50_ms == 200.5  # mean of 100 and 301
    assert result.metric_scores == {
        "tool_routing": pytest.approx(11 / 3),
        "task_completion": pytest.approx(10 / 3),
    }
    assert result.metric_passed == {"task_completion": True}
    assert result.cost_usd == pytest.approx(0.02)
    [strict] = reduced(facts, metrics=s_metrics, passed=PassReducer.ALL)
    assert strict.metric_passed == {"task_completion": False}


def test_run_summaries_and_rollups_share_one_percentile_definition() -> None:
    # 20 cases with one assistant turn each: per-case p50s and every message are the same values
    values = [100.0 * i for i in range(1, 21)]
    facts = [case(f"c{i:02}", verdicts=[verdict(5)], latencies=[v]) for i, v in enumerate(values)]
    scores, run = score_run(facts, spec())
    summary = rollup(
        [RollupInput(facts=f, score=s) for f, s in zip(facts, scores, strict=True)], [], []
    )
    rt = summary.summary.response_time
    # linear (type 7): h = 19 × 0.95 = 18.05 → 1900 + 0.05 × 100
    assert percentile(values, 95) == run.latency_p95_ms == rt.p95 == 1905.0
    assert percentile(values, 50) == run.latency_p50_ms == rt.p50 == 1050.0


def test_a_pending_repetition_is_not_a_failing_vote() -> None:
    facts = [
        scored_case((5, 5), "a", 0),
        case("a", repetition=1, transcript=False),  # not run yet
        case("a", repetition=2, turns=0),  # ran, no turns: fails
    ]
    scores, run = score_run(facts, spec(PAIR))
    (result,) = reduce_repetitions(scores, spec(PAIR))
    assert (result.repetitions, result.decided, result.passes) == (3, 2, 1)
    assert (result.passed, result.flaky, result.score) == (False, True, 100.0)
    only_pending = reduce_repetitions(scores[:2], spec(PAIR))[0]
    assert (only_pending.decided, only_pending.passed, only_pending.flaky) == (1, True, False)
    assert (run.passed_count, run.failed_count, run.coverage.pending) == (1, 1, 1)
