"""The ledger-wide hash chain: one link per commit over the global log order, keyed by HMAC.

Each commit (one `save()`, one transaction) appends one row to `evaledger_chain`: the range of
positions it wrote, how many events, `link = sha256(previous link, every (position, aggregate,
version, event hash) in order)` and, when the writer holds the checkpoint key, `mac =
HMAC-SHA256(key, last position, link)`. A deleted, edited, inserted or reordered event anywhere
breaks the link of its commit (and, through `previous link`, every later one); recomputing the
links after an edit needs the key to re-sign them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from evaledger.domain.errors import InfrastructureError, ValidationError
from evaledger.domain.events import stored_hash
from evaledger.domain.payloads import Sealed
from evaledger.domain.store.permissions import shared_mode
from evaledger.domain.store.urls import KEY_ENV as KEY_ENV

GENESIS_LINK = "0" * 64
CHAIN_TABLE = "evaledger_chain"
VERIFIED_TABLE = "evaledger_verified"
"""Checkpoints a keyed `verify` reached, signed: where the next `verify` resumes."""
CHECKPOINTS_TABLE = "evaledger_checkpoints"
"""Signed tree heads (Ed25519) over the Merkle tree of the log, with the frontier to extend."""
MIN_KEY_BYTES = 32


@dataclass(frozen=True)
class HashedStoredEvent(StoredEvent):
    """A stored event carrying the hash the domain already computed (hashed once per event)."""

    hash: str = ""
    sealed: Sealed | None = None
    """The event's sealed payload, for the vault to encrypt in the same transaction."""


@dataclass(frozen=True)
class Block:
    """One commit's row of the chain."""

    first_position: int
    last_position: int
    events: int
    link: str
    mac: str | None
    adopted: bool = False


Entry = tuple[int, UUID | str, int, str]
"""(position, aggregate id, version, event hash) of one event."""


def unextendable(reason: str) -> InfrastructureError:
    """A chain this writer cannot append to (exit 3 / 503): the one wording for every store."""
    return InfrastructureError(
        f"the ledger chain cannot be extended: {reason}; nothing was written. Run `evaledger "
        "verify`"
    )


def event_hash(event: StoredEvent) -> str:
    """The per-aggregate hash of a stored event (reused when the domain computed it)."""
    return (
        event.hash
        if isinstance(event, HashedStoredEvent) and event.hash
        else stored_hash(event.topic, event.state)
    )


def link_of(prev: str, entries: Iterable[Entry]) -> str:
    """The chain link of one commit over its events in log order."""
    h = hashlib.sha256(prev.encode())
    # One update over the joined lines: the same digest as a line at a time, fewer calls.
    lines = "".join(
        f"\n{position}\x1f{_canonical(originator_id)}\x1f{version}\x1f{ehash}"
        for position, originator_id, version, ehash in entries
    )
    h.update(lines.encode())
    return h.hexdigest()


def _canonical(originator_id: UUID | str) -> str:
    """The id as a UUID string (SQLite stores hex); anything else as it is, so it mismatches."""
    try:
        return str(originator_id if isinstance(originator_id, UUID) else UUID(originator_id))
    except ValueError:
        return originator_id if isinstance(originator_id, str) else repr(originator_id)


def mac_of(key: bytes, last_position: int, link: str) -> str:
    """The keyed checkpoint of a chain link."""
    return hmac.new(key, f"{last_position}\x1f{link}".encode(), hashlib.sha256).hexdigest()


def verified_mac(key: bytes, position: int, link: str) -> str:
    """The signature of a verified checkpoint (domain-separated: no block's mac is one)."""
    message = f"verified\x1f{position}\x1f{link}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def load_key(path: str | Path) -> bytes:
    """Read a checkpoint key file (at least 32 bytes of secret; surrounding whitespace ignored).

    Refused when group or others may read or write it (see `permissions`).
    """
    mode = shared_mode(path)
    if mode is not None:
        raise ValidationError(
            f"checkpoint key file {str(path)!r} is open to other users (mode {mode:04o}): it "
            f"must be readable by its owner only (chmod 600 {path})",
            field="checkpoint_key",
        )
    try:
        key = Path(path).read_bytes().strip()
    except OSError as e:
        raise InfrastructureError(f"checkpoint key file {str(path)!r}: {e.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        raise ValidationError(
            f"checkpoint key file {str(path)!r} holds {len(key)} bytes; it needs at least "
            f"{MIN_KEY_BYTES} (e.g. `openssl rand -hex 32 > FILE`)",
            field="checkpoint_key",
        )
    return key


class ChainWriter:
    """Appends one block per commit inside the recorder's write transaction.

    The caller holds the store's write lock (SQLite: the one writer; PostgreSQL: the events
    table's EXCLUSIVE lock eventsourcing takes before inserting), so the last block read here
    is the one this commit follows, and notification order equals chain order.
    """

    def __init__(
        self,
        placeholder: str,
        events: str,
        position: str,
        qualified_table: str = CHAIN_TABLE,
        *,
        hex_ids: bool = False,
    ) -> None:
        p = placeholder
        self.hex_ids = hex_ids
        """SQLite keeps aggregate ids as hex text (eventsourcing's choice), PostgreSQL as uuid."""
        self.key: bytes | None = None
        self.adopting: str | None = None
        """Set (to the reason) only by `chain adopt`: the next commit may adopt unchained events."""
        self.count_before = f"SELECT count(*) AS n FROM {events} WHERE {position} < {p}"
        self.select_before = (
            f"SELECT {position} AS notification_id, originator_id, originator_version, topic, "
            f"state FROM {events} WHERE {position} < {p} ORDER BY {position}"
        )
        self.select_last = (
            f"SELECT last_position, link, mac FROM {qualified_table} "
            "ORDER BY last_position DESC LIMIT 1"
        )
        self.count = f"SELECT count(*) AS n FROM {qualified_table}"
        self.select_position = (
            f"SELECT {position} AS notification_id FROM {events} "
            f"WHERE originator_id = {p} AND originator_version = {p}"
        )
        self.select_covering = (
            "SELECT first_position, last_position, events, link, mac, adopted "
            f"FROM {qualified_table} WHERE last_position >= {p} ORDER BY last_position LIMIT 1"
        )
        self.select_previous = (
            f"SELECT link FROM {qualified_table} WHERE last_position < {p} "
            "ORDER BY last_position DESC LIMIT 1"
        )
        self.select_signed_before = (
            f"SELECT count(*) AS n FROM {qualified_table} "
            f"WHERE last_position < {p} AND mac IS NOT NULL"
        )
        self.select_range = (
            f"SELECT {position} AS notification_id, originator_id, originator_version, topic, "
            f"state FROM {events} WHERE {position} >= {p} AND {position} <= {p} "
            f"ORDER BY {position}"
        )
        self.select_page = (
            "SELECT first_position, last_position, events, link, mac, adopted "
            f"FROM {qualified_table} WHERE last_position > {p} "
            f"ORDER BY last_position LIMIT {p}"
        )
        self.insert = (
            f"INSERT INTO {qualified_table} "
            "(first_position, last_position, events, link, mac, adopted) "
            f"VALUES ({p}, {p}, {p}, {p}, {p}, {p})"
        )
        verified = qualified_table.replace(CHAIN_TABLE, VERIFIED_TABLE)
        self.select_verified = (
            f"SELECT position, link, mac FROM {verified} ORDER BY position DESC LIMIT 1"
        )
        self.insert_verified = (
            f"INSERT INTO {verified} (position, link, mac, verified_at) VALUES ({p}, {p}, {p}, {p})"
        )
        checkpoints = qualified_table.replace(CHAIN_TABLE, CHECKPOINTS_TABLE)
        columns = "tree_size, last_position, root, frontier, note, signed_at"
        self.select_checkpoints = (
            f"SELECT {columns} FROM {checkpoints} WHERE tree_size > {p} "
            f"ORDER BY tree_size LIMIT {p}"
        )
        self.select_last_checkpoint = (
            f"SELECT {columns} FROM {checkpoints} ORDER BY tree_size DESC LIMIT 1"
        )
        self.insert_checkpoint = (
            f"INSERT INTO {checkpoints} ({columns}) VALUES ({p}, {p}, {p}, {p}, {p}, {p})"
        )

    def append(
        self, curs: Any, events: Sequence[StoredEvent], ids: Sequence[int], adopted: bool = False
    ) -> None:
        """Chain `events` (just inserted at positions `ids`) after the last block."""
        if not events:
            return
        curs.execute(self.select_last)
        row = curs.fetchone()
        if row is None and not adopted:
            self._check_nothing_unchained(curs, ids[0])
            curs.execute(self.select_last)
            row = curs.fetchone()
        if row is not None and row["last_position"] >= ids[0]:
            raise unextendable(
                f"its last commit ends at position {row['last_position']}, past the events being "
                f"written (from position {ids[0]}): a chain row written outside evaledger"
            )
        if row is not None and row["mac"] is not None and self.key is None:
            # An unsigned commit after signed ones would fail every later verify: refuse it.
            raise InfrastructureError(
                f"the ledger's commits are signed but this process has no checkpoint key "
                f"(set {KEY_ENV}); nothing was written"
            )
        prev = row["link"] if row is not None else GENESIS_LINK
        link = link_of(
            prev,
            (
                (pos, e.originator_id, e.originator_version, event_hash(e))
                for pos, e in zip(ids, events, strict=True)
            ),
        )
        mac = mac_of(self.key, ids[-1], link) if self.key is not None else None
        curs.execute(self.insert, (ids[0], ids[-1], len(ids), link, mac, adopted))

    def _check_nothing_unchained(self, curs: Any, first: int) -> None:
        """Refuse to start a chain over events it would not cover (an emptied chain table)."""
        curs.execute(self.count_before, (first,))
        row = curs.fetchone()
        if not row["n"]:
            return
        if self.adopting is None:
            raise InfrastructureError(
                f"the ledger chain is empty but {row['n']} events were stored before this "
                "commit: the chain table was emptied or dropped (or the store predates the "
                "chain); nothing was written. Run `evaledger verify`; a store written before "
                "the chain existed is adopted once with `evaledger chain adopt --reason`"
            )
        self._adopt(curs, first)

    def commit_verifies(
        self, curs: Any, originator_id: UUID, version: int, key: bytes | None
    ) -> bool:
        """Whether the commit that wrote one event stands (issue 29, token authentication).

        Its chain block covers the event, the block's link matches the stored events, and
        (keyed) its signature is the key's.

        One commit, a few indexed reads: what authenticating a token costs, not a
        walk of the log. A row written outside evaledger (below 1, after the last block, or
        edited) fails; so does an unsigned commit after signed ones when the key is held.
        """
        curs.execute(
            self.select_position,
            (originator_id.hex if self.hex_ids else originator_id, version),
        )
        row = curs.fetchone()
        if row is None:
            return False
        position = row["notification_id"]
        curs.execute(self.select_covering, (position,))
        found = curs.fetchone()
        if found is None or not 1 <= found["first_position"] <= position:
            return False
        first, last = found["first_position"], found["last_position"]
        curs.execute(self.select_previous, (first,))
        prev = curs.fetchone()
        curs.execute(self.select_range, (first, last))
        entries = [
            (
                r["notification_id"],
                r["originator_id"],
                r["originator_version"],
                stored_hash(r["topic"], bytes(r["state"])),
            )
            for r in curs.fetchall()
        ]
        link = link_of(GENESIS_LINK if prev is None else prev["link"], entries)
        if len(entries) != found["events"] or link != found["link"]:
            return False
        if key is None:
            return True
        if found["mac"] is not None:
            return hmac.compare_digest(found["mac"], mac_of(key, last, link))
        curs.execute(self.select_signed_before, (first,))
        return not curs.fetchone()["n"]  # unsigned: only before the ledger was first signed

    def is_empty(self, curs: Any) -> bool:
        """Whether the chain has no block yet."""
        curs.execute(self.count)
        return not curs.fetchone()["n"]

    def blocks(self, curs: Any, after: int, limit: int) -> list[Block]:
        """The chain's blocks ending after position `after`, in log order."""
        curs.execute(self.select_page, (after, limit))
        return [
            Block(
                first_position=r["first_position"],
                last_position=r["last_position"],
                events=r["events"],
                link=r["link"],
                mac=r["mac"],
                adopted=bool(r["adopted"]),
            )
            for r in curs.fetchall()
        ]

    def _adopt(self, curs: Any, before: int) -> None:
        """Chain the events stored before position `before` in one `adopted` block.

        Only `evaledger chain adopt` sets `adopting`; the same commit records `ChainAdopted`,
        so an adoption is always in the log (and `verify` says which range it covers).
        """
        curs.execute(self.select_before, (before,))
        rows = curs.fetchall()
        events = [
            StoredEvent(
                originator_id=r["originator_id"],
                originator_version=r["originator_version"],
                topic=r["topic"],
                state=bytes(r["state"]),
            )
            for r in rows
        ]
        self.append(curs, events, [r["notification_id"] for r in rows], adopted=True)


SQLITE_CHAIN_DDL = (
    f"CREATE TABLE IF NOT EXISTS {CHAIN_TABLE} ("
    "last_position INTEGER PRIMARY KEY, first_position INTEGER NOT NULL, "
    "events INTEGER NOT NULL, link TEXT NOT NULL, mac TEXT, adopted BOOLEAN NOT NULL)"
)


SQLITE_VERIFIED_DDL = (
    f"CREATE TABLE IF NOT EXISTS {VERIFIED_TABLE} ("
    "position INTEGER PRIMARY KEY, link TEXT NOT NULL, mac TEXT NOT NULL, "
    "verified_at TEXT NOT NULL)"
)


SQLITE_CHECKPOINTS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {CHECKPOINTS_TABLE} ("
    "tree_size INTEGER PRIMARY KEY, last_position INTEGER NOT NULL, root TEXT NOT NULL, "
    "frontier TEXT NOT NULL, note TEXT NOT NULL, signed_at TEXT NOT NULL)"
)


def postgres_chain_ddl(schema: str) -> str:
    """The chain table (and the verified checkpoints, the signed tree heads) on PostgreSQL."""
    return (
        f'CREATE TABLE IF NOT EXISTS "{schema}".{CHECKPOINTS_TABLE} ('
        "tree_size bigint PRIMARY KEY, last_position bigint NOT NULL, root text NOT NULL, "
        "frontier text NOT NULL, note text NOT NULL, signed_at text NOT NULL); "
        f'CREATE TABLE IF NOT EXISTS "{schema}".{CHAIN_TABLE} ('
        "last_position bigint PRIMARY KEY, first_position bigint NOT NULL, "
        "events integer NOT NULL, link text NOT NULL, mac text, adopted boolean NOT NULL); "
        f'CREATE TABLE IF NOT EXISTS "{schema}".{VERIFIED_TABLE} ('
        "position bigint PRIMARY KEY, link text NOT NULL, mac text NOT NULL, "
        "verified_at text NOT NULL)"
    )
