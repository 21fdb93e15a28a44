from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import pytest

from evaledger.domain.events import AgentSnapshot, ToolSpec
from evaledger.domain.spec import (
    ComparisonThresholds,
    JudgeConfig,
    MetricSelection,
    Reducers,
    RunConfig,
    ScoreReducer,
    ScoringSpec,
    resolve_spec,
)
from evaledger.scoring.case import reduce_repetitions, summarize_run
from evaledger.scoring.comparison import (
    ComparedRun,
    CompareThresholds,
    RunComparison,
    classify_case,
    compare_results,
    compare_runs,
    prompt_diff,
    render_markdown,
    tool_diff,
)
from evaledger.scoring.models import (
    CaseScore,
    CaseStatus,
    GateRule,
    MetricResult,
    RunAggregate,
    TestCaseResult,
)

SPEC = resolve_spec(RunConfig())
BASE_ID = UUID("00000000-0000-0000-0000-00000000000b")
CAND_ID = UUID("00000000-0000-0000-0000-00000000000c")
RESAMPLES = 500  # keep the bootstrap cheap in tests; the default (10 000) is tested in stats


def case(
    key: str,
    score: float | None = 80.0,
    passed: bool | None = True,
    *,
    rep: int = 0,
    errored: bool = False,
    latency: int | None = None,
    cost: float | None = None,
    metrics: list[MetricResult] | None = None,
    self_judged: bool = False,
    run_id: UUID = BASE_ID,
) -> CaseScore:
    if errored:
        status = CaseStatus.ERRORED
    elif passed is None:
        status = CaseStatus.UNSCORED
    else:
        status = CaseStatus.PASSED if passed else CaseStatus.FAILED
    return CaseScore(
        case_id=uuid4(),
        run_id=run_id,
        test_case_key=key,
        test_id=key,
        repetition=rep,
        status=status,
        overall_score=None if errored else score,
        passed=False if errored else passed,
        errored=errored,
        scored=not errored and score is not None,
        gate=GateRule.EXECUTION_ERROR if errored else GateRule.SCORE_THRESHOLD,
        gate_reason="test",
        metric_scores=metrics or [],
        latency_p50_ms=latency,
        cost_usd=cost,
        self_judged=self_judged,
    )


def run(
    cases: list[CaseScore],
    *,
    run_id: UUID = BASE_ID,
    spec: ScoringSpec = SPEC,
    agg: dict[str, Any] | None = None,
    suite: str = "support",
    version: int | str | None = 1,
    agent: AgentSnapshot | None = None,
    config: dict[str, Any] | None = None,
    judge: dict[str, Any] | None = None,
    status: str = "completed",
) -> ComparedRun:
    aggregate = summarize_run(cases, spec)
    if agg:
        aggregate = aggregate.model_copy(update=agg)
    return ComparedRun(
        run_id=run_id,
        status=status,
        suite_name=suite,
        suite_version=version,
        agent=agent or AgentSnapshot(name="bot", version="1", provider="openai", model="m1"),
        config=config or {},
        judge=judge or {"provider": "anthropic", "model": "j1", "pass_threshold": 75.0},
        spec=spec,
        cases=cases,
        aggregate=aggregate,
    )


def compare(baseline: ComparedRun, candidate: ComparedRun, **kw: Any) -> RunComparison:
    kw.setdefault("resamples", RESAMPLES)
    return compare_runs(baseline, candidate, **kw)


def statuses(result: RunComparison) -> dict[str, str]:
    return {c.test_case_key: c.status for c in result.test_case_comparisons}


def agg_only(**kw: Any) -> RunAggregate:
    fields: dict[str, Any] = {
        "unique_test_case_count": 0,
        "total_executions": 0,
        "passed_count": 0,
        "failed_count": 0,
        "error_count": 0,
        "pass_rate": 1.0,
        "metrics_pass_threshold": 80.0,
        "cases_pass_threshold": 100.0,
    }
    fields.update(kw)
    return RunAggregate(**fields)


# ---------------------------------------------------------------------------------------------
# Suite verdict anchors


def test_pass_rate_drop_one_to_point_nine_is_regression_with_exact_reason():
    base = run([case(f"k{i}") for i in range(10)])
    cand = run([case(f"k{i}") for i in range(9)] + [case("k9", passed=False)], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.aggregate.pass_rate_delta == -0.1
    assert result.verdict.regression_detected
    assert result.verdict.reasons == ["pass_rate dropped 10% (1.00 → 0.90)"]
    assert result.verdict.thresholds_used == ComparisonThresholds()
    assert statuses(result)["k9"] == "regression"
    assert result.aggregate.total_regressions == 1
    assert result.aggregate.total_unchanged == 9


def test_equal_pass_rate_is_no_regression():
    base = run([case(f"k{i}") for i in range(4)])
    cand = run([case(f"k{i}") for i in range(4)], run_id=CAND_ID)
    result = compare(base, cand)
    assert not result.verdict.regression_detected
    assert result.verdict.reasons == []
    assert result.aggregate.pass_rate_delta == 0.0


def test_pass_rate_drop_float_noise_on_threshold_is_not_flagged():
    # 0.8 - 0.7 == 0.10000000000000009 in floats; with max_pass_rate_drop=0.1 it must not flag.
    base = run([case(f"k{i}", passed=i < 8) for i in range(10)])
    cand = run([case(f"k{i}", passed=i < 7) for i in range(10)], run_id=CAND_ID)
    result = compare(base, cand, thresholds=CompareThresholds(max_pass_rate_drop=0.1))
    assert result.verdict.reasons == []
    assert result.verdict.thresholds_used.max_pass_rate_drop == 0.1
    assert result.aggregate.pass_rate_delta == -0.1


def test_avg_score_80_to_75_is_not_a_score_regression():
    base = run([case("a", 80.0)])
    cand = run([case("a", 75.0)], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.aggregate.avg_score_delta == -5.0
    assert not result.verdict.regression_detected
    assert statuses(result) == {"a": "unchanged"}  # exactly 5.0 is unchanged too


def test_avg_score_80_to_70_exact_reason():
    base = run([case("a", 80.0), case("b", 80.0)])
    cand = run([case("a", 70.0), case("b", 70.0)], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.aggregate.avg_score_delta == -10.0
    assert result.verdict.reasons == ["avg_score dropped 10.0pt (80.0 → 70.0)"]
    assert statuses(result) == {"a": "regression", "b": "regression"}


def test_latency_500_to_600_is_exactly_20_percent_not_flagged():
    base = run([case("a", latency=500), case("b", latency=500)])
    cand = run([case("a", latency=600), case("b", latency=600)], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.aggregate.latency_avg_delta_ms == 100.0
    assert not result.verdict.regression_detected
    assert not any("latency" in w for w in result.warnings)
    assert result.test_case_comparisons[0].latency_delta_ms == 100.0


def test_latency_500_to_700_exact_reason():
    base = run([case("a", latency=500)])
    cand = run([case("a", latency=700)], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.verdict.reasons == ["avg_latency increased 40% (500ms → 700ms)"]
    assert result.verdict.regression_detected


def test_latency_zero_baseline_skips_check_with_warning():
    base = run([case("a", latency=0)])
    cand = run([case("a", latency=900)], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.aggregate.baseline_metrics.latency_avg_ms == 0.0
    assert not result.verdict.regression_detected
    assert "latency check skipped: baseline latency_avg_ms is 0" in result.warnings


def test_missing_latency_skips_check_with_warning():
    base = run([case("a", latency=500)])
    cand = run([case("a")], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.aggregate.latency_avg_delta_ms is None
    assert "latency check skipped: no latency data in candidate" in result.warnings


def test_all_three_reasons_in_order():
    base = run(
        [case("a")],
        agg={"pass_rate": 1.0, "weighted_metrics_score_pct": 80.0, "latency_avg_ms": 500.0},
    )
    cand = run(
        [case("a")],
        run_id=CAND_ID,
        agg={"pass_rate": 0.9, "weighted_metrics_score_pct": 70.0, "latency_avg_ms": 700.0},
    )
    result = compare(base, cand)
    assert result.verdict.reasons == [
        "pass_rate dropped 10% (1.00 → 0.90)",
        "avg_score dropped 10.0pt (80.0 → 70.0)",
        "avg_latency increased 40% (500ms → 700ms)",
    ]


def test_thresholds_default_from_candidate_spec_and_request_overrides():
    lenient = SPEC.model_copy(update={"comparison": ComparisonThresholds(max_avg_score_drop=12.0)})
    base = run([case("a", 80.0)])
    cand = run([case("a", 70.0)], run_id=CAND_ID, spec=lenient)
    result = compare(base, cand)
    assert result.verdict.thresholds_used.max_avg_score_drop == 12.0
    assert not result.verdict.regression_detected
    # A per-request override beats the spec.
    result = compare(base, cand, thresholds=CompareThresholds(max_avg_score_drop=9.99))
    assert result.verdict.thresholds_used.max_avg_score_drop == 9.99
    assert result.verdict.thresholds_used.max_pass_rate_drop == 0.0
    assert result.verdict.reasons == ["avg_score dropped 10.0pt (80.0 → 70.0)"]


def test_spec_argument_supplies_thresholds_and_reducers():
    strict = SPEC.model_copy(update={"comparison": ComparisonThresholds(case_score_delta=1.0)})
    base = run([case("a", 80.0)])
    cand = run([case("a", 78.0)], run_id=CAND_ID)
    assert statuses(compare(base, cand)) == {"a": "unchanged"}
    result = compare(base, cand, spec=strict)
    assert statuses(result) == {"a": "regression"}
    assert result.verdict.thresholds_used.case_score_delta == 1.0


# ---------------------------------------------------------------------------------------------
# Per-case rules


def _tcr(key: str = "k", **kw: Any) -> TestCaseResult:
    fields: dict[str, Any] = {
        "test_case_key": key,
        "repetitions": 1,
        "case_ids": [],
        "score": 80.0,
        "passed": True,
        "errored": False,
    }
    fields.update(kw)
    return TestCaseResult(**fields)


@pytest.mark.parametrize(
    ("base", "cand", "expected"),
    [
        ({"score": 80.0}, {"score": 85.0}, "unchanged"),  # +5.0 exactly
        ({"score": 80.0}, {"score": 75.0}, "unchanged"),  # -5.0 exactly
        ({"score": 90.0}, {"score": 84.99}, "regression"),  # -5.01
        ({"score": 84.99}, {"score": 90.0}, "improvement"),  # +5.01
        ({"score": 80.3}, {"score": 75.3}, "unchanged"),
        ({"passed": True, "score": 80.0}, {"passed": False, "score": 99.0}, "regression"),
        ({"passed": False, "score": 90.0}, {"passed": True, "score": 10.0}, "improvement"),
        ({"errored": True, "score": None, "passed": False}, {"score": 10.0}, "error"),
        ({"score": 10.0}, {"errored": True, "score": None, "passed": False}, "error"),
        ({"score": None, "passed": None}, {"score": 10.0, "passed": False}, "unchanged"),
        ({"score": None, "passed": True}, {"score": 10.0, "passed": True}, "unchanged"),
    ],
)
def test_classify_case_rules(base, cand, expected):
    assert classify_case(_tcr(**base), _tcr(**cand)) == expected


def test_case_score_delta_601_boundary_via_compare_runs():
    base = run([case("a", 90.0), case("b", 80.0)])
    cand = run([case("a", 84.99), case("b", 85.0)], run_id=CAND_ID)
    result = compare(base, cand)
    by_key = {c.test_case_key: c for c in result.test_case_comparisons}
    assert by_key["a"].status == "regression"
    assert by_key["a"].score_delta == -5.01
    assert by_key["b"].status == "unchanged"
    assert by_key["b"].score_delta == 5.0


def test_disjoint_case_sets():
    base = run([case("a"), case("b"), case("z")])
    cand = run([case("b"), case("c"), case("d")], run_id=CAND_ID)
    result = compare(base, cand)
    assert [c.test_case_key for c in result.test_case_comparisons] == ["b"]
    assert result.baseline_only_test_cases == ["a", "z"]
    assert result.candidate_only_test_cases == ["c", "d"]


def test_fully_disjoint_runs_compare_nothing():
    base = run([case("a")])
    cand = run([case("b")], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.test_case_comparisons == []
    assert result.statistics.verdict == "insufficient_data"
    assert result.aggregate.per_metric_aggregate_deltas == []


def test_all_repetitions_errored_is_error_status():
    base = run([case("a", rep=0), case("a", rep=1)])
    cand = run([case("a", rep=0, errored=True), case("a", rep=1, errored=True)], run_id=CAND_ID)
    result = compare(base, cand)
    (cmp,) = result.test_case_comparisons
    assert cmp.status == "error"
    assert cmp.candidate_score is None
    assert cmp.score_delta is None
    assert cmp.repetitions.baseline == 2
    assert cmp.repetitions.candidate == 2
    assert result.aggregate.total_errors == 1
    # Error cases never enter the paired statistics.
    assert result.statistics.mcnemar.b == 0


def test_one_errored_repetition_is_not_error_status():
    base = run([case("a", rep=0), case("a", rep=1)])
    cand = run([case("a", rep=0, errored=True), case("a", rep=1)], run_id=CAND_ID)
    (cmp,) = compare(base, cand).test_case_comparisons
    # Pass reducer "all": the errored repetition failed, so the case flips pass → fail.
    assert cmp.status == "regression"
    assert cmp.candidate_passed is False
    assert cmp.candidate_score == 80.0  # the errored repetition has no score


def test_repetitions_reduced_not_last_row_wins_mean_vs_min():
    base = run([case("k", 90.0, rep=0), case("k", 90.0, rep=1)])
    cand = run([case("k", 84.0, rep=0), case("k", 90.0, rep=1)], run_id=CAND_ID)
    by_mean = compare(base, cand)
    (cmp,) = by_mean.test_case_comparisons
    assert cmp.candidate_score == 87.0  # mean, not the last row's 90
    assert cmp.score_delta == -3.0
    assert cmp.status == "unchanged"
    min_spec = resolve_spec(RunConfig(reducers=Reducers(score=ScoreReducer.MIN)))
    by_min = compare(base, cand, spec=min_spec)
    (cmp,) = by_min.test_case_comparisons
    assert cmp.candidate_score == 84.0
    assert cmp.score_delta == -6.0
    assert cmp.status == "regression"


def test_each_run_reduced_with_its_own_spec_when_no_spec_given():
    min_spec = resolve_spec(RunConfig(reducers=Reducers(score=ScoreReducer.MIN)))
    base = run([case("k", 90.0, rep=0), case("k", 90.0, rep=1)])
    cand = run([case("k", 84.0, rep=0), case("k", 90.0, rep=1)], run_id=CAND_ID, spec=min_spec)
    result = compare(base, cand)
    assert result.test_case_comparisons[0].candidate_score == 84.0
    assert any("different specs" in w for w in result.warnings)


def test_flaky_cases_flagged_and_warned():
    base = run([case("k", rep=0), case("k", rep=1)])
    cand = run([case("k", rep=0), case("k", 60.0, passed=False, rep=1)], run_id=CAND_ID)
    result = compare(base, cand)
    (cmp,) = result.test_case_comparisons
    assert cmp.candidate_flaky
    assert not cmp.baseline_flaky
    assert cmp.status == "regression"  # pass reducer "all"
    assert "1 flaky test case(s) in candidate (repetitions disagree): k" in result.warnings


def test_compare_results_with_prebuilt_results():
    base = run([], agg={"pass_rate": 1.0})
    cand = run([], run_id=CAND_ID, agg={"pass_rate": 1.0})
    result = compare_results(
        base,
        cand,
        [_tcr("a", score=70.0), _tcr("b", score=70.0)],
        [_tcr("a", score=80.0), _tcr("c")],
        resamples=RESAMPLES,
    )
    assert statuses(result) == {"a": "improvement"}
    assert result.baseline_only_test_cases == ["b"]
    assert result.candidate_only_test_cases == ["c"]
    assert result.aggregate.total_improvements == 1


# ---------------------------------------------------------------------------------------------
# Metric deltas

BIN_SPEC = resolve_spec(
    RunConfig(
        judge=JudgeConfig(
            metrics=[
                MetricSelection(metric="tool_routing"),
                MetricSelection(metric="task_completion", weight=0.15),
            ]
        )
    )
)


def _metrics(routing: float, task: bool) -> list[MetricResult]:
    return [
        MetricResult(metric="tool_routing", score=routing, weight=0.5, contribution=0.0),
        MetricResult(
            metric="task_completion",
            score=5.0 if task else 0.0,
            passed=task,
            weight=0.5,
            contribution=0.0,
        ),
    ]


def test_binary_and_scored_metric_deltas():
    base = run(
        [
            case("a", metrics=_metrics(4, True)),
            case("b", metrics=_metrics(3, True)),
        ],
        spec=BIN_SPEC,
    )
    cand = run(
        [
            case("a", metrics=_metrics(3, False)),
            case("b", metrics=_metrics(5, True)),
        ],
        run_id=CAND_ID,
        spec=BIN_SPEC,
    )
    result = compare(base, cand)
    by_key = {c.test_case_key: c for c in result.test_case_comparisons}
    a = {m.metric: m for m in by_key["a"].metric_deltas}
    assert a["tool_routing"].is_binary is False
    assert (a["tool_routing"].baseline_score, a["tool_routing"].candidate_score) == (4.0, 3.0)
    assert a["tool_routing"].delta == -1.0
    assert a["tool_routing"].status == "regression"
    assert a["tool_routing"].baseline_label == "good"
    assert a["task_completion"].is_binary is True
    assert a["task_completion"].status == "pass→fail"
    assert a["task_completion"].delta is None
    assert (a["task_completion"].baseline_label, a["task_completion"].candidate_label) == (
        "pass",
        "fail",
    )
    b = {m.metric: m for m in by_key["b"].metric_deltas}
    assert b["tool_routing"].status == "improvement"
    assert b["tool_routing"].delta == 2.0
    assert b["task_completion"].status == "unchanged"

    aggs = {m.metric: m for m in result.aggregate.per_metric_aggregate_deltas}
    assert [m.metric for m in result.aggregate.per_metric_aggregate_deltas] == [
        "tool_routing",
        "task_completion",
    ]
    routing = aggs["tool_routing"]
    assert (routing.baseline_avg, routing.candidate_avg, routing.delta) == (3.5, 4.0, 0.5)
    task = aggs["task_completion"]
    assert task.is_binary
    assert (task.baseline_avg, task.candidate_avg, task.delta) == (1.0, 0.5, -0.5)


def test_binary_fail_to_pass():
    base = run([case("a", metrics=_metrics(4, False))], spec=BIN_SPEC)
    cand = run([case("a", metrics=_metrics(4, True))], run_id=CAND_ID, spec=BIN_SPEC)
    (cmp,) = compare(base, cand).test_case_comparisons
    deltas = {m.metric: m.status for m in cmp.metric_deltas}
    assert deltas == {"tool_routing": "unchanged", "task_completion": "fail→pass"}


def test_per_metric_aggregates_only_over_matched_cases():
    base = run(
        [case("a", metrics=_metrics(4, True)), case("only_base", metrics=_metrics(0, False))],
        spec=BIN_SPEC,
    )
    cand = run([case("a", metrics=_metrics(2, True))], run_id=CAND_ID, spec=BIN_SPEC)
    aggs = {m.metric: m for m in compare(base, cand).aggregate.per_metric_aggregate_deltas}
    assert (aggs["tool_routing"].baseline_avg, aggs["tool_routing"].delta) == (4.0, -2.0)
    assert aggs["task_completion"].baseline_avg == 1.0


# ---------------------------------------------------------------------------------------------
# Aggregate deltas, warnings


def test_cost_delta_rounded_and_none_when_missing():
    base = run([case("a", cost=0.0123), case("b", cost=0.01)])
    cand = run([case("a", cost=0.02), case("b", cost=0.0101)], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.aggregate.cost_delta_usd == 0.0078  # 0.0301 - 0.0223
    no_cost = run([case("a"), case("b")], run_id=CAND_ID)
    assert compare(base, no_cost).aggregate.cost_delta_usd is None


def test_latency_p95_delta():
    base = run([case("a")], agg={"latency_p95_ms": 1000.0, "latency_avg_ms": 500.0})
    cand = run(
        [case("a")], run_id=CAND_ID, agg={"latency_p95_ms": 1234.56789, "latency_avg_ms": 500.0}
    )
    result = compare(base, cand)
    assert result.aggregate.latency_p95_delta_ms == 234.5679
    assert result.aggregate.latency_avg_delta_ms == 0.0


def test_aggregate_without_scores_has_no_avg_score_delta():
    base = ComparedRun(
        run_id="b",
        status="completed",
        suite_name="s",
        agent=AgentSnapshot(name="x"),
        spec=SPEC,
        aggregate=agg_only(weighted_metrics_score_pct=None),
    )
    cand = base.model_copy(update={"run_id": "c"})
    result = compare(base, cand)
    assert result.aggregate.avg_score_delta is None
    assert result.baseline_run_id == "b"
    assert result.candidate_run_id == "c"
    assert not result.verdict.regression_detected


def test_different_suites_warning():
    base = run([case("a")], suite="support")
    cand = run([case("a")], run_id=CAND_ID, suite="billing")
    result = compare(base, cand)
    assert "runs use different suites: 'support' vs 'billing'" in result.warnings
    assert result.config_diff.suite_changed is not None
    assert result.config_diff.suite_changed.new_value == "billing"


def test_different_suite_versions_warning():
    base = run([case("a")], version=1)
    cand = run([case("a")], run_id=CAND_ID, version=2)
    result = compare(base, cand)
    assert "runs use different versions of suite 'support': 1 vs 2" in result.warnings


def test_self_judged_and_status_warnings():
    base = run([case("a", self_judged=True)], status="running")
    cand = run([case("a")], run_id=CAND_ID)
    result = compare(base, cand)
    assert "baseline has 1 self-judged case(s): judge provider = agent provider" in result.warnings
    assert "baseline run is 'running', not completed" in result.warnings


def test_clean_comparison_has_no_warnings():
    base = run([case("a", latency=300)])
    cand = run([case("a", latency=300)], run_id=CAND_ID)
    assert compare(base, cand).warnings == []


# ---------------------------------------------------------------------------------------------
# Config diff


PROMPT_A = "You are a support bot.\nBe polite.\nNever share secrets.\n"
PROMPT_B = "You are a support bot.\nBe concise.\nNever share secrets.\n"
LOOKUP = ToolSpec(name="lookup", description="Find an order", parameters={"type": "object"})


def test_prompt_diff_unified_text():
    diff = prompt_diff(PROMPT_A, PROMPT_B)
    assert diff is not None
    assert diff.unified_diff == (
        "--- baseline\n"
        "+++ candidate\n"
        "@@ -1,3 +1,3 @@\n"
        " You are a support bot.\n"
        "-Be polite.\n"
        "+Be concise.\n"
        " Never share secrets.\n"
    )
    assert (diff.added_line_count, diff.removed_line_count) == (1, 1)
    assert 0 < diff.change_ratio < 0.5
    assert prompt_diff(PROMPT_A, PROMPT_A) is None
    assert prompt_diff(None, "") is None


def test_tool_diff_added_removed_changed():
    old = [
        LOOKUP,
        ToolSpec(name="refund", description="Refund"),
        ToolSpec(name="same", description="x"),
    ]
    new = [
        LOOKUP.model_copy(update={"parameters": {"type": "object", "required": ["id"]}}),
        ToolSpec(name="same", description="x"),
        ToolSpec(name="escalate", description="Hand over"),
    ]
    diff = tool_diff(old, new)
    assert diff is not None
    assert diff.added == ["escalate"]
    assert diff.removed == ["refund"]
    assert diff.changed == ["lookup"]
    assert [m.field for m in diff.modified] == ["lookup.parameters"]
    assert tool_diff(old, list(old)) is None


def test_config_diff_in_comparison():
    base_agent = AgentSnapshot(
        name="bot",
        version="1",
        provider="openai",
        model="m1",
        system_prompt=PROMPT_A,
        tools=[LOOKUP],
    )
    cand_agent = AgentSnapshot(
        name="bot",
        version="2",
        provider="anthropic",
        model="m2",
        system_prompt=PROMPT_B,
        tools=[LOOKUP.model_copy(update={"description": "Find any order"})],
    )
    base = run(
        [case("a")],
        agent=base_agent,
        config={"concurrency": 5, "judge": {"temperature": 0.0, "model": "j1"}, "tags": ["x"]},
        judge={"provider": "anthropic", "model": "j1", "pass_threshold": 75.0, "metrics": None},
    )
    cand = run(
        [case("a")],
        run_id=CAND_ID,
        agent=cand_agent,
        config={
            "concurrency": 10,
            "judge": {"temperature": 0.2, "model": "j1"},
            "max_turns": 8,
            "tags": ["x"],
        },
        judge={
            "provider": "openai",
            "model": "j2",
            "pass_threshold": 80.0,
            "metrics": [{"metric": "tool_routing"}],
        },
    )
    result = compare(base, cand)
    diff = result.config_diff
    md = render_markdown(result)
    assert (
        "Changes: system prompt (+1/-1 lines); tools (~lookup); agent.version 1 → 2; "
        "agent.provider openai → anthropic; agent.model m1 → m2; "
        "judge.provider anthropic → openai; judge.model j1 → j2; "
        "judge.pass_threshold 75.0 → 80.0; judge.metrics; "
        "config: concurrency, judge.temperature, max_turns\n"
    ) in md
    assert diff.prompt_diff is not None
    assert "-Be polite.\n+Be concise.\n" in diff.prompt_diff.unified_diff
    assert diff.tool_diff is not None
    assert diff.tool_diff.changed == ["lookup"]
    assert diff.tool_diff.modified[0].field == "lookup.description"
    assert diff.model_changed is not None
    assert (diff.model_changed.old_value, diff.model_changed.new_value) == ("m1", "m2")
    assert diff.provider_changed is not None
    assert diff.agent_version_changed is not None
    assert (diff.baseline_agent_version, diff.candidate_agent_version) == ("1", "2")
    assert diff.agent_name_changed is None
    assert diff.judge_provider_changed is not None
    assert diff.judge_provider_changed.new_value == "openai"
    assert diff.judge_model_changed is not None
    assert diff.judge_pass_threshold_changed is not None
    assert diff.judge_pass_threshold_changed.old_value == 75.0
    assert diff.judge_metrics_changed is not None
    assert [(c.field, c.old_value, c.new_value) for c in diff.config_changes] == [
        ("concurrency", 5, 10),
        ("judge.temperature", 0.0, 0.2),
        ("max_turns", None, 8),
    ]


def test_config_diff_identical_runs_is_empty():
    base = run([case("a")])
    cand = run([case("a")], run_id=CAND_ID)
    diff = compare(base, cand).config_diff
    assert diff.prompt_diff is None
    assert diff.tool_diff is None
    assert diff.model_changed is None
    assert diff.judge_model_changed is None
    assert diff.config_changes == []


# ---------------------------------------------------------------------------------------------
# Statistics in the comparison


def test_statistics_mcnemar_on_reduced_pass_flips():
    # 10 matched cases: 1 pass→fail, 9 fail→pass (b=1, c=9 → p = 22/1024).
    base_cases = [case("r0")] + [case(f"i{i}", 60.0, passed=False) for i in range(9)]
    cand_cases = [case("r0", 60.0, passed=False)] + [case(f"i{i}", 80.0) for i in range(9)]
    # Repetitions count once: a second passing repetition of r0 in the baseline.
    base_cases.append(case("r0", rep=1))
    result = compare(run(base_cases), run(cand_cases, run_id=CAND_ID))
    st = result.statistics
    assert (st.mcnemar.b, st.mcnemar.c) == (1, 9)
    assert st.mcnemar.p_value == 0.021484375
    ci = st.score_delta_ci95
    assert ci.n == 10
    assert ci.mean == 16.0  # (-20 + 9 * 20) / 10
    assert ci.resamples == RESAMPLES
    assert st.verdict == "improvement"
    # The statistics never replace the threshold verdict.
    assert result.verdict.regression_detected is False


def test_statistics_reproducible_and_default_resamples():
    base = run([case(f"k{i}", 80.0 + i) for i in range(6)])
    cand = run([case(f"k{i}", 78.0 + (i % 3)) for i in range(6)], run_id=CAND_ID)
    first = compare_runs(base, cand, seed=11)
    second = compare_runs(base, cand, seed=11)
    assert first.statistics == second.statistics
    assert first.statistics.score_delta_ci95.resamples == 10_000
    assert first.statistics.score_delta_ci95.seed == 11


def test_statistics_insufficient_data_beside_threshold_regression():
    base = run([case("a", 90.0), case("b", 90.0)])
    cand = run([case("a", 60.0, passed=False), case("b", 60.0, passed=False)], run_id=CAND_ID)
    result = compare(base, cand)
    assert result.verdict.regression_detected
    assert result.statistics.insufficient_data
    assert result.statistics.verdict == "insufficient_data"


# ---------------------------------------------------------------------------------------------
# Markdown


def test_markdown_regression_comment():
    base = run([case(f"k{i}", latency=500) for i in range(10)])
    cand = run(
        [case(f"k{i}", latency=700) for i in range(9)]
        + [case("k9", 40.0, passed=False, latency=700)],
        run_id=CAND_ID,
    )
    md = render_markdown(compare(base, cand))
    assert md.startswith("### ❌ Regression detected\n")
    assert "- pass_rate dropped 10% (1.00 → 0.90)" in md
    assert "- avg_latency increased 40% (500ms → 700ms)" in md
    assert "| Pass rate | 100.0% | 90.0% | -10.0pt |" in md
    assert "| Latency avg | 500ms | 700ms | +200ms |" in md
    assert "**Regressed cases (1)**" in md
    assert "| `k9` | pass 80.0 | fail 40.0 | -40.0 |" in md
    assert "Statistics: McNemar b=1 c=0 p=1" in md
    assert "insufficient_data" in md


def test_markdown_no_regression_and_row_cap():
    base = run([case(f"k{i:02d}", 90.0) for i in range(25)])
    cand = run([case(f"k{i:02d}", 80.0) for i in range(25)], run_id=CAND_ID)
    result = compare(base, cand, thresholds=CompareThresholds(max_avg_score_drop=20.0))
    assert not result.verdict.regression_detected
    assert result.aggregate.total_regressions == 25
    md = render_markdown(result)
    assert md.startswith("### ✅ No regression\n")
    assert md.count("| `k") == 20
    assert "…and 5 more" in md
    assert "| Avg score | 90.0 | 80.0 | -10.0 |" in md


def test_markdown_cost_row_and_warnings():
    base = run([case("a", cost=0.5)], suite="s1")
    cand = run([case("a", cost=0.75)], run_id=CAND_ID, suite="s2")
    md = render_markdown(compare(base, cand))
    assert "| Cost | $0.5000 | $0.7500 | +0.2500 USD |" in md
    assert "> ⚠️ runs use different suites: 's1' vs 's2'" in md


def test_reduce_repetitions_is_what_compare_uses():
    cases = [case("k", 70.0, rep=0), case("k", 90.0, rep=1)]
    (reduced,) = reduce_repetitions(cases, SPEC)
    base = run(cases)
    cand = run(cases, run_id=CAND_ID)
    (cmp,) = compare(base, cand).test_case_comparisons
    assert cmp.baseline_score == reduced.score == 80.0


# ---------------------------------------------------------------------------------------------
# The verdict uses the numbers it reports (rounded 4 dp deltas, strict >)


@pytest.mark.parametrize(
    ("candidate_score", "delta", "reasons"),
    [
        (74.99996, -5.0, []),  # raw drop 5.00004, reported 5.0: exactly on 5.0 is no regression
        (75.00004, -5.0, []),
        (74.9999, -5.0001, ["avg_score dropped 5.0001pt (80.0 → 74.9999)"]),
    ],
)
def test_avg_score_threshold_is_held_against_the_reported_delta(
    candidate_score: float, delta: float, reasons: list[str]
) -> None:
    base = run([case("a")], agg={"weighted_metrics_score_pct": 80.0})
    cand = run([case("a")], run_id=CAND_ID, agg={"weighted_metrics_score_pct": candidate_score})
    result = compare(base, cand)
    assert result.aggregate.avg_score_delta == delta
    assert result.verdict.reasons == reasons
    assert result.verdict.regression_detected is bool(reasons)


@pytest.mark.parametrize(
    ("candidate_rate", "delta", "reasons"),
    [
        (0.99996, 0.0, []),  # a drop of 0.00004 is reported as 0.0: no regression
        (0.99994, -0.0001, ["pass_rate dropped 0.01% (1.00 → 0.9999)"]),
        (0.8667, -0.1333, ["pass_rate dropped 13.33% (1.00 → 0.8667)"]),
    ],
)
def test_pass_rate_threshold_is_held_against_the_reported_delta(
    candidate_rate: float, delta: float, reasons: list[str]
) -> None:
    base = run([case("a")], agg={"pass_rate": 1.0})
    cand = run([case("a")], run_id=CAND_ID, agg={"pass_rate": candidate_rate})
    result = compare(base, cand)
    assert result.aggregate.pass_rate_delta == delta
    assert result.verdict.reasons == reasons


@pytest.mark.parametrize(
    ("candidate_ms", "increase", "reasons"),
    [
        (600.0, 0.2, []),  # exactly 20 %: not flagged
        (600.01, 0.2, []),  # 20.002 % is reported as 0.2: not flagged
        (600.03, 0.2001, ["avg_latency increased 20.01% (500ms → 600ms)"]),
    ],
)
def test_latency_threshold_is_held_against_the_reported_increase(
    candidate_ms: float, increase: float, reasons: list[str]
) -> None:
    base = run([case("a")], agg={"latency_avg_ms": 500.0})
    cand = run([case("a")], run_id=CAND_ID, agg={"latency_avg_ms": candidate_ms})
    result = compare(base, cand)
    assert result.aggregate.latency_avg_increase_pct == increase
    assert result.verdict.reasons == reasons


def test_latency_increase_is_none_without_a_baseline_latency() -> None:
    result = compare(run([case("a", latency=0)]), run([case("a", latency=9)], run_id=CAND_ID))
    assert result.aggregate.latency_avg_increase_pct is None


@pytest.mark.parametrize(
    ("candidate_score", "delta", "status"),
    [
        (74.99996, -5.0, "unchanged"),
        (85.00004, 5.0, "unchanged"),
        (74.9999, -5.0001, "regression"),
        (85.0001, 5.0001, "improvement"),
    ],
)
def test_case_score_delta_is_held_against_the_reported_score_delta(
    candidate_score: float, delta: float, status: str
) -> None:
    result = compare(run([case("a", 80.0)]), run([case("a", candidate_score)], run_id=CAND_ID))
    (only,) = result.test_case_comparisons
    assert (only.score_delta, only.status) == (delta, status)


# ---------------------------------------------------------------------------------------------
# Cost and latency: what is compared


def test_cost_delta_is_agent_cost_only_and_judge_cost_is_its_own_delta() -> None:
    base = run([case("a", cost=0.10), case("b", cost=0.05)], agg={"judge_cost_usd": 0.02})
    cand = run(
        [case("a", cost=0.12, run_id=CAND_ID), case("b", errored=True, cost=0.04, run_id=CAND_ID)],
        run_id=CAND_ID,
        agg={"judge_cost_usd": 0.50},
    )
    result = compare(base, cand)
    # the errored case's spend counts: the agent paid for it
    assert result.aggregate.candidate_metrics.total_cost_usd == pytest.approx(0.16)
    assert result.aggregate.cost_delta_usd == 0.01
    assert result.aggregate.judge_cost_delta_usd == 0.48


def test_judge_cost_delta_is_none_without_any_judge_cost() -> None:
    result = compare(run([case("a", cost=0.1)]), run([case("a", cost=0.1)], run_id=CAND_ID))
    assert (result.aggregate.cost_delta_usd, result.aggregate.judge_cost_delta_usd) == (0.0, None)


def test_an_agent_crash_does_not_trip_the_latency_regression() -> None:
    # baseline: two cases at 500 ms; candidate: same, plus one repetition that crashed at 30 s
    base = run([case("a", latency=500), case("b", latency=500)])
    cand = run(
        [
            case("a", latency=500, run_id=CAND_ID),
            case("b", latency=500, run_id=CAND_ID),
            case("b", rep=1, errored=True, latency=30_000, run_id=CAND_ID),
        ],
        run_id=CAND_ID,
    )
    result = compare(base, cand)
    assert result.aggregate.candidate_metrics.latency_avg_ms == 500.0
    assert result.aggregate.latency_avg_increase_pct == 0.0
    assert not any("latency" in r for r in result.verdict.reasons)
    b = next(c for c in result.test_case_comparisons if c.test_case_key == "b")
    # per-case latency: the mean of the non-errored repetitions' p50s
    assert (b.baseline_latency_ms, b.candidate_latency_ms, b.latency_delta_ms) == (
        500.0,
        500.0,
        0.0,
    )


def test_two_runs_without_cases_compare_to_no_deltas_and_no_regression() -> None:
    """No executions on either side: the seed's pass rate 0.0 on both, a delta of 0.0."""
    result = compare(run([]), run([], run_id=CAND_ID))
    agg = result.aggregate
    assert (agg.baseline_metrics.pass_rate, agg.candidate_metrics.pass_rate) == (0.0, 0.0)
    assert (agg.pass_rate_delta, agg.avg_score_delta, agg.latency_avg_increase_pct) == (
        0.0,
        None,
        None,
    )
    assert (agg.cost_delta_usd, agg.judge_cost_delta_usd) == (None, None)
    assert result.test_case_comparisons == []
    assert (result.verdict.regression_detected, result.verdict.reasons) == (False, [])
    assert "latency check skipped: no latency data in baseline and candidate" in result.warnings


def test_a_candidate_whose_every_case_errored_drops_its_pass_rate_to_0_as_the_seed_says() -> None:
    """Errored cases stay in the denominator: 1.00 → 0.00 is the seed's drop (issue 29)."""
    base = run([case("a"), case("b")])
    cand = run(
        [case("a", None, None, errored=True, run_id=CAND_ID), case("b", None, None, errored=True)],
        run_id=CAND_ID,
    )
    result = compare(base, cand)
    assert result.aggregate.candidate_metrics.pass_rate == 0.0
    assert result.aggregate.pass_rate_delta == -1.0
    assert result.verdict.regression_detected
    assert result.verdict.reasons[0] == "pass_rate dropped 100% (1.00 → 0.00)"
    md = render_markdown(result)
    assert "| Pass rate | 100.0% | 0.0% | -100.0pt |" in md


def test_markdown_delta_cells_agree_with_the_reasons() -> None:
    base = run([case("a")], agg={"pass_rate": 1.0, "weighted_metrics_score_pct": 80.0})
    cand = run(
        [case("a")],
        run_id=CAND_ID,
        agg={"pass_rate": 0.99994, "weighted_metrics_score_pct": 74.9999},
    )
    md = render_markdown(compare(base, cand))
    assert "- pass_rate dropped 0.01% (1.00 → 0.9999)" in md
    assert "| Pass rate | 100.0% | 99.99% | -0.01pt |" in md
    assert "- avg_score dropped 5.0001pt (80.0 → 74.9999)" in md
    assert "| Avg score | 80.0 | 74.9999 | -5.0001 |" in md
    same = render_markdown(compare(base, run([case("a")], run_id=CAND_ID, agg={"pass_rate": 1.0})))
    assert "| Pass rate | 100.0% | 100.0% | +0.0pt |" in same


def _variant(c: CaseScore, variant: str) -> CaseScore:
    return c.model_copy(update={"variant": variant})


def test_variants_of_one_test_are_rows_of_their_own_and_never_flaky():
    """Two providers of one test that disagree: two rows, each classed alone, neither flaky."""
    a, b = "openai:a\x1f", "openai:b\x1f"
    base = run(
        [_variant(case("k", rep=r), a) for r in (0, 1)]
        + [_variant(case("k", 60.0, passed=False, rep=r), b) for r in (0, 1)]
    )
    cand = run(
        [_variant(case("k", rep=r, run_id=CAND_ID), v) for r in (0, 1) for v in (a, b)],
        run_id=CAND_ID,
    )
    result = compare(base, cand)
    rows = {(t.test_case_key, t.variant): t for t in result.test_case_comparisons}
    assert {k: t.status for k, t in rows.items()} == {
        ("k", "openai:a"): "unchanged",
        ("k", "openai:b"): "improvement",
    }
    assert not any(t.baseline_flaky or t.candidate_flaky for t in rows.values())
    assert not any("flaky" in w for w in result.warnings)
    per = {v.variant: v for v in result.aggregate.per_variant}
    assert (per["openai:b"].baseline_pass_rate, per["openai:b"].candidate_pass_rate) == (0.0, 1.0)
    assert per["openai:b"].total_improvements == 1


def test_one_provider_per_run_matches_by_key_when_the_provider_changes():
    """A run of gpt-4o against a run of gpt-5: the variant is the change compared, not a row."""
    base = run([_variant(case("k"), "gpt-4o\x1f")])
    cand = run(
        [_variant(case("k", 60.0, passed=False, run_id=CAND_ID), "gpt-5\x1f")], run_id=CAND_ID
    )
    result = compare(base, cand)
    (row,) = result.test_case_comparisons
    assert (row.test_case_key, row.variant, row.status) == ("k", "", "regression")
    assert result.baseline_only_test_cases == result.candidate_only_test_cases == []
    assert result.aggregate.per_variant == []
    assert "variant" not in result.model_dump(mode="json")["test_case_comparisons"][0]


def test_a_variant_on_one_side_only_is_listed_with_its_key():
    a, b = "p1\x1f", "p2\x1f"
    base = run([_variant(case("k"), a), _variant(case("k"), b)])
    cand = run([_variant(case("k", run_id=CAND_ID), a)], run_id=CAND_ID)
    result = compare(base, cand)
    assert [(t.test_case_key, t.variant) for t in result.test_case_comparisons] == [("k", "p1")]
    assert result.baseline_only_test_cases == ["k [p2]"]
