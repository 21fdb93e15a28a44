"""The batched write path is the case-by-case path, batched (issue 32), on SQLite and PostgreSQL.

Hypothesis draws a few runs in a few projects (the writers) and an interleaving of their
batches of cases; one store records each batch with one `record_cases` (one transaction: on
PostgreSQL a binary COPY above a few events), another records the same cases in the same order
with one `record_case` each (one transaction per case: on PostgreSQL one binary INSERT). Some
runs are completed (sealed over their cases' last hashes), others left open. Both stores must
then hold the same read models (every row of every table but the log positions, which differ:
a batch attaches its cases to the run with one event, the other path with one per case), the
same export of every run, the very same stored bytes (hence hashes) of every case event, and
both must verify.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import runs
from evaledger.domain.bundle import BundleCase, BundleRun
from evaledger.domain.export import export_bundle
from evaledger.domain.ledger import Context
from evaledger.domain.verify import verify
from evaledger.projections.tables import metadata
from tests.conftest import drop_pg_database, fresh_pg_database, require_postgres
from tests.helpers import bundle
from tests.oracles.rescore_inputs import CACHE_TABLES, check_stored_inputs
from tests.projections.test_rebuild_property import case_st

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PROJECTS = ["p0", "p1", "p2"]

Snapshot = dict[str, list[tuple[Any, ...]]]


@st.composite
def plan_st(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[int, list[int]]]]:
    """Runs (project, cases, completed?) and an interleaving of their batches.

    Returns the runs and the writes in order: (run index, the indices of its cases written).
    """
    n_runs = draw(st.integers(1, 4), label="runs")
    plans: list[dict[str, Any]] = []
    queues: list[list[list[int]]] = []
    for r in range(n_runs):
        bodies = draw(st.lists(case_st(), min_size=1, max_size=12), label=f"run {r} cases")
        for i, body in enumerate(bodies):
            # Each case its own identity within the run (a repeated one is refused in a batch).
            body["test_case"]["key"] = f"case-{i}"
        cuts = draw(st.lists(st.integers(1, len(bodies)), unique=True), label=f"run {r} cuts")
        edges = [0, *sorted(c for c in cuts if c < len(bodies)), len(bodies)]
        queues.append([list(range(a, b)) for a, b in pairwise(edges)])
        plans.append(
            {
                "project": draw(st.sampled_from(PROJECTS), label=f"run {r} project"),
                "cases": bodies,
                "complete": draw(st.booleans(), label=f"run {r} completed"),
            }
        )
    order: list[tuple[int, list[int]]] = []
    while any(queues):
        r = draw(st.sampled_from([i for i, q in enumerate(queues) if q]), label="next writer")
        order.append((r, queues[r].pop(0)))
    return plans, order


def record(
    services: Services,
    plans: list[dict[str, Any]],
    order: list[tuple[int, list[int]]],
    batched: bool,
) -> list[UUID]:
    """Record the plan through the application layer; the runs' ids."""
    ctx = Context(actor="writer")
    run_ids: list[UUID] = []
    for r, plan in enumerate(plans):
        body = {
            **bundle()["run"],
            "key": f"run-{r}",
            "project": plan["project"],
            "status": "running",
            "completed_at": None,
            "created_at": (T0 + timedelta(minutes=r)).isoformat(),
        }
        run_ids.append(runs.create_run(services, BundleRun.model_validate(body), ctx).id)
    for r, indices in order:
        cases = [BundleCase.model_validate(plans[r]["cases"][i]) for i in indices]
        if batched:
            written = runs.record_cases(services, run_ids[r], cases, ctx)
            assert written.events >= 2 * len(cases) + 1  # every case opened, and attached
        else:
            for case in cases:
                runs.record_case(services, run_ids[r], case, ctx)
    for r, plan in enumerate(plans):
        if plan["complete"]:
            runs.complete_run(services, run_ids[r], ctx, T0 + timedelta(hours=1))
    return run_ids


def read_models(services: Services) -> Snapshot:
    """Every row of every read-model table but the log positions (and the tracking table).

    The rescore inputs are a cache: checked against the reference build instead.
    """
    services.runner.catch_up()
    out: Snapshot = {}
    with services.engine.connect() as conn:
        for table in metadata.sorted_tables:
            if table.name in ("projection_tracking", "projection_failures"):
                continue
            if table.name in CACHE_TABLES:
                check_stored_inputs(conn)
                continue
            columns = [c for c in table.columns if c.name != "position"]
            rows = conn.execute(select(*columns)).all()
            out[table.name] = sorted((tuple(r) for r in rows), key=repr)
    return out


def case_events(services: Services, run_id: UUID) -> dict[UUID, list[tuple[int, str, bytes]]]:
    """Each case's stored events (version, topic, state bytes)."""
    ledger = services.ledger
    return {
        case_id: [
            (e.originator_version, e.topic, bytes(e.state))
            for e in ledger.stored_events_of(case_id)
        ]
        for case_id in ledger.get_run(run_id).case_ids
    }


def check_same_result(
    store: Callable[[], AbstractContextManager[Services]],
    plans: list[dict[str, Any]],
    order: list[tuple[int, list[int]]],
) -> None:
    with store() as batched, store() as one_by_one:
        for services in (batched, one_by_one):
            services.ledger.clock = lambda: T0  # the same timestamps in both stores
        ids = record(batched, plans, order, batched=True)
        assert record(one_by_one, plans, order, batched=False) == ids
        # The batched store wrote fewer, larger transactions (what is being compared).
        assert batched.ledger.position() < one_by_one.ledger.position() or len(order) == sum(
            len(p["cases"]) for p in plans
        )
        assert read_models(batched) == read_models(one_by_one)
        for run_id in ids:
            exported = export_bundle(batched.ledger, run_id).model_dump(mode="json")
            assert exported == export_bundle(one_by_one.ledger, run_id).model_dump(mode="json")
            assert case_events(batched, run_id) == case_events(one_by_one, run_id)
        for services in (batched, one_by_one):
            report = verify(services.ledger)
            assert report.ok, report
            assert report.events == services.ledger.position()


# Inline stores (`seal_payloads=False`): the two stores are compared byte for byte, and a sealed
# payload's reference hashes a random salt (issue 34), which every later event of the aggregate
# chains over (`prev_hash`). The batched path of a sealing store is the default store of the rest
# of the suite.
@contextmanager
def sqlite_store() -> Iterator[Services]:
    with tempfile.TemporaryDirectory(prefix="evaledger-batch-") as tmp:
        services = build_services(Settings(db=f"sqlite:///{tmp}/store/", seal_payloads=False))
        try:
            yield services
        finally:
            services.close()


@contextmanager
def pg_store() -> Iterator[Services]:
    url, name = fresh_pg_database()
    try:
        services = build_services(Settings(db=url, seal_payloads=False))
        try:
            yield services
        finally:
            services.close()
    finally:
        drop_pg_database(name)


def run_property(store: Callable[[], AbstractContextManager[Services]], examples: int) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(plan_st())
    def prop(plan: tuple[list[dict[str, Any]], list[tuple[int, list[int]]]]) -> None:
        check_same_result(store, *plan)

    prop()


def test_batches_and_cases_one_by_one_give_the_same_ledger_on_sqlite() -> None:
    run_property(sqlite_store, examples=20)


@pytest.mark.postgres
def test_batches_and_cases_one_by_one_give_the_same_ledger_on_postgres() -> None:
    require_postgres()
    run_property(pg_store, examples=8)


def test_sqlite_positions_of_a_save_are_its_rows_rowids_even_when_sqlite_picks_them_at_random(
    tmp_path: Path,
) -> None:
    """A row written outside evaledger at SQLite's largest rowid makes SQLite pick new rowids at
    random: the positions a save reports (and chains) are still its own rows' rowids."""
    services = build_services(Settings(db=f"sqlite:///{tmp_path}/store/"))
    try:
        recorder: Any = services.ledger.recorder  # eventsourcing's, with insert_events
        table = recorder.events_table_name
        ids = [uuid4() for _ in range(3)]
        rows = [
            StoredEvent(originator_id=i, originator_version=1, topic="t/v1", state=b"{}")
            for i in ids
        ]
        ordinary = list(recorder.insert_events(rows[:1], lane=0) or [])
        assert ordinary == [1]  # the largest rowid plus one
        raw = sqlite3.connect(services.location.events_env["SQLITE_DBNAME"])
        with raw:
            raw.execute(
                f"INSERT INTO {table} (rowid, originator_id, originator_version, topic, state) "
                "VALUES (?, ?, 1, 't/v1', x'7b7d')",
                (2**63 - 1, uuid4().hex),
            )
        positions = list(recorder.insert_events(rows[1:], lane=0) or [])
        stored = [
            raw.execute(
                f"SELECT rowid FROM {table} WHERE originator_id = ? AND originator_version = 1",
                (i.hex,),
            ).fetchone()[0]
            for i in ids[1:]
        ]
        raw.close()
        assert positions == stored
        assert all(1 < p < 2**63 - 1 for p in positions)
    finally:
        services.close()
