"""The verification, store-operation and audit use cases, called directly (issue 31)."""

from __future__ import annotations

import threading
from uuid import UUID

import pytest

from evaledger.api.bootstrap import Services
from evaledger.application import audit, verification
from evaledger.domain.aggregates import case_id_for
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import ConflictError, NotFoundError, ValidationError
from evaledger.domain.events import CaseOpened, JudgeVerdictRecorded, RunCreated
from evaledger.domain.importing import ImportResult
from evaledger.domain.ledger import Context
from evaledger.domain.verify import Checkpoint
from tests.helpers import bundle, case
from tests.integrity_helpers import RawStore

OWNER = Context(actor="owner")


def _import(services: Services, *cases: dict[str, object]) -> ImportResult:
    data = bundle()
    if cases:
        data["cases"] = list(cases)
    return services.ledger.import_bundle(RunBundle.model_validate(data), OWNER)


def test_verify_finds_a_tampered_row(store_services: Services) -> None:
    _import(store_services, case("a", 5), case("b", 3))
    report = verification.verify_log(store_services)
    assert report.ok and report.events > 0 and report.checkpoint is not None
    raw = RawStore(store_services)
    try:
        opened = next(r for r in raw.rows() if r.topic == CaseOpened.topic())
        raw.edit(opened.position, b'"name":"a"', b'"name":"A"')
    finally:
        raw.close()
    broken = verification.verify_log(store_services)
    assert not broken.ok
    assert broken.first_broken_position is not None
    assert broken.first_broken_position <= opened.position
    # A checkpoint the log no longer holds fails too.
    lost = Checkpoint(report.checkpoint.position, "0" * 64, signed=False)
    assert not verification.verify_log(store_services, expect=lost).ok


def test_verify_store_with_views_compares_the_read_models(store_services: Services) -> None:
    _import(store_services, case("a", 5))
    done = verification.verify_store(store_services, views=True)
    assert done.ok and done.report.ok
    assert done.views is not None and done.views.ok and done.views.tables > 0
    plain = verification.verify_store(store_services)
    assert plain.views is None and plain.ok


def test_adopting_a_chained_store_is_refused(services: Services) -> None:
    _import(services)
    with pytest.raises(ValidationError):
        verification.adopt_chain(services, OWNER, "legacy")
    with pytest.raises(ConflictError):
        verification.adopt_chain(services, OWNER, "legacy", unsigned=True)


def test_store_health_lag_and_projections(store_services: Services) -> None:
    imported = _import(store_services, case("a", 5))
    assert verification.log_position(store_services) == imported.position
    reached = verification.catch_up_projections(store_services)
    assert reached == imported.position
    health = verification.store_health(store_services)
    assert health.kind == store_services.location.kind
    assert health.log_position == imported.position and not health.failures
    assert set(health.projection_lag.values()) == {0}
    lag = verification.projection_lag(store_services)
    assert (lag.log_position, lag.projection_lag) == (imported.position, 0)
    name = next(iter(health.projections))
    assert verification.rebuild_projection(store_services, name) == imported.position
    with pytest.raises(KeyError):
        verification.rebuild_projection(store_services, "no-such-projection")


def test_following_stops_when_asked(services: Services) -> None:
    stop = threading.Event()
    stop.set()
    verification.follow_projections(services, stop, poll_interval=0.01)


def test_audit_history_of_a_case(store_services: Services) -> None:
    imported = _import(store_services, case("a", 5), case("b", 3))
    case_a = case_id_for(imported.run_id, "a", 0, "")
    found = audit.case_history(store_services, case_a)
    assert (found.case_id, found.run_id) == (case_a, imported.run_id)
    assert isinstance(found.events[0], CaseOpened)
    assert any(isinstance(e, JudgeVerdictRecorded) for e in found.events)
    assert found.version == found.latest_version == len(found.events)
    assert found.score.passed is True
    # As of version 1 the case is opened, not yet judged.
    first = audit.case_history(store_services, case_a, version=1)
    assert first.version == 1 and first.latest_version == found.latest_version
    assert first.score.passed is not True
    with pytest.raises(ValidationError):
        audit.case_history(store_services, case_a, version=found.latest_version + 1)
    with pytest.raises(NotFoundError):
        audit.case_history(store_services, imported.run_id)
    run = audit.run_history(store_services, imported.run_id)
    assert isinstance(run.events[0], RunCreated)
    with pytest.raises(NotFoundError):
        audit.run_history(store_services, UUID(int=7))


def test_explain_and_project_of_a_case(services: Services) -> None:
    imported = _import(services, case("a", 5))
    case_a = case_id_for(imported.run_id, "a", 0, "")
    explained = audit.explain(services, case_a)
    assert explained.trail["case_id"] == str(case_a)
    assert explained.trail["spec_source"] == "run"
    assert explained.source_scores == ()
    assert audit.case_project(services, case_a) == "default"
