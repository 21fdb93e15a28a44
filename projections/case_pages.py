"""A run's cases read narrow: what a cases table filters, sorts and charts by, for every case.

No case's stored score is decoded for that; whole scores are read only for the rows of the
page shown. A 10,000-case run page decoded every case's score (≈ 2.3 KB of JSON each) to
show 50 of them; here the database hands over the plain columns and four top-level fields of
each score (`NARROW`), and only the page's rows are decoded whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import orjson
from sqlalchemy import Engine, func, select, text

from evaledger.projections import encoding
from evaledger.projections.tables import cases, run_summaries

NARROW = ("errored", "judge_error", "latency_p50_ms", "cost_usd")
"""The fields of a case's score read out of its JSON by the database (top-level, scalar)."""

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
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            fields = ", ".join(f"j->'{name}'" for name in NARROW)
            rows = conn.execute(
                text(
                    "SELECT case_id, test_case_key, repetition, variant, status, overall_score, "
                    f"passed, json_build_array({fields})::text FROM (SELECT *, score::jsonb AS j "
                    f"FROM {cases.name} WHERE run_id = :run) AS c ORDER BY seq"
                ),
                {"run": str(run_id)},
            ).all()
        else:
            # One json_extract of several paths parses each score once; it answers a JSON array.
            extract = func.json_extract(cases.c.score, *(f"$.{name}" for name in NARROW))
            rows = conn.execute(
                select(
                    cases.c.case_id,
                    cases.c.test_case_key,
                    cases.c.repetition,
                    cases.c.variant,
                    cases.c.status,
                    cases.c.overall_score,
                    cases.c.passed,
                    extract,
                )
                .where(cases.c.run_id == str(run_id))
                .order_by(cases.c.seq)
            ).all()
    out = []
    for case_id, key, repetition, variant, status, overall, passed, narrow in rows:
        values = orjson.loads(narrow)
        row = {
            "case_id": case_id,
            "test_case_key": key,
            "repetition": repetition,
            "variant": variant,
            "status": status,
            "overall_score": overall,
            "passed": None if passed is None else bool(passed),
        }
        row.update(zip(NARROW, values, strict=True))
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
