"""The audit's tamper table (issue 23): 42 kinds × 4 stores, each detected, refused or stated.

Stores: SQLite and PostgreSQL, each written and verified with and without the checkpoint key.
The attacker has the database (on PostgreSQL: a superuser with the triggers switched off, or
the two-role app role where the kind says so) but never the key. Every kind states its outcome
on every store: `Broken` (verify exit 1, naming the position and the cause), `Refused` (the
attempted write or start-up is refused), `Drift` (`verify --views` names the row), or
`VerifiesOk` (undetectable or harmless BY DESIGN on that store, with the reason; e.g. a full
rewrite without a key to sign with).

 1 edit_middle_event              15 forged_event_good_prev_hash   29 chain_row_below_1
 2 delete_middle_event            16 swap_two_events               30 chain_emptied
 3 edit_last_event_open_run       17 change_topic                  31 chain_dropped
 4 delete_last_event_open_run     18 move_event_to_other_case      32 adopted_block_without_record
 5 edit_last_event_sealed_run     19 rehash_aggregates_and_seals   33 adoption_record_edited
 6 delete_last_event_sealed_run   20 rechain_keep_signatures       34 trigger_function_swapped
 7 flip_override_after_seal       21 rechain_strip_signatures      35 app_role_chain_row
 8 change_override_author         22 chain_row_deleted             36 read_model_row_edited
 9 delete_override_after_seal     23 tail_rolled_back_vs_expect    37 tail_rolled_back_vs_recorded
10 delete_seal                    24 unreadable_state              38 forged_verified_record
11 edit_seal                      25 keyless_writer                39 one_signature_stripped
12 delete_whole_run               26 token_forged_at_0             40 chain_link_edited
13 delete_whole_case_open_run     27 token_forged_at_minus_1       41 chain_event_count_edited
14 edit_run_config                28 override_forged_at_minus_1    42 row_moved_to_other_lane

Kinds 1–22 moved here from test_integrity.py, 29 and 32 from test_integrity_positions.py;
23–28, 30, 31 and 33 are also reproduced there with what else they hold (the forged token in
`token list`, projections isolating an unreadable event, nothing adopted after a refused write,
the CLI, the two-role set-up); 34–41 are the issue's; 42 is issue 32's (write lanes). Each store is a copy of one story written once per store kind (a copied SQLite folder, a
PostgreSQL database created from a template).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import psycopg
import pytest
from sqlalchemy import text

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.migrate import migrate_store
from evaledger.domain.errors import InfrastructureError
from evaledger.domain.events import VerdictInvalidated, VerdictOverridden
from evaledger.domain.ledger import Context
from evaledger.domain.store.chain import load_key
from evaledger.domain.verify import Checkpoint, VerifyReport, verify
from evaledger.projections.drift import check_views
from tests.conftest import PG_ADMIN_URL, drop_pg_database, fresh_pg_database
from tests.domain.test_integrity import KEY, Story, _import, write_story
from tests.domain.test_integrity_positions import forge_admin_token, forge_override
from tests.helpers import case
from tests.integrity_helpers import RawBlock, RawStore

pytestmark = pytest.mark.reliability


# -- expected outcomes -------------------------------------------------------------------------


@dataclass(frozen=True)
class Broken:
    """`verify` fails: first broken at `position`, with a finding there starting `message`."""

    position: int
    message: str
    how: str = "full"
    """full (`--full`), incremental (resumes from the recorded checkpoint) or expect (the
    checkpoint the tampering returned is passed as `--expect`)."""


@dataclass(frozen=True)
class Refused:
    """The act the tampering attempted raised an error matching `match`."""

    match: str


@dataclass(frozen=True)
class Drift:
    """`verify --views` names a row of `table` (and `column`)."""

    table: str
    column: str | None


@dataclass(frozen=True)
class VerifiesOk:
    """By design on this store: `verify` says ok (the reason says why that is right)."""

    why: str


@dataclass(frozen=True)
class Both:
    """Every one of these outcomes."""

    parts: tuple[Broken | Refused | Drift | VerifiesOk, ...]


Outcome = Broken | Refused | Drift | VerifiesOk | Both


@dataclass
class Tampered(Story):
    """A story store of one kind, ready for one tampering."""

    kind: str = "sqlite"
    keyed: bool = True
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    @property
    def signing_key(self) -> bytes | None:
        """The key writers and verify use on this store (None: unkeyed)."""
        return self.key if self.keyed else None


@dataclass(frozen=True)
class Kind:
    """One row of the table: the tampering, and its outcome on a given store."""

    name: str
    tamper: Callable[[Tampered], Any]
    outcome: Callable[[Tampered], Outcome]


def same(outcome: Outcome) -> Callable[[Tampered], Outcome]:
    """The same outcome on every store."""
    return lambda s: outcome


def keyed_or(keyed: Outcome, unkeyed: Outcome) -> Callable[[Tampered], Outcome]:
    """One outcome with the checkpoint key, another without."""
    return lambda s: keyed if s.keyed else unkeyed


COMMIT_1 = "positions 1–9 (one commit): "
LINK = "the chain link does not match"
REWRITE = (
    "without the checkpoint key a rewrite that recomputes every hash and link is undetectable "
    "by design; verify reports keyed: false"
)


# -- the tamperings ------------------------------------------------------------------------------


def _edit(field_: str, old: bytes, new: bytes) -> Callable[[Tampered], None]:
    return lambda s: s.raw.edit(s.pos[field_], old, new)


def _delete(field_: str) -> Callable[[Tampered], None]:
    return lambda s: s.raw.delete(s.pos[field_])


def _delete_aggregates(*names: str) -> Callable[[Tampered], None]:
    def tamper(s: Tampered) -> None:
        ids = {s.ids[n] for n in names}
        s.raw.delete(*(r.position for r in s.raw.rows() if r.originator_id in ids))

    return tamper


def _edit_seal(s: Tampered) -> None:
    row = s.raw.row(s.pos["seal_sealed"])
    s.raw.edit(row.position, row.data()["seal"].encode(), b"0" * 64)


def _forged_event(s: Tampered) -> None:
    last = s.raw.row(s.pos["verdict_d"])
    forged = last.data() | {"prev_hash": s.services.ledger.get_case(s.ids["d"]).last_hash}
    forged |= {"passed": True, "reason": "forged"}
    s.raw.insert(s.ids["d"], last.version + 1, VerdictOverridden.topic(), orjson.dumps(forged))


def _swap(s: Tampered) -> None:
    a, b = s.raw.row(s.pos["transcript_a"]), s.raw.row(s.pos["transcript_b"])
    s.raw.delete(a.position, b.position)
    s.raw.insert(b.originator_id, b.version, b.topic, b.state)
    s.raw.insert(a.originator_id, a.version, a.topic, a.state)


def _change_topic(s: Tampered) -> None:
    row = s.raw.row(s.pos["override_b"])
    s.raw.update(row, replace(row, topic=VerdictInvalidated.topic()))


def _move(s: Tampered) -> None:
    row = s.raw.row(s.pos["override_b"])
    s.raw.update(row, replace(row, originator_id=s.ids["a"], version=4))


def _rewrite(rechain: bool, keep_macs: bool) -> Callable[[Tampered], None]:
    def tamper(s: Tampered) -> None:
        s.raw.edit(s.pos["verdict_b"], b'"score":2', b'"score":5')
        s.raw.rehash_aggregates()
        if rechain:
            s.raw.rechain(keep_macs=keep_macs)

    return tamper


def _roll_back_tail(s: Tampered) -> Checkpoint:
    earlier = verify(s.services.ledger).checkpoint
    assert earlier is not None and earlier.position == 23
    s.raw.delete(*range(18, 24))
    s.raw.delete_block(23)
    return earlier


def _roll_back_tail_and_records(s: Tampered) -> Checkpoint:
    earlier = _roll_back_tail(s)
    s.raw.forget_verified()
    return earlier


def _unreadable(s: Tampered) -> None:
    row = s.raw.row(s.pos["override_b"])
    s.raw.update(row, replace(row, state=b"\xff garbage"))


def _write(services: Services) -> Exception | None:
    """One ordinary write; the error it raised, if any."""
    try:
        _import(services, "after", "running", case("e", 2))
    except InfrastructureError as e:
        return e
    return None


def _keyless_writer(s: Tampered) -> Exception | None:
    keyless = build_services(Settings(db=s.services.settings.db))
    try:
        return _write(keyless)
    finally:
        keyless.close()


def _chain_row_below_1(s: Tampered) -> None:
    forge_override(s, 0)
    from evaledger.domain.events import stored_hash
    from evaledger.domain.store.chain import GENESIS_LINK, link_of, mac_of

    row = s.raw.row(0)
    link = link_of(
        GENESIS_LINK, [(0, row.originator_id, row.version, stored_hash(row.topic, row.state))]
    )
    mac = None if s.signing_key is None else mac_of(s.signing_key, 0, link)
    first = RawBlock(0, 0, 1, link, mac, False)
    s.raw.replace_blocks([first, *s.raw.blocks()])


def _chain_emptied(s: Tampered) -> Exception | None:
    s.raw.delete(s.pos["override_b"])
    s.raw.empty_chain()
    return _write(s.services)


def _reopen(s: Tampered) -> None:
    settings = s.services.settings
    s.raw.close()
    s.services.close()
    s.services = build_services(settings)
    s.raw = RawStore(s.services)


def _chain_dropped(s: Tampered) -> Exception | None:
    s.raw.drop_chain()
    _reopen(s)  # SQLite recreates the table on open; PostgreSQL's start-up migrates it back
    return _write(s.services)


def _adopt_then(edit: Callable[[Tampered], None]) -> Callable[[Tampered], None]:
    def tamper(s: Tampered) -> None:
        s.raw.empty_chain()
        s.services.ledger.adopt_chain(Context("admin"), "legacy", unsigned=not s.keyed)
        edit(s)

    return tamper


def _drop_adoption_record(s: Tampered) -> None:
    s.raw.delete(24)
    s.raw.delete_block(24)


def _trigger_swapped(s: Tampered) -> Exception | None:
    if s.kind == "sqlite":
        triggers = s.raw.conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"
        ).fetchone()
        assert triggers == (0,)  # nothing to swap: the file's holder holds the store
        return None
    s.raw.conn.execute(
        "CREATE OR REPLACE FUNCTION evaledger_refuse_change() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$"
    )
    try:
        build_services(s.services.settings).close()
    except InfrastructureError as e:
        return e
    return None


def _app_role_chain_row(s: Tampered) -> Exception | None:
    values = (24, 24, 1, "0" * 64, "f" * 64, False)
    if s.kind == "sqlite":
        s.raw.replace_blocks([*s.raw.blocks(), RawBlock(*values)])
        return None
    role = f"evl_app_{uuid.uuid4().hex[:10]}"
    s.raw.conn.execute(f'CREATE ROLE "{role}" LOGIN')
    s.cleanup.append(lambda: _drop_role(role))
    migrate_store(Settings(db=s.services.settings.db), role)
    app_url = s.services.settings.db.replace("postgres@", f"{role}@", 1)
    assert app_url != s.services.settings.db
    with psycopg.connect(app_url, autocommit=True) as conn:
        try:
            conn.execute(
                "INSERT INTO evaledger_chain (first_position, last_position, events, link, mac, "
                "adopted) VALUES (%s, %s, %s, %s, %s, %s)",
                values,
            )
        except psycopg.errors.InsufficientPrivilege as e:
            return e
    return None


def _drop_role(role: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def _read_model_edited(s: Tampered) -> None:
    s.services.sync()
    with s.services.engine.begin() as conn:
        conn.execute(
            text("UPDATE cases_v6 SET passed = NOT passed WHERE case_id = :c"),
            {"c": str(s.ids["b"])},
        )


def _forged_verified_record(s: Tampered) -> None:
    s.raw.conn.execute(
        "INSERT INTO evaledger_verified (position, link, mac, verified_at) VALUES "
        f"(23, '{'0' * 64}', '{'f' * 64}', 'now')"
    )


def _edit_block(last: int, **changes: Any) -> Callable[[Tampered], None]:
    def tamper(s: Tampered) -> None:
        s.raw.replace_blocks(
            [replace(b, **changes) if b.last_position == last else b for b in s.raw.blocks()]
        )

    return tamper


BELOW_1 = "is below 1, the first position, and not covered by the ledger chain"
EMPTY = "the ledger chain is empty but the log holds {} events: the chain table was emptied"
EMPTY_WRITE = "the ledger chain is empty but {} events were stored before this commit"


def _token(position: int) -> Callable[[Tampered], str]:
    return lambda s: forge_admin_token(s, position)


def _move_lane(s: Tampered) -> None:
    """Move one event to the next lane, at that lane's next position (consistent there)."""
    if s.kind == "sqlite":
        return  # one lane, no lane column
    row = s.raw.conn.execute(
        "SELECT lane FROM evaledger_events WHERE notification_id = %s", (s.pos["override_b"],)
    ).fetchone()
    other = (row[0] + 1) % 16
    s.raw.conn.execute(
        "UPDATE evaledger_events SET lane = %s, lane_position = (SELECT coalesce(max("
        "lane_position), 0) + 1 FROM evaledger_events WHERE lane = %s) WHERE notification_id = %s",
        (other, other, s.pos["override_b"]),
    )


def _moved_lane(s: Tampered) -> Outcome:
    if s.kind == "sqlite":
        return VerifiesOk("SQLite has one write lane by design (one writer): no lane to move to")
    at = s.pos["override_b"]
    version = s.raw.row(at).version
    return Broken(at, f"position {at} (aggregate {_b(s)} version {version}): in lane")


def _b(s: Tampered) -> UUID:
    return s.ids["b"]


KINDS: list[Kind] = [
    Kind(
        "edit_middle_event",
        # The text is sealed (a new store's default): its place in the event is edited.
        _edit("transcript_a", b'"content":"[sealed]"', b'"content":"HELLO"'),
        same(Broken(1, COMMIT_1 + LINK)),
    ),
    Kind(
        "delete_middle_event",
        _delete("transcript_a"),
        same(Broken(1, COMMIT_1 + "9 events were committed, 8 remain")),
    ),
    Kind(
        "edit_last_event_open_run",
        _edit("override_c", b'"passed":false', b'"passed":true'),
        same(Broken(17, "positions 17–17 (one commit): " + LINK)),
    ),
    Kind(
        "delete_last_event_open_run",
        _delete("override_c"),
        same(Broken(17, "positions 17–17 (one commit): 1 events were committed, 0")),
    ),
    Kind(
        "edit_last_event_sealed_run",
        _edit("verdict_a", b'"score":4', b'"score":5'),
        same(Broken(1, COMMIT_1 + LINK)),
    ),
    Kind(
        "delete_last_event_sealed_run",
        _delete("verdict_a"),
        same(Broken(1, COMMIT_1 + "9 events were committed, 8 remain")),
    ),
    Kind(
        "flip_override_after_seal",
        _edit("override_b", b'"passed":true', b'"passed":false'),
        same(Broken(10, "positions 10–10 (one commit): " + LINK)),
    ),
    Kind(
        "change_override_author",
        _edit("override_b", b'"actor":"bob"', b'"actor":"admin@tenant-b"'),
        same(Broken(10, "positions 10–10 (one commit): " + LINK)),
    ),
    Kind(
        "delete_override_after_seal",
        _delete("override_b"),
        same(Broken(10, "positions 10–10 (one commit): 1 events were committed, 0")),
    ),
    Kind(
        "delete_seal",
        _delete("seal_sealed"),
        same(Broken(1, COMMIT_1 + "9 events were committed, 8 remain")),
    ),
    Kind("edit_seal", _edit_seal, same(Broken(1, COMMIT_1 + LINK))),
    Kind(
        "delete_whole_run",
        _delete_aggregates("open", "c"),
        same(Broken(11, "positions 11–16 (one commit): 6 events were committed, 0")),
    ),
    Kind(
        "delete_whole_case_open_run",
        _delete_aggregates("c"),
        same(Broken(11, "positions 11–16 (one commit): 6 events were committed, 3")),
    ),
    Kind(
        "edit_run_config",
        _edit("created_sealed", b'"git_sha":"4f2c9e1"', b'"git_sha":"0000000"'),
        same(Broken(1, COMMIT_1 + LINK)),
    ),
    Kind(
        "forged_event_good_prev_hash",
        _forged_event,
        same(Broken(24, "position 24 (aggregate ")),
    ),
    Kind(
        "swap_two_events",
        _swap,
        same(Broken(1, COMMIT_1 + "9 events were committed, 7 remain")),
    ),
    Kind(
        "change_topic",
        _change_topic,
        same(Broken(10, "positions 10–10 (one commit): " + LINK)),
    ),
    Kind(
        "move_event_to_other_case",
        _move,
        lambda s: Broken(10, f"aggregate {s.ids['a']} version 4 (position 10): prev_hash"),
    ),
    Kind(
        "rehash_aggregates_and_seals",
        _rewrite(rechain=False, keep_macs=True),
        same(Broken(1, COMMIT_1 + LINK)),
    ),
    Kind(
        "rechain_keep_signatures",
        _rewrite(rechain=True, keep_macs=True),
        keyed_or(Broken(1, COMMIT_1 + "signature does not match"), VerifiesOk(REWRITE)),
    ),
    Kind(
        "rechain_strip_signatures",
        _rewrite(rechain=True, keep_macs=False),
        keyed_or(Broken(1, "no commit is signed with the checkpoint key"), VerifiesOk(REWRITE)),
    ),
    Kind(
        "chain_row_deleted",
        lambda s: s.raw.delete_block(s.pos["override_b"]),
        same(Broken(10, "position 10 (aggregate ")),
    ),
    Kind(
        "tail_rolled_back_vs_expect",
        _roll_back_tail_and_records,
        same(Broken(23, "checkpoint 23:", how="expect")),
    ),
    Kind(
        "unreadable_state",
        _unreadable,
        lambda s: Broken(10, f"aggregate {s.ids['b']} version 4 (position 10): the stored"),
    ),
    Kind(
        "keyless_writer",
        _keyless_writer,
        keyed_or(
            Refused("this process has no checkpoint key"),
            VerifiesOk("an unsigned ledger takes writers without a key: nothing is forged"),
        ),
    ),
    Kind("token_forged_at_0", _token(0), same(Broken(0, "position 0 (aggregate "))),
    Kind("token_forged_at_minus_1", _token(-1), same(Broken(-1, "position -1 (aggregate "))),
    Kind(
        "override_forged_at_minus_1",
        lambda s: forge_override(s, -1),
        lambda s: Broken(-1, f"position -1 (aggregate {_b(s)} version 5): {BELOW_1}"),
    ),
    Kind(
        "chain_row_below_1",
        _chain_row_below_1,
        same(Broken(0, "positions 0–0 (one commit): not a range of positions from 1")),
    ),
    Kind(
        "chain_emptied",
        _chain_emptied,
        same(Both((Broken(1, EMPTY.format(22)), Refused(EMPTY_WRITE.format(22))))),
    ),
    Kind(
        "chain_dropped",
        _chain_dropped,
        same(Both((Broken(1, EMPTY.format(23)), Refused(EMPTY_WRITE.format(23))))),
    ),
    Kind(
        "adopted_block_without_record",
        _adopt_then(_drop_adoption_record),
        same(Broken(1, "positions 1–23 were adopted into the chain without a `chain adopt`")),
    ),
    Kind(
        "adoption_record_edited",
        _adopt_then(lambda s: s.raw.edit(24, b'"last_position":23', b'"last_position":22')),
        same(Broken(1, "positions 1–23 were adopted into the chain without a `chain adopt`")),
    ),
    Kind(
        "trigger_function_swapped",
        _trigger_swapped,
        lambda s: (
            VerifiesOk("SQLite has no triggers to swap: the file's holder holds the store")
            if s.kind == "sqlite"
            else Refused("the immutability trigger function was replaced")
        ),
    ),
    Kind(
        "app_role_chain_row",
        _app_role_chain_row,
        lambda s: (
            Broken(24, "positions 24–24 (one commit): 1 events were committed, 0 remain")
            if s.kind == "sqlite"
            else Refused("permission denied for table evaledger_chain")
        ),
    ),
    Kind("read_model_row_edited", _read_model_edited, same(Drift("cases_v6", "passed"))),
    Kind(
        "tail_rolled_back_vs_recorded",
        _roll_back_tail,
        keyed_or(
            Broken(23, "checkpoint 23:", how="incremental"),
            VerifiesOk(
                "without a key no checkpoint is recorded in the store; an `--expect` kept "
                "outside it catches the rollback (tail_rolled_back_vs_expect)"
            ),
        ),
    ),
    Kind(
        "forged_verified_record",
        _forged_verified_record,
        keyed_or(
            Broken(23, "the verified checkpoint 23:", how="incremental"),
            VerifiesOk("without a key verify never resumes, so the record is not used"),
        ),
    ),
    Kind(
        "one_signature_stripped",
        _edit_block(10, mac=None),
        keyed_or(
            Broken(10, "positions 10–10 (one commit): not signed although commits from"),
            VerifiesOk("an unsigned ledger has no signature to strip"),
        ),
    ),
    Kind(
        "chain_link_edited",
        _edit_block(10, link="0" * 64),
        same(Broken(10, "positions 10–10 (one commit): " + LINK)),
    ),
    Kind(
        "chain_event_count_edited",
        _edit_block(16, events=5),
        same(Broken(11, "positions 11–16 (one commit): 5 events were committed, 6 remain")),
    ),
    Kind("row_moved_to_other_lane", _move_lane, _moved_lane),
]


def test_the_table_holds_the_audits_42_kinds() -> None:
    assert len(KINDS) == 42
    assert len({k.name for k in KINDS}) == 42
    listed = (__doc__ or "").split()
    assert all(k.name in listed for k in KINDS)


# -- the stores: one story per store kind, copied for each row ---------------------------------


@dataclass
class Template:
    """A story written once: where it is, and its positions and ids."""

    db: str
    pos: dict[str, int]
    ids: dict[str, UUID]


STORES = [
    pytest.param(("sqlite", True), id="sqlite-keyed"),
    pytest.param(("sqlite", False), id="sqlite-unkeyed"),
    pytest.param(("postgres", True), id="postgres-keyed", marks=pytest.mark.postgres),
    pytest.param(("postgres", False), id="postgres-unkeyed", marks=pytest.mark.postgres),
]


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "checkpoint.key"
    path.write_text(KEY + "\n")
    path.chmod(0o600)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def templates(
    tmp_path_factory: pytest.TempPathFactory, key_file: Path
) -> Iterator[Callable[[str, bool], Template]]:
    made: dict[tuple[str, bool], Template] = {}
    databases: list[str] = []

    def template(kind: str, keyed: bool) -> Template:
        if (kind, keyed) not in made:
            if kind == "sqlite":
                db = f"sqlite:///{tmp_path_factory.mktemp('story')}/store/"
            else:
                db, name = fresh_pg_database()
                databases.append(name)
            settings = Settings(db=db, checkpoint_key_file=str(key_file) if keyed else None)
            services = build_services(settings)
            try:
                pos, ids = write_story(services)
            finally:
                services.close()
            made[(kind, keyed)] = Template(db, pos, ids)
        return made[(kind, keyed)]

    yield template
    for name in databases:
        drop_pg_database(name)


def _copy(template: Template, kind: str, tmp_path: Path) -> tuple[str, Callable[[], None]]:
    """A copy of the template store; its URL and how to remove it."""
    if kind == "sqlite":
        source = Path(template.db.removeprefix("sqlite:///"))
        target = tmp_path / "store"
        shutil.copytree(source, target)
        return f"sqlite:///{target}/", lambda: None
    name = f"evaledger_t_{uuid.uuid4().hex[:12]}"
    source_name = template.db.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source_name}"')
    return f"{template.db.rsplit('/', 1)[0]}/{name}", lambda: drop_pg_database(name)


@pytest.fixture(params=STORES)
def tampered(
    request: pytest.FixtureRequest,
    templates: Callable[[str, bool], Template],
    key_file: Path,
    tmp_path: Path,
) -> Iterator[Tampered]:
    kind, keyed = request.param
    template = templates(kind, keyed)
    db, remove = _copy(template, kind, tmp_path)
    services = build_services(Settings(db=db, checkpoint_key_file=str(key_file) if keyed else None))
    s = Tampered(
        services,
        RawStore(services),
        load_key(key_file),
        key_file,
        dict(template.pos),
        dict(template.ids),
        kind=kind,
        keyed=keyed,
    )
    try:
        yield s
    finally:
        s.raw.close()
        s.services.close()
        remove()
        for step in s.cleanup:
            step()


# -- the table -----------------------------------------------------------------------------------


def _check(s: Tampered, outcome: Outcome, result: Any) -> None:
    if isinstance(outcome, Both):
        for part in outcome.parts:
            _check(s, part, result)
    elif isinstance(outcome, Broken):
        report = _verify(s, outcome, result)
        assert not report.ok
        assert report.first_broken_position == outcome.position, report.broken
        at = [m for p, m in report.findings if p == outcome.position]
        assert any(m.startswith(outcome.message) for m in at), report.broken
    elif isinstance(outcome, Refused):
        assert isinstance(result, Exception), result
        assert outcome.match in str(result), result
    elif isinstance(outcome, Drift):
        assert verify(s.services.ledger).ok  # the log itself is whole
        drift = check_views(s.services.ledger, s.services.engine).drift
        assert drift is not None
        assert (drift.table, drift.column) == (outcome.table, outcome.column)
        assert drift.key == {"case_id": str(s.ids["b"])}
    else:
        report = verify(s.services.ledger)
        assert report.ok, report.broken
        assert report.keyed is s.keyed
        assert outcome.why


def _verify(s: Tampered, outcome: Broken, result: Any) -> VerifyReport:
    ledger = s.services.ledger
    if outcome.how == "expect":
        assert isinstance(result, Checkpoint)
        return verify(ledger, expect=result)
    return verify(ledger, incremental=outcome.how == "incremental")


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_each_tampering_is_detected_refused_or_stated_on_each_store(
    tampered: Tampered, kind: Kind
) -> None:
    """One row of the audit's table on one store: its stated outcome holds."""
    result = kind.tamper(tampered)
    _check(tampered, kind.outcome(tampered), result)
