"""Incremental verify (issue 19): a keyed `verify --incremental` resumes from the last signed
checkpoint (issue 29: a plain `verify` is full).

What it re-checks: the recorded checkpoint's signature, the chain block it names (same link,
valid signature), every event and block after it, and each earlier event a new event or a new
seal depends on. What it does not: an earlier event nothing new depends on (a full one does).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Settings, build_services
from evaledger.api.migrate import migrate_store
from evaledger.domain.ledger import Context
from evaledger.domain.verify import verify
from tests.api.test_operation import TwoRoles
from tests.domain.test_integrity import KEY, Story, _import, _override
from tests.domain.test_integrity_positions import forge_admin_token
from tests.helpers import case

pytestmark = pytest.mark.reliability


def _recorded(story: Story) -> int:
    """A full keyed verify (which records its checkpoint); the log's head."""
    report = verify(story.services.ledger)
    assert report.ok and report.resumption == "full", report.broken
    return report.checkpoint.position  # type: ignore[union-attr]


def test_a_keyed_verify_resumes_and_checks_only_the_new_events(story: Story) -> None:
    assert _recorded(story) == 23
    _import(story.services, "new", "running", case("e", 2))
    report = verify(story.services.ledger, incremental=True)
    assert report.ok, report.broken
    assert (report.resumption, report.resumed_from) == ("incremental", 23)
    # The new run: created, case opened, transcript, verdict, attached (one commit).
    assert (report.events, report.commits) == (story.services.ledger.position() - 23, 1)
    assert report.checkpoint is not None and report.checkpoint.position > 23
    # The next one resumes from there.
    again = verify(story.services.ledger, incremental=True)
    assert (again.resumed_from, again.events) == (report.checkpoint.position, 0)


def test_an_edit_after_the_checkpoint_is_caught(story: Story) -> None:
    _recorded(story)
    position = _override(story.services, story.ids["d"], "dave", True)
    story.raw.edit(position, b'"passed":true', b'"passed":false')
    report = verify(story.services.ledger, incremental=True)
    assert report.resumed_from == 23
    assert report.first_broken_position == position
    assert report.broken[0].startswith(f"positions {position}–{position} (one commit): ")


def test_an_edit_before_the_checkpoint_under_a_later_event_is_caught(story: Story) -> None:
    _recorded(story)
    # A new override of d follows its verdict (before the checkpoint); then the attacker
    # edits that verdict. (An edit before the new write would be chained onto by it: only
    # `--full` sees that one.)
    position = _override(story.services, story.ids["d"], "dave", True)
    story.raw.edit(story.pos["verdict_d"], b'"score":5', b'"score":1')
    report = verify(story.services.ledger, incremental=True)
    assert report.resumed_from == 23
    assert not report.ok
    assert report.broken[0].startswith(
        f"aggregate {story.ids['d']} version 4 (position {position}): prev_hash"
    ), report.broken


def test_an_edit_before_the_checkpoint_nothing_new_depends_on_waits_for_full(
    story: Story,
) -> None:
    _recorded(story)
    story.raw.edit(story.pos["transcript_a"], b'"content":"[sealed]"', b'"content":"HELLO"')
    incremental = verify(story.services.ledger, incremental=True)
    # Not re-read: the documented limit of resuming (the chain block at the checkpoint still
    # stands); the report says it resumed, and `--full` finds the edit.
    assert (incremental.ok, incremental.resumed_from, incremental.events) == (True, 23, 0)
    full = verify(story.services.ledger)
    assert (full.ok, full.first_broken_position) == (False, 1)


def test_a_forged_or_orphaned_resumption_point_falls_back_to_a_full_walk(story: Story) -> None:
    _recorded(story)
    # A record the attacker writes without the key: refused as a resumption point.
    story.raw.conn.execute(
        f"INSERT INTO evaledger_verified (position, link, mac, verified_at) VALUES "
        f"(30, '{'0' * 64}', '{'f' * 64}', 'now')"
    )
    story.raw.edit(story.pos["transcript_a"], b'"content":"[sealed]"', b'"content":"HELLO"')
    report = verify(story.services.ledger, incremental=True)
    assert report.resumption == "full"
    assert report.broken[0].startswith("positions 1–9 (one commit): the chain link")
    assert any("is not signed with the checkpoint key (a forged" in b for b in report.broken)


def test_a_rewritten_chain_block_at_the_checkpoint_is_caught(story: Story) -> None:
    _recorded(story)
    blocks = story.raw.blocks()
    from dataclasses import replace

    story.raw.replace_blocks([*blocks[:-1], replace(blocks[-1], mac="0" * 64)])
    report = verify(story.services.ledger, incremental=True)
    assert report.resumption == "full"
    assert report.first_broken_position is not None
    assert any("lost its signature or carries another one" in b for b in report.broken)


def test_a_run_sealed_after_the_checkpoint_is_checked_against_its_earlier_cases(
    story: Story,
) -> None:
    _recorded(story)
    # The open run (its cases attached before the checkpoint) is sealed after it: the seal
    # check reads case c's last event from before the checkpoint, so an edit of it shows.
    seal = story.services.ledger.complete_run(story.ids["open"], Context("alice")).position
    story.raw.edit(story.pos["override_c"], b'"passed":false', b'"passed":true')
    report = verify(story.services.ledger, incremental=True)
    assert report.resumed_from == 23
    assert report.broken == [
        f"run {story.ids['open']} (position {seal}): seal does not match its cases' hashes"
    ]


def test_without_a_key_verify_says_it_checked_everything(story: Story) -> None:
    _recorded(story)
    story.services.ledger.checkpoint_key = None
    report = verify(story.services.ledger, incremental=True)
    assert (report.resumption, report.resumed_from, report.events) == ("unsigned", None, 23)
    # The story's commits are signed: without the key they are not vouched for (issue 29).
    assert (report.ok, report.first_broken_position) == (False, 1)
    assert "carries a signature this verify cannot check" in report.broken[0]


@pytest.mark.postgres
def test_a_verifier_that_cannot_record_still_verifies_in_full(
    two_roles: TwoRoles, tmp_path: Path
) -> None:
    key_file = tmp_path / "checkpoint.key"
    key_file.write_text(KEY)
    key_file.chmod(0o600)
    migrate_store(Settings(db=two_roles.migrator_url), two_roles.app_role)
    writer = build_services(Settings(db=two_roles.app_url, checkpoint_key_file=str(key_file)))
    try:
        _import(writer, "run", "completed", case("a", 4))
    finally:
        writer.close()
    with psycopg.connect(two_roles.migrator_url, autocommit=True) as conn:
        conn.execute(f'REVOKE INSERT ON evaledger_verified FROM "{two_roles.app_role}"')
    auditor = build_services(Settings(db=two_roles.app_url, checkpoint_key_file=str(key_file)))
    try:
        first = verify(auditor.ledger, incremental=True)
        again = verify(auditor.ledger, incremental=True)
    finally:
        auditor.close()
    assert (first.ok, first.resumption) == (True, "full")
    assert (again.ok, again.resumption, again.events) == (True, "full", first.events)


def test_rows_forged_below_position_1_after_the_checkpoint_are_still_caught(
    story: Story,
) -> None:
    _recorded(story)
    forge_admin_token(story, 0)
    report = verify(story.services.ledger, incremental=True)
    assert (report.resumed_from, report.first_broken_position) == (23, 0)
    assert report.broken[0].endswith(
        "is below 1, the first position, and not covered by the ledger chain (written outside "
        "evaledger)"
    )
    blocks = story.raw.blocks()
    story.raw.replace_blocks([replace(blocks[0], first_position=-5, last_position=-5), *blocks])
    report = verify(story.services.ledger, incremental=True)
    assert report.resumed_from == 23
    assert any(
        b.startswith("positions -5–-5 (one commit): not a range of positions from 1")
        for b in report.broken
    )


def test_get_verify_is_full_and_incremental_1_resumes(story: Story) -> None:
    with TestClient(create_app(services=story.services)) as client:
        first = client.get("/verify").json()
        assert (first["resumption"], first["events"]) == ("full", 23)
        again = client.get("/verify", params={"incremental": 1}).json()
        assert (again["resumption"], again["resumed_from"], again["events"]) == (
            "incremental",
            23,
            0,
        )
        story.raw.edit(story.pos["transcript_a"], b'"content":"[sealed]"', b'"content":"HELLO"')
        # Incremental: nothing new depends on it; the default (and `full=1`) walk finds it.
        assert client.get("/verify", params={"incremental": 1}).json()["ok"] is True
        assert client.get("/verify", params={"incremental": 1, "full": 1}).json()["ok"] is False
        full = client.get("/verify").json()
        assert (full["ok"], full["resumption"], full["first_broken_position"]) == (
            False,
            "full",
            1,
        )
        assert client.get("/health").json()["status"] == "degraded"
