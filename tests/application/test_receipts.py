"""Signed checkpoints, rollback detection and receipts through the use cases (issue 34).

Real stores (SQLite files, PostgreSQL); an attacker's raw access through `RawStore`.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from uuid import UUID

import orjson
import psycopg
import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.migrate import migrate_store
from evaledger.application import receipts
from evaledger.application.receipts import Signing
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import InfrastructureError
from evaledger.domain.ledger import Context
from evaledger.domain.receipts import verify_receipt
from evaledger.domain.signing import SigningKey, open_checkpoint
from evaledger.domain.transparency import HeadMemory
from tests.api.test_operation import TwoRoles
from tests.helpers import bundle, case

OWNER = Context(actor="owner")


def _import(services: Services, key: str = "run-1", *cases: dict[str, object]) -> UUID:
    data = bundle()
    data["run"] = {**data["run"], "key": key}
    data["cases"] = list(cases) or [case("a", 5), case("b", 3)]
    return services.ledger.import_bundle(RunBundle.model_validate(data), OWNER).run_id


@pytest.fixture
def signing(tmp_path: Path) -> Signing:
    return Signing(SigningKey.generate("team"), heads=HeadMemory(tmp_path / "heads"))


def test_a_receipt_verifies_offline_and_names_what_a_changed_byte_breaks(
    store_services: Services, signing: Signing
) -> None:
    run_id = _import(store_services)
    _import(store_services, "run-2", case("c", 4))
    receipt = receipts.issue_receipt(store_services, run_id, signing)
    assert signing.key is not None
    keys = [signing.key.public]
    bundle_json = orjson.loads(orjson.dumps(receipt))  # a copy, as an auditor reads it
    report = verify_receipt(bundle_json, keys)
    assert report.ok, report.as_json()
    assert {c.part for c in report.checks} >= {"checkpoint", "signature", "proof", "seal"}
    statement = receipt["statement"]
    assert statement["run"]["seal"] and statement["run"]["spec_id"]
    assert len(statement["events"]) == len(receipt["proofs"]) > 4
    # A proof's byte: only the proof fails.
    changed = orjson.loads(orjson.dumps(receipt))
    index = next(k for k, v in changed["proofs"].items() if v)
    h = changed["proofs"][index][0]
    changed["proofs"][index][0] = ("0" if h[0] != "0" else "1") + h[1:]
    assert [c.part for c in verify_receipt(changed, keys).failed] == ["proof"]
    # The statement's byte: the signature fails.
    changed = orjson.loads(orjson.dumps(receipt))
    changed["statement"]["run"]["summary"]["pass_rate"] = 1.0
    assert "signature" in [c.part for c in verify_receipt(changed, keys).failed]
    # Another key: the checkpoint and the signature fail.
    other = [SigningKey.generate("team").public]
    assert {c.part for c in verify_receipt(receipt, other).failed} == {"checkpoint", "signature"}


def test_a_store_restored_from_an_older_backup_is_caught_without_expect(
    tmp_path: Path, signing: Signing
) -> None:
    url = f"sqlite:///{tmp_path}/store/"
    services = build_services(Settings(db=url))
    try:
        _import(services)
        assert receipts.verify_tree(services, signing).ok
        shutil.copytree(tmp_path / "store", tmp_path / "backup")
        _import(services, "run-2", case("c", 4))
        later = receipts.verify_tree(services, signing)
        assert later.ok and later.merkle is not None
    finally:
        services.close()
    shutil.rmtree(tmp_path / "store")
    shutil.copytree(tmp_path / "backup", tmp_path / "store")
    services = build_services(Settings(db=url))
    try:
        # The restored store's own checkpoints agree with it: only the head remembered here
        # (outside the store) shows the rollback.
        report = receipts.verify_tree(services, signing)
        assert not report.ok
        assert any("rolled back" in b for b in report.broken), report.broken
        alone = receipts.verify_tree(services, Signing(signing.key))
        assert alone.ok  # without the remembered head, nothing to hold it to
    finally:
        services.close()


def test_a_checkpoint_signed_by_another_key_fails_verify(
    store_services: Services, signing: Signing
) -> None:
    _import(store_services)
    mallory = Signing(SigningKey.generate("team"))
    receipts.sign_checkpoint(store_services, mallory)
    report = receipts.verify_tree(store_services, Signing(signing.key))
    assert not report.ok
    assert any("not by a trusted key" in b for b in report.broken), report.broken


def test_rotation_keeps_old_receipts_and_checkpoints_verifiable(
    store_services: Services, signing: Signing
) -> None:
    run_id = _import(store_services)
    old_receipt = receipts.issue_receipt(store_services, run_id, signing)
    new = SigningKey.generate("team")
    receipts.rotate_key(store_services, OWNER, signing, new, "yearly")
    _import(store_services, "run-2", case("c", 4))
    rotated = Signing(new, heads=signing.heads)
    # The store's checkpoints signed by the old key are trusted through the recorded hand-over.
    report = receipts.verify_tree(store_services, rotated)
    assert report.ok, report.broken
    assert signing.key is not None
    trusted = receipts.trusted(store_services, rotated)
    assert signing.key.public in trusted and new.public in trusted
    assert verify_receipt(old_receipt, [signing.key.public]).ok
    assert verify_receipt(old_receipt, trusted).ok
    assert not verify_receipt(old_receipt, [new.public]).ok
    fresh = receipts.issue_receipt(store_services, run_id, rotated)
    assert open_checkpoint(fresh["statement"]["checkpoint"], [new.public]).head.size > 0


def test_an_edited_checkpoint_row_or_rewritten_prefix_is_found(
    services: Services, signing: Signing
) -> None:
    _import(services)
    receipts.sign_checkpoint(services, signing)
    path = services.location.events_env["SQLITE_DBNAME"]
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE evaledger_checkpoints SET root = ?", ("00" * 32,))
    finally:
        conn.close()
    report = receipts.verify_tree(services, Signing(signing.key))
    assert any("checkpoints table was edited" in b for b in report.broken)
    with pytest.raises(InfrastructureError, match="checkpoints table was edited"):
        receipts.sign_checkpoint(services, signing)


@pytest.mark.postgres
def test_the_app_role_signs_checkpoints_and_issues_receipts(
    two_roles: TwoRoles, signing: Signing
) -> None:
    """Two roles: the app role may read and append checkpoints, nothing more."""
    migrate_store(Settings(db=two_roles.migrator_url), two_roles.app_role)
    app = build_services(Settings(db=two_roles.app_url))
    try:
        run_id = _import(app)
        receipt = receipts.issue_receipt(app, run_id, signing)
        assert signing.key is not None
        assert verify_receipt(receipt, [signing.key.public]).ok
        assert receipts.verify_tree(app, signing).ok
    finally:
        app.close()
    with (
        psycopg.connect(two_roles.app_url, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("DELETE FROM evaledger_checkpoints")


def test_hmac_chain_signatures_and_ed25519_checkpoints_work_together(
    tmp_path: Path, signing: Signing
) -> None:
    """An existing keyed store keeps its HMAC chain; the Ed25519 heads come on top."""
    key_file = tmp_path / "checkpoint.key"
    key_file.write_text("k" * 64)
    key_file.chmod(0o600)
    services = build_services(
        Settings(db=f"sqlite:///{tmp_path}/store/", checkpoint_key_file=str(key_file))
    )
    try:
        run_id = _import(services)
        report = receipts.verify_tree(services, signing)
        assert report.ok and report.keyed and report.merkle is not None
        assert signing.key is not None
        receipt = receipts.issue_receipt(services, run_id, signing)
        assert verify_receipt(receipt, [signing.key.public]).ok
    finally:
        services.close()
