"""Erasure by data subject (issue 34): `erase --subject S` and `POST /subjects/{S}/erasure`.

A bundle case may name its data subject (`subject`, e.g. a pseudonymous end-user id). With
sealing on, that subject's sealed payloads in a run share one key; erasing the subject records
`PayloadErased` on each of its cases, destroys every such key in the caller's project and leaves
`verify` passing and the text gone from the SQLite files and a `pg_dump`. Real stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.migrate import migrate_store
from evaledger.application.verification import check_views
from evaledger.domain.bundle import BundleCase, RunBundle
from evaledger.domain.errors import NotFoundError, PermissionDeniedError, ValidationError
from evaledger.domain.events import CaseOpened, PayloadErased, TokenScope
from evaledger.domain.export import export_case
from evaledger.domain.ledger import Context
from evaledger.domain.payloads import subject_key
from evaledger.domain.verify import verify
from tests.api.test_cli import Cli
from tests.domain.test_erasure import _raw, _store_bytes, _texts
from tests.domain.test_erasure_traces import _holds
from tests.helpers import bundle, case

ALICE = "ZQX-SUBJECT-ALICE-4410"
"""A string in the personal text of data subject u-alice only."""
BOB = "ZQX-SUBJECT-BOB-5520"


def _case(key: str, subject: str | None, marker: str) -> dict[str, Any]:
    c = case(key)
    c["transcript"][0]["content"] = f"my card is {marker}"
    c["verdicts"][0]["raw_output"] = f"the user said {marker}"
    if subject is not None:
        c["subject"] = subject
    return c


def _bundle(run_key: str, project: str = "default") -> RunBundle:
    data = bundle(key=run_key, status="completed")
    data["run"]["project"] = project
    data["cases"] = [
        _case(f"{run_key}-a1", "u-alice", ALICE),
        _case(f"{run_key}-a2", "u-alice", ALICE),
        _case(f"{run_key}-b", "u-bob", BOB),
        _case(f"{run_key}-none", None, "plain"),
    ]
    return RunBundle.model_validate(data)


def _opened(services: Services) -> dict[str, CaseOpened]:
    found: dict[str, CaseOpened] = {}
    for n in services.ledger.notifications(None, 1000):
        if n.topic == CaseOpened.topic():
            event = services.ledger.decode(n)
            assert isinstance(event, CaseOpened)
            found[event.test_case.key] = event
    return found


def _key_of(services: Services, name: str) -> list[tuple[Any, ...]]:
    return _raw(services, "SELECT key FROM evaledger_payload_keys WHERE subject = ?", name)


@pytest.fixture
def sealed(store_url: str) -> Iterator[Services]:
    services = build_services(Settings(db=store_url, seal_payloads=True))
    try:
        for run_key in ("r1", "r2"):
            services.ledger.import_bundle(_bundle(run_key), Context("alice"))
        yield services
    finally:
        services.close()


def test_erasing_a_subject_erases_its_cases_in_every_run_and_nothing_else(
    sealed: Services, tmp_path: Path
) -> None:
    services = sealed
    opened = _opened(services)
    alice = [opened[k] for k in ("r1-a1", "r1-a2", "r2-a1", "r2-a2")]
    assert {o.subject for o in alice} == {"u-alice"}
    assert opened["r1-none"].subject is None
    # One key per (run, subject), shared by the subject's cases of that run.
    keys = {subject_key(o.run_id, "u-alice", o.originator_id) for o in alice}
    assert len(keys) == 2
    for name in keys:
        (rows,) = _raw(services, "SELECT count(*) FROM evaledger_payloads WHERE subject = ?", name)
        assert rows[0] == 4  # two cases x (transcript, verdict)
    assert not _holds(_store_bytes(services, tmp_path), ALICE)
    assert _holds(_store_bytes(services, tmp_path), "u-alice")  # the search sees events
    position = services.ledger.position()

    erasures = services.ledger.erase_subject("u-alice", Context("dpo"), "deletion request 21")

    assert {e.case_id for e in erasures} == {o.originator_id for o in alice}
    assert all(e.written is not None for e in erasures)
    assert services.ledger.position() == position + 4  # one PayloadErased per case
    for o in alice:
        (event,) = [
            e for e in services.ledger.events_of(o.originator_id) if isinstance(e, PayloadErased)
        ]
        assert event.actor == "dpo" and event.reason == "deletion request 21"
        assert event.subject == subject_key(o.run_id, "u-alice", o.originator_id)
        assert {t[:9] for t in _texts(services, o.originator_id)} == {"[erased o"}
    for key in ("r1-b", "r2-b"):
        assert any(BOB in t for t in _texts(services, opened[key].originator_id))
    assert any("plain" in t for t in _texts(services, opened["r1-none"].originator_id))
    for name in keys:
        assert _key_of(services, name) == [(None,)]
    report = verify(services.ledger)
    assert report.ok, report.broken
    views = check_views(services)
    assert views.ok, views
    assert not _holds(_store_bytes(services, tmp_path), ALICE)
    # Again: the vault step is finished, nothing new recorded.
    again = services.ledger.erase_subject("u-alice", Context("dpo"), "again")
    assert all(e.written is None for e in again) and len(again) == 4
    assert services.ledger.position() == position + 4


def test_a_subjects_case_is_not_erased_alone(sealed: Services) -> None:
    """Its key is the subject's: erasing one case would destroy its siblings' text unrecorded."""
    a1 = _opened(sealed)["r1-a1"].originator_id
    position = sealed.ledger.position()
    with pytest.raises(ValidationError, match="erase --subject"):
        sealed.ledger.erase_case(a1, Context("dpo"), "deletion request 22")
    assert sealed.ledger.position() == position
    assert any(ALICE in t for t in _texts(sealed, a1))


def test_unknown_foreign_or_unscoped_subject_erasure_stores_nothing(sealed: Services) -> None:
    position = sealed.ledger.position()
    with pytest.raises(NotFoundError, match="u-nobody"):
        sealed.ledger.erase_subject("u-nobody", Context("dpo"), "deletion request 23")
    # Another project's admin: the subject has no case there (as if absent).
    with pytest.raises(NotFoundError, match="u-alice"):
        sealed.ledger.erase_subject("u-alice", Context("eve", project="other"), "forged")
    with pytest.raises(PermissionDeniedError):
        sealed.ledger.erase_subject(
            "u-alice", Context("eve", project="default", scope=TokenScope.WRITE), "no"
        )
    with pytest.raises(ValidationError, match="reason"):
        sealed.ledger.erase_subject("u-alice", Context("dpo"), " ")
    assert sealed.ledger.position() == position


def test_a_subject_with_a_case_stored_inline_is_refused_whole(store_url: str) -> None:
    """All the subject's cases are checked before anything is written."""
    services = build_services(Settings(db=store_url, seal_payloads=False))
    try:
        services.ledger.import_bundle(_bundle("old"), Context("alice"))
    finally:
        services.close()
    migrate_store(Settings(db=store_url), seal_payloads=True)  # the operator turns it on
    services = build_services(Settings(db=store_url))
    try:
        services.ledger.import_bundle(_bundle("new"), Context("alice"))
        position = services.ledger.position()
        with pytest.raises(ValidationError, match="stored inline before sealing"):
            services.ledger.erase_subject("u-alice", Context("dpo"), "deletion request 24")
        assert services.ledger.position() == position
        new = _opened(services)["new-a1"].originator_id
        assert any(ALICE in t for t in _texts(services, new))
    finally:
        services.close()


def test_the_subject_route_is_scoped_to_the_tokens_project(store_url: str) -> None:
    services = build_services(Settings(db=store_url, seal_payloads=True, auth="tokens"))
    owner = Context("owner")
    try:
        services.ledger.import_bundle(_bundle("r1"), owner)
        services.ledger.import_bundle(_bundle("o1", project="other"), owner)
        tokens = {
            name: services.ledger.issue_token(project, TokenScope(scope), name, owner).token
            for name, project, scope in (
                ("other-admin", "other", "admin"),
                ("own-write", "default", "write"),
                ("own-admin", "default", "admin"),
            )
        }
        opened = _opened(services)
        position = services.ledger.position()
        with TestClient(create_app(services=services)) as client:

            def erase(token: str, subject: str, reason: str) -> Any:
                return client.post(
                    f"/subjects/{subject}/erasure",
                    json={"reason": reason},
                    headers={"Authorization": f"Bearer {tokens[token]}"},
                )

            assert erase("own-write", "u-alice", "not mine").status_code == 403
            reply = erase("own-admin", "u-nobody", "x")
            assert reply.status_code == 404 and "u-nobody" in reply.text
            assert erase("own-admin", "u-alice", "").status_code == 422
            reply = erase("own-admin", "u" * 5000, "x")  # hostile: refused by its length
            assert reply.status_code == 422 and "subject" in reply.text
            assert services.ledger.position() == position  # nothing stored
            reply = erase("other-admin", "u-alice", "deletion request 25")
            assert reply.status_code == 201, reply.text
            cases = reply.json()["cases"]
            assert len(cases) == 2 and all(c["recorded"] for c in cases)
            # Only the other project's cases: this project's u-alice keeps her text.
            assert any(ALICE in t for t in _texts(services, opened["r1-a1"].originator_id))
            assert not any(ALICE in t for t in _texts(services, opened["o1-a1"].originator_id))
            assert erase("other-admin", "u-alice", "again").status_code == 200
        report = verify(services.ledger)
        assert report.ok, report.broken
    finally:
        services.close()


def test_erase_subject_on_the_command_line(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALEDGER_SEAL_PAYLOADS", "1")
    services = build_services(Settings.from_env(db=sqlite_url))
    try:
        services.ledger.import_bundle(_bundle("r1"), Context("alice"))
        a1 = _opened(services)["r1-a1"].originator_id
        position = services.ledger.position()
    finally:
        services.close()
    cli = Cli(capsys, sqlite_url)
    code, _, err = cli("erase", "--subject", "u-nobody", "--reason", "x")
    assert code == 2 and "u-nobody" in err
    code, _, err = cli("erase", "--subject", "u-alice", "--case", str(a1), "--reason", "x")
    assert code == 2 and "not allowed with" in err
    code, _, err = cli("erase", "--subject", "u-alice")
    assert code == 2 and "--reason" in err
    services = build_services(Settings(db=sqlite_url))
    try:
        assert services.ledger.position() == position  # nothing stored
    finally:
        services.close()
    done = cli.json("erase", "--subject", "u-alice", "--reason", "deletion request 26")
    assert done["subject"] == "u-alice" and len(done["cases"]) == 2
    assert all(c["recorded"] and c["erased_by"] == "cli" for c in done["cases"])
    code, out, _ = cli("transcript", str(a1))
    assert code == 0 and "by cli (deletion request 26)" in out and ALICE not in out
    code, out, err = cli("verify", "--full")
    assert code == 0, out + err


def test_a_case_without_subject_keeps_its_bytes() -> None:
    """Old bundles (no `subject`) dump, digest and store exactly as before."""
    plain = BundleCase.model_validate(case("x"))
    assert "subject" not in plain.model_dump()
    assert b"subject" not in orjson.dumps(plain.model_dump(mode="json"))
    with pytest.raises(ValueError, match="subject"):
        BundleCase.model_validate({**case("x"), "subject": ""})
    with pytest.raises(ValueError, match="subject"):
        BundleCase.model_validate({**case("x"), "subject": "u" * 201})


def test_the_subject_is_exported_and_a_reimport_is_a_no_op(sealed: Services) -> None:
    opened = _opened(sealed)
    exported = export_case(sealed.ledger, opened["r1-a1"].originator_id)
    assert exported.subject == "u-alice"
    assert export_case(sealed.ledger, opened["r1-none"].originator_id).subject is None
    position = sealed.ledger.position()
    sealed.ledger.import_bundle(_bundle("r1"), Context("alice"))
    assert sealed.ledger.position() == position
