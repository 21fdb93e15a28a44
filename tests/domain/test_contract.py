"""Contract tests: the same behaviour on SQLite files and on a real PostgreSQL server."""

from __future__ import annotations

import threading
from uuid import uuid4

import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent

from evaledger.api.audit import case_history
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import BundleCase, BundleRun, RunBundle
from evaledger.domain.export import export_bundle
from evaledger.domain.ledger import Context
from evaledger.domain.verify import verify
from tests.helpers import bundle, case, event_count

CTX = Context(actor="contract")


def test_example_bundle_imports_once_exports_back_and_shows_every_event(
    store_services: Services,
) -> None:
    s = store_services
    original = RunBundle.model_validate(bundle())
    first = s.ledger.import_bundle(original, CTX)
    assert (first.events, first.cases) == (13, 3)
    assert s.ledger.import_bundle(original, CTX).events == 0
    assert event_count(s) == 13
    assert export_bundle(s.ledger, first.run_id) == original
    history = case_history(s, first.case_ids[0])
    assert [e["type"] for e in history["events"]] == [
        "CaseOpened",
        "TranscriptRecorded",
        "JudgeVerdictRecorded",
        "ClaimsVerified",
    ]
    assert [e["version"] for e in history["events"]] == [1, 2, 3, 4]
    assert all(e["actor"] == "contract" for e in history["events"])
    assert verify(s.ledger).ok


def test_projections_show_the_example_run(store_services: Services) -> None:
    s = store_services
    r = s.ledger.import_bundle(RunBundle.model_validate(bundle()), CTX)
    s.sync(r.position)
    agg = s.reads.summary(r.run_id).aggregate
    assert agg.weighted_metrics_score_pct == pytest.approx(68.0)
    assert (agg.passed_count, agg.failed_count, agg.error_count, agg.total_executions) == (
        1,
        1,
        1,
        3,
    )
    assert agg.metrics_passed is False and agg.cases_passed is False
    rows, total = s.reads.list_runs(
        __import__("evaledger.projections.queries", fromlist=["RunFilter"]).RunFilter()
    )
    assert total == 1 and rows[0].status == "completed" and rows[0].case_count == 3


def test_concurrent_writers_on_one_run_all_land(store_services: Services) -> None:
    # Opening cases appends to the run (CasesAttached): parallel writers conflict and retry.
    s = store_services
    run = BundleRun.model_validate({**bundle()["run"], "status": "running"})
    run_id = s.ledger.create_run(run, CTX).id
    errors: list[BaseException] = []

    def open_cases(worker: int) -> None:
        try:
            other = build_services(Settings(db=s.settings.db))
            try:
                for i in range(5):
                    other.ledger.open_case(
                        run_id, BundleCase.model_validate(case(f"w{worker}-{i}")), CTX
                    )
            finally:
                other.close()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=open_cases, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(s.ledger.get_run(run_id).case_ids) == 15


@pytest.mark.postgres
def test_postgres_events_table_refuses_update_and_delete(pg_url: str) -> None:
    import psycopg

    s = build_services(Settings(db=pg_url))
    try:
        s.ledger.import_bundle(RunBundle.model_validate(bundle()), CTX)
    finally:
        s.close()
    with psycopg.connect(pg_url.replace("postgresql://", "postgresql://", 1)) as conn:
        for sql in (
            "UPDATE evaledger_events SET topic = 'x'",
            "DELETE FROM evaledger_events",
            "TRUNCATE evaledger_events",
        ):
            with pytest.raises(psycopg.errors.RaiseException, match="immutable"):
                conn.execute(sql)
            conn.rollback()


def test_a_large_save_with_a_conflict_stores_nothing(store_services: Services) -> None:
    # The large-save path (COPY on PostgreSQL) must fail whole on a version conflict.
    s = store_services
    first = s.ledger.import_bundle(RunBundle.model_validate(bundle(key="first")), CTX)
    before = s.ledger.position()
    taken = s.ledger.notifications(1, 1)[0]
    rows = [
        StoredEvent(originator_id=uuid4(), originator_version=1, topic="x", state=b"y" * 20_000)
        for _ in range(100)
    ]
    rows.append(
        StoredEvent(
            originator_id=taken.originator_id,
            originator_version=taken.originator_version,
            topic="x",
            state=b"y",
        )
    )
    with pytest.raises(IntegrityError):
        s.ledger.app.recorder.insert_events(rows, lane=0)
    assert s.ledger.position() == before == first.position
    assert len(s.ledger.notifications(1, 100_000)) == first.events


def test_a_large_bundle_imports_atomically(store_services: Services) -> None:
    # ~7 MB of state in one save: on PostgreSQL it goes by binary COPY in one transaction.
    s = store_services
    data = bundle(key="large-run")
    data["cases"] = [case(f"big-{i:04d}") for i in range(600)]
    for c in data["cases"]:
        c["transcript"][1]["content"] = "x" * 12_000
    result = s.ledger.import_bundle(RunBundle.model_validate(data), CTX)
    stored = s.ledger.notifications(1, 100_000)
    assert result.events == len(stored) == 600 * 3 + 3
    assert [n.id for n in stored] == list(range(stored[0].id, stored[0].id + len(stored)))
    assert result.position == stored[-1].id
    assert verify(s.ledger).ok
    s.sync(result.position)
    assert s.reads.summary(result.run_id).aggregate.total_executions == 600


@pytest.mark.postgres
def test_a_postgres_session_idle_in_a_transaction_is_ended_after_the_set_timeout(
    pg_url: str,
) -> None:
    # eventsourcing's default (5 s) ended a CI test's session on a loaded machine: the events
    # pool's sessions carry evaledger's own timeout instead (domain/store/urls.py).
    from evaledger.domain.store.urls import IDLE_IN_TRANSACTION_TIMEOUT

    s = build_services(Settings(db=pg_url))
    try:
        with s.ledger.recorder.datastore.transaction(commit=False) as curs:
            curs.execute("SHOW idle_in_transaction_session_timeout")
            row = curs.fetchone()
    finally:
        s.close()
    assert row is not None
    assert row["idle_in_transaction_session_timeout"] == f"{IDLE_IN_TRANSACTION_TIMEOUT}s"
