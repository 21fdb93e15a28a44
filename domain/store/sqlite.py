"""The SQLite event store: eventsourcing's recorder, chaining each commit."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor, SQLiteDatastore

from evaledger.domain.store.chain import (
    SQLITE_CHAIN_DDL,
    SQLITE_CHECKPOINTS_DDL,
    SQLITE_VERIFIED_DDL,
    ChainWriter,
)
from evaledger.domain.store.errors import store_errors
from evaledger.domain.store.payloads import SQLITE_PAYLOAD_DDL, PayloadVault, Tombstone
from evaledger.domain.store.recorder import LedgerRecorder

LAST_STORED_BATCH = 500
"""Aggregate ids per query reading their last stored events (sealing a run)."""


class ChainedSQLiteApplicationRecorder(LedgerRecorder, SQLiteApplicationRecorder):
    """eventsourcing's SQLite recorder, appending each commit's block to the ledger chain.

    SQLite has one writer at a time: the events are inserted first (which takes the write
    lock), so the chain's last block read next is the one this commit follows.
    """

    def __init__(
        self, datastore: SQLiteDatastore, events_table_name: str = "stored_events"
    ) -> None:
        super().__init__(datastore, events_table_name)
        self.chain = ChainWriter("?", events_table_name, "rowid", hex_ids=True)
        self.vault = PayloadVault("?")
        self._name = f"the SQLite event store {datastore.pool.db_name}"
        # Ids are stored as 32 hex digits (eventsourcing writes `UUID.hex`): formatted here.
        o = "originator_id"
        canonical = "||'-'||".join(
            f"substr({o},{a},{n})" for a, n in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))
        )
        self.select_log = (
            f"SELECT rowid, CASE length({o}) WHEN 32 THEN lower({canonical}) ELSE lower({o}) END,"
            f" originator_version, topic, state FROM {events_table_name}"
            " WHERE rowid >= ? ORDER BY rowid LIMIT ?"
        )
        t = events_table_name
        self.select_inserted = (
            f"SELECT last_insert_rowid(), (SELECT max(rowid) FROM {t}), (SELECT count(*) FROM {t}"
            " WHERE rowid BETWEEN last_insert_rowid() - ? AND last_insert_rowid())"
        )
        self.select_rowid = (
            f"SELECT rowid FROM {t} WHERE originator_id = ? AND originator_version = ?"
        )
        self.select_last_stored = (
            f"SELECT originator_id, topic, state, max(originator_version) FROM {t}"
            " WHERE originator_id IN ({}) GROUP BY originator_id"
        )

    def construct_create_table_statements(self) -> list[str]:
        """The events table, the chain and the verified checkpoints."""
        return [
            *super().construct_create_table_statements(),
            SQLITE_CHAIN_DDL,
            SQLITE_VERIFIED_DDL,
            SQLITE_CHECKPOINTS_DDL,
            *SQLITE_PAYLOAD_DDL,
        ]

    def create_table(self) -> None:
        """Create the tables (a store that predates the chain is adopted only explicitly)."""
        # Opening errors (a corrupt file) are left to the caller, which names the store's URL.
        with self.datastore.transaction(commit=True) as c:
            self._create_table(c)

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = self._insert_rows(c, stored_events)
        self.chain.append(c, stored_events, ids)
        self.vault.put(c, stored_events)
        return ids

    def _insert_rows(self, c: SQLiteCursor, stored_events: Sequence[StoredEvent]) -> list[int]:
        """Insert a save's events with one `executemany`; their rowids (positions) in order.

        eventsourcing inserts one row per `execute` to read each `lastrowid`. The transaction
        holds the database's one write lock from its first insert, and SQLite gives a new row
        the largest rowid plus one, so a save's rows take consecutive rowids ending at
        `last_insert_rowid()`, then the largest rowid: both checked, with their count. Only
        when that fails (a row stored outside evaledger at the largest rowid SQLite has makes
        it pick rowids at random) is each row's rowid looked up.
        """
        rows = [
            (
                e.originator_id.hex if isinstance(e.originator_id, UUID) else e.originator_id,
                e.originator_version,
                e.topic,
                e.state,
            )
            for e in stored_events
        ]
        c.executemany(self.insert_events_statement, rows)
        n = len(rows)
        c.execute(self.select_inserted, (n - 1,))
        last, top, count = c.fetchone()
        if last == top and count == n:
            return list(range(last - n + 1, last + 1))
        ids = []
        for oid, version, _, _ in rows:
            c.execute(self.select_rowid, (oid, version))
            ids.append(c.fetchone()[0])
        return ids

    def insert_events(
        self, stored_events: Sequence[StoredEvent], *, lane: int | None = None, **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert events and their chain block in one transaction (lane 0: the one lane)."""
        if lane != 0:
            raise ValueError("insert_events: SQLite has one write lane: lane=0 is required")
        with store_errors(self._name):
            return super().insert_events(stored_events, **kwargs)

    def erase_payloads(self, subject: str, tombstone: Tombstone) -> None:
        """Destroy a subject's key and ciphertexts, then make SQLite forget the bytes.

        `secure_delete` overwrites the freed cells with zeros; `VACUUM` rebuilds the file without
        the freed pages; a truncating WAL checkpoint empties the write-ahead log that held them.
        """
        with store_errors(self._name), self.datastore.transaction(commit=True) as c:
            c.execute("PRAGMA secure_delete = ON")
            self.vault.erase(c, subject, tombstone)
        # VACUUM runs outside a transaction: a connection of its own, in autocommit mode.
        raw = sqlite3.connect(self.datastore.pool.db_name, isolation_level=None)
        try:
            with store_errors(self._name):
                raw.execute("VACUUM")
                raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            raw.close()

    def last_stored(self, originator_ids: Sequence[UUID]) -> dict[UUID, tuple[str, bytes]]:
        """(topic, state) of each aggregate's last stored event: a query per batch of ids.

        SQLite gives a bare column of a `max()` aggregate from the row holding the maximum.
        """
        found: dict[UUID, tuple[str, bytes]] = {}
        ids = list(originator_ids)
        by_hex = {oid.hex: oid for oid in ids}
        with store_errors(self._name), self.datastore.transaction(commit=False) as c:
            for start in range(0, len(ids), LAST_STORED_BATCH):
                batch = [oid.hex for oid in ids[start : start + LAST_STORED_BATCH]]
                c.execute(self.select_last_stored.format(",".join("?" * len(batch))), batch)
                for row in c.fetchall():
                    oid = by_hex.get(row[0])
                    if oid is not None:
                        found[oid] = (row[1], bytes(row[2]))
        return found

    def select_events(self, originator_id: UUID | str, **kwargs: Any) -> Sequence[StoredEvent]:
        """One aggregate's events."""
        with store_errors(self._name):
            return super().select_events(originator_id, **kwargs)

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """A page of the log."""
        with store_errors(self._name):
            return super().select_notifications(
                start, limit, stop, topics, inclusive_of_start=inclusive_of_start
            )

    def max_notification_id(self) -> int:
        """The log's head."""
        with store_errors(self._name):
            return super().max_notification_id()
