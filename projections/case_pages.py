"""A run's cases read narrow: what a cases table filters, sorts and charts by, for every case.

No case's stored score is decoded for that; whole scores are read only for the rows of the
page shown. A 10,000-case run page decoded every case's score (≈ 2.3 KB of JSON each) to
show 50 of them; here the database hands over plain columns, four fields of each score
(`NARROW`) among them, and only the page's rows are decoded whole. `cases_v6` adds the score's
metric scores and named scores as two small JSON columns, read only by a page that filters by
a metric or charts named scores, and stores the narrow columns before the large JSON ones.
Each case is one `NarrowCase` (a named tuple, built by the C tuple constructor: a frozen
dataclass per case was ≈ 40 % of a run page's CPU).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple
from uuid import UUID

import orjson
from sqlalchemy import Engine, select

from evaledger.domain import collector
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

NONE: Mapping[str, Any] = MappingProxyType({})
"""The metric or named scores of a narrow row read without them (read-only, shared)."""


class NarrowCase(NamedTuple):
    """One case as a cases table filters, sorts and charts it (the `CaseScore` field names).

    `metric_scores` and `named_scores` are the score's (`{metric: score}`, `{name: value}`)
    when the read asked for them, else the empty `NONE`. Shared between requests: read-only.
    """

    case_id: str
    test_case_key: str
    repetition: int
    variant: str
    status: str
    overall_score: float | None
    passed: bool | None
    errored: bool
    judge_error: bool
    latency_p50_ms: float | None
    cost_usd: float | None
    metric_scores: Mapping[str, float | None] = NONE
    named_scores: Mapping[str, float] = NONE


NARROW_CACHED = 4
"""Closed runs whose narrow rows this process keeps (≈ 5 MB per 10,000 cases)."""

# (id of the engine, run, summary position, metrics read, named read) → (that engine, the rows).
# The entry holds its engine so that the id cannot be reused by another store's engine while
# the entry lives.
_Key = tuple[int, str, int, bool, bool]
_cache: OrderedDict[_Key, tuple[Engine, list[NarrowCase]]] = OrderedDict()
_lock = threading.Lock()


def narrow_case_scores(
    engine: Engine, run_id: UUID, *, metrics: bool = False, named: bool = False
) -> list[NarrowCase]:
    """Every case of the run, in opening order, as the `CaseScore` fields a cases table reads.

    The table's columns (`ROW_COLUMNS`, `NARROW`); with `metrics` the metric scores, with
    `named` the named scores (else both empty). No gate text, hallucinations or self-judging:
    those are read for the page's rows only (`case_scores_by_id`). A closed run's rows are kept
    per summary position (it moves whenever one of the run's cases changes), so the next page,
    sort or filter of the same run reads one indexed row; the rows are shared, the list is the
    caller's own.
    """
    with engine.connect() as conn:
        position = conn.scalar(
            select(run_summaries.c.position).where(run_summaries.c.run_id == str(run_id))
        )
    key = (id(engine), str(run_id), int(position or 0), metrics, named)
    if position is not None:
        with _lock:
            hit = _cache.get(key)
            if hit is not None and hit[0] is engine:
                _cache.move_to_end(key)
                return list(hit[1])
    rows = _narrow_rows(engine, run_id, metrics=metrics, named=named)
    if position is not None:
        with _lock:
            _cache[key] = (engine, rows)
            while len(_cache) > NARROW_CACHED:
                _cache.popitem(last=False)
    return list(rows)


def forget_kept() -> None:
    """Drop every run's kept narrow rows (a benchmark's cold read; nothing else needs it)."""
    with _lock:
        _cache.clear()


def _narrow_rows(engine: Engine, run_id: UUID, *, metrics: bool, named: bool) -> list[NarrowCase]:
    # The cases read model (v5 on) keeps the `NARROW` fields as columns: no score's JSON is
    # read or parsed here;
    # v6 the metric and named scores, two small objects, parsed only when asked for.
    columns = [cases.c[name] for name in (*ROW_COLUMNS, *NARROW)]
    extra = [
        cases.c[name]
        for name, asked in (("metric_scores", metrics), ("named_scores", named))
        if asked
    ]
    # 10,000 rows of plain values: no cycles, nothing for the collector to find.
    with collector.paused(), engine.connect() as conn:
        found = conn.execute(
            select(*columns, *extra).where(cases.c.run_id == str(run_id)).order_by(cases.c.seq)
        ).all()
        return _built(found, metrics=metrics, named=named)


def _built(found: Sequence[Any], *, metrics: bool, named: bool) -> list[NarrowCase]:
    # The Boolean columns come back as bool (SQLite's 0/1 converted by SQLAlchemy's type).
    extra = metrics or named
    make, loads = NarrowCase._make, orjson.loads
    if not extra:
        return [make((*r, NONE, NONE)) for r in found]
    if metrics and named:
        return [make((*r[:-2], loads(r[-2]), loads(r[-1]))) for r in found]
    if metrics:
        return [make((*r[:-1], loads(r[-1]), NONE)) for r in found]
    return [make((*r[:-1], NONE, loads(r[-1]))) for r in found]


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
