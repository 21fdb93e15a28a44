"""A run's cases read narrow: what a cases table filters, sorts and charts by, for every case.

No case's stored score is decoded for that; whole scores are read only for the rows of the
page shown. A 10,000-case run page decoded every case's score (≈ 2.3 KB of JSON each) to
show 50 of them; here the database hands over plain columns, four fields of each score
(`NARROW`) among them (`cases_v5`; v4 extracted them from the JSON), and only the page's
rows are decoded whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, select

from evaledger.projections import encoding
from evaledger.projections.tables import cases, run_summaries

ROW_COLUMNS = (
    "case_id",
    "test_case_key",
    "repetition",
    "variant",
    "status",
    "overall_score",
    "passed",
)
"""The case row's own columns a cases table reads."""

NARROW = ("errored", "judge_error", "latency_p50_ms", "cost_usd")
"""The fields of a case's score a cases table reads, kept as columns of the case row (v5)."""

PAGE_CHUNK = 500
"""Case ids per `IN (…)` when a page's scores are read."""


NARROW_CACHED = 4
"""Closed runs whose narrow rows this process keeps (≈ 5 MB per 10,000 cases)."""

# (id of the engine, run, summary position) → (that engine, the rows). The entry holds its engine
# so that the id cannot be reused by another store's engine while the entry lives.
_cache: OrderedDict[tuple[int, str, int], tuple[Engine, list[dict[str, Any]]]] = OrderedDict()
_lock = threading.Lock()


def narrow_case_scores(engine: Engine, run_id: UUID) -> list[dict[str, Any]]:
    """Every case of the run, in opening order, as the `CaseScore` fields a cases table reads.

    Each dict has `case_id`, `test_case_key`, `repetition`, `variant`, `status`,
    `overall_score`, `passed` (the table's columns) and the `NARROW` fields (absent → None).
    No metric, named score or gate text: those are read for the page's rows only
    (`case_scores_by_id`). A closed run's rows are kept per summary position (it moves
    whenever one of the run's cases changes), so the next page, sort or filter of the same run
    reads one indexed row; callers must not change the dicts.
    """
    with engine.connect() as conn:
        position = conn.scalar(
            select(run_summaries.c.position).where(run_summaries.c.run_id == str(run_id))
        )
    key = (id(engine), str(run_id), int(position or 0))
    if position is not None:
        with _lock:
            hit = _cache.get(key)
            if hit is not None and hit[0] is engine:
                _cache.move_to_end(key)
                return hit[1]
    rows = _narrow_rows(engine, run_id)
    if position is not None:
        with _lock:
            _cache[key] = (engine, rows)
            while len(_cache) > NARROW_CACHED:
                _cache.popitem(last=False)
    return rows


def forget_kept() -> None:
    """Drop every run's kept narrow rows (a benchmark's cold read; nothing else needs it)."""
    with _lock:
        _cache.clear()


def _narrow_rows(engine: Engine, run_id: UUID) -> list[dict[str, Any]]:
    # cases_v5 keeps the `NARROW` fields as columns: no score's JSON is read or parsed here.
    columns = [cases.c[name] for name in (*ROW_COLUMNS, *NARROW)]
    with engine.connect() as conn:
        rows = conn.execute(
            select(*columns).where(cases.c.run_id == str(run_id)).order_by(cases.c.seq)
        ).all()
    names = (*ROW_COLUMNS, *NARROW)
    out = []
    for found in rows:
        row = dict(zip(names, found, strict=True))
        passed = row["passed"]
        row["passed"] = None if passed is None else bool(passed)
        out.append(row)
    return out


def case_scores_by_id(engine: Engine, case_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The stored scores (decoded `CaseScore` JSON) of the cases given, by case id."""
    found: dict[str, dict[str, Any]] = {}
    with engine.connect() as conn:
        for start in range(0, len(case_ids), PAGE_CHUNK):
            chunk = [str(c) for c in case_ids[start : start + PAGE_CHUNK]]
            rows = conn.execute(
                select(cases.c.case_id, cases.c.score).where(cases.c.case_id.in_(chunk))
            )
            for case_id, score in rows:
                found[case_id] = encoding.loads(score)
    return found
