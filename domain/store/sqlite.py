"""The SQLite event store: eventsourcing's recorder, chaining each commit."""

from __future__ import annotations

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
from evaledger.domain.store.recorder import LedgerRecorder


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

    def construct_create_table_statements(self) -> list[str]:
        """The events table, the chain and the verified checkpoints."""
        return [
            *super().construct_create_table_statements(),
            SQLITE_CHAIN_DDL,
            SQLITE_VERIFIED_DDL,
            SQLITE_CHECKPOINTS_DDL,
        ]

    def create_table(self) -> None:
        """Create the tables (a store that predates the chain is adopted only explicitly)."""
        # Opening errors (a corrupt file) are left to the caller, which names the store's URL.
        with self.datastore.transaction(commit=True) as c:
            self._create_table(c)

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = super()._insert_events(c, stored_events, **kwargs)
        assert ids is not None
        self.chain.append(c, stored_events, ids)
        return ids

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert events and their chain block in one transaction."""
        with store_errors(self._name):
            return super().insert_events(stored_events, **kwargs)

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
