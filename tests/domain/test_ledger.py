"""The ledger, told as a story: a run is created, cases recorded, corrected, completed, audited."""

from __future__ import annotations

import itertools
from typing import Any
from uuid import UUID

import pytest

from evaledger.api.audit import case_history
from evaledger.api.bootstrap import Services
from evaledger.domain.aggregates import case_id_for, run_id_for
from evaledger.domain.bundle import BundleCase, BundleRun, RunBundle
from evaledger.domain.errors import (
    ClosedRunError,
    ConflictError,
    IdempotencyConflictError,
    NotFoundError,
)
from evaledger.domain.events import GENESIS_HASH, CheckStatus, JudgeVerdictRecorded
from evaledger.domain.export import export_bundle
from evaledger.domain.ledger import Context
from evaledger.domain.verify import verify
from tests.helpers import bundle, case, event_count

ACTOR = Context(actor="alice@example.com")


def _run(**overrides: object) -> BundleRun:
    data = bundle(**overrides)
    return BundleRun.model_validate({**data["run"], "status": "running"})


def test_story_of_a_run(services: Services) -> None:
    ledger = services.ledger
    # Given a run created by Alice with the default config
    created = ledger.create_run(_run(), ACTOR)
    run_id = created.id
    assert run_id == run_id_for("default", "northwind-support-v12-nightly-2026-11-20")
    assert created.events == 1 and created.position == 1

    # When two cases are opened in one batch, and a third on its own
    batch = ledger.ingest_cases(
        run_id,
        [BundleCase.model_validate(case("a", 5)), BundleCase.model_validate(case("b", 3))],
        ACTOR,
    )
    single = ledger.open_case(run_id, BundleCase.model_validate(case("c", 4)), ACTOR)
    case_a = case_id_for(run_id, "a", 0, "")
    assert batch.ids == (case_a, case_id_for(run_id, "b", 0, ""))
    assert single.position > batch.position

    # Then the projections show their scores under the run's own spec
    services.sync(single.position)
    by_key = {s.test_case_key: s for s in services.reads.case_scores(run_id)}
    assert (by_key["a"].overall_score, by_key["a"].passed) == (100.0, True)
    assert (by_key["b"].overall_score, by_key["b"].passed) == (60.0, False)
    assert (by_key["c"].overall_score, by_key["c"].passed) == (80.0, True)

    # When a reviewer overrides b's verdict, the original stays in the history
    verdict_id = next(
        e for e in ledger.events_of(by_key["b"].case_id) if isinstance(e, JudgeVerdictRecorded)
    ).verdict_id
    ledger.override_verdict(
        by_key["b"].case_id,
        Context("bob"),
        verdict_id=verdict_id,
        passed=True,
        reason="judge misread turn 3",
    )
    history = case_history(services, by_key["b"].case_id)
    assert [e["type"] for e in history["events"]] == [
        "CaseOpened",
        "TranscriptRecorded",
        "JudgeVerdictRecorded",
        "VerdictOverridden",
    ]
    assert history["events"][-1]["actor"] == "bob"
    assert history["state"]["score"]["passed"] is True
    as_of_3 = case_history(services, by_key["b"].case_id, version=3)
    assert as_of_3["state"]["score"]["passed"] is False

    # When the run completes, it is sealed and takes no more cases
    done = ledger.complete_run(run_id, ACTOR)
    assert done.events == 1
    with pytest.raises(ClosedRunError):
        ledger.open_case(run_id, BundleCase.model_validate(case("d")), ACTOR)
    # ...but overrides still land
    ledger.override_verdict(
        by_key["c"].case_id,
        Context("carol"),
        verdict_id=next(
            e for e in ledger.events_of(by_key["c"].case_id) if isinstance(e, JudgeVerdictRecorded)
        ).verdict_id,
        passed=False,
        reason="policy breach",
    )
    services.sync()
    aggregate = services.reads.summary(run_id).aggregate
    assert (aggregate.passed_count, aggregate.failed_count, aggregate.total_executions) == (2, 1, 3)

    # And the whole log verifies
    report = verify(ledger)
    assert report.ok, report.broken
    assert report.runs_sealed == 1


def test_hash_chain_links_each_event_to_its_predecessor(services: Services) -> None:
    r = services.ledger.import_bundle(RunBundle.model_validate(bundle()), ACTOR)
    events = services.ledger.events_of(r.case_ids[0])
    assert events[0].prev_hash == GENESIS_HASH
    for before, after in itertools.pairwise(events):
        assert after.prev_hash == before.hash()


def test_same_bundle_twice_writes_nothing_and_answers_the_same(services: Services) -> None:
    b = RunBundle.model_validate(bundle())
    first = services.ledger.import_bundle(b, ACTOR)
    before = event_count(services)
    second = services.ledger.import_bundle(b, ACTOR)
    assert first.events == 13
    assert second.events == 0
    assert second.run_id == first.run_id and second.case_ids == first.case_ids
    assert event_count(services) == before


def test_a_run_key_cannot_be_reused_with_another_body(services: Services) -> None:
    services.ledger.create_run(_run(), ACTOR)
    with pytest.raises(ConflictError, match="different body"):
        services.ledger.create_run(_run(name="another name"), ACTOR)


def test_resending_a_case_is_idempotent_and_a_changed_case_conflicts(services: Services) -> None:
    run_id = services.ledger.create_run(_run(), ACTOR).id
    first = services.ledger.open_case(run_id, BundleCase.model_validate(case("a")), ACTOR)
    again = services.ledger.open_case(run_id, BundleCase.model_validate(case("a")), ACTOR)
    assert again.events == 0 and again.id == first.id
    with pytest.raises(ConflictError, match="different content"):
        services.ledger.open_case(run_id, BundleCase.model_validate(case("a", score=2)), ACTOR)


def test_idempotency_key_replays_and_conflicts(services: Services) -> None:
    run_id = services.ledger.create_run(_run(), ACTOR).id
    case_id = services.ledger.open_case(
        run_id, BundleCase.model_validate({**case("a"), "verdicts": []}), ACTOR
    ).id
    keyed = Context("alice", idempotency_key="k-1")
    body: dict[str, Any] = {"check": "audit_log", "status": CheckStatus.PASSED, "evidence": None}

    first = services.ledger.record_check(case_id, keyed, **body)
    again = services.ledger.record_check(case_id, keyed, **body)
    assert (first.events, again.events) == (1, 0)
    with pytest.raises(IdempotencyConflictError):
        services.ledger.record_check(case_id, keyed, **{**body, "status": CheckStatus.FAILED})


def test_unknown_run_and_case_are_not_found(services: Services) -> None:
    with pytest.raises(NotFoundError):
        services.ledger.complete_run(UUID(int=1), ACTOR)
    with pytest.raises(NotFoundError):
        services.ledger.get_case(UUID(int=2))


def test_export_of_an_import_is_equivalent_to_the_input(services: Services) -> None:
    original = RunBundle.model_validate(bundle())
    r = services.ledger.import_bundle(original, ACTOR)
    assert export_bundle(services.ledger, r.run_id) == original


def test_tampering_is_named_by_verify(services: Services) -> None:
    import sqlite3
    from contextlib import closing

    services.ledger.import_bundle(RunBundle.model_validate(bundle()), ACTOR)
    path = services.location.events_env["SQLITE_DBNAME"]
    services.close()
    with closing(sqlite3.connect(path)) as db, db:
        row = db.execute(
            "SELECT rowid, state FROM stored_events WHERE originator_version = 2 LIMIT 1"
        ).fetchone()
        db.execute(
            "UPDATE stored_events SET state = ? WHERE rowid = ?",
            (row[1].replace(b"hello", b"HELLO").replace(b"7.5", b"9.5"), row[0]),
        )
    from evaledger.api.bootstrap import Settings, build_services

    reopened = build_services(Settings(db=services.settings.db))
    try:
        report = verify(reopened.ledger)
    finally:
        reopened.close()
    assert not report.ok
    assert report.first_broken_position == 1
    assert report.broken[0].startswith("positions 1–13 (one commit): the chain link does not")
    assert "version 3" in report.broken[1]
