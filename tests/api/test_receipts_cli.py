"""`key`, `checkpoint`, `receipt`, `evidence` and `verify --against` from the command line.

The auditor's side runs in a separate process, in an empty folder holding only the receipt,
the bundle and the public key, with no EVALEDGER_* variable: no store and no secret.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Settings, build_services
from evaledger.application.receipts import check_receipt, public_keys
from evaledger.domain.signing import SigningKey, TreeHead, sign_checkpoint
from tests.api.test_cli import RUN_ID, RUN_KEY, Cli
from tests.conftest import EXAMPLE_BUNDLE, drop_pg_database, fresh_pg_database
from tests.helpers import bundle, case


@pytest.fixture
def signed(
    capsys: pytest.CaptureFixture[str],
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Cli:
    """A store holding the example run, and an Ed25519 key in the environment."""
    monkeypatch.setenv("EVALEDGER_SIGNING_KEY_FILE", str(tmp_path / "signing.key"))
    monkeypatch.delenv("EVALEDGER_SIGNING_KEY", raising=False)
    monkeypatch.delenv("EVALEDGER_HEADS_DIR", raising=False)
    cli = Cli(capsys, store_url)
    code, out, err = cli("key", "init")
    assert code == 0, err
    (tmp_path / "public.key").write_text(out)
    assert (tmp_path / "signing.key").stat().st_mode & 0o777 == 0o600
    cli.json("import", str(EXAMPLE_BUNDLE))
    return cli


def _auditor(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER")}
    return subprocess.run(
        [sys.executable, "-m", "evaledger", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _hand_over(cli: Cli, tmp_path: Path) -> Path:
    """receipt.json, run.json and public.key, alone in a folder."""
    out = tmp_path / "made"
    out.mkdir()
    code, _, err = cli("receipt", RUN_KEY, "-o", str(out / "receipt.json"))
    assert code == 0, err
    code, _, err = cli("export", RUN_KEY, "-o", str(out / "run.json"))
    assert code == 0, err
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    for name in ("receipt.json", "run.json"):
        shutil.copy(out / name, auditor / name)
    shutil.copy(tmp_path / "public.key", auditor / "public.key")
    return auditor


VERIFY = ("receipt", "verify", "receipt.json", "--bundle", "run.json", "--public-key", "public.key")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_an_auditor_verifies_a_receipt_alone_and_a_changed_part_is_named(
    signed: Cli, tmp_path: Path
) -> None:
    folder = _hand_over(signed, tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["public.key", "receipt.json", "run.json"]
    done = _auditor(folder, *VERIFY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"receipt of run {RUN_KEY} ({RUN_ID}): verified" in done.stdout
    receipt = orjson.loads((folder / "receipt.json").read_bytes())
    proof = next(h for hs in receipt["proofs"].values() for h in hs)
    note = receipt["statement"]["checkpoint"]
    root_line = note.split("\n")[2]
    edits = {
        "bundle": ("run.json", '"refund-late-delivery"', '"refund-late-deliverz"'),
        "proof": ("receipt.json", proof, ("0" if proof[0] != "0" else "1") + proof[1:]),
        "signature": (
            "receipt.json",
            receipt["signature"]["value"],
            ("A" if receipt["signature"]["value"][0] != "A" else "B")
            + receipt["signature"]["value"][1:],
        ),
        "checkpoint": (
            "receipt.json",
            root_line,
            ("A" if root_line[0] != "A" else "B") + root_line[1:],
        ),
    }
    for part, (name, old, new) in edits.items():
        case_folder = tmp_path / f"auditor-{part}"
        shutil.copytree(folder, case_folder)
        _edit(case_folder / name, old, new)
        done = _auditor(case_folder, *VERIFY)
        assert done.returncode == 1, (part, done.stdout, done.stderr)
        assert f"FAIL {part}:" in done.stdout, (part, done.stdout)
        assert "NOT verified" in done.stdout
    # Without a key there is nothing to check against: a usage error, exit 2.
    done = _auditor(folder, "receipt", "verify", "receipt.json")
    assert done.returncode == 2 and "--public-key" in done.stderr


def test_one_changed_byte_anywhere_in_the_receipt_or_bundle_fails(
    signed: Cli, tmp_path: Path
) -> None:
    folder = _hand_over(signed, tmp_path)
    keys = public_keys([str(folder / "public.key")])
    receipt = (folder / "receipt.json").read_bytes()
    run = (folder / "run.json").read_bytes()
    assert check_receipt(receipt, keys, run).ok
    for i in range(0, len(receipt), 5):
        changed = receipt[:i] + bytes([receipt[i] ^ 1]) + receipt[i + 1 :]
        assert not check_receipt(changed, keys, run).ok, (i, receipt[i - 20 : i + 20])
    for i in range(0, len(run), 23):
        changed = run[:i] + bytes([run[i] ^ 1]) + run[i + 1 :]
        found = check_receipt(receipt, keys, changed)
        assert [c.part for c in found.failed] == ["bundle"], (i, run[i - 20 : i + 20])


def _one_more_run(cli: Cli) -> None:
    data = bundle()
    data["run"] = {**data["run"], "key": "second"}
    data["cases"] = [case("x", 4)]
    path = Path(os.environ["EVALEDGER_SIGNING_KEY_FILE"]).with_name("second.json")
    path.write_bytes(orjson.dumps(data))
    cli.json("import", str(path))


def test_a_store_restored_from_an_older_backup_fails_verify_without_expect(
    signed: Cli, tmp_path: Path
) -> None:
    code, out, err = signed("verify")
    assert code == 0 and "merkle:" in out, out + err
    backup = _backup(signed.db, tmp_path)
    _one_more_run(signed)
    code, out, err = signed("verify")
    assert code == 0, out + err
    restored = _restore(signed.db, backup, tmp_path)
    try:
        code, out, err = signed("verify", db=restored)
        assert code == 1, out + err
        assert "rolled back" in out
        # `--expect` was never given: the head remembered beside the key held it.
        code, out, _ = signed("verify", "--json", db=restored)
        report = orjson.loads(out)
        merkle = report["merkle"]
        assert report["ok"] is False and merkle["remembered"] > merkle["size"] > 0
    finally:
        _drop(restored)


def _backup(db: str, tmp_path: Path) -> Path:
    if db.startswith("sqlite"):
        target = tmp_path / "backup"
        shutil.copytree(Path(db.removeprefix("sqlite:///")), target)
        return target
    dump = tmp_path / "backup.sql"
    subprocess.run(["pg_dump", "--no-owner", "-f", str(dump), db], check=True, timeout=120)
    return dump


def _restore(db: str, backup: Path, tmp_path: Path) -> str:
    if db.startswith("sqlite"):
        shutil.copytree(backup, tmp_path / "restored")
        return f"sqlite:///{tmp_path}/restored/"
    url, _ = fresh_pg_database()
    subprocess.run(
        ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(backup), url],
        check=True,
        timeout=120,
        capture_output=True,
    )
    return url


def _drop(url: str) -> None:
    if url.startswith("postgresql"):
        drop_pg_database(url.rsplit("/", 1)[1])


def test_publish_then_verify_against_the_published_head(signed: Cli, tmp_path: Path) -> None:
    head = tmp_path / "head.txt"
    code, _, err = signed("checkpoint", "publish", "-o", str(head))
    assert code == 0, err
    text = head.read_text()
    assert text.startswith("evaledger/") and "\n\n\u2014 evaledger " in text
    _one_more_run(signed)
    code, out, err = signed("verify", "--against", str(head))
    assert code == 0, out + err
    assert "the published head" in out
    # The same head signed by another key is refused; so is a head the log does not extend.
    stated = TreeHead.parse_body(text.partition("\n\n")[0] + "\n")
    forged = sign_checkpoint(stated, SigningKey.generate("evaledger"))
    (tmp_path / "forged.txt").write_text(forged)
    code, out, _ = signed("verify", "--against", str(tmp_path / "forged.txt"))
    assert code == 1 and "not by a trusted key" in out
    # Another key cannot extend the stored checkpoints either: nothing is signed.
    other = tmp_path / "other.key"
    code, _, err = signed("key", "init", "--key-file", str(other))
    assert code == 0, err
    code, _, err = signed("checkpoint", "sign", "--key-file", str(other))
    assert code == 3 and "not by a trusted key" in err


def test_rotation_keeps_old_receipts_verifiable_and_is_recorded(
    signed: Cli, tmp_path: Path
) -> None:
    folder = _hand_over(signed, tmp_path)
    rotated = signed.json("key", "rotate", "--reason", "yearly")
    assert Path(rotated["retired_key_file"]).stat().st_mode & 0o777 == 0o600
    assert rotated["public_key"] != rotated["retired_key"]
    assert _auditor(folder, *VERIFY).returncode == 0  # the old key still verifies its receipt
    _one_more_run(signed)
    code, out, err = signed("verify")
    assert code == 0, out + err  # checkpoints signed by the old key: trusted through the record
    fresh = tmp_path / "fresh.json"
    code, _, err = signed("receipt", RUN_KEY, "-o", str(fresh))
    assert code == 0, err
    new_key = tmp_path / "new.key"
    new_key.write_text(rotated["public_key"] + "\n")
    keys = public_keys([str(new_key)])
    assert check_receipt(fresh.read_bytes(), keys).ok
    assert not check_receipt((folder / "receipt.json").read_bytes(), keys).ok


def test_the_evidence_pack_verifies_after_unzipping(signed: Cli, tmp_path: Path) -> None:
    pack = tmp_path / "evidence.zip"
    code, _, err = signed("evidence", RUN_KEY, "-o", str(pack))
    assert code == 0, err
    folder = tmp_path / "unzipped"
    with zipfile.ZipFile(pack) as z:
        z.extractall(folder)
    assert {p.name for p in folder.iterdir()} == {
        "README.md",
        "judge-calls.jsonl",
        "public-key.txt",
        "receipt.json",
        "rubrics.json",
        "run.json",
        "spec.json",
        "verification.json",
    }
    done = _auditor(
        folder,
        "receipt",
        "verify",
        "receipt.json",
        "--bundle",
        "run.json",
        "--public-key",
        "public-key.txt",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (folder / "README.md").read_text()
    assert RUN_KEY in summary and "by `cli`" in summary
    calls = [orjson.loads(line) for line in (folder / "judge-calls.jsonl").read_text().splitlines()]
    assert calls and all(c["prompt"] and c["reply"] for c in calls)
    assert orjson.loads((folder / "verification.json").read_bytes())["ok"] is True


def test_get_receipt_serves_the_same_kind_of_receipt(signed: Cli, tmp_path: Path) -> None:
    services = build_services(Settings(db=signed.db))
    try:
        with TestClient(create_app(services=services)) as client:
            answer = client.get(f"/runs/{RUN_ID}/receipt")
            assert answer.status_code == 200, answer.text
            got: dict[str, Any] = answer.json()
            keys = public_keys([str(tmp_path / "public.key")])
            assert check_receipt(answer.content, keys).ok
            assert got["statement"]["run"]["key"] == RUN_KEY
            missing = client.get("/runs/00000000-0000-0000-0000-000000000000/receipt")
            assert missing.status_code == 404
            page = client.get(f"/ui/runs/{RUN_ID}")
            assert page.status_code == 200
            assert f'href="/runs/{RUN_ID}/receipt"' in page.text
    finally:
        services.close()


def test_a_receipt_without_a_signing_key_is_an_infrastructure_error(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("EVALEDGER_SIGNING_KEY_FILE", "EVALEDGER_SIGNING_KEY", "EVALEDGER_HEADS_DIR"):
        monkeypatch.delenv(name, raising=False)
    cli = Cli(capsys, sqlite_url)
    cli.json("import", str(EXAMPLE_BUNDLE))
    code, _, err = cli("receipt", RUN_KEY)
    assert code == 3 and "EVALEDGER_SIGNING_KEY_FILE" in err
    code, _, err = cli("key", "init")
    assert code == 2 and "--key-file" in err


def test_hostile_receipts_are_refused_naming_the_file_and_nothing_is_read_whole(
    tmp_path: Path,
) -> None:
    key = SigningKey.generate()
    (tmp_path / "public.key").write_text(f"{key.public}\n")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    done = _auditor(tmp_path, "receipt", "verify", "deep.json", "--public-key", "public.key")
    assert done.returncode == 2 and "deep.json" in done.stderr, done.stderr
    (tmp_path / "receipt.json").write_text('{"statement": 1}')
    done = _auditor(
        tmp_path,
        "receipt",
        "verify",
        "receipt.json",
        "--bundle",
        "deep.json",
        "--public-key",
        "public.key",
    )
    assert done.returncode == 2 and "deep.json" in done.stderr, done.stderr
    done = _auditor(tmp_path, "receipt", "verify", "receipt.json", "--public-key", "public.key")
    assert done.returncode == 1 and "FAIL format" in done.stdout
    done = _auditor(tmp_path, "receipt", "verify", "missing.json", "--public-key", "public.key")
    assert done.returncode == 2 and "missing.json" in done.stderr
    done = _auditor(tmp_path, "receipt", "verify", "receipt.json", "--public-key", "nokey+x")
    assert done.returncode == 2 and "--public-key" in done.stderr


def test_a_rotation_retried_after_a_failure_reuses_the_retired_copy(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    key_file = tmp_path / "signing.key"
    cli = Cli(capsys, sqlite_url)
    assert cli("key", "init", "--key-file", str(key_file))[0] == 0
    cli.json("import", str(EXAMPLE_BUNDLE))
    old = SigningKey.parse(key_file.read_text(), "test")
    retired = tmp_path / f"signing.key.retired-{old.public.hash.hex()}"
    retired.write_text(old.to_text() + "\n")  # what a failed attempt left
    retired.chmod(0o600)
    rotated = cli.json("key", "rotate", "--key-file", str(key_file), "--reason", "retry")
    assert rotated["retired_key"] == str(old.public)
    current = SigningKey.parse(key_file.read_text(), "test")
    assert current.public != old.public
    # Someone else's file at the name the current key would retire to is never overwritten.
    taken = tmp_path / f"signing.key.retired-{current.public.hash.hex()}"
    taken.write_text(SigningKey.generate().to_text() + "\n")
    code, _, err = cli("key", "rotate", "--key-file", str(key_file), "--reason", "again")
    assert code == 2 and "never overwritten" in err
    assert SigningKey.parse(key_file.read_text(), "test") == current
