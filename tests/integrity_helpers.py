"""Raw access to a store's tables, as an attacker with database access has it (tamper tests)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

import orjson

from evaledger.api.bootstrap import Services
from evaledger.domain.aggregates import seal_of
from evaledger.domain.events import GENESIS_HASH, CasesAttached, RunCompleted, stored_hash
from evaledger.domain.payloads import PAYLOAD_KEY
from evaledger.domain.store.chain import (
    CHAIN_TABLE,
    GENESIS_LINK,
    VERIFIED_TABLE,
    link_of,
    mac_of,
)
from evaledger.domain.store.payloads import PAYLOADS_TABLE


@dataclass(frozen=True)
class Row:
    """One stored event."""

    position: int
    originator_id: UUID
    version: int
    topic: str
    state: bytes

    def data(self) -> dict[str, Any]:
        """The decoded state."""
        loaded: dict[str, Any] = orjson.loads(self.state)
        return loaded


@dataclass(frozen=True)
class RawBlock:
    """One row of the chain table."""

    first_position: int
    last_position: int
    events: int
    link: str
    mac: str | None
    adopted: bool


class RawStore:
    """Direct SQL on the events and chain tables, bypassing evaledger (and its triggers)."""

    def __init__(self, services: Services) -> None:
        self.kind = services.location.kind
        if self.kind == "sqlite":
            self.conn: Any = sqlite3.connect(
                services.location.events_env["SQLITE_DBNAME"], isolation_level=None
            )
            self.table, self.pos, self.p = "stored_events", "rowid", "?"
        else:
            import psycopg

            self.conn = psycopg.connect(services.settings.db, autocommit=True)
            # A superuser can switch triggers off for its session: the trigger is no defence
            # against the database owner, which is why the chain exists.
            self.conn.execute("SET session_replication_role = replica")
            self.table, self.pos, self.p = "evaledger_events", "notification_id", "%s"

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def _oid(self, oid: UUID) -> Any:
        return oid.hex if self.kind == "sqlite" else oid

    def rows(self) -> list[Row]:
        """Every stored event in log order."""
        cur = self.conn.execute(
            f"SELECT {self.pos}, originator_id, originator_version, topic, state "
            f"FROM {self.table} ORDER BY {self.pos}"
        )
        return [
            Row(pos, oid if isinstance(oid, UUID) else UUID(oid), ver, topic, bytes(state))
            for pos, oid, ver, topic, state in cur.fetchall()
        ]

    def row(self, position: int) -> Row:
        """The event at a position."""
        return next(r for r in self.rows() if r.position == position)

    def update(self, old: Row, new: Row) -> None:
        """Overwrite the event at `old.position` with `new`'s columns."""
        p = self.p
        self.conn.execute(
            f"UPDATE {self.table} SET originator_id = {p}, originator_version = {p}, "
            f"topic = {p}, state = {p} WHERE {self.pos} = {p}",
            (self._oid(new.originator_id), new.version, new.topic, new.state, old.position),
        )

    def edit(self, position: int, old: bytes, new: bytes) -> None:
        """Replace bytes in an event's stored state."""
        row = self.row(position)
        assert old in row.state, (old, row.state)
        self.update(row, replace(row, state=row.state.replace(old, new)))

    def delete(self, *positions: int) -> None:
        """Delete events, with the sealed payloads they name (as a restored backup lacks both).

        A store seals by default: leaving a deleted event's payload in the vault would let a
        full `verify` see it as named by no event, which a careful attacker (or a rollback to an
        older copy of the database) does not leave. The vault's own findings are tested with
        erasure (`tests/domain/test_erasure.py`).
        """
        for position in positions:
            ref = (self.row(position).data().get(PAYLOAD_KEY) or {}).get("ref")
            self.conn.execute(
                f"DELETE FROM {self.table} WHERE {self.pos} = {self.p}",
                (position,),
            )
            if ref is not None:
                self.conn.execute(f"DELETE FROM {PAYLOADS_TABLE} WHERE ref = {self.p}", (ref,))

    def insert(self, oid: UUID, version: int, topic: str, state: bytes) -> int:
        """Append an event the way a raw INSERT would; returns its position."""
        p = self.p
        self.conn.execute(
            f"INSERT INTO {self.table} (originator_id, originator_version, topic, state) "
            f"VALUES ({p}, {p}, {p}, {p})",
            (self._oid(oid), version, topic, state),
        )
        return max(r.position for r in self.rows())

    def blocks(self) -> list[RawBlock]:
        """The chain table."""
        cur = self.conn.execute(
            "SELECT first_position, last_position, events, link, mac, adopted "
            f"FROM {CHAIN_TABLE} ORDER BY last_position"
        )
        return [RawBlock(f, la, n, link, mac, bool(a)) for f, la, n, link, mac, a in cur]

    def replace_blocks(self, blocks: list[RawBlock]) -> None:
        """Rewrite the chain table."""
        p = self.p
        self.conn.execute(f"DELETE FROM {CHAIN_TABLE}")
        for b in blocks:
            self.conn.execute(
                f"INSERT INTO {CHAIN_TABLE} (first_position, last_position, events, link, mac, "
                f"adopted) VALUES ({p}, {p}, {p}, {p}, {p}, {p})",
                (b.first_position, b.last_position, b.events, b.link, b.mac, b.adopted),
            )

    def delete_block(self, last_position: int) -> None:
        """Delete one chain row."""
        self.conn.execute(
            f"DELETE FROM {CHAIN_TABLE} WHERE last_position = {self.p}",
            (last_position,),
        )

    def rehash_aggregates(self) -> None:
        """Recompute every prev_hash and every seal from the (edited) stored events."""
        last: dict[UUID, str] = {}
        run_cases: dict[UUID, list[UUID]] = {}
        for row in self.rows():
            data = row.data()
            data["prev_hash"] = last.get(row.originator_id, GENESIS_HASH)
            if row.topic == CasesAttached.topic():
                run_cases.setdefault(row.originator_id, []).extend(
                    UUID(c) for c in data["case_ids"]
                )
            elif row.topic == RunCompleted.topic():
                cases = run_cases.get(row.originator_id, [])
                data["seal"] = seal_of({c: last.get(c, GENESIS_HASH) for c in cases})
            state = orjson.dumps(data)
            if state != row.state:
                self.update(row, replace(row, state=state))
            last[row.originator_id] = stored_hash(row.topic, state)

    def rechain(self, key: bytes | None = None, keep_macs: bool = True) -> None:
        """Recompute every chain link over the stored events (signing with `key` if given)."""
        rows = self.rows()
        prev = GENESIS_LINK
        blocks = []
        for b in self.blocks():
            entries = [
                (r.position, r.originator_id, r.version, stored_hash(r.topic, r.state))
                for r in rows
                if b.first_position <= r.position <= b.last_position
            ]
            link = link_of(prev, entries)
            mac = mac_of(key, b.last_position, link) if key else (b.mac if keep_macs else None)
            blocks.append(replace(b, events=len(entries), link=link, mac=mac))
            prev = link
        self.replace_blocks(blocks)

    def insert_at(self, position: int, oid: UUID, version: int, topic: str, state: bytes) -> None:
        """Insert an event at a chosen position (0 and below included)."""
        p = self.p
        self.conn.execute(
            f"INSERT INTO {self.table} ({self.pos}, originator_id, originator_version, topic, "
            f"state) VALUES ({p}, {p}, {p}, {p}, {p})",
            (position, self._oid(oid), version, topic, state),
        )

    def empty_chain(self) -> None:
        """DELETE FROM the chain table."""
        self.conn.execute(f"DELETE FROM {CHAIN_TABLE}")

    def forget_verified(self) -> None:
        """DELETE FROM the verified checkpoints (the next keyed verify walks the whole log)."""
        self.conn.execute(f"DELETE FROM {VERIFIED_TABLE}")

    def drop_chain(self) -> None:
        """DROP the chain table."""
        self.conn.execute(f"DROP TABLE {CHAIN_TABLE}")
