"""The run page's cases read narrow (issue 32): every case's filter/sort/chart fields as columns,
no score decoded, the shown page read whole; the same page as the whole rows give, SQLite and
PostgreSQL, and never a stale row after a case changes.

The reference is the slow path kept: every case's stored score decoded into a `CaseRow`
(`review_queue.run_cases`), filtered by the same rules, sorted and paged the obvious way
(`tests/oracles/case_table.py`).
"""

from __future__ import annotations

import gc
import itertools
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.common import generate_bundle
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.web import views
from evaledger.application import review_queue
from evaledger.application.case_filters import CaseFilter
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.domain.metrics import DEFAULT_METRIC_NAMES
from evaledger.projections.case_pages import NONE, NarrowCase
from evaledger.scoring.judge_errors import run_judge_error_note
from tests.helpers import bundle, case
from tests.oracles.case_table import reference_page

NARROW_FIELDS = (
    "case_id",
    "test_case_key",
    "repetition",
    "variant",
    "status",
    "overall_score",
    "passed",
    "errored",
    "judge_error",
    "latency_p50_ms",
    "cost_usd",
)


def _typed(row: review_queue.CaseFields, names: tuple[str, ...] = NARROW_FIELDS) -> list[Any]:
    # Same values of the same types (a float stays a float, a bool a bool).
    return [(f, getattr(row, f), type(getattr(row, f))) for f in names]


def _import(services: Services, data: dict[str, Any]) -> UUID:
    run_id = services.ledger.import_bundle(
        RunBundle.model_validate(data), Context(actor="test")
    ).run_id
    services.sync()
    return run_id


def _fast_page(services: Services, run_id: UUID, query: views.CaseQuery) -> views.CasePage[Any]:
    """What the run page does: narrow rows, the rules, the shown rows read whole."""
    cases = review_queue.page_cases(services, run_id, by_metric=query.reads_metrics)
    selected = views.select_cases(cases.rows, cases.flaky, query)
    whole = review_queue.whole_rows(services, selected.rows)
    return views.CasePage(whole, selected.matching, selected.page, selected.pages, selected.first)


@pytest.fixture
def varied_run(store_services: Services) -> tuple[Services, UUID]:
    """A generated run: repetitions, variants, judge errors, errored cases, costs, latencies."""
    return store_services, _import(store_services, generate_bundle(120, seed=7, run_key="pages"))


def test_narrow_rows_carry_the_whole_rows_figures(varied_run: tuple[Services, UUID]) -> None:
    services, run_id = varied_run
    whole = review_queue.run_cases(services, run_id)
    narrow = review_queue.page_cases(services, run_id)
    assert narrow.summary is whole.summary
    assert all(isinstance(r, NarrowCase) for r in narrow.rows)
    assert [_typed(r) for r in narrow.rows] == [_typed(r) for r in whole.rows]
    # The generated run has what the filters look for: otherwise the test proves little.
    assert any(r.judge_error for r in whole.rows) and any(r.errored for r in whole.rows)
    assert any(r.cost_usd is not None for r in whole.rows) and whole.flaky
    # Without a metric filter neither the metric nor the named scores are read.
    assert all(r.metric_scores is NONE and r.named_scores is NONE for r in narrow.rows)
    # With one, the metric scores are the score's, in its order.
    by_metric = review_queue.page_cases(services, run_id, by_metric=True)
    assert [list(r.metric_scores.items()) for r in by_metric.rows] == [
        list(r.metric_scores.items()) for r in whole.rows
    ]
    assert any(r.metric_scores for r in by_metric.rows)
    assert review_queue.whole_rows(services, narrow.rows[3:9]) == whole.rows[3:9]
    assert review_queue.whole_rows(services, whole.rows[:2]) == whole.rows[:2]


def test_every_filter_and_sort_pages_narrow_rows_as_whole_ones(
    varied_run: tuple[Services, UUID],
) -> None:
    services, run_id = varied_run
    whole = review_queue.run_cases(services, run_id)
    pages = 0
    metric = DEFAULT_METRIC_NAMES[0]
    for show, sort, desc, page, below in itertools.product(
        views.Show, views.SortKey, (False, True), (1, 2, 9), (None, 3.0)
    ):
        query = views.CaseQuery(
            show=show,
            metric=metric if below is not None else None,
            below=below,
            sort=sort,
            desc=desc,
            page=page,
            per_page=20,
        )
        expected = reference_page(whole.rows, whole.flaky, query)
        assert _fast_page(services, run_id, query) == expected, (show, sort, desc, page, below)
        pages += bool(expected.rows)
    assert pages > 200  # most filters match cases of the generated run


def test_which_queries_read_the_metric_scores() -> None:
    metric = DEFAULT_METRIC_NAMES[0]
    assert not views.CaseQuery().reads_metrics
    assert not views.CaseQuery(metric=metric).reads_metrics  # a metric chosen, no bound
    assert views.CaseQuery(metric=metric, below=3).reads_metrics
    assert views.CaseQuery(filter=CaseFilter(metric=metric, metric_min=2)).reads_metrics
    assert views.CaseQuery(filter=CaseFilter(metric=metric)).reads_metrics  # scored on it


# --- the property: random runs, random queries, the narrow page equals the reference -------

METRICS = list(DEFAULT_METRIC_NAMES)
KEYS = ["alpha", "beta", "gamma", "Δelta"]


@st.composite
def run_cases_st(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Cases of one run: repeated keys, errored ones, judge errors (no metric scores), named
    scores on some cases, latencies and costs."""
    cases = []
    for n in range(draw(st.integers(1, 10))):
        key = draw(st.sampled_from(KEYS))
        c = case(key, repetition=n, status=draw(st.sampled_from(["completed"] * 3 + ["errored"])))
        if c["status"] == "completed":
            verdict = c["verdicts"][0]
            verdict["metric_scores"] = [
                {"metric": m, "score": draw(st.integers(0, 5)), "justification": m, "turns": []}
                for m in METRICS
            ]
            if draw(st.booleans()):
                verdict["cost_usd"] = draw(st.floats(0, 2, allow_nan=False))
            if draw(st.integers(0, 4)) == 0:
                verdict.update(metric_scores=[], error="judge timed out")
            latency = draw(st.none() | st.integers(1, 9000))
            for turn in c["transcript"]:
                if turn["role"] == "assistant":
                    turn["latency_ms"] = latency
        if draw(st.booleans()):
            c["named_scores"] = [
                {
                    "scorer": "exact",
                    "scores": [
                        {"name": name, "value": draw(st.floats(0, 1)), "scale": "fraction"}
                        for name in draw(
                            st.lists(
                                st.sampled_from(["exact", "f1", "bleu"]), min_size=1, unique=True
                            )
                        )
                    ],
                }
            ]
        cases.append(c)
    return cases


def sometimes(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> Any:
    """A value one time in four, else None: several filters at once seldom leave a case."""
    return draw(values) if draw(st.integers(0, 3)) == 0 else None


@st.composite
def query_st(draw: st.DrawFn) -> views.CaseQuery:
    metric = draw(st.sampled_from([*METRICS[:3], "no_such_metric"]))
    # How the query reads the metric: not at all, `below`, `at least`, or "scored on it".
    by = draw(st.sampled_from(["none", "below", "at least", "scored"]))
    low, high = sorted(draw(st.lists(st.integers(0, 100), min_size=2, max_size=2)))
    narrowed = CaseFilter(
        status=sometimes(draw, st.sampled_from(["passed", "failed", "errored", "unscored"])),
        min_score=sometimes(draw, st.just(float(low))),
        max_score=sometimes(draw, st.just(float(high))),
        min_latency_ms=sometimes(draw, st.integers(0, 9000)),
        metric=metric if by in ("at least", "scored") else None,
        metric_min=float(draw(st.integers(0, 5))) if by == "at least" else None,
    )
    return views.CaseQuery(
        show=draw(st.sampled_from(views.Show)) if draw(st.booleans()) else views.Show.ALL,
        metric=metric if by == "below" or draw(st.booleans()) else None,
        below=float(draw(st.integers(0, 6))) if by == "below" else None,
        q=sometimes(draw, st.sampled_from(["a", "ELTA", "zz"])),
        sort=draw(st.sampled_from(views.SortKey)),
        desc=draw(st.booleans()),
        page=draw(st.integers(1, 3)),
        per_page=3,
        filter=narrowed,
    )


def test_random_runs_and_queries_page_narrow_rows_as_whole_ones(store_services: Services) -> None:
    """Held to the reference on random runs (SQLite and PostgreSQL): the page shown, its
    counts, the charts and the judge-error note the run page draws from every case."""
    services = store_services
    runs = itertools.count()
    seen = {"metric pages": 0, "named runs": 0}

    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
    )
    @given(cases=run_cases_st(), queries=st.lists(query_st(), min_size=1, max_size=6))
    def prop(cases: list[dict[str, Any]], queries: list[views.CaseQuery]) -> None:
        data = bundle(key=f"prop-{next(runs)}")
        data["cases"] = cases
        run_id = _import(services, data)
        whole = review_queue.run_cases(services, run_id)
        for query in queries:
            expected = reference_page(whole.rows, whole.flaky, query)
            assert _fast_page(services, run_id, query) == expected, query
            seen["metric pages"] += bool(query.reads_metrics and expected.rows)
        page = review_queue.page_cases(services, run_id)
        spec, agg = page.summary.spec, page.summary.aggregate
        assert views.run_charts(spec, agg, page.rows, {}) == views.run_charts(
            spec, agg, whole.rows, {}
        )
        assert run_judge_error_note(page.rows, spec.judge_errors) == run_judge_error_note(
            whole.rows, spec.judge_errors
        )
        assert [r.latency_p50_ms for r in page.rows] == [r.latency_p50_ms for r in whole.rows]
        if spec.scorers or agg.named_score_means:
            assert [dict(r.named_scores) for r in page.rows] == [r.named_scores for r in whole.rows]
            seen["named runs"] += 1

    prop()
    # The random runs reached what the fast path reads: otherwise the property proves little.
    assert seen["metric pages"] > 0 and seen["named runs"] > 0


def test_the_kept_rows_follow_an_override(store_services: Services) -> None:
    data = bundle()
    data["cases"] = [case(f"k{i}", score=2 + i % 3) for i in range(5)]
    run_id = _import(store_services, data)
    before = review_queue.page_cases(store_services, run_id)
    again = review_queue.page_cases(store_services, run_id)
    assert again.rows == before.rows
    # The kept rows are built once, each caller getting its own list.
    assert all(a is b for a, b in zip(again.rows, before.rows, strict=True))
    assert again.rows is not before.rows
    low = min(before.rows, key=lambda r: r.overall_score or 0.0)
    facts, _ = store_services.reads.case_score(UUID(low.case_id))
    store_services.ledger.override_verdict(
        UUID(low.case_id),
        Context(actor="qa"),
        verdict_id=facts.verdicts[0].verdict_id,
        passed=not low.passed,
        reason="checked by hand",
    )
    store_services.sync()
    after = review_queue.page_cases(store_services, run_id)
    assert not any(a is b for a, b in zip(after.rows, before.rows, strict=True))
    changed = next(r for r in after.rows if r.case_id == low.case_id)
    assert changed.passed is (not low.passed)
    assert [_typed(r) for r in after.rows] == [
        _typed(r) for r in review_queue.run_cases(store_services, run_id).rows
    ]


def test_another_store_with_the_same_run_never_reads_the_kept_rows(tmp_path: Path) -> None:
    """Run ids derive from the run's key: two stores can hold the same run id at the same
    summary position with other scores. The kept rows belong to one store's engine."""
    seen = []
    for n, score in enumerate((2, 5)):
        data = bundle()
        data["cases"] = [case(f"k{i}", score=score) for i in range(3)]
        services = build_services(Settings(db=f"sqlite:///{tmp_path}/store{n}/"))
        try:
            run_id = _import(services, data)
            rows = review_queue.page_cases(services, run_id).rows
            assert [_typed(r) for r in rows] == [
                _typed(r) for r in review_queue.run_cases(services, run_id).rows
            ]
            seen.append((run_id, [r.overall_score for r in rows]))
        finally:
            services.close()
        del services
        gc.collect()  # the first engine freed: its id may be the second one's
    (first_id, first), (second_id, second) = seen
    assert first_id == second_id and first != second
