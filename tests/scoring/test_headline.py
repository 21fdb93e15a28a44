"""Issue 30: `run_headline`, the one rule for what a run leads with (exact strings)."""

from __future__ import annotations

from typing import Any

from evaledger.domain.spec import RunConfig, ScoreGate, ScorerInfo, resolve_spec
from evaledger.scoring.headline import pass_rule, run_headline
from evaledger.scoring.models import Coverage, RunAggregate


def aggregate(**fields: Any) -> RunAggregate:
    base: dict[str, Any] = {
        "passed_count": 0,
        "failed_count": 0,
        "error_count": 0,
        "canceled_count": 0,
        "total_executions": 0,
        "unique_test_case_count": 0,
        "metrics_pass_threshold": 80.0,
        "cases_pass_threshold": 100.0,
        "pass_rate": 0.0,
        "coverage": Coverage(),
    }
    return RunAggregate.model_validate({**base, **fields})


FLOAT_SCORER = ScorerInfo(name="quality", score="quality", semantics="inspect", metrics=("mean",))


def test_a_float_scorer_leads_with_its_mean_beside_the_pass_rate_and_its_rule() -> None:
    # The case: a float scorer's mean 0.84, no case reaching the gate of 1.
    spec = resolve_spec(
        RunConfig(
            scorers=(FLOAT_SCORER,), score_gates=(ScoreGate(score="quality", op=">=", value=1),)
        )
    )
    head = run_headline(
        spec,
        aggregate(
            passed_count=0,
            failed_count=5,
            total_executions=5,
            pass_rate=0.0,
            scorer_metrics={"quality/mean": 0.84},
        ),
    )
    assert (head.metric, head.text, head.pass_rate_text, head.rule) == (
        "quality/mean",
        "quality/mean 0.8400",
        "0.0%",
        "quality >= 1",
    )
    assert (
        head.summary
        == "quality/mean 0.8400 · pass rate 0.0% (0 of 5 cases; passes when quality >= 1)"
    )


def test_no_decided_case_reads_a_dash_from_the_counts_not_from_pass_rate() -> None:
    # pass_rate keeps the seed's meaning (0.0 for an all-errored run); the view reads the counts.
    spec = resolve_spec(RunConfig())
    head = run_headline(
        spec,
        aggregate(error_count=3, total_executions=3, pass_rate=0.0, coverage=Coverage(errored=3)),
    )
    assert (head.pass_rate, head.pass_rate_text, head.text) == (None, "—", "—")
    assert head.summary == (
        "pass rate — (0 of 3 cases; passes when every expected outcome passes, "
        "else overall_score >= 75)"
    )


def test_a_rubric_run_leads_with_its_weighted_score() -> None:
    head = run_headline(
        resolve_spec(RunConfig()),
        aggregate(
            passed_count=3,
            failed_count=2,
            total_executions=6,
            pass_rate=0.5,
            weighted_metrics_score_pct=74.8,
        ),
    )
    assert (head.metric, head.text, head.pass_rate_text) == (
        "weighted_metrics_score_pct",
        "weighted score 74.80",
        "50.0%",
    )


def test_the_rule_follows_the_gate() -> None:
    gates = (ScoreGate(score="exact", op=">=", value=1), ScoreGate(score="f1", op=">", value=0.5))
    assert pass_rule(resolve_spec(RunConfig(score_gates=gates))) == "exact >= 1 and f1 > 0.5"
    assert pass_rule(resolve_spec(RunConfig(gate="blockers"))) == "every blocker outcome passes"
