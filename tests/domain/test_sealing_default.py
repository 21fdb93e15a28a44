"""Sealing by default (issue 34): each store records at creation whether it seals.

A new store seals unless `EVALEDGER_SEAL_PAYLOADS=0` at its creation; a store from before the
record keeps its payloads inline (and its old events' bytes) until the operator turns sealing on
(`evaledger migrate --seal-payloads`, or `=1` on opening it); the record, once made, wins over
any later process's environment. Real stores on SQLite and PostgreSQL, the real CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.ledger import Context
from evaledger.domain.payloads import SEALED_TEXT
from evaledger.domain.store.payloads import SETTINGS_TABLE
from evaledger.domain.verify import verify
from tests.api.test_cli import Cli
from tests.domain.test_erasure import (
    MARKER,
    _bundle,
    _case_ids,
    _pg_hex,
    _raw,
    _store_bytes,
    _texts,
)


def _setting(services: Services) -> list[Any]:
    rows = _raw(services, f"SELECT value FROM {SETTINGS_TABLE} WHERE name = 'seal_payloads'")
    return [r[0] for r in rows]


def _log(services: Services) -> list[tuple[int, str, int, str, bytes]]:
    return [(p, o, v, t, bytes(s)) for p, o, v, t, s in services.ledger.log_rows(1, 10_000)]


def _inline_markers(services: Services) -> int:
    """How many stored events hold the marker in their own bytes (inline personal text)."""
    return sum(MARKER.encode() in state for *_, state in _log(services))


def test_a_store_created_with_defaults_seals_and_erases(
    store_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.delenv("EVALEDGER_SEAL_PAYLOADS", raising=False)
    services = build_services(Settings.from_env(db=store_url))
    try:
        assert services.ledger.seal_payloads
        services.ledger.import_bundle(_bundle("r1"), Context("alice"))
        secret = _case_ids(services)["secret"]
        assert _setting(services) == ["1"]
        assert _inline_markers(services) == 0
        assert SEALED_TEXT.encode() in b"".join(s for *_, s in _log(services))
        stored = _store_bytes(services, tmp_path)
        assert MARKER.encode() not in stored and _pg_hex(MARKER.encode()) not in stored
        assert sum(MARKER in t for t in _texts(services, secret)) == 3  # read through the vault
    finally:
        services.close()
    cli = Cli(capsys, store_url)
    # The export holds the plaintext; imported into a fresh (sealing) store it exports the same.
    exported, again = tmp_path / "run.json", tmp_path / "again.json"
    code, _, err = cli("export", "r1", "-o", str(exported))
    assert code == 0, err
    assert exported.read_bytes().count(MARKER.encode()) == 3
    fresh = f"sqlite:///{tmp_path}/fresh/"
    assert cli("import", str(exported), db=fresh)[0] == 0
    code, _, err = cli("export", "r1", "-o", str(again), db=fresh)
    assert code == 0, err
    assert again.read_bytes() == exported.read_bytes()
    done = cli.json("erase", "--case", str(secret), "--reason", "deletion request 40")
    assert done["recorded"] and len(done["refs"]) == 2
    code, out, err = cli("verify", "--full")
    assert code == 0, out + err
    code, out, _ = cli("transcript", str(secret))
    assert code == 0 and "erased on" in out and MARKER not in out


def test_the_record_wins_over_a_later_process_setting(store_url: str) -> None:
    services = build_services(Settings(db=store_url))
    services.close()
    services = build_services(Settings(db=store_url, seal_payloads=False))
    try:
        assert services.ledger.seal_payloads  # created sealing: `=0` later changes nothing
        services.ledger.import_bundle(_bundle("r1"), Context("alice"))
        assert _inline_markers(services) == 0 and _setting(services) == ["1"]
    finally:
        services.close()


def test_a_store_created_with_sealing_off_refuses_erasure(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALEDGER_SEAL_PAYLOADS", "0")
    services = build_services(Settings.from_env(db=store_url))
    try:
        assert not services.ledger.seal_payloads
        services.ledger.import_bundle(_bundle("r1"), Context("alice"))
        secret = _case_ids(services)["secret"]
        assert _setting(services) == ["0"]
        assert _inline_markers(services) == 2  # the transcript and the verdict, inline
    finally:
        services.close()
    monkeypatch.delenv("EVALEDGER_SEAL_PAYLOADS")
    services = build_services(Settings.from_env(db=store_url))
    try:
        assert not services.ledger.seal_payloads  # the default later does not flip it
        position = services.ledger.position()
    finally:
        services.close()
    cli = Cli(capsys, store_url)
    code, _, err = cli("erase", "--case", str(secret), "--reason", "deletion request 41")
    assert code == 2 and "does not seal payloads" in err and "EVALEDGER_SEAL_PAYLOADS=0" in err
    code, _, err = cli("erase", "--subject", "someone", "--reason", "deletion request 41")
    assert code == 2 and "does not seal payloads" in err
    services = build_services(Settings(db=store_url))
    try:
        assert services.ledger.position() == position  # nothing stored
    finally:
        services.close()
    # The operator turns sealing on: what is recorded from then on is sealed and erasable.
    out = cli.json("migrate", "--seal-payloads")
    assert out["seals_payloads"] is True
    services = build_services(Settings(db=store_url, seal_payloads=False))
    try:
        assert services.ledger.seal_payloads and _setting(services) == ["1"]
        services.ledger.import_bundle(_bundle("r2"), Context("alice"))
        assert _inline_markers(services) == 2  # the old run's two events only
        assert verify(services.ledger).ok
    finally:
        services.close()
    code, _, err = cli("erase", "--case", str(secret), "--reason", "deletion request 41")
    assert code == 2 and "stored inline before sealing" in err


def test_a_store_from_before_the_record_keeps_inline_payloads_and_its_hashes(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store made before this change has no settings table: it is not sealed behind its back."""
    services = build_services(Settings(db=store_url, seal_payloads=False))
    try:
        services.ledger.import_bundle(_bundle("old"), Context("alice"))
        _raw(services, f"DROP TABLE {SETTINGS_TABLE}")  # as the store was before this change
        before = _log(services)
        blocks = services.ledger.chain_blocks(0, 10_000)
    finally:
        services.close()
    services = build_services(Settings(db=store_url))  # defaults: sealing would be on for a new one
    try:
        assert not services.ledger.seal_payloads
        assert _setting(services) == []  # nothing recorded: turning sealing on stays possible
        services.ledger.import_bundle(_bundle("new"), Context("alice"))
        after = _log(services)
        assert after[: len(before)] == before  # old events' bytes (hence hashes) unchanged
        assert services.ledger.chain_blocks(0, 10_000)[: len(blocks)] == blocks
        assert _inline_markers(services) == 4  # the new run's text inline too
        report = verify(services.ledger)
        assert report.ok, report.broken
    finally:
        services.close()
    cli = Cli(capsys, store_url)
    secret = next(iter(_case_ids_of(store_url)))
    code, _, err = cli("erase", "--case", str(secret), "--reason", "deletion request 42")
    assert code == 2 and "does not seal payloads" in err
    # `=1` on opening it is the operator turning sealing on (as the opt-in did): recorded.
    services = build_services(Settings(db=store_url, seal_payloads=True))
    try:
        assert services.ledger.seal_payloads and _setting(services) == ["1"]
        assert _log(services)[: len(before)] == before
    finally:
        services.close()


def test_a_store_that_sealed_under_the_opt_in_keeps_sealing(store_url: str) -> None:
    """A store from before the record whose vault holds keys was sealing: it still does."""
    services = build_services(Settings(db=store_url, seal_payloads=True))
    try:
        services.ledger.import_bundle(_bundle("old"), Context("alice"))
        _raw(services, f"DROP TABLE {SETTINGS_TABLE}")
    finally:
        services.close()
    services = build_services(Settings(db=store_url))
    try:
        assert services.ledger.seal_payloads and _setting(services) == ["1"]
        services.ledger.import_bundle(_bundle("new"), Context("alice"))
        assert _inline_markers(services) == 0
    finally:
        services.close()


def _case_ids_of(store_url: str) -> list[Any]:
    services = build_services(Settings(db=store_url))
    try:
        return [i for k, i in _case_ids(services).items() if k == "secret"]
    finally:
        services.close()
