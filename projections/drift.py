"""`verify --views`: rebuild every read model in a scratch store and compare it table by table.

The read models are derived data: anyone who can write them (the app role, a database owner)
can change a reported score without touching the log, and the log's verification would still
say ok. This check folds the same log into a scratch SQLite file with the same projections and
compares every projection's tables with the live ones, row by row in primary-key order, up to
the position the live read models reached. The first differing row is named: table, key,
column, live value and rebuilt value. Caches (`rescore_inputs_v1`, `compare_cache_v1`,
`rescores_v1`: answers kept for speed, not folded from the log) are not views and are left out.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Connection, Engine, Table, select

from evaledger.domain.ledger import Ledger
from evaledger.projections.projectors import all_projections
from evaledger.projections.runner import Projection, ProjectionRunner
from evaledger.projections.tables import lane_tracking, make_engine

PAGE = 2000


@dataclass(frozen=True)
class Drift:
    """The first row where a live read model departs from the one rebuilt from the log."""

    table: str
    key: dict[str, Any]
    column: str | None
    """None: the row is missing on one side."""
    live: Any
    rebuilt: Any

    def __str__(self) -> str:
        key = ", ".join(f"{k}={v}" for k, v in self.key.items())
        if self.column is None:
            where = "live only" if self.rebuilt is None else "missing from the live table"
            return f"{self.table} row ({key}): {where} (not what the log folds to)"
        return (
            f"{self.table} row ({key}) column {self.column}: live {self.live!r}, "
            f"rebuilt from the log {self.rebuilt!r}"
        )


@dataclass
class ViewsReport:
    """What `verify --views` found."""

    position: int
    """Where both sides were compared: the log position on a one-lane store (SQLite), the sum of
    the lane positions on several (`projection_tracking`)."""
    tables: int = 0
    rows: int = 0
    drift: Drift | None = None
    behind: list[str] | None = None
    """Projections the live side has not brought to `position` (stopped on an event)."""

    @property
    def ok(self) -> bool:
        """No table differs."""
        return self.drift is None and not self.behind

    def as_json(self) -> dict[str, object]:
        """The report as `verify --views --json` and `GET /verify?views=1` show it."""
        d = self.drift
        return {
            "ok": self.ok,
            "position": self.position,
            "tables": self.tables,
            "rows": self.rows,
            "behind": self.behind or [],
            "drift": None
            if d is None
            else {
                "table": d.table,
                "key": {str(k): _plain(v) for k, v in d.key.items()},
                "column": d.column,
                "live": _plain(d.live),
                "rebuilt": _plain(d.rebuilt),
                "message": str(d),
            },
        }


def _plain(value: Any) -> Any:
    """A value JSON can carry (bytes as text, the rest as it is)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def check_views(
    ledger: Ledger,
    live: Engine,
    progress: Callable[[int, int], None] | None = None,
    projections: Callable[[], Sequence[Projection]] = all_projections,
) -> ViewsReport:
    """Rebuild the read models from `ledger` in a scratch file; compare with `live`'s tables.

    Call it with the live read models caught up (the CLI syncs first): both sides are compared
    at the position every live projection reached.
    """
    folded = list(projections())
    names = [p.name for p in folded]
    with live.connect() as conn:
        rows = conn.execute(
            select(lane_tracking.c.name, lane_tracking.c.lane, lane_tracking.c.position).where(
                lane_tracking.c.name.in_(names)
            )
        ).all()
    reached: dict[str, dict[int, int]] = {name: {} for name in names}
    for name, lane, at in rows:
        if at:
            reached[str(name)][int(lane)] = int(at)
    lanes = max(reached.values(), key=lambda r: sum(r.values()), default={})
    report = ViewsReport(position=min((sum(r.values()) for r in reached.values()), default=0))
    behind = [n for n in names if reached[n] != lanes]
    if behind:
        report.behind = behind
        return report
    with tempfile.TemporaryDirectory(prefix="evaledger-views-") as tmp:
        scratch = make_engine(f"sqlite:///{Path(tmp) / 'views.db'}")
        try:
            upto = cast(Ledger, _Until(ledger, lanes))
            ProjectionRunner(upto, scratch, folded).catch_up(until=lanes, progress=progress)
            with live.connect() as left, scratch.connect() as right:
                for projection in folded:
                    for table in projection.tables:
                        report.tables += 1
                        drift = _compare(left, right, table, report)
                        if drift is not None:
                            report.drift = drift
                            return report
        finally:
            scratch.dispose()
    return report


class _Until:
    """The ledger's lanes as they stood at the live read models' lane positions.

    Later writes are not folded.
    """

    def __init__(self, ledger: Ledger, lanes: dict[int, int]) -> None:
        self.ledger = ledger
        self.lanes = lanes
        self.decode = ledger.decode
        self.opened = ledger.opened
        self.opened_many = ledger.opened_many

    def position(self) -> int:
        return sum(self.lanes.values())

    def lane_heads(self) -> dict[int, int]:
        return dict(self.lanes)

    def lanes_upto(self, position: int) -> dict[int, int]:
        return {}  # the scratch read models start empty: nothing to carry over

    def lane_log_rows(self, lane: int, after: int, limit: int) -> Any:
        # The rows come in lane order: the ones past the lane's head end the lists.
        rows, at = self.ledger.lane_log_rows(lane, after, limit)
        head = self.lanes.get(lane, 0)
        keep = sum(1 for lp in at if lp <= head)
        return rows[:keep], at[:keep]


def _ordered(
    conn: Connection, table: Table
) -> Generator[tuple[tuple[Any, ...], dict[str, Any]], None, None]:
    """The table's rows in primary-key order (byte order for text keys on every dialect)."""
    keys = list(table.primary_key.columns)
    order = [
        c.collate("C") if conn.dialect.name == "postgresql" and _is_text(c) else c for c in keys
    ]
    result = conn.execution_options(yield_per=PAGE).execute(select(table).order_by(*order))
    try:
        for row in result.mappings():
            yield tuple(row[c.name] for c in keys), dict(row)
    finally:
        result.close()  # a server-side cursor left at the first drift


def _is_text(column: Any) -> bool:
    return column.type.python_type is str


def _compare(
    left: Connection, right: Connection, table: Table, report: ViewsReport
) -> Drift | None:
    """The first differing row of one table, or None."""
    names = [str(c.name) for c in table.primary_key.columns]
    with closing(_ordered(left, table)) as lefts, closing(_ordered(right, table)) as rights:
        return _first_difference(table, names, zip_longest(lefts, rights), report)


def _first_difference(
    table: Table, names: list[str], rows: Iterator[tuple[Any, Any]], report: ViewsReport
) -> Drift | None:
    for live, rebuilt in rows:
        report.rows += 1
        if live is None or rebuilt is None or live[0] != rebuilt[0]:
            # The side with the lower key has a row the other lacks.
            if rebuilt is None or (live is not None and _before(live[0], rebuilt[0])):
                assert live is not None
                return Drift(table.name, dict(zip(names, live[0], strict=True)), None, True, None)
            return Drift(table.name, dict(zip(names, rebuilt[0], strict=True)), None, None, True)
        for column, value in live[1].items():
            if value != rebuilt[1][column]:
                key = dict(zip(names, live[0], strict=True))
                return Drift(table.name, key, column, value, rebuilt[1][column])
    return None


def _before(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Primary-key order as both sides sort it (text by its UTF-8 bytes)."""
    return tuple(_sortable(v) for v in a) < tuple(_sortable(v) for v in b)


def _sortable(value: Any) -> Any:
    return value.encode() if isinstance(value, str) else value
