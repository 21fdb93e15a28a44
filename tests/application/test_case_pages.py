"""The run page's cases read narrow (issue 32): every case's filter/sort/chart fields without its
score decoded, the shown page read whole; the same page as the whole rows give, SQLite and
PostgreSQL, and never a stale row after a case changes."""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from bench.common import generate_bundle
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.web import views
from evaledger.application import review_queue
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from tests.helpers import bundle, case

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


def _typed(row: review_queue.CaseRow) -> list[tuple[str, Any, type]]:
    return [(f, getattr(row, f), type(getattr(row, f))) for f in NARROW_FIELDS]


@pytest.fixture
def varied_run(store_services: Services) -> tuple[Services, UUID]:
    """A generated run: repetitions, variants, judge errors, errored cases, costs, latencies."""
    data = generate_bundle(120, seed=7, run_key="pages")
    run = store_services.ledger.import_bundle(RunBundle.model_validate(data), Context(actor="test"))
    store_services.sync()
    return store_services, run.run_id


def test_narrow_rows_carry_the_whole_rows_figures(varied_run: tuple[Services, UUID]) -> None:
    services, run_id = varied_run
    whole = review_queue.run_cases(services, run_id)
    narrow = review_queue.page_cases(services, run_id)
    assert narrow.narrow and not whole.narrow
    assert narrow.summary is whole.summary
    # Same values of the same types (a float stays a float), in the same order.
    assert [_typed(r) for r in narrow.rows] == [_typed(r) for r in whole.rows]
    # The generated run has what the filters look for: otherwise the test proves little.
    assert any(r.judge_error for r in whole.rows) and any(r.errored for r in whole.rows)
    assert any(r.cost_usd is not None for r in whole.rows) and whole.flaky
    # Narrow rows hold none of the page-only fields; `whole_rows` reads them.
    assert all(r.metric_scores == {} and r.gate == "" for r in narrow.rows)
    some = narrow.rows[3:9]
    assert review_queue.whole_rows(services, narrow, some) == whole.rows[3:9]
    assert review_queue.whole_rows(services, whole, whole.rows[:2]) == whole.rows[:2]


def test_every_filter_and_sort_pages_narrow_rows_as_whole_ones(
    varied_run: tuple[Services, UUID],
) -> None:
    services, run_id = varied_run
    whole = review_queue.run_cases(services, run_id)
    narrow = review_queue.page_cases(services, run_id)
    pages = 0
    for show in views.Show:
        for sort in views.SortKey:
            for desc in (False, True):
                for page in (1, 2, 9):
                    query = views.CaseQuery(show=show, sort=sort, desc=desc, page=page, per_page=20)
                    expected = views.select_cases(whole.rows, whole.flaky, query)
                    got = views.select_cases(narrow.rows, narrow.flaky, query)
                    got = dataclasses.replace(
                        got, rows=review_queue.whole_rows(services, narrow, got.rows)
                    )
                    assert got == expected, (show, sort, desc, page)
                    pages += bool(expected.rows)
    assert pages > 100  # most filters match cases of the generated run


def test_a_metric_filter_or_named_scores_read_whole_rows(
    varied_run: tuple[Services, UUID],
) -> None:
    services, run_id = varied_run
    by_metric = review_queue.page_cases(services, run_id, by_metric=True)
    assert not by_metric.narrow and any(r.metric_scores for r in by_metric.rows)


def test_the_kept_rows_follow_an_override(store_services: Services) -> None:
    data = bundle()
    data["cases"] = [case(f"k{i}", score=2 + i % 3) for i in range(5)]
    run_id = store_services.ledger.import_bundle(
        RunBundle.model_validate(data), Context(actor="test")
    ).run_id
    store_services.sync()
    before = review_queue.page_cases(store_services, run_id)
    assert before.narrow
    again = review_queue.page_cases(store_services, run_id)
    assert again.rows == before.rows
    # The kept rows' `CaseRow`s are built once (session 11), each caller getting its own list.
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
            run_id = services.ledger.import_bundle(
                RunBundle.model_validate(data), Context(actor="test")
            ).run_id
            services.sync()
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
