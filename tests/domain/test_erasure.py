"""Erasure that keeps the log verifiable (issue 34): sealed payloads, `erase`, and what stays.

Real stores (SQLite files, PostgreSQL databases): the personal text of a sealed case is never
in a database file or a `pg_dump`; after `erase` its ciphertexts and key are gone too, while
`verify` (full and views) still passes and the scores derived before stay.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import zipfile
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import orjson
import psycopg
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.migrate import migrate_store
from evaledger.application.traces import complete_traces, receive_traces
from evaledger.application.verification import check_views
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import (
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from evaledger.domain.events import (
    CaseOpened,
    JudgeIdentity,
    JudgeVerdictRecorded,
    PayloadErased,
    TokenScope,
    TranscriptRecorded,
)
from evaledger.domain.ledger import Context
from evaledger.domain.payloads import SEALED_TEXT
from evaledger.domain.verify import verify
from evaledger.importers.otlp import PROTOBUF
from tests.api.test_cli import Cli
from tests.api.test_operation import TwoRoles
from tests.api.test_receipts_cli import _auditor
from tests.helpers import bundle, case
from tests.otlp_helpers import chat_trace, export_body, recorder

MARKER = "ZQX-ERASE-MARKER-7731"
"""A string that appears nowhere but in the personal text of the erased case."""


def _bundle(run_key: str) -> RunBundle:
    secret = case("secret")
    secret["transcript"][0]["content"] = f"my card is {MARKER}"
    secret["verdicts"][0]["prompt"] = f"judge this: {MARKER}"
    secret["verdicts"][0]["raw_output"] = f"the user said {MARKER}"
    data = bundle(key=run_key, status="completed")
    data["cases"] = [secret, case("other")]
    return RunBundle.model_validate(data)


def _case_ids(services: Services) -> dict[str, UUID]:
    ids: dict[str, UUID] = {}
    for n in services.ledger.notifications(None, 1000):
        if n.topic == CaseOpened.topic():
            event = services.ledger.decode(n)
            assert isinstance(event, CaseOpened)
            ids[event.test_case.key] = event.originator_id
    return ids


@pytest.fixture
def sealed(store_url: str) -> Iterator[Services]:
    services = build_services(Settings(db=store_url, seal_payloads=True))
    try:
        services.ledger.import_bundle(_bundle("r1"), Context("alice"))
        yield services
    finally:
        services.close()


def _store_bytes(services: Services, tmp: Path) -> bytes:
    """Every byte the store keeps: SQLite's files (and journals), or a `pg_dump`."""
    if services.location.kind == "sqlite":
        folder = Path(services.location.events_env["SQLITE_DBNAME"]).parent
        return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())
    dump = tmp / "dump.sql"
    subprocess.run(
        ["pg_dump", "--no-owner", "-f", str(dump), services.settings.db], check=True, timeout=120
    )
    return dump.read_bytes()


def _raw(services: Services, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    if services.location.kind == "sqlite":
        path = services.location.events_env["SQLITE_DBNAME"]
        # closing(): a sqlite3 connection's own `with` commits but does not close (Python 3.13
        # warns of the unclosed connection, which the suite turns into a failure).
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            return list(conn.execute(sql, params).fetchall())
    with psycopg.connect(services.settings.db, autocommit=True) as conn:
        cur = conn.execute(sql.replace("?", "%s"), params)
        return list(cur.fetchall()) if cur.description else []


def _ciphertexts(services: Services, subject: UUID) -> list[bytes]:
    rows = _raw(
        services, "SELECT ciphertext FROM evaledger_payloads WHERE subject = ?", str(subject)
    )
    return [bytes(r[0]) for r in rows]


def _pg_hex(data: bytes) -> bytes:
    return data.hex().encode()


def _texts(services: Services, case_id: UUID) -> list[str]:
    texts: list[str] = []
    for event in services.ledger.events_of(case_id):
        if isinstance(event, TranscriptRecorded):
            texts.extend(t.content or "" for t in event.turns)
        elif isinstance(event, JudgeVerdictRecorded):
            texts.extend([event.prompt or "", event.raw_output or ""])
    return texts


def test_erasure_keeps_the_log_verifiable_and_the_bytes_gone(
    sealed: Services, tmp_path: Path
) -> None:
    services = sealed
    ids = _case_ids(services)
    secret, other = ids["secret"], ids["other"]
    # Sealed: the text reads back, yet no store file (or dump) ever held it.
    assert any(MARKER in t for t in _texts(services, secret))
    blob = _store_bytes(services, tmp_path)
    assert MARKER.encode() not in blob
    assert _pg_hex(MARKER.encode()) not in blob  # pg_dump writes bytea (the events) as hex
    ciphertexts = _ciphertexts(services, secret)
    assert len(ciphertexts) == 2  # the transcript and the verdict
    pg = services.location.kind == "postgresql"
    for c in ciphertexts:
        assert (_pg_hex(c) if pg else c) in blob
    services.sync()
    before = services.reads.case_score(secret)[1]
    position = services.ledger.position()

    erasure = services.ledger.erase_case(secret, Context("dpo"), "deletion request 12")

    assert erasure.written is not None and erasure.written.position == position + 1
    assert len(erasure.refs) == 2
    wording = f"[erased on {erasure.erased_at[:10]} by dpo (deletion request 12)]"
    assert set(_texts(services, secret)) == {wording}
    assert "hi" in _texts(services, other)  # only the erased case
    report = verify(services.ledger)
    assert report.ok, report.broken
    views = check_views(services)
    assert views.ok, views
    services.sync()
    assert services.reads.case_score(secret)[1] == before  # scores derived before remain
    blob = _store_bytes(services, tmp_path)
    assert MARKER.encode() not in blob
    assert _pg_hex(MARKER.encode()) not in blob  # pg_dump writes bytea (the events) as hex
    for c in ciphertexts:
        assert (_pg_hex(c) if pg else c) not in blob
    assert _raw(services, "SELECT key FROM evaledger_payload_keys WHERE subject = ?", str(secret))[
        0
    ] == (None,)
    # The erasure is an event with its author; erasing again records nothing new.
    (event,) = [e for e in services.ledger.events_of(secret) if isinstance(e, PayloadErased)]
    assert (event.actor, event.reason, sorted(event.refs)) == (
        "dpo",
        "deletion request 12",
        sorted(erasure.refs),
    )
    again = services.ledger.erase_case(secret, Context("dpo"), "again")
    assert again.written is None and services.ledger.position() == position + 1


def test_a_tampered_or_missing_ciphertext_is_named_by_verify(sealed: Services) -> None:
    services = sealed
    ids = _case_ids(services)
    (ref, ciphertext), *_ = _raw(
        services,
        "SELECT ref, ciphertext FROM evaledger_payloads WHERE subject = ?",
        str(ids["secret"]),
    )
    flipped = bytes([ciphertext[0] ^ 1]) + bytes(ciphertext[1:])
    _raw(services, "UPDATE evaledger_payloads SET ciphertext = ? WHERE ref = ?", flipped, ref)
    report = verify(services.ledger)
    assert not report.ok
    assert any(f"payload {ref[:12]}: the ciphertext does not open" in b for b in report.broken)
    # The event reads the sealed placeholder, never someone else's text.
    assert SEALED_TEXT in _texts(services, ids["secret"])
    _raw(services, "DELETE FROM evaledger_payloads WHERE ref = ?", ref)
    report = verify(services.ledger)
    assert any(
        b.startswith(f"payload {ref[:12]}") and "missing, and no erasure names it" in b
        for b in report.broken
    ), report.broken
    # Another case's ciphertext moved under this reference does not open either (bound to it).
    (other_ct,) = _raw(
        services,
        "SELECT ciphertext, nonce FROM evaledger_payloads WHERE subject = ? LIMIT 1",
        str(ids["other"]),
    )
    _raw(
        services,
        "INSERT INTO evaledger_payloads (ref, subject, nonce, ciphertext) VALUES (?, ?, ?, ?)",
        ref,
        str(ids["secret"]),
        other_ct[1],
        other_ct[0],
    )
    assert any("does not open" in b for b in verify(services.ledger).broken)


def test_only_an_admin_of_the_cases_project_erases(store_url: str) -> None:
    services = build_services(Settings(db=store_url, seal_payloads=True, auth="tokens"))
    owner = Context("owner")
    try:
        services.ledger.import_bundle(_bundle("r1"), owner)
        secret = _case_ids(services)["secret"]
        tokens = {
            name: services.ledger.issue_token(project, TokenScope(scope), name, owner).token
            for name, project, scope in (
                ("other-admin", "other", "admin"),
                ("own-write", "default", "write"),
                ("own-admin", "default", "admin"),
            )
        }
        position = services.ledger.position()
        with TestClient(create_app(services=services)) as client:

            def erase(token: str, body: dict[str, Any]) -> Any:
                return client.post(
                    f"/cases/{secret}/erasure",
                    json=body,
                    headers={"Authorization": f"Bearer {tokens[token]}"},
                )

            reply = erase("other-admin", {"reason": "forged"})
            assert reply.status_code == 404, reply.text  # another project's case does not exist
            assert erase("own-write", {"reason": "not mine"}).status_code == 403
            reply = erase("own-admin", {"reason": ""})
            assert reply.status_code == 422 and "reason" in reply.text
            assert services.ledger.position() == position  # nothing stored
            assert any(MARKER in t for t in _texts(services, secret))
            reply = erase("own-admin", {"reason": "deletion request 12"})
            assert reply.status_code == 201, reply.text
            assert reply.json()["recorded"] is True and len(reply.json()["refs"]) == 2
            assert erase("own-admin", {"reason": "again"}).status_code == 200
        assert not any(MARKER in t for t in _texts(services, secret))
    finally:
        services.close()


def test_the_ledger_refuses_foreign_and_unscoped_erasure(sealed: Services) -> None:
    secret = _case_ids(sealed)["secret"]
    position = sealed.ledger.position()
    with pytest.raises(NotFoundError):
        sealed.ledger.erase_case(secret, Context("eve", project="other"), "forged")
    with pytest.raises(PermissionDeniedError):
        sealed.ledger.erase_case(
            secret, Context("eve", project="default", scope=TokenScope.WRITE), "no"
        )
    with pytest.raises(ValidationError, match="reason"):
        sealed.ledger.erase_case(secret, Context("dpo"), " ")
    assert sealed.ledger.position() == position


def test_a_case_stored_inline_before_sealing_is_refused(store_url: str) -> None:
    """Migration: old events keep their bytes (the chain covers them), so they stay inline."""
    services = build_services(Settings(db=store_url, seal_payloads=False))
    try:
        services.ledger.import_bundle(_bundle("old"), Context("alice"))
    finally:
        services.close()
    migrate_store(Settings(db=store_url), seal_payloads=True)  # the operator turns it on
    services = build_services(Settings(db=store_url))
    try:
        old = _case_ids(services)["secret"]
        services.ledger.import_bundle(_bundle("new"), Context("alice"))
        position = services.ledger.position()
        with pytest.raises(ValidationError, match="stored inline before sealing"):
            services.ledger.erase_case(old, Context("dpo"), "deletion request 13")
        assert services.ledger.position() == position
        new = next(i for k, i in _case_ids(services).items() if k == "secret" and i != old)
        assert new != old
        services.ledger.erase_case(new, Context("dpo"), "deletion request 13")
        report = verify(services.ledger)
        assert report.ok, report.broken
        assert any(MARKER in t for t in _texts(services, old))
    finally:
        services.close()


def test_erase_on_the_command_line(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALEDGER_SEAL_PAYLOADS", "1")
    services = build_services(Settings.from_env(db=sqlite_url))
    try:
        services.ledger.import_bundle(_bundle("r1"), Context("alice"))
        secret = _case_ids(services)["secret"]
        position = services.ledger.position()
    finally:
        services.close()
    cli = Cli(capsys, sqlite_url)
    code, _, err = cli("erase", "--case", "00000000-0000-4000-8000-000000000001", "--reason", "x")
    assert code == 2 and "no case" in err
    code, _, err = cli("erase", "--case", "not-an-id", "--reason", "x")
    assert code == 2 and "case" in err
    code, _, err = cli("erase", "--case", str(secret))
    assert code == 2 and "--reason" in err
    services = build_services(Settings(db=sqlite_url))
    try:
        assert services.ledger.position() == position  # nothing stored
    finally:
        services.close()
    done = cli.json("erase", "--case", str(secret), "--reason", "deletion request 14")
    assert done["recorded"] and done["erased_by"] == "cli" and len(done["refs"]) == 2
    code, out, _ = cli("transcript", str(secret))
    assert code == 0 and "erased on" in out and "by cli (deletion request 14)" in out
    assert MARKER not in out
    code, out, err = cli("verify", "--full")
    assert code == 0, out + err
    code, out, err = cli("verify", "--views")
    assert code == 0, out + err


@pytest.mark.postgres
def test_the_app_role_seals_and_erases_but_cannot_touch_the_events(
    two_roles: TwoRoles, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault is granted to the app role (erasure deletes); the events stay append-only."""
    monkeypatch.setenv("EVALEDGER_SEAL_PAYLOADS", "1")
    cli = Cli(capsys, two_roles.app_url)
    code, _, err = cli("migrate", "--app-role", two_roles.app_role, db=two_roles.migrator_url)
    assert code == 0, err
    services = build_services(Settings.from_env(db=two_roles.app_url))
    try:
        services.ledger.import_bundle(_bundle("r1"), Context("alice"))
        secret = _case_ids(services)["secret"]
    finally:
        services.close()
    done = cli.json("erase", "--case", str(secret), "--reason", "deletion request 15")
    assert done["recorded"] is True
    code, out, err = cli("verify", "--full")
    assert code == 0, out + err
    with psycopg.connect(two_roles.app_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            conn.execute("DELETE FROM evaledger_events")
        (left,) = conn.execute(
            "SELECT count(*) FROM evaledger_payloads WHERE subject = %s", (str(secret),)
        ).fetchone() or (None,)
    assert left == 0


def test_an_erased_case_takes_no_new_personal_text(sealed: Services) -> None:
    secret = _case_ids(sealed)["secret"]
    sealed.ledger.erase_case(secret, Context("dpo"), "deletion request 16")
    position = sealed.ledger.position()
    with pytest.raises(ConflictError, match="was erased"):
        sealed.ledger.record_verdict(
            secret,
            Context("judge"),
            judgement=True,
            verdict_id=uuid4(),
            judge=JudgeIdentity(provider="openai", model="gpt-4.1"),
            prompt=f"judge again: {MARKER}",
            raw_output="{}",
        )
    assert sealed.ledger.position() == position


def test_receipts_and_evidence_of_a_sealed_run_survive_its_erasure(
    capsys: pytest.CaptureFixture[str],
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A receipt made before an erasure still verifies offline with the bundle of its day."""
    monkeypatch.setenv("EVALEDGER_SEAL_PAYLOADS", "1")
    monkeypatch.setenv("EVALEDGER_SIGNING_KEY_FILE", str(tmp_path / "signing.key"))
    monkeypatch.delenv("EVALEDGER_SIGNING_KEY", raising=False)
    monkeypatch.delenv("EVALEDGER_HEADS_DIR", raising=False)
    cli = Cli(capsys, store_url)
    code, out, err = cli("key", "init")
    assert code == 0, err
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    (auditor / "public.key").write_text(out)
    source = tmp_path / "r1.json"
    source.write_bytes(orjson.dumps(_bundle("r1").model_dump(mode="json")))
    cli.json("import", str(source))
    assert cli("receipt", "r1", "-o", str(auditor / "receipt.json"))[0] == 0
    assert cli("export", "r1", "-o", str(auditor / "run.json"))[0] == 0
    assert MARKER in (auditor / "run.json").read_text()  # the run's text, as of that day
    secret = next(
        c["case_id"] for c in cli.json("show", "r1")["cases"] if c["test_case_key"] == "secret"
    )
    assert cli("erase", "--case", secret, "--reason", "deletion request 17")[0] == 0
    verify_args = ("receipt.json", "--bundle", "run.json", "--public-key", "public.key")
    done = _auditor(auditor, "receipt", "verify", *verify_args)
    assert done.returncode == 0, done.stdout + done.stderr
    pack = tmp_path / "evidence.zip"
    code, _, err = cli("evidence", "r1", "-o", str(pack))
    assert code == 0, err
    later = tmp_path / "later"
    with zipfile.ZipFile(pack) as z:
        z.extractall(later)
    calls = [orjson.loads(x) for x in (later / "judge-calls.jsonl").read_text().splitlines()]
    by_case = {c["case_id"]: c for c in calls}
    assert "deletion request 17" in by_case[secret]["reply"]
    assert all(c["prompt"] and "[sealed]" not in c["prompt"] for c in calls)
    assert not any(MARKER in (later / name).read_text() for name in os.listdir(later))
    (later / "public.key").write_text((auditor / "public.key").read_text())
    done = _auditor(later, "receipt", "verify", *verify_args)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_case_from_a_trace_received_before_sealing_is_refused(store_url: str) -> None:
    """Spans received inline (sealing off) keep their text: the case recorded later is refused."""
    services = build_services(Settings(db=store_url, seal_payloads=False))
    try:
        tracer, memory = recorder()
        chat_trace(tracer)
        body = export_body(memory.get_finished_spans())
        receive_traces(services, body, PROTOBUF, None, Context("otlp"), max_bytes=4 << 20)
    finally:
        services.close()
    migrate_store(Settings(db=store_url), seal_payloads=True)  # the operator turns it on
    services = build_services(Settings(db=store_url))
    try:
        later = datetime.now(UTC) + timedelta(seconds=60)
        completed = complete_traces(services, Context("otlp"), quiet_s=30, now=later)
        ((case_id,),) = completed.recorded.values()
        position = services.ledger.position()
        with pytest.raises(ValidationError, match="of OTLP trace"):
            services.ledger.erase_case(case_id, Context("dpo"), "deletion request 18")
        assert services.ledger.position() == position
    finally:
        services.close()


def test_a_streamed_import_seals_and_erases_like_a_whole_one(store_url: str) -> None:
    """The import spool carries each sealed payload to the write (issue 32's streamed path)."""
    services = build_services(Settings(db=store_url, seal_payloads=True))
    try:
        source = _bundle("streamed")
        more = [c.model_copy(update={"repetition": r}) for c in source.cases for r in (1, 2)]
        cases = [*source.cases, *more]
        services.ledger.import_stream(source.run, lambda: iter(cases), Context("a"), chunk_size=2)
        secret = _case_ids(services)["secret"]
        assert any(MARKER in t for t in _texts(services, secret))
        report = verify(services.ledger)
        assert report.ok, report.broken
        services.ledger.erase_case(secret, Context("dpo"), "deletion request 19")
        report = verify(services.ledger)
        assert report.ok, report.broken
        assert not any(MARKER in t for t in _texts(services, secret))
    finally:
        services.close()
