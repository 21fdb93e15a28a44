"""The reference run-page cases table: every case's stored score decoded into a `CaseRow`, the
filters applied row by row, the sort and the page worked out the obvious way.

The run page (`api/web/pages.py` `run_page`) reads narrow rows (`review_queue.page_cases`),
sorts with each row's sort value computed once (`views.select_cases`) and reads the shown rows
whole (`review_queue.whole_rows`); `tests/application/test_case_pages.py` holds it to this.
The filters themselves are the product's one definition (`views.select_cases` in opening order,
unsorted and unpaged); what is restated here is the order and the page.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from evaledger.api.web import views
from evaledger.application.review_queue import CaseRow
from evaledger.scoring.models import CaseStatus

STATUS_ORDER = [s.value for s in CaseStatus]


def _order_value(row: CaseRow, key: views.SortKey) -> tuple[Any, ...]:
    """The column sorted by, then test case key and repetition (variant for the key sort)."""
    if key is views.SortKey.KEY:
        return (row.test_case_key, row.repetition, row.variant)
    if key is views.SortKey.STATUS:
        return (STATUS_ORDER.index(row.status), row.test_case_key, row.repetition)
    value = {
        views.SortKey.SCORE: row.overall_score,
        views.SortKey.LATENCY: row.latency_p50_ms,
        views.SortKey.COST: row.cost_usd,
    }[key]
    return (value, row.test_case_key, row.repetition)


def _missing(row: CaseRow, key: views.SortKey) -> bool:
    return key in (views.SortKey.SCORE, views.SortKey.LATENCY, views.SortKey.COST) and (
        _order_value(row, key)[0] is None
    )


def reference_page(
    rows: list[CaseRow], flaky: set[tuple[str, str]], query: views.CaseQuery
) -> views.CasePage[CaseRow]:
    """The page of `rows` the query shows: kept rows in opening order, then sorted (a missing
    value last in either direction, in key order), reversed when `desc` without a sort."""
    everything = replace(
        query, sort=views.SortKey.ORDER, desc=False, page=1, per_page=max(1, len(rows))
    )
    kept = views.select_cases(rows, flaky, everything).rows
    if query.sort is views.SortKey.ORDER:
        ordered = list(reversed(kept)) if query.desc else list(kept)
    else:
        present = [r for r in kept if not _missing(r, query.sort)]
        missing = [r for r in kept if _missing(r, query.sort)]
        present.sort(key=lambda r: _order_value(r, query.sort), reverse=query.desc)
        missing.sort(key=lambda r: (r.test_case_key, r.repetition))
        ordered = present + missing
    pages = max(1, math.ceil(len(ordered) / query.per_page))
    page = min(max(1, query.page), pages)
    shown = ordered[(page - 1) * query.per_page : page * query.per_page]
    first = (page - 1) * query.per_page + 1 if shown else 0
    return views.CasePage(shown, len(ordered), page, pages, first)
