"""Write lanes (issue 32 item 1): the one rule saying which lane a project's events go to.

Every event is written in one lane: the lane of the project its command touches, or lane 0
(`STORE_WIDE`) for records that belong to no project (tokens, the metric catalogue, chain
adoption and key rotation). A project's lane is its pin in `evaledger_lanes` when it has one
(the migration pins every project that existed before lanes, so their events stay in the lane
they were migrated to), else `sha256(project) mod LANES`. A command touches one project, so a
commit is always in one lane; the lane's `lane_position`s are consecutive in its commit order.

SQLite keeps one lane (one writer by design): every event there is lane 0 and its lane
position is its rowid, so it has neither the columns nor the pins table.

Why hash partitions and not one lane per project: the number of locks, chains and runner
positions stays fixed (docs/scaling.md, "Next: per-project lanes").
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

LANES = 16
"""Lanes of a PostgreSQL store (fixed: changing it would move every unpinned project)."""

STORE_WIDE = 0
"""The lane of records that belong to no project (tokens, the catalogue, chain records)."""

LANES_TABLE = "evaledger_lanes"
"""Pins: (project, lane) for projects whose lane is not their hash's (set at migration)."""


def hashed_lane(project: str, lanes: int = LANES) -> int:
    """The lane a project hashes to: the first 8 bytes of sha256(project) mod `lanes`."""
    digest = hashlib.sha256(project.encode()).digest()
    return int.from_bytes(digest[:8], "big") % lanes


def lane_of(project: str | None, pins: Mapping[str, int], lanes: int = LANES) -> int:
    """The lane of a project's events (None: a store-wide record, lane 0).

    One lane only (SQLite): everything is lane 0.
    """
    if project is None or lanes == 1:
        return STORE_WIDE
    pinned = pins.get(project)
    return pinned if pinned is not None else hashed_lane(project, lanes)


def lanes_to_read(heads: Mapping[int, int], places: Mapping[int, int]) -> list[int]:
    """The lanes whose head is past a reader's place in them, in lane order.

    A reader that keeps its place (the trace cursor, the review queues' names) keeps one per
    lane: within a lane every position up to a visible one is visible (the lane's writers take
    turns under its lock), which is not true of log positions across lanes. After reading a
    lane to its end the reader's place may move to the head it saw.
    """
    return [lane for lane in sorted(heads) if heads[lane] > places.get(lane, 0)]


def postgres_lanes_ddl(schema: str) -> str:
    """The pins table (append-only like the events: a pin never moves)."""
    return (
        f'CREATE TABLE IF NOT EXISTS "{schema}".{LANES_TABLE} ('
        "project text PRIMARY KEY, lane smallint NOT NULL CHECK (lane >= 0), "
        "pinned_at timestamptz NOT NULL DEFAULT now())"
    )


LANE_INDEX = "evaledger_events_lane_position"


def read_pins(curs: Any, schema: str) -> dict[str, int]:
    """Every pin of a PostgreSQL store."""
    curs.execute(f'SELECT project, lane FROM "{schema}".{LANES_TABLE}')
    return {str(r["project"]): int(r["lane"]) for r in curs.fetchall()}


def lanes_ready(curs: Any, schema: str, events_table: str) -> bool:
    """Whether the store was migrated to lanes (the pins table and the lane columns exist)."""
    curs.execute(
        "SELECT to_regclass(%s) IS NOT NULL AND (SELECT count(*) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attname IN ('lane', 'lane_position') "
        "AND NOT a.attisdropped) = 2 AS ready",
        (f'"{schema}".{LANES_TABLE}', f'"{schema}"."{events_table}"'),
    )
    row = curs.fetchone()
    return bool(row is not None and row["ready"])


def migrate_lanes(curs: Any, schema: str, events_table: str) -> int:
    """Put a store on lanes once (inside the migration's transaction); projects pinned.

    The first time only (the pins table is the marker: a later migration must not give rows
    forged since then a lane): every existing event goes to lane 0 at `lane_position =
    notification_id`, so lane 0's chain is the chain as it was, and every project named in
    those events is pinned to lane 0 (a pinned project moves only by export and import into a
    new project). The immutability triggers are disabled for that one UPDATE, inside this
    transaction only (ALTER TABLE holds its lock until commit: nobody writes meanwhile); the
    migration re-creates every trigger after this step anyway.
    """
    events = f'"{schema}"."{events_table}"'
    curs.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (f'"{schema}".{LANES_TABLE}',))
    row = curs.fetchone()
    curs.execute(
        f"ALTER TABLE {events} ADD COLUMN IF NOT EXISTS lane smallint, "
        "ADD COLUMN IF NOT EXISTS lane_position bigint"
    )
    curs.execute(
        f"CREATE UNIQUE INDEX IF NOT EXISTS {LANE_INDEX} ON {events} (lane, lane_position)"
    )
    if row is not None and row["present"]:
        return 0
    curs.execute(postgres_lanes_ddl(schema))
    projects = _projects_named(curs, events)
    curs.execute(f"ALTER TABLE {events} DISABLE TRIGGER USER")
    curs.execute(
        f"UPDATE {events} SET lane = {STORE_WIDE}, lane_position = notification_id "
        "WHERE lane IS NULL"
    )
    moved = int(curs.rowcount)
    curs.execute(f"ALTER TABLE {events} ENABLE TRIGGER USER")
    for project in sorted(projects):
        curs.execute(
            f'INSERT INTO "{schema}".{LANES_TABLE} (project, lane) VALUES (%s, {STORE_WIDE})',
            (project,),
        )
    return moved


def _projects_named(curs: Any, events: str, page: int = 5000) -> set[str]:
    """Every project an existing event's state names (read a page at a time)."""
    found: set[str] = set()
    after = -(2**62)
    while True:
        curs.execute(
            f"SELECT notification_id, state FROM {events} WHERE notification_id > %s "
            "ORDER BY notification_id LIMIT %s",
            (after, page),
        )
        rows = curs.fetchall()
        if not rows:
            return found
        for r in rows:
            try:
                state = orjson.loads(bytes(r["state"]))
            except orjson.JSONDecodeError:
                continue  # an unreadable state names nothing (verify reports it)
            if isinstance(state, dict) and isinstance(state.get("project"), str):
                found.add(state["project"])
        after = rows[-1]["notification_id"]
