"""Readers keep their place per write lane: nothing committed late is skipped.

With one lock per lane, two lanes' transactions commit in any order, so a log position can
become visible after a higher one. A runner paging the log by position would move past the
higher one and never read the lower (the projection runner; the trace completion loop's
cursor). Here two transactions in two lanes commit out of position
order on PostgreSQL (raw inserts of a real story's events, one connection per lane): the read
models must end up as the same story's on SQLite (one lane), written one event at a time.
"""

from __future__ import annotations

import tempfile
from typing import Any
from uuid import UUID

import psycopg
import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import verification
from evaledger.application.traces import TraceCursor, receive_traces
from evaledger.domain.aggregates import run_id_for
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import ReviewQueueCreated
from evaledger.domain.ledger import Context
from evaledger.domain.store.lanes import hashed_lane
from evaledger.domain.store.recorder import LogRow
from evaledger.importers.otlp import PROTOBUF
from evaledger.projections.names import PROJECTION_NAMES
from tests.helpers import bundle, case
from tests.oracles.read_model import stored_read_model
from tests.otlp_helpers import chat_trace, export_body, recorder

INSERT = (
    "INSERT INTO evaledger_events (originator_id, originator_version, topic, state, lane, "
    "lane_position) VALUES (%s::uuid, %s, %s, %s, %s, %s) RETURNING notification_id"
)


def _two_projects() -> tuple[str, str]:
    """Two projects in two different lanes, neither lane 0 (the store-wide one)."""
    first = next(p for p in (f"a{i}" for i in range(100)) if hashed_lane(p) != 0)
    second = next(
        p for p in (f"b{i}" for i in range(100)) if hashed_lane(p) not in (0, hashed_lane(first))
    )
    return first, second


def _story(services: Services, projects: tuple[str, str]) -> None:
    for n, project in enumerate(projects):
        data = bundle(key=f"run-{n}", project=project)
        data["cases"] = [case(k, s) for k, s in (("x", 1), ("y", 0), ("z", 3))]
        services.ledger.import_bundle(RunBundle.model_validate(data), Context("w"))


def lane_runner_model(services: Services) -> tuple[Any, ...]:
    """The read model less each row's log position (which lanes renumber)."""
    services.sync()
    with services.engine.connect() as conn:
        model = stored_read_model(conn)
    rows = {k: {c: v for c, v in r.items() if c != "position"} for k, r in model.rows.items()}
    per_run: dict[str, list[str]] = {}
    for case_id in model.opening_order:
        per_run.setdefault(str(model.rows[case_id]["run_id"]), []).append(case_id)
    return rows, per_run, model.summaries


def insert_lane_rows(
    conn: psycopg.Connection[Any], rows: list[LogRow], lane: int, first: int = 1
) -> list[int]:
    """Insert a story's events in `lane` from lane position `first`, in `conn`'s transaction."""
    ids = []
    for lane_position, (_, oid, version, topic, state) in enumerate(rows, start=first):
        found = conn.execute(INSERT, (oid, version, topic, state, lane, lane_position)).fetchone()
        assert found is not None
        ids.append(int(found[0]))
    return ids


@pytest.mark.postgres
def test_a_lane_committed_after_a_higher_position_is_read_whole(pg_url: str) -> None:
    projects = _two_projects()
    lanes = [hashed_lane(p) for p in projects]
    with tempfile.TemporaryDirectory(prefix="evaledger-lane-runner-") as tmp:
        one = build_services(Settings(db=f"sqlite:///{tmp}/store/", seal_payloads=False))
        try:
            _story(one, projects)
            expected = lane_runner_model(one)
            rows = one.ledger.log_rows(1, 10_000)
            by_project: dict[str, list[LogRow]] = {p: [] for p in projects}
            for row in rows:
                project = one.ledger.project_of(UUID(row[1]))
                assert project is not None
                by_project[project].append(row)
        finally:
            one.close()
    pg = build_services(Settings(db=pg_url, seal_payloads=False))
    try:
        with psycopg.connect(pg_url) as gap:  # positions taken, never committed: a gap
            insert_lane_rows(gap, by_project[projects[0]][:2], lanes[0])
            gap.rollback()
        with psycopg.connect(pg_url) as first, psycopg.connect(pg_url) as second:
            early = insert_lane_rows(
                first, by_project[projects[0]], lanes[0]
            )  # lower positions ...
            late = insert_lane_rows(second, by_project[projects[1]], lanes[1])
            second.commit()  # ... committed after the higher ones
            assert max(early) < min(late)
            partial = lane_runner_model(pg)
            runner = pg.runner
            assert runner.target(max(late)) == {lanes[1]: len(late)}  # the open lane unseen
            runner.wait_for(max(late), timeout=0.2, inline=False)  # reached: returns
            first.commit()
        assert runner.target(max(late)) == {lanes[0]: len(early), lanes[1]: len(late)}
        # Waiting on the late write's position waits for the lower positions committed since
        # (in the other lane): everything up to it, as a client reading its writes expects.
        with pytest.raises(TimeoutError):
            runner.wait_for(max(late), timeout=0.2, inline=False)
        assert lane_runner_model(pg) == expected
        runner.wait_for(max(late), timeout=0.2, inline=False)
        assert runner.lane_positions() == {
            name: {lanes[0]: len(early), lanes[1]: len(late)} for name in PROJECTION_NAMES
        }
    finally:
        pg.close()
    # Caught up, a new process's read returns on its first queries (no runner built), although
    # the log's head passes the number of events (the gap).
    fresh = build_services(Settings(db=pg_url, seal_payloads=False))
    try:
        assert fresh.ledger.position() > len(early) + len(late)
        fresh.sync()
        assert fresh._runner is None
        # Nor is a caught-up projection reported behind by the gap.
        health = verification.store_health(fresh)
        assert set(health.projection_lag.values()) == {0}
        assert verification.projection_lag(fresh).projection_lag == 0
    finally:
        fresh.close()
    # Before the first lane committed, the second lane's run alone was in the read models.
    assert set(partial[1]) == {str(run_id_for(projects[1], "run-1"))}
    assert set(expected[1]) == {str(run_id_for(p, f"run-{n}")) for n, p in enumerate(projects)}


@pytest.mark.postgres
def test_the_trace_cursor_reads_a_lane_committed_late(pg_url: str) -> None:
    """The completion loop's cursor keeps its place per lane: a late commit is not passed over."""
    projects = _two_projects()
    lanes = [hashed_lane(p) for p in projects]
    tracer, memory = recorder()
    chat_trace(tracer)
    body = export_body(memory.get_finished_spans())
    with tempfile.TemporaryDirectory(prefix="evaledger-lane-traces-") as tmp:
        one = build_services(Settings(db=f"sqlite:///{tmp}/store/", seal_payloads=False))
        try:
            for project in projects:
                ctx = Context(actor="otlp", project=project)
                receive_traces(one, body, PROTOBUF, None, ctx, max_bytes=1 << 22)
            rows = one.ledger.log_rows(1, 10_000)
            traces = [UUID(r[1]) for r in rows]
            assert len(set(traces)) == 2  # one Trace aggregate per project, first one's first
        finally:
            one.close()
    first_rows = [r for r in rows if UUID(r[1]) == traces[0]]
    second_rows = [r for r in rows if UUID(r[1]) == traces[-1]]
    pg = build_services(Settings(db=pg_url, seal_payloads=False))
    try:
        cursor = TraceCursor()
        with psycopg.connect(pg_url) as first, psycopg.connect(pg_url) as second:
            early = insert_lane_rows(first, first_rows, lanes[0])
            late = insert_lane_rows(second, second_rows, lanes[1])
            second.commit()
            cursor.catch_up(pg)
            assert set(cursor.open) == {traces[-1]}
            first.commit()
        assert max(early) < min(late)
        cursor.catch_up(pg)
        assert set(cursor.open) == {traces[0], traces[-1]}
        assert cursor.lanes == {lanes[0]: len(early), lanes[1]: len(late)}
    finally:
        pg.close()


@pytest.mark.postgres
def test_review_queue_names_read_a_lane_committed_late(pg_url: str) -> None:
    """The review queues' names are read once, then by lane: a late commit is not passed over."""
    projects = _two_projects()
    lanes = [hashed_lane(p) for p in projects]
    with tempfile.TemporaryDirectory(prefix="evaledger-lane-queues-") as tmp:
        one = build_services(Settings(db=f"sqlite:///{tmp}/store/", seal_payloads=False))
        try:
            _story(one, projects)
            for n, project in enumerate(projects):
                run = one.ledger.get_run(run_id_for(project, f"run-{n}"))
                one.ledger.create_review_queue(
                    project,
                    f"q-{project}",
                    Context(actor="admin"),
                    rule="all",
                    run_ids=[run.id],
                    case_ids=run.case_ids,
                    reviewers=["ann"],
                    per_item=1,
                    blind=False,
                )
            topic = ReviewQueueCreated.topic()
            rows = [r for r in one.ledger.log_rows(1, 10_000) if r[3] == topic]
            assert len(rows) == 2
        finally:
            one.close()
    pg = build_services(Settings(db=pg_url, seal_payloads=False))
    try:
        with psycopg.connect(pg_url) as first, psycopg.connect(pg_url) as second:
            early = insert_lane_rows(first, rows[:1], lanes[0])
            late = insert_lane_rows(second, rows[1:], lanes[1])
            second.commit()
            assert pg.ledger.review_queue_names(None) == [(projects[1], f"q-{projects[1]}")]
            first.commit()
        assert max(early) < min(late)
        assert sorted(pg.ledger.review_queue_names(None)) == sorted((p, f"q-{p}") for p in projects)
    finally:
        pg.close()
