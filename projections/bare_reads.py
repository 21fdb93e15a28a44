"""`evaledger runs` on a SQLite store through the standard library's `sqlite3`, no SQLAlchemy.

Start-up (issue 32): importing SQLAlchemy alone costs about three times the import of pydantic
and orjson, the whole budget of a listing. A caught-up SQLite store's page of runs is three
queries on the read models, so those are read here with the bare driver, on read-only
connections. Whatever this path cannot answer exactly as the full one does, it declines (None):
the read models behind the log (only the projectors catch them up), a run whose summary is not
materialised under its own spec (only the scoring rules summarise it), or any SQLite error (the
full path names it). The table names come from `names.py`, which `tables.py` defines the tables
from; the columns read here are held to `tables.py`'s by a test (`COLUMNS`).
"""

from __future__ import annotations

import sqlite3
from collections import namedtuple
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

from evaledger.projections import encoding
from evaledger.projections.names import (
    PROJECTION_NAMES,
    RUN_SUMMARIES_TABLE,
    RUNS_PROJECTION,
    TRACKING_TABLE,
)
from evaledger.projections.run_rows import RunFilter, RunRow, run_row

SQLITE_EVENTS_TABLE = "stored_events"
"""eventsourcing's SQLite table of events (its `max_notification_id` reads its `MAX(rowid)`)."""

COLUMNS: dict[str, tuple[str, ...]] = {
    TRACKING_TABLE: ("name", "position"),
    RUNS_PROJECTION: ("project", "run_key", "suite_name", "agent_name", "status", "listed_at"),
    RUN_SUMMARIES_TABLE: ("run_id", "spec_id", "aggregate"),
}
"""The columns the queries here name, per table (`run_row` reads the rows it is given)."""

FILTERS = (
    ("project", "project"),
    ("key", "run_key"),
    ("suite", "suite_name"),
    ("agent", "agent_name"),
    ("status", "status"),
)
"""`RunFilter` field → the runs column it matches, as `ReadModels.list_runs` filters."""


class ListedRuns(NamedTuple):
    """A page of runs, how many match, and each run's stored aggregate (JSON, in row order)."""

    rows: list[RunRow]
    total: int
    aggregates: list[bytes | str]


def read_only(path: str) -> sqlite3.Connection:
    """A read-only connection to an existing SQLite file (`?`, `#` in the path quoted)."""
    uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=30)


def log_head(events_path: str) -> int | None:
    """The head of a SQLite file store's log (eventsourcing's `MAX(rowid)`); None if unreadable."""
    if "mode=memory" in events_path or not Path(events_path).is_file():
        return None
    try:
        with closing(read_only(events_path)) as conn:
            row = conn.execute(f"SELECT MAX(rowid) FROM {SQLITE_EVENTS_TABLE}").fetchone()
    except sqlite3.Error:
        return None
    return int(row[0] or 0)


def projected_position(conn: sqlite3.Connection) -> int | None:
    """The position every projection has reached (`ReadModels.projected_position`'s query)."""
    marks = ", ".join("?" for _ in PROJECTION_NAMES)
    rows = conn.execute(
        f"SELECT name, position FROM {TRACKING_TABLE} WHERE name IN ({marks})", PROJECTION_NAMES
    ).fetchall()
    if len(rows) < len(PROJECTION_NAMES):
        return None
    return min(int(position) for _, position in rows)


def list_runs(events_path: str, views_path: str, f: RunFilter) -> ListedRuns | None:
    """The page of runs `ReadModels.list_runs` answers, with their aggregates; else None.

    None when the store is not caught up, a listed run has no summary materialised under its
    own spec, a filter this path does not know is set, or SQLite raises: the caller then takes
    the full path, which catches up, summarises or names the error.
    """
    if f.created_from is not None or f.created_to is not None:
        return None
    head = log_head(events_path)
    if head is None or not Path(views_path).is_file():
        return None
    try:
        with closing(read_only(views_path)) as conn:
            reached = projected_position(conn)
            if reached is None or reached < head:
                return None
            return _page(conn, f)
    except sqlite3.Error:
        return None


def _page(conn: sqlite3.Connection, f: RunFilter) -> ListedRuns | None:
    conds = [(column, getattr(f, field)) for field, column in FILTERS if getattr(f, field)]
    where = " AND ".join(f"{column} = ?" for column, _ in conds)
    params: list[Any] = [value for _, value in conds]
    where_sql = f" WHERE {where}" if where else ""
    query = f"SELECT * FROM {RUNS_PROJECTION}{where_sql} ORDER BY listed_at DESC, run_id"
    if f.label:
        # Labels live in a JSON column: filtered in Python, paginated after (as the queries do).
        k, _, v = f.label.partition("=")
        found = [r for r in _rows(conn, query, params) if encoding.loads(r.labels).get(k) == v]
        total = len(found)
        found = found[f.offset : f.offset + f.limit]
    else:
        total = int(conn.execute(f"SELECT count(*) FROM {RUNS_PROJECTION}{where_sql}", params)
                    .fetchone()[0])  # fmt: skip
        found = _rows(conn, f"{query} LIMIT ? OFFSET ?", [*params, f.limit, f.offset])
    rows = [run_row(r) for r in found]
    stored = _aggregates(conn, [str(r.run_id) for r in rows])
    aggregates = []
    for r in rows:
        spec_id, aggregate = stored.get(str(r.run_id), (None, None))
        if spec_id != r.spec_id or aggregate is None:
            return None  # not materialised under its own spec: the scoring rules summarise it
        aggregates.append(aggregate)
    return ListedRuns(rows, total, aggregates)


def _rows(conn: sqlite3.Connection, query: str, params: Sequence[Any]) -> list[Any]:
    cursor = conn.execute(query, params)
    row = namedtuple("row", [d[0] for d in cursor.description])  # type: ignore[misc]
    return [row(*values) for values in cursor.fetchall()]


def _aggregates(conn: sqlite3.Connection, run_ids: list[str]) -> dict[str, tuple[str, Any]]:
    if not run_ids:
        return {}
    marks = ", ".join("?" for _ in run_ids)
    return {
        run_id: (spec_id, aggregate)
        for run_id, spec_id, aggregate in conn.execute(
            f"SELECT run_id, spec_id, aggregate FROM {RUN_SUMMARIES_TABLE} "
            f"WHERE run_id IN ({marks})",
            run_ids,
        )
    }
