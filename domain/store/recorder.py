"""What the ledger needs of an event store beyond what eventsourcing's recorder offers.

The chain, the seal's last hashes, the schema's readiness: each store's recorder provides them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from evaledger.domain.payloads import (
    PAYLOAD_KEY,
    SEALED_TEXT,
    PayloadError,
    decrypt,
    erased_text,
    unseal_state,
    unsealed_copy,
)
from evaledger.domain.store.chain import Block, ChainWriter
from evaledger.domain.store.errors import first_line, statement_errors, store_errors
from evaledger.domain.store.lanes import lane_of
from evaledger.domain.store.payloads import SEAL_SETTING, PayloadVault, StoredPayload, Tombstone

log = logging.getLogger("evaledger")

LaneRow = tuple[int, int | None, int | None]
"""(position, lane, lane position) of one stored event (None: a row stored without a lane)."""

LogRow = tuple[int, str, int, str, bytes]
"""One event of the log as plain values: (position, aggregate id as canonical UUID text,
aggregate version, topic, stored state). What replay reads instead of notification objects."""


@dataclass(frozen=True)
class CheckpointRow:
    """One stored signed tree head.

    Its size, the log position of its last leaf, its root (hex), the frontier to extend it
    (JSON list of hex), the signed note and when it was signed.
    """

    tree_size: int
    last_position: int
    root: str
    frontier: str
    note: str
    signed_at: str


def _checkpoint_row(r: Any) -> CheckpointRow:
    return CheckpointRow(
        int(r["tree_size"]),
        int(r["last_position"]),
        str(r["root"]),
        str(r["frontier"]),
        str(r["note"]),
        str(r["signed_at"]),
    )


class LedgerRecorder:
    """The ledger's side of a recorder; mixed into eventsourcing's own recorder of each store."""

    chain: ChainWriter
    vault: PayloadVault
    datastore: Any
    _name: str

    lanes: int = 1
    """Write lanes of this store (`store/lanes.py`): SQLite has one, PostgreSQL `LANES`."""
    pins: dict[str, int] = {}
    """Projects pinned to a lane (read at start-up; only a migration writes pins)."""

    def lane_for(self, project: str | None) -> int:
        """The write lane of `project`'s events (None: a store-wide record)."""
        return lane_of(project, self.pins, self.lanes)

    def read_pins(self) -> dict[str, int]:
        """The stored pins (none on a one-lane store)."""
        return {}

    def lane_rows(self, start: int, limit: int) -> list[LaneRow]:
        """(position, lane, lane position) from position `start`, in log order.

        A one-lane store (SQLite) stores no lane: every event is lane 0 at its own position.
        """
        return [(n.id, 0, n.id) for n in cast(Any, self).select_notifications(start, limit)]

    def lane_heads(self) -> dict[int, int]:
        """The last lane position of every lane holding events (a one-lane store: lane 0)."""
        head = cast(Any, self).max_notification_id() or 0
        return {0: head} if head else {}

    def lanes_upto(self, position: int) -> dict[int, int]:
        """Per lane, the last lane position of the events at log positions up to `position`.

        Within a lane, log positions grow with lane positions (a lane's writers take its lock
        before the sequence gives them ids), so this is each lane's prefix written by then: what
        "everything up to position P" means once lanes commit concurrently. One lane: {0: P}.
        """
        return {0: position} if position > 0 else {}

    def lane_log_rows(self, lane: int, after: int, limit: int) -> tuple[list[LogRow], list[int]]:
        """Up to `limit` events of `lane` after lane position `after`, in the lane's order.

        The rows as `log_rows` gives them, and each one's lane position. A one-lane store
        (SQLite): lane 0 is the log, its lane positions the log positions.
        """
        if lane != 0:
            return [], []
        rows = self.log_rows(after + 1, limit)
        return rows, [r[0] for r in rows]

    def lane_notifications(
        self, lane: int, after: int, topics: Sequence[str], limit: int
    ) -> list[tuple[int, Any]]:
        """Up to `limit` events of `lane` with these topics after lane position `after`.

        Each as (lane position, eventsourcing notification), in the lane's order. One lane
        (SQLite): lane 0 is the log.
        """
        if lane != 0:
            return []
        page = cast(Any, self).select_notifications(after + 1, limit, topics=list(topics))
        return [(n.id, n) for n in page]

    def use_checkpoint_key(self, key: bytes | None) -> None:
        """Sign every commit's chain block with `key` (None: unsigned blocks)."""
        self.chain.key = key

    def prepare(self, env: dict[str, str], *, migrate: bool, app_role: str | None) -> None:
        """Make the tables ready before the first command (the recorder created them already)."""

    def check_append_only(self) -> None:
        """Refuse to serve a store that lets its events change (nothing to check by default)."""

    select_log: str
    """The SELECT of `log_rows` (each store's own SQL, two parameters: start, limit)."""

    def log_rows(self, start: int, limit: int) -> list[LogRow]:
        """Up to `limit` events from position `start` (inclusive), in log order, as plain tuples.

        One cursor, no notification object and no UUID object per event: the store gives the
        aggregate id as canonical text. Catch-up and rebuild read the log through this.
        """
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            curs.execute(self.select_log, (start, limit))
            return [self.log_row(row) for row in curs.fetchall()]

    @staticmethod
    def log_row(row: Any) -> LogRow:
        """A fetched row of `select_log` as a `LogRow` (per store: rows are tuples or dicts)."""
        return cast(LogRow, tuple(row))

    def chain_blocks(self, after: int, limit: int) -> list[Block]:
        """Blocks ending after position `after`, in log order."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            return self.chain.blocks(curs, after, limit)

    def commit_verifies(self, originator_id: UUID, version: int, key: bytes | None) -> bool:
        """Whether the commit that wrote this event stands (see `ChainWriter.commit_verifies`)."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            return self.chain.commit_verifies(curs, originator_id, version, key)

    def last_verified(self) -> tuple[int, str, str] | None:
        """(position, link, signature) of the last checkpoint a keyed `verify` recorded."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            curs.execute(self.chain.select_verified)
            row = curs.fetchone()
        return None if row is None else (row["position"], row["link"], row["mac"])

    def record_verified(self, position: int, link: str, mac: str, at: str) -> bool:
        """Remember a verified checkpoint (a later one only); False when this role cannot.

        Best effort: a verifier with read-only access (an auditor's role, a replica) still
        verifies; its next run is a full one.
        """
        last = self.last_verified()
        if last is not None and last[0] >= position:
            return True
        try:
            with store_errors(self._name), self.datastore.transaction(commit=True) as curs:
                curs.execute(self.chain.insert_verified, (position, link, mac, at))
        except statement_errors() as e:
            log.warning("could not record the verified checkpoint %s: %s", position, e)
            return False
        return True

    def checkpoints(self, after_size: int, limit: int) -> list[CheckpointRow]:
        """Stored signed tree heads larger than `after_size`, smallest first."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            curs.execute(self.chain.select_checkpoints, (after_size, limit))
            return [_checkpoint_row(r) for r in curs.fetchall()]

    def last_checkpoint(self) -> CheckpointRow | None:
        """The largest stored signed tree head."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            curs.execute(self.chain.select_last_checkpoint)
            row = curs.fetchone()
        return None if row is None else _checkpoint_row(row)

    def record_checkpoint(self, row: CheckpointRow) -> None:
        """Store a signed tree head (a size already stored, or smaller, is left as it is).

        Two signers racing to store the same size: the second's insert fails on the key and the
        one stored stands (both signed the same tree).
        """
        last = self.last_checkpoint()
        if last is not None and last.tree_size >= row.tree_size:
            return
        values = (
            row.tree_size,
            row.last_position,
            row.root,
            row.frontier,
            row.note,
            row.signed_at,
        )
        try:
            with store_errors(self._name), self.datastore.transaction(commit=True) as curs:
                curs.execute(self.chain.insert_checkpoint, values)
        except statement_errors():
            stored = self.last_checkpoint()
            if stored is None or stored.tree_size < row.tree_size:
                raise

    # -- the payload vault (`store/payloads.py`) ------------------------------------------------

    def sealing(self, requested: bool | None) -> bool:
        """Whether this store seals payloads: its recorded setting, else decided (and recorded).

        The store's record wins over `requested` (the opening process's setting). With none:
        a store without events is new and records `requested` (None: seal, the default); a
        store with events predates the setting: it seals when its vault holds a key (it was
        sealing under the old opt-in) or when `requested` is True (the operator turns sealing
        on), recorded either way; otherwise it keeps its payloads inline and records nothing,
        so turning sealing on later stays possible. A role that may not write the record (a
        read-only auditor) uses the decision without recording it.
        """
        try:
            with self.datastore.transaction(commit=False) as curs:
                stored = self.vault.setting(curs, SEAL_SETTING)
                had_keys = stored is None and self.vault.has_keys(curs)
        except statement_errors() as e:  # a store not migrated since issue 34: no table yet
            log.info("store settings not readable: %s", first_line(e))
            stored, had_keys = None, False
        if stored is not None:
            if requested is not None and requested != (stored == "1"):
                log.warning(
                    "%s was created %s: EVALEDGER_SEAL_PAYLOADS=%d is ignored",
                    self._name,
                    "sealing payloads" if stored == "1" else "with payloads inline",
                    requested,
                )
            return stored == "1"
        new = not (cast(Any, self).max_notification_id() or 0)
        if new:
            seal, why = requested is not False, "store created"
        elif had_keys or requested:
            seal, why = True, "sealing on (store with events)"
        else:
            return False  # a store from before the setting: inline, nothing recorded
        try:
            with self.datastore.transaction(commit=True) as curs:
                value = self.vault.record_setting(curs, SEAL_SETTING, "1" if seal else "0", why)
        except statement_errors() as e:
            log.warning("%s: could not record whether it seals: %s", self._name, first_line(e))
            return seal
        return value == "1"

    def turn_sealing_on(self, by: str) -> bool:
        """Record that the store seals from now on; False when it did already."""
        with store_errors(self._name), self.datastore.transaction(commit=True) as curs:
            if self.vault.setting(curs, SEAL_SETTING) == "1":
                return False
            if self.vault.record_setting(curs, SEAL_SETTING, "1", by) != "1":
                curs.execute(self.vault.update_setting, ("1", by, SEAL_SETTING))
        return True

    def unseal(self, data: dict[str, Any]) -> dict[str, Any]:
        """A decoded sealed state with its strings back: decrypted, or the erasure's wording.

        A payload that is missing without an erasure, or that does not open, reads as
        `SEALED_TEXT` here; `verify --full` names it (`payload_problems`).
        """
        values, tomb = self._open(data)
        if values is not None:
            return unseal_state(data, values)
        if tomb is not None:
            return unseal_state(data, erased_text(tomb.erased_at, tomb.erased_by, tomb.reason))
        return unseal_state(data, SEALED_TEXT)

    def open_sealed(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """A decoded sealed state with its strings decrypted; None when its payload does not open.

        What an index of the plaintext reads (the search projection): an erased, missing or
        damaged payload gives None rather than a wording, so no placeholder is taken for text.
        """
        values, _ = self._open(data)
        return unseal_state(data, values) if values is not None else None

    def open_sealed_many(self, states: Sequence[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """`open_sealed` of copies of many sealed states, their payloads read in one transaction.

        A catch-up's page of sealed events (the search projection's plaintext) reads the vault
        once instead of once per event. Each state is left as it was (`unsealed_copy`).
        """
        entries = [state[PAYLOAD_KEY] for state in states]
        refs = sorted({str(entry["ref"]) for entry in entries})
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            stored = self.vault.get_many(curs, refs)
        out: list[dict[str, Any] | None] = []
        for state, entry in zip(states, entries, strict=True):
            ref, subject = str(entry["ref"]), str(entry["subject"])
            found = stored.get(ref)
            values: list[str] | None = None
            if found is not None and found.key is not None:
                try:
                    values = decrypt(found.key, ref, subject, found.nonce, found.ciphertext)
                except PayloadError:
                    values = None
            out.append(None if values is None else unsealed_copy(state, values))
        return out

    def _open(self, data: dict[str, Any]) -> tuple[list[str] | None, Tombstone | None]:
        """The payload's strings (None: not stored, keyless or not opening), and its tombstone."""
        entry = data[PAYLOAD_KEY]
        ref, subject = str(entry["ref"]), str(entry["subject"])
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            stored = self.vault.get(curs, ref)
            tomb = self.vault.tombstone(curs, subject) if stored is None else None
        if stored is not None and stored.key is not None:
            try:
                return decrypt(stored.key, ref, subject, stored.nonce, stored.ciphertext), None
            except PayloadError:
                return None, None
        return None, tomb

    def tombstone(self, subject: str) -> Tombstone | None:
        """When, by whom and why a subject's payloads were erased (None: not erased)."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            return self.vault.tombstone(curs, subject)

    def payload(self, ref: str) -> StoredPayload | None:
        """One stored payload (None: erased or never stored)."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            return self.vault.get(curs, ref)

    def payload_page(self, after: str, limit: int) -> list[StoredPayload]:
        """Stored payloads after a reference, in reference order (what verify walks)."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            return self.vault.page(curs, after, limit)

    def erase_payloads(self, subject: str, tombstone: Tombstone) -> None:
        """Destroy a subject's key and ciphertexts (each store also clears the freed bytes)."""
        with store_errors(self._name), self.datastore.transaction(commit=True) as curs:
            self.vault.erase(curs, subject, tombstone)

    def last_stored(self, originator_ids: Sequence[UUID]) -> dict[UUID, tuple[str, bytes]]:
        """(topic, state) of the last stored event of each aggregate that has one."""
        found: dict[UUID, tuple[str, bytes]] = {}
        select = cast(Any, self).select_events
        for oid in originator_ids:
            last = select(oid, desc=True, limit=1)
            if last:
                found[oid] = (last[0].topic, bytes(last[0].state))
        return found
