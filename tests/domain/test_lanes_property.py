"""Lanes change no answer: random writers in random projects, PostgreSQL (lanes) vs SQLite (one).

Hypothesis draws a few writers, each with imports into projects drawn from four (several
lanes). On PostgreSQL the writers run at the same time, each with its own services (as
separate server workers would); on SQLite the same imports run one after another. The cases
read model, every run's export and the lane bookkeeping must agree: each event in its
project's lane, consecutive within it, and `verify` ok.
"""

from __future__ import annotations

import tempfile
import threading
from typing import Any
from uuid import UUID

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.export import bundle_to_json, export_bundle
from evaledger.domain.ledger import Context
from evaledger.domain.store.lanes import hashed_lane
from evaledger.domain.verify import verify
from tests.conftest import drop_pg_database, fresh_pg_database, require_postgres
from tests.helpers import bundle, case
from tests.oracles.read_model import stored_read_model
from tests.projections.test_lane_runner import insert_lane_rows, lane_runner_model

PROJECTS = ["default", "p1", "p2", "p3"]

Import = tuple[str, str, list[tuple[str, int]]]
"""(project, run key, [(case key, score)])."""


@st.composite
def writers_st(draw: st.DrawFn) -> list[list[Import]]:
    writers = draw(st.integers(2, 4))
    plans: list[list[Import]] = []
    for w in range(writers):
        plan: list[Import] = []
        for i in range(draw(st.integers(1, 3))):
            cases = draw(
                st.lists(
                    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5)),
                    min_size=1,
                    max_size=3,
                    unique_by=lambda c: c[0],
                )
            )
            plan.append((draw(st.sampled_from(PROJECTS)), f"w{w}-r{i}", cases))
        plans.append(plan)
    return plans


def _import(services: Services, item: Import) -> Any:
    project, key, cases = item
    data = bundle(key=key, project=project)
    data["cases"] = [case(k, s) for k, s in cases]
    return services.ledger.import_bundle(RunBundle.model_validate(data), Context("w")).run_id


def _answers(services: Services, run_ids: list[Any]) -> tuple[Any, ...]:
    """The read model and the exports, less what is log order across runs.

    A case row's `position` and the store-wide opening order follow how the writers
    interleaved (different between any two concurrent runs, lanes or not); the order of each
    run's own cases does not.
    """
    services.sync()
    with services.engine.connect() as conn:
        model = stored_read_model(conn)
    rows = {k: {c: v for c, v in row.items() if c != "position"} for k, row in model.rows.items()}
    per_run: dict[str, list[str]] = {}
    for case_id in model.opening_order:
        per_run.setdefault(str(model.rows[case_id]["run_id"]), []).append(case_id)
    exports = {str(r): bundle_to_json(export_bundle(services.ledger, r)) for r in run_ids}
    return rows, per_run, model.summaries, exports


def _check_lanes(services: Services) -> None:
    recorder = services.ledger.recorder
    heads: dict[int, int] = {}
    for position, lane, lane_position in recorder.lane_rows(-(2**62), 1_000_000):
        assert lane is not None and lane_position is not None, position
        assert lane_position == heads.get(lane, 0) + 1
        heads[lane] = lane_position
    for n in services.ledger.notifications(None, 1_000_000):
        project = services.ledger.project_of(n.originator_id)  # type: ignore[arg-type]
        row = recorder.lane_rows(n.id, 1)[0]
        assert row[1] == recorder.lane_for(project), (n.id, project)


def _run_concurrently(url: str, plans: list[list[Import]]) -> list[Any]:
    run_ids: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(plans))

    def writer(plan: list[Import]) -> None:
        services = build_services(Settings(db=url))
        try:
            barrier.wait()
            for item in plan:
                run_ids.append(_import(services, item))
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            services.close()

    threads = [threading.Thread(target=writer, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return run_ids


@pytest.mark.postgres
def test_random_writers_in_random_projects_answer_as_one_lane() -> None:
    require_postgres()

    @settings(
        max_examples=3,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(writers_st())
    def prop(plans: list[list[Import]]) -> None:
        url, name = fresh_pg_database()
        try:
            run_ids = _run_concurrently(url, plans)
            pg = build_services(Settings(db=url))
            try:
                _check_lanes(pg)
                assert verify(pg.ledger).ok
                pg_answers = _answers(pg, run_ids)
            finally:
                pg.close()
        finally:
            drop_pg_database(name)
        with tempfile.TemporaryDirectory(prefix="evaledger-lanes-") as tmp:
            one = build_services(Settings(db=f"sqlite:///{tmp}/store/"))
            try:
                for plan in plans:
                    for item in plan:
                        _import(one, item)
                _check_lanes(one)
                assert _answers(one, run_ids) == pg_answers
            finally:
                one.close()

    prop()


LANED = [p for p in (f"lane-{i}" for i in range(64)) if hashed_lane(p) != 0]
"""Projects in lanes other than the store-wide one, one per lane (the first of each)."""
LANED = [
    p for i, p in enumerate(LANED) if hashed_lane(p) not in {hashed_lane(q) for q in LANED[:i]}
]


@st.composite
def schedules_st(draw: st.DrawFn) -> tuple[list[Import], list[tuple[int, bool]]]:
    """Imports in 2-3 projects of distinct lanes, and an order to commit their events in.

    Each project's events go in 1-3 transactions (one connection per lane, its inserts and
    commits in order); the schedule interleaves the lanes' steps, a catch-up after some.
    """
    projects = draw(st.lists(st.sampled_from(LANED[:6]), min_size=2, max_size=3, unique=True))
    imports: list[Import] = []
    for n, project in enumerate(projects):
        cases = draw(
            st.lists(
                st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5)),
                min_size=1,
                max_size=3,
                unique_by=lambda c: c[0],
            )
        )
        imports.append((project, f"r{n}", cases))
    steps = {n: draw(st.integers(1, 3)) * 2 for n in range(len(projects))}  # insert, commit
    schedule: list[tuple[int, bool]] = []
    while any(steps.values()):
        lane = draw(st.sampled_from(sorted(n for n, left in steps.items() if left)))
        steps[lane] -= 1
        schedule.append((lane, draw(st.booleans())))
    return imports, schedule


def _chunks(rows: list[Any], parts: int) -> list[list[Any]]:
    size = -(-len(rows) // parts)
    return [rows[i : i + size] for i in range(0, len(rows), size)] or [[]]


@pytest.mark.postgres
def test_lanes_committed_in_any_order_give_the_one_lane_read_models() -> None:
    """Transactions of several lanes committing in any order, read between commits."""
    require_postgres()

    @settings(
        max_examples=4,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(schedules_st())
    def prop(drawn: tuple[list[Import], list[tuple[int, bool]]]) -> None:
        imports, schedule = drawn
        with tempfile.TemporaryDirectory(prefix="evaledger-lanes-") as tmp:
            one = build_services(Settings(db=f"sqlite:///{tmp}/store/", seal_payloads=False))
            try:
                for item in imports:
                    _import(one, item)
                expected = lane_runner_model(one)
                rows = one.ledger.log_rows(1, 100_000)
                of = {
                    p: [r for r in rows if one.ledger.project_of(UUID(r[1])) == p]
                    for p, _, _ in imports
                }
            finally:
                one.close()
        url, name = fresh_pg_database()
        try:
            pg = build_services(Settings(db=url, seal_payloads=False))
            conns = [psycopg.connect(url) for _ in imports]
            try:
                commits = {
                    n: sum(1 for m, _ in schedule if m == n) // 2 for n in range(len(imports))
                }
                pending = {n: _chunks(of[p], commits[n]) for n, (p, _, _) in enumerate(imports)}
                at = dict.fromkeys(pending, 0)
                inserted = dict.fromkeys(pending, False)
                for n, read in schedule:
                    lane = hashed_lane(imports[n][0])
                    if not inserted[n]:
                        chunk = pending[n].pop(0)
                        insert_lane_rows(conns[n], chunk, lane, at[n] + 1)
                        at[n] += len(chunk)
                    else:
                        conns[n].commit()
                    inserted[n] = not inserted[n]
                    if read:
                        pg.sync()
                assert not any(pending.values())
                assert lane_runner_model(pg) == expected
            finally:
                for conn in conns:
                    conn.close()
                pg.close()
        finally:
            drop_pg_database(name)

    prop()
