"""The log proves itself: the story ledger every tamper test uses, and what `verify` reports.

The attacker has full database access (on PostgreSQL: a superuser with the triggers switched
off) but not the checkpoint key, which the writers and `verify` hold outside the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import InfrastructureError
from evaledger.domain.events import (
    CaseOpened,
    CasesAttached,
    JudgeVerdictRecorded,
    RunCompleted,
    RunCreated,
    TranscriptRecorded,
    VerdictOverridden,
)
from evaledger.domain.ledger import Context
from evaledger.domain.store.chain import KEY_ENV, load_key
from evaledger.domain.verify import Checkpoint, VerifyReport, verify
from evaledger.projections.projectors import all_projections
from tests.api.test_cli import Cli
from tests.helpers import bundle, case
from tests.integrity_helpers import RawStore

pytestmark = pytest.mark.reliability

KEY = "3f" * 32


@dataclass
class Story:
    """A small ledger: a sealed run with a post-seal override, an open run, a later run."""

    services: Services
    raw: RawStore
    key: bytes
    key_file: Path
    pos: dict[str, int]
    ids: dict[str, UUID]

    def verify(self) -> VerifyReport:
        return verify(self.services.ledger)


def _import(services: Services, key: str, status: str, *cases: dict[str, object]) -> UUID:
    data = bundle(key=key, status=status)
    if status != "completed":
        data["run"]["completed_at"] = None
    data["cases"] = list(cases)
    return services.ledger.import_bundle(RunBundle.model_validate(data), Context("alice")).run_id


def _override(services: Services, case_id: UUID, actor: str, passed: bool) -> int:
    verdict = next(
        e for e in services.ledger.events_of(case_id) if isinstance(e, JudgeVerdictRecorded)
    )
    return services.ledger.override_verdict(
        case_id, Context(actor), verdict_id=verdict.verdict_id, passed=passed, reason="reviewed"
    ).position


def write_story(services: Services) -> tuple[dict[str, int], dict[str, UUID]]:
    """Write the story into fresh services; its positions and aggregate ids by name."""
    raw = RawStore(services)
    try:
        ids = {"sealed": _import(services, "sealed", "completed", case("a", 4), case("b", 2))}

        def cases() -> None:
            for row in raw.rows():
                if row.topic == CaseOpened.topic():
                    ids[row.data()["test_case"]["key"]] = row.originator_id

        cases()
        pos = {"override_b": _override(services, ids["b"], "bob", True)}
        ids["open"] = _import(services, "open", "running", case("c", 3))
        cases()
        pos["override_c"] = _override(services, ids["c"], "carol", False)
        ids["later"] = _import(services, "later", "running", case("d", 5))
        cases()
        for row in raw.rows():
            name = {
                RunCreated.topic(): "created",
                TranscriptRecorded.topic(): "transcript",
                JudgeVerdictRecorded.topic(): "verdict",
                CasesAttached.topic(): "attached",
                RunCompleted.topic(): "seal",
            }.get(row.topic)
            owner = next(k for k, v in ids.items() if v == row.originator_id)
            if name is not None:
                pos[f"{name}_{owner}"] = row.position
    finally:
        raw.close()
    return pos, ids


@pytest.fixture
def story(store_url: str, tmp_path: Path) -> Iterator[Story]:
    key_file = tmp_path / "checkpoint.key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)  # a key file others may read is refused
    services = build_services(Settings(db=store_url, checkpoint_key_file=str(key_file)))
    pos, ids = write_story(services)
    raw = RawStore(services)
    try:
        yield Story(services, raw, load_key(key_file), key_file, pos, ids)
    finally:
        raw.close()
        services.close()


def _assert_broken(report: VerifyReport, position: int, message: str) -> None:
    assert not report.ok
    assert report.first_broken_position == position, report.broken
    assert report.broken[0].startswith(message), report.broken


def test_the_untouched_story_verifies_signed_to_its_last_commit(story: Story) -> None:
    report = story.verify()
    assert report.ok, report.broken
    assert (report.events, report.aggregates, report.runs_sealed, report.commits) == (23, 7, 1, 5)
    assert report.checkpoint is not None
    assert (report.checkpoint.position, report.checkpoint.signed) == (23, True)
    assert story.pos == {
        "created_sealed": 1,
        "transcript_a": 3,
        "verdict_a": 4,
        "transcript_b": 6,
        "verdict_b": 7,
        "attached_sealed": 8,
        "seal_sealed": 9,
        "override_b": 10,
        "created_open": 11,
        "transcript_c": 13,
        "verdict_c": 14,
        "attached_open": 15,
        "override_c": 17,
        "created_later": 18,
        "transcript_d": 20,
        "verdict_d": 21,
        "attached_later": 22,
    }


LINK = "the chain link does not match"

# The 21 tamper kinds that were numbered here, and a deleted chain row, are rows of the audit's
# table now (tests/domain/test_tamper_table.py), on SQLite and PostgreSQL with and without a key.


def test_a_rolled_back_tail_is_caught_against_a_remembered_checkpoint(story: Story) -> None:
    earlier = story.verify().checkpoint
    assert earlier is not None and earlier.position == 23
    # The attacker removes the last commit and its chain row: the verified checkpoint the
    # keyed verify recorded no longer stands...
    story.raw.delete(*range(18, 24))
    story.raw.delete_block(23)
    _assert_broken(story.verify(), 23, f"checkpoint 23:{earlier.link[:12]}")
    # ...and without that record, what is left is a valid prefix...
    story.raw.forget_verified()
    assert story.verify().ok
    # ...which only a checkpoint remembered outside the database can tell from the real log.
    _assert_broken(
        verify(story.services.ledger, expect=earlier), 23, f"checkpoint 23:{earlier.link[:12]}"
    )
    assert (
        verify(story.services.ledger, expect=Checkpoint(17, "0" * 64, True)).first_broken_position
        == 17
    )


def test_without_the_key_a_full_rewrite_is_undetectable_and_says_so(story: Story) -> None:
    story.raw.edit(story.pos["verdict_b"], b'"score":2', b'"score":5')
    story.raw.rehash_aggregates()
    story.raw.rechain(keep_macs=False)
    story.services.ledger.checkpoint_key = None
    report = story.verify()
    assert (report.ok, report.keyed) == (True, False)
    assert report.checkpoint is not None and report.checkpoint.signed is False
    # The writer's key signs every commit; the verifier's key catches the rewrite.
    story.services.ledger.checkpoint_key = story.key
    assert not story.verify().ok


def _verify_cli(
    story: Story, cli: Cli, monkeypatch: pytest.MonkeyPatch, *args: str, key: bool = True
) -> tuple[int, str, str]:
    if key:
        monkeypatch.setenv(KEY_ENV, str(story.key_file))
    else:
        monkeypatch.delenv(KEY_ENV, raising=False)
    return cli("verify", *args, db=story.services.settings.db)


def test_the_cli_checks_signatures_and_a_remembered_checkpoint(
    story: Story, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = Cli(capsys, story.services.settings.db)
    link = story.verify().checkpoint.link  # type: ignore[union-attr]
    assert _verify_cli(story, cli, monkeypatch, "--full") == (
        0,
        "ok: 23 events in 7 aggregates, 1 sealed runs, 5 commits chained, signatures checked\n"
        f"checkpoint: 23:{link}\n",
        "",
    )
    # A plain verify checks every event (issue 29); `--incremental` resumes from the checkpoint
    # the last one recorded.
    assert _verify_cli(story, cli, monkeypatch)[1].startswith("ok: 23 events in 7 aggregates")
    assert _verify_cli(story, cli, monkeypatch, "--incremental") == (
        0,
        "ok: 0 new events since the verified checkpoint 23 in 0 aggregates, 0 sealed runs, "
        "0 commits chained, signatures checked (incremental: a plain `verify` re-checks every "
        f"event)\ncheckpoint: 23:{link}\n",
        "",
    )
    assert _verify_cli(story, cli, monkeypatch, "--incremental", "--full")[0] == 2
    # Without the key a signed ledger is not vouched for (issue 29: writers without the key
    # refuse to extend it, and a forged signature looks the same).
    code, out, _ = _verify_cli(story, cli, monkeypatch, key=False)
    assert (code, out) == (
        1,
        "BROKEN at position 1: positions 1–9 (one commit): carries a signature this verify "
        "cannot check (no checkpoint key: set EVALEDGER_CHECKPOINT_KEY_FILE); writers without "
        "the key refuse to extend a signed chain, and on a ledger that never had a key the "
        "signature was written outside evaledger\n",
    )
    assert _verify_cli(story, cli, monkeypatch, "--expect", "23:nonsense") == (
        2,
        "",
        "evaledger: error: --expect: '23:nonsense' is not POSITION:LINK (as `evaledger verify` "
        "prints it)\n",
    )
    story.raw.delete(*range(18, 24))
    story.raw.delete_block(23)
    story.raw.forget_verified()  # the attacker removes the recorded checkpoint too
    assert _verify_cli(story, cli, monkeypatch)[0] == 0
    assert _verify_cli(story, cli, monkeypatch, "--expect", f"23:{link}") == (
        1,
        f"BROKEN at position 23: checkpoint 23:{link[:12]}… verified earlier is no longer in the "
        "log (the log was rolled back or rewritten)\n",
        "",
    )


def test_get_verify_remembers_its_checkpoint_and_health_reports_it(story: Story) -> None:
    with TestClient(create_app(services=story.services)) as client:
        assert client.get("/health").json()["verify"] is None
        first = client.get("/verify").json()
        assert (first["ok"], first["events"], first["commits"], first["keyed"]) == (
            True,
            23,
            5,
            True,
        )
        health = client.get("/health").json()
        assert health["status"] == "ok"
        assert health["verify"] == {
            "ok": True,
            "verified_at": first["verified_at"],
            "checkpoint": {"position": 23, "link": first["checkpoint"]["link"], "signed": True},
            "first_broken_position": None,
            "views": None,
        }
        # The tail is cut back: in-database checks alone see a valid prefix; the server doesn't.
        story.raw.delete(*range(18, 24))
        story.raw.delete_block(23)
        second = client.get("/verify").json()
        assert (second["ok"], second["first_broken_position"]) == (False, 23)
        assert second["broken"] == [
            f"checkpoint 23:{first['checkpoint']['link'][:12]}… verified earlier is no longer "
            "in the log (the log was rolled back or rewritten)"
        ]
        health = client.get("/health").json()
        assert (health["status"], health["verify"]["ok"]) == ("degraded", False)


def test_unreadable_bytes_are_reported_by_verify_and_isolated_by_the_projections(
    story: Story,
) -> None:
    row = story.raw.row(story.pos["override_b"])
    story.raw.update(row, replace(row, state=b"\xff garbage"))
    report = story.verify()
    _assert_broken(report, 10, f"aggregate {story.ids['b']} version 4 (position 10): the stored")
    assert (
        "(position 10): prev_hash None… does not match the hash of version 3 (" in report.broken[1]
    )
    assert report.broken[2].startswith("positions 10–10 (one commit): " + LINK)
    # Reads keep answering from what could be projected; /health names the event.
    story.services.sync()
    assert story.services.runner.positions() == {}
    failures = story.services.runner.failures()
    assert sorted(str(f["name"]) for f in failures) == sorted(p.name for p in all_projections())
    assert {(f["position"], f["event"]) for f in failures} == {
        (10, f"{VerdictOverridden.topic()} of {story.ids['b']} v4")
    }
    with TestClient(create_app(services=story.services)) as client:
        assert client.get("/runs").json()["count"] == 1
        assert client.get("/health").json()["status"] == "degraded"


def test_a_writer_without_the_key_cannot_append_to_a_signed_ledger(story: Story) -> None:
    keyless = build_services(Settings(db=story.services.settings.db))
    try:
        with pytest.raises(InfrastructureError, match="this process has no checkpoint key"):
            _import(keyless, "unsigned", "running", case("e", 2))
    finally:
        keyless.close()
    report = story.verify()
    assert (report.ok, report.events, report.commits) == (True, 23, 5)
