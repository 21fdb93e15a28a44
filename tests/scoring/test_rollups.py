from __future__ import annotations

import math
from collections.abc import Sequence
from uuid import UUID, uuid4

import pytest

from evaledger.domain.events import ClaimSupport, Role
from evaledger.scoring.facts import CaseFacts, MessageFact
from evaledger.scoring.models import CaseScore, CaseStatus, GateRule
from evaledger.scoring.rollups import (
    Aggregate,
    CustomMetricSpec,
    Rollup,
    RollupInput,
    Summary,
    natural_key,
    render_table,
    result_score,
    rollup,
)
from evaledger.scoring.stats import percentile

RUN = uuid4()
S, U, C = ClaimSupport.SUPPORTED, ClaimSupport.UNSUPPORTED, ClaimSupport.CONTRADICTED


def msg(
    role: Role = Role.ASSISTANT,
    latency: float | None = None,
    tokens: int | None = None,
    cost: float | None = None,
    **metrics: float,
) -> MessageFact:
    return MessageFact(role=role, latency_ms=latency, tokens=tokens, cost_usd=cost, metrics=metrics)


def result(
    status: str = "passed",
    score: float | None = None,
    *,
    assertion: float | None = None,
    test: str = "t1",
    configuration: str | None = "cfg",
    persona: str | None = None,
    scenario: str | None = None,
    tags: Sequence[str] = (),
    messages: Sequence[MessageFact] = (),
    claims: Sequence[ClaimSupport] = (),
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    cost: float | None = None,
    run_id: UUID = RUN,
    run_name: str | None = None,
    agent: str | None = None,
    suite: str | None = None,
    repetition: int = 0,
    self_judged: bool = False,
) -> RollupInput:
    case_id = uuid4()
    facts = CaseFacts(
        case_id=case_id,
        run_id=run_id,
        test_case_key=test,
        test_id=test,
        repetition=repetition,
        configuration=configuration,
        persona=persona,
        scenario=scenario,
        tags=list(tags),
        has_transcript=bool(messages),
        turn_count=len(messages),
        messages=list(messages),
        claims=list(claims),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost,
        errored=status == "errored",
        canceled=status == "canceled",
    )
    sc = CaseScore(
        case_id=case_id,
        run_id=run_id,
        test_case_key=test,
        test_id=test,
        repetition=repetition,
        status=CaseStatus(status),
        overall_score=score,
        passed={"passed": True, "failed": False, "errored": False}.get(status),
        errored=status == "errored",
        canceled=status == "canceled",
        scored=score is not None,
        gate=GateRule.NONE,
        gate_reason="",
        assertion_score=assertion,
        self_judged=self_judged,
    )
    return RollupInput(facts=facts, score=sc, run_name=run_name, agent=agent, suite=suite)


def cell(r: Rollup, row: str, column: str) -> Summary:
    summary = r.cell(row, column)
    assert summary is not None
    return summary


# --------------------------------------------------------------------------------------------
# Score


def test_completed_80_completed_100_errored_gives_60():
    results = [result("passed", 80.0), result("failed", 100.0), result("errored", None)]
    r = rollup(results, ["configuration"], ["test"])
    assert r.row_summaries["cfg"].score == 60.0
    assert r.row_summaries["cfg"].results == 3
    assert r.summary.score == 60.0
    assert (r.summary.passed, r.summary.failed, r.summary.errored) == (1, 1, 1)


def test_pending_running_canceled_and_unscored_are_left_out():
    results = [
        result("passed", 80.0),
        result("failed", 100.0),
        result("errored", None),
        result("pending", None),  # judged later
        result("pending", None, messages=[msg(latency=500.0)]),  # running
        result("canceled", None),
        result("unscored", None),
    ]
    r = rollup(results, ["configuration"], ["test"])
    s = r.row_summaries["cfg"]
    assert s.score == 60.0
    assert s.results == 3
    assert (s.pending, s.canceled, s.unscored) == (2, 1, 1)


def test_pending_results_are_left_out_of_every_figure_but_their_count():
    results = [
        result("passed", 80.0, messages=[msg(latency=100.0, tokens=10)], claims=[S, U]),
        result("pending", None, messages=[msg(latency=9_000.0, tokens=900)], claims=[U, C]),
        result("pending", None),  # not run yet
    ]
    s = rollup(results, [], []).summary
    assert (s.score, s.results, s.pending) == (80.0, 1, 2)
    assert (s.conversations, s.messages, s.claims, s.hallucinations) == (1, 1, 2, 1)
    rt = s.response_time
    assert (rt.count, rt.max, rt.p95) == (1, 100.0, 100.0)
    assert s.tokens_per_conversation.avg == 10.0


def test_a_transcript_without_turns_is_no_conversation():
    empty = result("failed", None, cost=0.5)
    empty.facts.has_transcript = True  # recorded, with zero turns (and a cost)
    s = rollup([empty, result("passed", 90.0, messages=[msg(latency=200.0)])], [], []).summary
    assert (s.score, s.results, s.failed) == (45.0, 2, 1)
    assert (s.conversations, s.messages) == (1, 1)
    assert s.cost_per_conversation.conversations == 0


def test_failed_gate_keeps_score_and_assertion_score_wins():
    # A completed result that failed its gate keeps its score; the assertion score (Voxli
    # weighted assertions) is used when present.
    results = [result("failed", 90.0, assertion=40.0), result("passed", 70.0)]
    assert result_score(results[0].score) == 40.0
    r = rollup(results, [], [])
    assert r.summary.score == 55.0


def test_completed_without_numeric_score_counts_its_gate():
    assert result_score(result("passed", None).score) == 100.0
    assert result_score(result("failed", None).score) == 0.0


def test_summary_is_recomputed_from_results_not_cells():
    results = [
        result("passed", 100.0, test="a"),
        result("passed", 40.0, test="b"),
        result("passed", 40.0, test="b"),
        result("passed", 40.0, test="b"),
    ]
    r = rollup(results, ["configuration"], ["test"])
    assert cell(r, "cfg", "a").score == 100.0
    assert cell(r, "cfg", "b").score == 40.0
    assert r.row_summaries["cfg"].score == 55.0  # not 70, the mean of the two cells
    assert r.column_summaries["b"].results == 3


def test_repetitions_and_personalities_each_count():
    results = [
        result("passed", score, persona=p, repetition=rep)
        for p, scores in (("calm", (100.0, 80.0)), ("angry", (60.0, 20.0)))
        for rep, score in enumerate(scores)
    ]
    r = rollup(results, ["personality"], ["test"])
    assert r.rows == ["angry", "calm"]
    assert r.row_summaries["calm"].results == 2
    assert r.row_summaries["calm"].score == 90.0
    assert r.row_summaries["angry"].score == 40.0
    assert r.column_summaries["t1"].results == 4
    assert r.column_summaries["t1"].score == 65.0


# --------------------------------------------------------------------------------------------
# Per-message metrics and per-conversation totals


def test_response_time_max_is_the_real_max():
    results = [
        result("passed", 90.0, test="a", messages=[msg(latency=12_000.0), msg(latency=17_400.0)]),
        result("passed", 90.0, test="b", messages=[msg(latency=17_000.0), msg(latency=9_000.0)]),
    ]
    r = rollup(results, ["configuration"], ["test"])
    assert cell(r, "cfg", "a").response_time.max == 17_400.0
    assert cell(r, "cfg", "b").response_time.max == 17_000.0
    assert r.row_summaries["cfg"].response_time.max == 17_400.0  # not 17 200
    assert r.summary.response_time.max == 17_400.0
    assert r.summary.response_time.min == 9_000.0
    assert r.summary.response_time.unit == "ms"


def test_only_assistant_turns_are_response_times():
    results = [
        result(
            "passed",
            90.0,
            messages=[msg(Role.USER, latency=99_000.0), msg(latency=1_000.0), msg(Role.TOOL)],
        )
    ]
    s = rollup(results, [], []).summary
    assert s.response_time.count == 1
    assert s.response_time.max == 1_000.0
    assert s.messages == 3


def test_message_average_is_weighted_by_message_counts():
    results = [
        result("passed", 90.0, test="a", messages=[msg(latency=1_000.0), msg(latency=3_000.0)]),
        result("passed", 90.0, test="b", messages=[msg(latency=4_000.0)]),
    ]
    r = rollup(results, ["configuration"], ["test"])
    assert cell(r, "cfg", "a").response_time.avg == 2_000.0
    assert cell(r, "cfg", "b").response_time.avg == 4_000.0
    # (1000 + 3000 + 4000) / 3 messages, not (2000 + 4000) / 2 cells
    assert r.row_summaries["cfg"].response_time.avg == pytest.approx(8_000.0 / 3)
    assert r.row_summaries["cfg"].response_time.p50 == 3_000.0


def test_totals_are_summed_per_conversation_then_averaged():
    results = [
        # per-turn tokens and costs only: 100 + 200 tokens, 0.01 + 0.02 usd, 3 turns
        result(
            "passed",
            90.0,
            test="a",
            messages=[
                msg(Role.USER),
                msg(tokens=100, cost=0.01),
                msg(tokens=200, cost=0.02),
            ],
        ),
        # conversation usage recorded: 400 + 200 tokens, 0.09 usd, 1 turn
        result(
            "passed",
            90.0,
            test="b",
            messages=[msg(tokens=600)],
            prompt_tokens=400,
            completion_tokens=200,
            cost=0.09,
        ),
        # no transcript: no conversation
        result("failed", 0.0, test="b"),
    ]
    s = rollup(results, ["configuration"], ["test"]).summary
    assert s.conversations == 2
    assert s.tokens_per_conversation.conversations == 2
    assert s.tokens_per_conversation.total == 900.0
    assert s.tokens_per_conversation.avg == 450.0
    assert s.tokens_per_conversation.max == 600.0
    assert s.cost_per_conversation.avg == pytest.approx(0.06)
    assert s.turns_per_conversation.avg == 2.0
    # per-message token stats are over every message that reports tokens
    assert s.tokens_per_message.count == 3
    assert s.tokens_per_message.avg == pytest.approx(300.0)
    assert s.cost_per_message.max == 0.02


def test_custom_per_message_metric_with_declared_aggregates():
    spec = CustomMetricSpec(
        name="interruptions",
        unit="count",
        aggregates=(Aggregate.AVG, Aggregate.MAX, Aggregate.P95, Aggregate.PER_CONVERSATION),
    )
    results = [
        result("passed", 90.0, test="a", messages=[msg(interruptions=1.0), msg(interruptions=3.0)]),
        result("passed", 90.0, test="b", messages=[msg(interruptions=0.0), msg()]),
    ]
    r = rollup(results, ["configuration"], ["test"], metrics=[spec])
    m = r.summary.custom_metrics["interruptions"]
    assert m.unit == "count"
    assert m.messages == 3
    assert m.conversations == 2
    assert m.values == {
        "avg": pytest.approx(4 / 3),
        "max": 3.0,
        "p95": pytest.approx(2.8),
        "per_conversation": 2.0,
    }
    assert cell(r, "cfg", "b").custom_metrics["interruptions"].values["max"] == 0.0


def test_custom_metric_without_data_is_null():
    spec = CustomMetricSpec(name="barge_in_ms", unit="ms")
    s = rollup([result("passed", 90.0, messages=[msg()])], [], [], metrics=[spec]).summary
    values = s.custom_metrics["barge_in_ms"].values
    assert set(values) == {"avg", "min", "max", "p50", "p90", "p95", "p99"}
    assert all(v is None for v in values.values())


def test_hallucinations_are_summed():
    results = [
        result("passed", 90.0, test="a", claims=[S, U, C]),
        result("passed", 90.0, test="b", claims=[U, S]),
        result("errored", None, test="b", claims=[C]),
        result("canceled", None, test="b", claims=[C]),  # left out
    ]
    r = rollup(results, ["configuration"], ["test"])
    assert cell(r, "cfg", "a").hallucinations == 2
    assert cell(r, "cfg", "b").hallucinations == 2
    assert r.summary.hallucinations == 4
    assert r.summary.claims == 6


# --------------------------------------------------------------------------------------------
# Dimensions


def test_tag_columns_count_a_multi_tagged_result_in_each_but_once_overall():
    results = [
        result("passed", 100.0, tags=["billing", "refunds"], messages=[msg(latency=2_000.0)]),
        result("passed", 50.0, tags=["billing"], messages=[msg(latency=1_000.0)]),
        result("passed", 0.0),
    ]
    r = rollup(results, ["configuration"], ["tag"])
    assert r.columns == ["billing", "refunds", "(untagged)"]
    assert r.column_summaries["billing"].score == 75.0
    assert r.column_summaries["billing"].results == 2
    assert r.column_summaries["refunds"].score == 100.0
    assert r.column_summaries["(untagged)"].score == 0.0
    assert r.row_summaries["cfg"].results == 3
    assert r.row_summaries["cfg"].score == 50.0
    assert r.summary.results == 3
    assert r.summary.response_time.count == 2


def test_scenario_column_falls_back_to_suite_and_missing_values_sort_last():
    results = [
        result("passed", 80.0, scenario="checkout", configuration=None),
        result("passed", 60.0, suite="support-suite"),
        result("passed", 40.0),
    ]
    r = rollup(results, ["configuration"], ["scenario"])
    assert r.columns == ["checkout", "support-suite", "(none)"]
    assert r.rows == ["cfg", "(none)"]
    assert cell(r, "(none)", "checkout").score == 80.0
    assert r.cell("cfg", "checkout") is None


def test_run_and_agent_rows_and_several_dimensions():
    # Two runs of one name are told apart by their id's first eight characters, read
    # naturally (digit runs as numbers): 9aaaaaaa before 10aaaaaa.
    first = UUID("9aaaaaaa-0000-4000-8000-000000000000")
    second = UUID("10aaaaaa-0000-4000-8000-000000000000")
    results = [
        result("passed", 80.0, run_id=second, run_name="nightly", agent="bot", persona="calm"),
        result("passed", 60.0, run_id=first, run_name="nightly", agent="bot", persona="calm"),
    ]
    r = rollup(results, ["agent", "run"], ["test", "scenario"])
    assert r.rows == ["bot / nightly (9aaaaaaa)", "bot / nightly (10aaaaaa)"]
    assert r.columns == ["t1 / (none)"]
    r2 = rollup(results, ["persona", "agent"], [])
    assert r2.rows == ["calm / bot"]
    assert r2.columns == ["all"]
    assert r2.summary.score == 70.0


def test_no_dimensions_give_one_cell():
    r = rollup([result("passed", 80.0)], [], [])
    assert r.rows == ["all"]
    assert r.columns == ["all"]
    assert cell(r, "all", "all").score == 80.0


def test_empty_rollup():
    r = rollup([], ["configuration"], ["test"])
    assert r.rows == []
    assert r.cells == []
    assert r.summary.score is None
    assert r.summary.results == 0
    assert r.summary.response_time.max is None


def test_self_judged_results_are_flagged():
    r = rollup([result("passed", 80.0, self_judged=True), result("passed", 80.0)], [], [])
    assert r.summary.self_judged == 1


@pytest.mark.parametrize(
    ("rows", "columns", "match"),
    [
        (["colour"], ["test"], r"rows\[0\]: unknown dimension 'colour'"),
        (["configuration"], ["configuration"], r"columns\[0\]: unknown dimension"),
        (["run", "run"], ["test"], r"rows\[1\]: dimension 'run' is given twice"),
    ],
)
def test_bad_dimensions(rows, columns, match):
    with pytest.raises(ValueError, match=match):
        rollup([], rows, columns)


def test_same_case_twice_is_rejected():
    item = result("passed", 80.0)
    with pytest.raises(ValueError, match="given twice"):
        rollup([item, item], [], [])


def test_facts_and_score_must_be_the_same_case():
    a, b = result("passed", 80.0), result("passed", 80.0)
    with pytest.raises(ValueError, match="does not match"):
        RollupInput(facts=a.facts, score=b.score)


def test_json_shape():
    data = rollup(
        [result("passed", 80.0, messages=[msg(latency=5.0)])], ["configuration"], ["test"]
    )
    dumped = data.model_dump(mode="json")
    assert set(dumped) >= {"rows", "columns", "cells", "row_summaries", "column_summaries"}
    assert dumped["cells"][0]["row"] == "cfg"
    assert dumped["cells"][0]["column"] == "t1"
    summary = dumped["summary"]
    assert set(summary["response_time"]) >= {"avg", "min", "max", "p50", "p90", "p95", "p99"}
    assert {"score", "results", "hallucinations", "tokens_per_conversation"} <= set(summary)
    assert "cost_per_conversation" in summary


# --------------------------------------------------------------------------------------------
# Percentiles (linear interpolation, numpy's default)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 90, 3.7),
        ([15, 20, 35, 40, 50], 40, 29.0),
        ([15, 20, 35, 40, 50], 0, 15.0),
        ([15, 20, 35, 40, 50], 100, 50.0),
        ([50, 15, 40, 20, 35], 50, 35.0),
        ([7], 99, 7.0),
        (list(range(1, 11)), 90, 9.1),
        (list(range(1, 11)), 95, 9.55),
        (list(range(1, 11)), 99, 9.91),
    ],
)
def test_percentile_linear_interpolation(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_errors():
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="q"):
        percentile([1.0], 101)


def test_response_time_percentiles():
    latencies = [float(v) for v in range(100, 1100, 100)]  # 100 … 1000 ms
    s = rollup([result("passed", 90.0, messages=[msg(latency=v) for v in latencies])], [], [])
    rt = s.summary.response_time
    assert (rt.min, rt.max, rt.avg) == (100.0, 1000.0, 550.0)
    assert rt.p50 == pytest.approx(550.0)
    assert rt.p90 == pytest.approx(910.0)
    assert rt.p95 == pytest.approx(955.0)
    assert rt.p99 == pytest.approx(991.0)
    assert rt.p99 is not None
    assert not math.isnan(rt.p99)


# --------------------------------------------------------------------------------------------
# Rendering


def test_render_table():
    results = [
        result("passed", 80.0, test="greeting", configuration="gpt"),
        result("failed", 40.0, test="refund", configuration="gpt"),
        result("errored", None, test="refund", configuration="claude"),
        result("canceled", None, test="greeting", configuration="claude"),
    ]
    text = render_table(rollup(results, ["configuration"], ["test"]))
    assert text == (
        "configuration | greeting | refund | Summary\n"
        "--------------+----------+--------+--------\n"
        "claude        |      n/a |    0.0 |     0.0\n"
        "gpt           |     80.0 |   40.0 |    60.0\n"
        "--------------+----------+--------+--------\n"
        "Summary       |     80.0 |   20.0 |    40.0"
    )


def test_render_table_empty_cell_and_custom_value():
    results = [
        result("passed", 80.0, test="a", configuration="x", messages=[msg(latency=1500.0)]),
        result("passed", 60.0, test="b", configuration="y"),
    ]
    r = rollup(results, ["configuration"], ["test"])
    text = render_table(r, value=lambda s: s.response_time.max, decimals=0)
    lines = text.splitlines()
    assert lines[2] == "x             | 1500 |   - |    1500"
    assert lines[3] == "y             |    - | n/a |     n/a"


def test_keys_sort_naturally_task_2_before_task_10():
    results = [result("passed", 50.0, test=t) for t in ("task-10", "task-2", "Task-1", "task-1a")]
    r = rollup(results, [], ["test"])
    assert r.columns == ["Task-1", "task-1a", "task-2", "task-10"]
    assert natural_key("task-2") < natural_key("task-10") < natural_key("task-10b")


def test_the_same_key_in_two_suites_stays_two_columns():
    results = [
        result("passed", 80.0, test="greeting", suite="support"),
        result("failed", 20.0, test="greeting", suite="sales"),
    ]
    r = rollup(results, [], ["test"])
    assert r.columns == ["sales: greeting", "support: greeting"]
    assert cell(r, "all", "sales: greeting").score == 20.0
    assert cell(r, "all", "support: greeting").score == 80.0
    one_suite = rollup(results[:1], [], ["test"])
    assert one_suite.columns == ["greeting"]
