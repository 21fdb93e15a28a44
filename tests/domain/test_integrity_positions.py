"""Issue 23 items 1–2: rows below position 1 are verified; an emptied chain is never re-adopted.

Each attack of the audit is reproduced on SQLite and PostgreSQL (the `story` ledger of
test_integrity.py, signed with the checkpoint key) and must be detected by `verify` or refused.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import psycopg
import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.aggregates import Meta
from evaledger.domain.errors import ConflictError, InfrastructureError
from evaledger.domain.events import JudgeVerdictRecorded, TokenScope, VerdictOverridden
from evaledger.domain.ledger import Context
from evaledger.domain.tokens import ApiToken, new_secret, secret_hash, split_token
from evaledger.domain.verify import verify
from tests.api.test_cli import Cli
from tests.api.test_operation import TwoRoles
from tests.conftest import EXAMPLE_BUNDLE
from tests.domain.test_integrity import Story, _import
from tests.helpers import case
from tests.integrity_helpers import RawStore

pytestmark = pytest.mark.reliability


def forge_admin_token(s: Story, position: int) -> str:
    """Insert a `TokenIssued` for an admin token at `position`; returns the token's secret."""
    token_id, token = new_secret()
    parts = split_token(token)
    assert parts is not None
    agg = ApiToken.issue(
        token_id,
        Meta(timestamp=datetime.now(UTC), actor="mallory"),
        project="default",
        scope=TokenScope.ADMIN,
        name="forged",
        secret_sha256=secret_hash(parts[1]),
    )
    stored = s.services.ledger.app.mapper.to_stored_event(agg.collect_events()[0])
    s.raw.insert_at(position, agg.id, 1, stored.topic, stored.state)
    return token


def forge_override(s: Story, position: int) -> None:
    """Insert an override of case b (sealed run) at `position`, with a correct prev_hash."""
    b = s.services.ledger.get_case(s.ids["b"])
    verdict = next(
        e for e in s.services.ledger.events_of(s.ids["b"]) if isinstance(e, JudgeVerdictRecorded)
    )
    event = VerdictOverridden(
        originator_id=b.id,
        originator_version=b.version + 1,
        timestamp=datetime.now(UTC),
        actor="mallory",
        prev_hash=b.last_hash,
        verdict_id=verdict.verdict_id,
        passed=False,
        reason="forged",
    )
    stored = s.services.ledger.app.mapper.to_stored_event(event)
    s.raw.insert_at(position, b.id, b.version + 1, stored.topic, stored.state)


@pytest.mark.parametrize("position", [0, -1])
def test_a_token_forged_below_position_1_is_caught_by_verify(story: Story, position: int) -> None:
    forge_admin_token(story, position)
    report = verify(story.services.ledger)
    assert not report.ok
    assert report.first_broken_position == position
    assert report.broken[0].endswith(
        "is below 1, the first position, and not covered by the ledger chain (written outside "
        "evaledger)"
    )
    # `token list` reads every stored row, so the forged token shows there too.
    assert [t.name for t in story.services.ledger.tokens()] == ["forged"]


def test_an_override_forged_at_minus_1_on_a_sealed_run_is_caught(story: Story) -> None:
    forge_override(story, -1)
    # The aggregate loads it (reads go by id), but verify names it.
    assert story.services.ledger.get_case(story.ids["b"]).version == 5
    report = verify(story.services.ledger)
    assert report.first_broken_position == -1
    assert any(
        b.startswith(f"position -1 (aggregate {story.ids['b']} version 5): is below 1")
        for b in report.broken
    ), report.broken


def _emptied(story: Story, how: str) -> None:
    if how == "delete":
        story.raw.empty_chain()
    else:
        story.raw.drop_chain()


@pytest.mark.parametrize("how", ["delete", "drop"])
def test_an_emptied_chain_is_an_integrity_failure_and_writers_refuse(
    story: Story, how: str
) -> None:
    # (SQLite recreates a dropped chain table on open: the same empty chain as "delete".)
    # The audit's attack: delete an override, then empty the chain.
    story.raw.delete(story.pos["override_b"])
    _emptied(story, how)
    settings = story.services.settings
    story.services.close()
    reopened = build_services(
        Settings(db=settings.db, checkpoint_key_file=settings.checkpoint_key_file)
    )
    try:
        report = verify(reopened.ledger)
        assert not report.ok
        assert report.broken[0].startswith(
            "the ledger chain is empty but the log holds 22 events: the chain table was emptied "
            "or dropped"
        )
        assert report.commits == 0
        with pytest.raises(InfrastructureError, match="the ledger chain is empty but 22 events"):
            _import(reopened, "after", "running", case("e", 2))
        # Nothing was written, and nothing was adopted.
        assert reopened.ledger.position() == 23
        assert reopened.ledger.chain_blocks(-100, 10) == []
    finally:
        reopened.close()


def test_chain_adopt_is_explicit_recorded_and_once(story: Story) -> None:
    story.raw.empty_chain()
    ledger = story.services.ledger
    with pytest.raises(Exception, match="reason"):
        ledger.adopt_chain(Context("admin"), " ")
    done = ledger.adopt_chain(Context("admin"), "store written before the chain")
    assert (done.first_position, done.last_position, done.events, done.position) == (1, 23, 23, 24)
    report = verify(ledger)
    assert report.ok, report.broken
    assert report.adopted_until == 23
    assert report.adoption is not None
    assert (report.adoption["first_position"], report.adoption["last_position"]) == (1, 23)
    assert report.adoption["reason"] == "store written before the chain"
    assert report.adoption["actor"] == "admin"
    with pytest.raises(ConflictError, match="already has commits"):
        ledger.adopt_chain(Context("admin"), "again")
    # Writers go on after it.
    _import(story.services, "after", "running", case("e", 2))
    assert verify(ledger).ok


def test_the_state_of_a_chain_adopted_event_matches_its_block(story: Story) -> None:
    story.raw.empty_chain()
    story.services.ledger.adopt_chain(Context("admin"), "legacy")
    row = story.raw.row(24)
    data = row.data()
    assert (data["first_position"], data["last_position"], data["events"]) == (1, 23, 23)
    story.raw.edit(24, b'"last_position":23', b'"last_position":22')
    assert not verify(story.services.ledger).ok
    assert orjson.loads(story.raw.row(24).state)["reason"] == "legacy"


@pytest.mark.postgres
def test_two_roles_the_app_cannot_choose_a_position_nor_revive_a_dropped_chain(
    two_roles: TwoRoles, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(capsys, two_roles.app_url)
    assert cli("migrate", "--app-role", two_roles.app_role, db=two_roles.migrator_url)[0] == 0
    assert cli("import", str(EXAMPLE_BUNDLE))[0] == 0
    with (
        psycopg.connect(two_roles.app_url, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"),
    ):
        conn.execute(
            "INSERT INTO evaledger_events (notification_id, originator_id, "
            "originator_version, topic, state) VALUES (0, gen_random_uuid(), 1, 'x', '')"
        )
    # The owner deletes the run and drops the chain, then runs `migrate` as the README says.
    with psycopg.connect(two_roles.migrator_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE evaledger_events DISABLE TRIGGER evaledger_events_immutable_row")
        conn.execute("DELETE FROM evaledger_events WHERE notification_id > 1")
        # ...with the sealed payloads those events named (a store seals by default), as a
        # careful owner would: left behind, `verify` would list them (position 0) first.
        conn.execute("DELETE FROM evaledger_payloads")
        conn.execute("DROP TABLE evaledger_chain")
    assert cli("migrate", "--app-role", two_roles.app_role, db=two_roles.migrator_url)[0] == 0
    code, out, err = cli("import", str(EXAMPLE_BUNDLE))
    assert (code, out) == (3, "")
    assert "the ledger chain is empty but 1 events were stored before this commit" in err
    code, out, _ = cli("verify")
    assert code == 1
    assert out.startswith(
        "BROKEN at position 1: the ledger chain is empty but the log holds 1 events"
    )


def test_the_cli_adopts_on_the_record_and_verify_says_so_in_plain_words(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(capsys, sqlite_url)
    assert cli("import", str(EXAMPLE_BUNDLE))[0] == 0
    services = build_services(Settings(db=sqlite_url))
    raw = RawStore(services)
    raw.empty_chain()
    raw.close()
    services.close()
    assert cli("verify")[0] == 1
    assert cli("chain", "adopt")[0] == 2  # --reason is required
    # No checkpoint key: the operator says the adoption is unsigned (issue 29).
    code, out, err = cli("chain", "adopt", "--reason", "written by 0.3, before the chain")
    assert (code, out) == (2, "")
    assert "no checkpoint key (EVALEDGER_CHECKPOINT_KEY_FILE)" in err and "--unsigned" in err
    assert cli("chain", "adopt", "--unsigned", "--reason", "written by 0.3, before the chain") == (
        0,
        "adopted positions 1–13 (13 events) into the chain; recorded at position 14\n",
        "",
    )
    code, out, _ = cli("verify")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].startswith("ok: 14 events")
    assert lines[1].startswith("checkpoint: 14:")
    assert lines[2].startswith(
        "adopted: positions 1–13 (13 events) were chained by `chain adopt` (by cli at "
    )
    assert lines[2].endswith(": 'written by 0.3, before the chain'), not when they were written")
    code, _, err = cli("chain", "adopt", "--unsigned", "--reason", "again")
    assert code != 0 and "already has commits" in err


@pytest.mark.postgres
def test_two_roles_a_trigger_function_swapped_for_a_no_op_stops_the_app(
    two_roles: TwoRoles,
) -> None:
    from evaledger.api.migrate import migrate_store

    migrate_store(Settings(db=two_roles.migrator_url), two_roles.app_role)
    build_services(Settings(db=two_roles.app_url)).close()
    with psycopg.connect(two_roles.migrator_url, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION evaledger_refuse_change() RETURNS trigger "
            "LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$"
        )
    with pytest.raises(InfrastructureError, match="the immutability trigger function was replaced"):
        build_services(Settings(db=two_roles.app_url))
    migrate_store(Settings(db=two_roles.migrator_url), two_roles.app_role)
    build_services(Settings(db=two_roles.app_url)).close()


def _chain_own_event_signed(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """As the app role: insert an event and chain it with a (made-up) signature."""
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO evaledger_events (originator_id, originator_version, topic, state) "
            "VALUES (gen_random_uuid(), 1, 'x', '{}') RETURNING notification_id"
        ).fetchone()
        assert row is not None
        conn.execute(
            "SELECT evaledger_chain_append(%s, %s, 1, %s, %s, false)",
            (row[0], row[0], "0" * 64, "f" * 64),
        )


@pytest.mark.postgres
def test_two_roles_the_app_cannot_write_a_chain_row_that_blocks_later_writers(
    two_roles: TwoRoles, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23 item 3: chain rows only through the owner's checking function."""
    cli = Cli(capsys, two_roles.app_url)
    assert cli("migrate", "--app-role", two_roles.app_role, db=two_roles.migrator_url)[0] == 0
    assert cli("import", str(EXAMPLE_BUNDLE))[0] == 0
    with psycopg.connect(two_roles.app_url, autocommit=True) as conn:
        # The audit's blocking row: a signed block ahead of the sequence, without events.
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            conn.execute(
                "INSERT INTO evaledger_chain (first_position, last_position, events, link, mac, "
                "adopted) VALUES (14, 14, 1, repeat('0', 64), repeat('f', 64), false)"
            )
        # Nor through the function: it takes only the events this transaction wrote.
        for args, error in [
            ((14, 14, 1, None, False), "events claimed"),
            ((14, 14, 0, None, False), "events claimed"),
            ((13, 10**9, 1, None, False), "do not follow the last commit"),
            ((1, 13, 13, None, False), "do not follow the last commit"),
            ((14, 10**9, 0, "f" * 64, False), "events claimed"),
            ((1, 13, 13, None, True), "do not follow|an adoption covers"),
        ]:
            first, last, count, mac, adopted = args
            with pytest.raises(psycopg.errors.RaiseException, match=error):
                conn.execute(
                    "SELECT evaledger_chain_append(%s, %s, %s, %s, %s, %s)",
                    (first, last, count, "0" * 64, mac, adopted),
                )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            conn.execute("DELETE FROM evaledger_chain")
        # Its own event, chained with a signature on an unsigned chain: refused too (an
        # unkeyed writer would refuse to follow it).
        with pytest.raises(psycopg.errors.RaiseException, match="only the owner signs"):
            _chain_own_event_signed(conn)
    # Appends through the ledger still work, and the log verifies.
    assert cli("import", str(EXAMPLE_BUNDLE), "--run-key", "second")[0] in (0,)
    code, out, _ = cli("verify")
    assert code == 0 and out.startswith("ok: "), out


@pytest.mark.postgres
def test_two_roles_a_replaced_chain_function_stops_the_app(two_roles: TwoRoles) -> None:
    from evaledger.api.migrate import migrate_store

    migrate_store(Settings(db=two_roles.migrator_url), two_roles.app_role)
    build_services(Settings(db=two_roles.app_url)).close()
    with psycopg.connect(two_roles.migrator_url, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION evaledger_chain_append(p_first bigint, p_last bigint, "
            "p_events integer, p_link text, p_mac text, p_adopted boolean) RETURNS boolean "
            "LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN RETURN true; END $$"
        )
    with pytest.raises(InfrastructureError, match="writing function evaledger_chain_append"):
        build_services(Settings(db=two_roles.app_url))
    migrate_store(Settings(db=two_roles.migrator_url), two_roles.app_role)
    build_services(Settings(db=two_roles.app_url)).close()
