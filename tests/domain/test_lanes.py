"""Write lanes (issue 32 item 1, first step): the rule, the stored lanes, the migration, verify.

The rule lives in `domain/store/lanes.py`; the hash below is its reference implementation.
On PostgreSQL every event carries its project's lane and a position consecutive within the
lane; SQLite keeps one lane (lane 0 at the rowid). The chain's writing function refuses a
commit that is not the next run of positions of one lane; verify names a row in another lane.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import psycopg
import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from evaledger.domain.store.lanes import LANES, LANES_TABLE, hashed_lane, lane_of
from evaledger.domain.verify import verify
from tests.helpers import bundle, case

ADMIN = Context(actor="admin")


def _reference_lane(project: str) -> int:
    return int(hashlib.sha256(project.encode()).hexdigest()[:16], 16) % 16


def test_the_rule_hashes_projects_pins_win_and_store_wide_is_lane_0() -> None:
    for project in ["default", "a", "tenant-b", "ünïcode", "x" * 300]:
        assert hashed_lane(project) == _reference_lane(project)
        assert lane_of(project, {}) == _reference_lane(project)
        assert lane_of(project, {project: 0}) == 0
        assert lane_of(project, {}, lanes=1) == 0
    assert lane_of(None, {"default": 5}) == 0
    assert LANES == 16
    # 64 projects reach more than one lane (the hash spreads them).
    assert len({hashed_lane(f"p{i}") for i in range(64)}) > 8


@pytest.fixture
def services(store_url: str) -> Iterator[Services]:
    s = build_services(Settings(db=store_url))
    try:
        yield s
    finally:
        s.close()


def _import(services: Services, project: str, key: str, *keys: str) -> None:
    data = bundle(key=key, project=project)
    data["cases"] = [case(k) for k in keys]
    services.ledger.import_bundle(RunBundle.model_validate(data), ADMIN)


def _lanes(services: Services) -> list[tuple[int, int | None, int | None]]:
    return services.ledger.recorder.lane_rows(-(2**62), 100_000)


def _project_of_position(services: Services) -> dict[int, str | None]:
    """Each event's project, found from the events (runs and cases; tokens: None)."""
    ledger = services.ledger
    found: dict[int, str | None] = {}
    for n in ledger.notifications(None, 100_000):
        if n.topic.startswith("evaledger.token."):
            found[n.id] = None
        else:
            found[n.id] = ledger.project_of(UUID(str(n.originator_id)))
    return found


def test_random_writers_in_random_projects_fill_each_lane_in_order(services: Services) -> None:
    rng = random.Random(32)
    projects = [f"proj-{i}" for i in range(6)]
    for i in range(14):
        _import(services, rng.choice(projects), f"run-{i}", *(f"c{j}" for j in range(i % 3 + 1)))
        if i % 5 == 0:
            services.ledger.issue_token(rng.choice(projects), TokenScope.WRITE, None, ADMIN)
    rows = _lanes(services)
    projects_at = _project_of_position(services)
    recorder = services.ledger.recorder
    heads: dict[int, int] = {}
    for position, lane, lane_position in rows:
        assert lane is not None and lane_position is not None
        expected = recorder.lane_for(projects_at[position])
        assert lane == expected, (position, projects_at[position])
        assert lane_position == heads.get(lane, 0) + 1  # consecutive within the lane
        heads[lane] = lane_position
    if services.location.kind == "sqlite":
        assert set(heads) == {0}
        assert [p for p, _, _ in rows] == [lp for _, _, lp in rows]
    else:
        assert len(heads) > 2  # six projects and the tokens: several lanes in use
    assert verify(services.ledger).ok


@pytest.mark.postgres
def test_the_chain_function_refuses_a_commit_out_of_lane(pg_url: str) -> None:
    s = build_services(Settings(db=pg_url))
    try:
        _import(s, "default", "r1", "a")
    finally:
        s.close()
    with psycopg.connect(pg_url) as conn:
        # Two events in two lanes, then a chain row claiming both: refused, nothing kept.
        conn.execute(
            "INSERT INTO evaledger_events (originator_id, originator_version, topic, state, "
            "lane, lane_position) VALUES (gen_random_uuid(), 1, 't', '{}', 3, 1), "
            "(gen_random_uuid(), 1, 't', '{}', 4, 1)"
        )
        row = conn.execute(
            "SELECT min(notification_id), max(notification_id) FROM evaledger_events "
            "WHERE xmin = pg_current_xact_id()::xid"
        ).fetchone()
        assert row is not None
        with pytest.raises(psycopg.errors.RaiseException, match="not the next positions of one"):
            conn.execute(
                "SELECT evaledger_chain_append(%s, %s, 2, %s, NULL, false)",
                (row[0], row[1], "0" * 64),
            )
        conn.rollback()


def _strip_lanes(url: str) -> None:
    """Make a store look like one written before lanes (as its owner, triggers off)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(f"DROP TABLE {LANES_TABLE}")
        conn.execute("ALTER TABLE evaledger_events DROP COLUMN lane, DROP COLUMN lane_position")


@pytest.mark.postgres
def test_the_migration_puts_old_events_in_lane_0_and_pins_their_projects(pg_url: str) -> None:
    old_project = next(p for p in (f"old-{i}" for i in range(100)) if hashed_lane(p) != 0)
    new_project = next(p for p in (f"new-{i}" for i in range(100)) if hashed_lane(p) != 0)
    s = build_services(Settings(db=pg_url))
    try:
        _import(s, old_project, "before", "a", "b")
        before = s.ledger.position()
    finally:
        s.close()
    _strip_lanes(pg_url)
    s = build_services(Settings(db=pg_url))  # the owner opens it: migrated on open
    try:
        rows = _lanes(s)
        assert rows == [(p, 0, p) for p in range(1, before + 1)]
        assert s.ledger.recorder.pins == {old_project: 0}
        _import(s, old_project, "after", "c")  # a pinned project stays in lane 0
        _import(s, new_project, "fresh", "d")  # a new one is hashed
        lanes = {lane for p, lane, _ in _lanes(s) if p > before}
        assert lanes == {0, hashed_lane(new_project)}
        assert [lp for p, lane, lp in _lanes(s) if lane == 0] == list(
            range(1, len([r for r in _lanes(s) if r[1] == 0]) + 1)
        )
        assert verify(s.ledger).ok
    finally:
        s.close()
    # The pins are append-only like the events.
    with (
        psycopg.connect(pg_url, autocommit=True) as conn,
        pytest.raises(psycopg.errors.RaiseException, match="immutable"),
    ):
        conn.execute(f"UPDATE {LANES_TABLE} SET lane = 3")


@pytest.mark.postgres
def test_verify_names_a_row_without_a_lane(pg_url: str) -> None:
    s = build_services(Settings(db=pg_url))
    try:
        _import(s, "default", "r1", "a", "b")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")
            conn.execute("UPDATE evaledger_events SET lane = NULL WHERE notification_id = 3")
        report = verify(s.ledger)
    finally:
        s.close()
    assert report.first_broken_position == 3
    assert any("stored without a lane" in m for m in report.broken), report.broken


def _no_lane_kwarg(services: Services) -> Any:
    return services.ledger.app.recorder.insert_events([])


def test_a_write_without_a_lane_is_refused(services: Services) -> None:
    with pytest.raises(ValueError, match="lane"):
        _no_lane_kwarg(services)
