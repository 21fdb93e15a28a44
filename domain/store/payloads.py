"""The payload vault: sealed payloads' ciphertexts and the subjects' keys, in the event store.

Two tables beside the events (same database, so a payload is stored in the transaction of the
event that names it): `evaledger_payload_keys` (one AES-256 key per subject; erasure sets the key
to NULL and records when, by whom and why: the tombstone the case page reads) and
`evaledger_payloads` (ref → subject, nonce, ciphertext; erasure deletes the rows). Neither is
covered by the chain: the events hold the references (`domain/payloads.py`), so what these tables
lose on erasure never breaks a link. Kept apart from the chain and the recorders' own SQL.

A third table, `evaledger_store_settings` (name → value, when, by whom), holds what the store
decided once and every process must agree on: whether it seals (`SEAL_SETTING`, recorded when the
store is created, so an environment variable of a later process cannot make one store mix).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import StoredEvent

from evaledger.domain.errors import ConflictError
from evaledger.domain.payloads import encrypt, new_key
from evaledger.domain.store.chain import HashedStoredEvent

KEYS_TABLE = "evaledger_payload_keys"
PAYLOADS_TABLE = "evaledger_payloads"
SETTINGS_TABLE = "evaledger_store_settings"
SEAL_SETTING = "seal_payloads"
"""The setting row saying whether the store seals ("1") or keeps payloads inline ("0")."""

SQLITE_PAYLOAD_DDL = (
    f"CREATE TABLE IF NOT EXISTS {KEYS_TABLE} (subject TEXT PRIMARY KEY, key BLOB, "
    "created_at TEXT NOT NULL, erased_at TEXT, erased_by TEXT, reason TEXT)",
    f"CREATE TABLE IF NOT EXISTS {PAYLOADS_TABLE} (ref TEXT PRIMARY KEY, subject TEXT NOT NULL, "
    "nonce BLOB NOT NULL, ciphertext BLOB NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS ix_{PAYLOADS_TABLE}_subject ON {PAYLOADS_TABLE} (subject)",
    f"CREATE TABLE IF NOT EXISTS {SETTINGS_TABLE} (name TEXT PRIMARY KEY, value TEXT NOT NULL, "
    "set_at TEXT NOT NULL, set_by TEXT NOT NULL)",
)


def postgres_payload_ddl(schema: str) -> str:
    """The vault's tables on PostgreSQL."""
    return (
        f'CREATE TABLE IF NOT EXISTS "{schema}".{KEYS_TABLE} (subject text PRIMARY KEY, '
        "key bytea, created_at text NOT NULL, erased_at text, erased_by text, reason text); "
        f'CREATE TABLE IF NOT EXISTS "{schema}".{PAYLOADS_TABLE} (ref text PRIMARY KEY, '
        "subject text NOT NULL, nonce bytea NOT NULL, ciphertext bytea NOT NULL); "
        f"CREATE INDEX IF NOT EXISTS ix_{PAYLOADS_TABLE}_subject "
        f'ON "{schema}".{PAYLOADS_TABLE} (subject); '
        f'CREATE TABLE IF NOT EXISTS "{schema}".{SETTINGS_TABLE} (name text PRIMARY KEY, '
        "value text NOT NULL, set_at text NOT NULL, set_by text NOT NULL)"
    )


@dataclass(frozen=True)
class StoredPayload:
    """One payload as the vault holds it (key None: the subject's key was destroyed)."""

    ref: str
    subject: str
    nonce: bytes
    ciphertext: bytes
    key: bytes | None


@dataclass(frozen=True)
class Tombstone:
    """When, by whom and why a subject's payloads were erased."""

    erased_at: str
    erased_by: str
    reason: str


REFS_PER_QUERY = 500
"""Payload references per `IN (…)` read (`PayloadVault.get_many`)."""
_KEYS_AT_ONCE = 500
"""Subjects per key lookup (under every store's limit of bound parameters)."""


class PayloadVault:
    """The vault's SQL for one store (placeholder style and qualified table names)."""

    def __init__(self, placeholder: str, prefix: str = "") -> None:
        p = placeholder
        keys, payloads = f"{prefix}{KEYS_TABLE}", f"{prefix}{PAYLOADS_TABLE}"
        settings = f"{prefix}{SETTINGS_TABLE}"
        self.select_setting = f"SELECT value FROM {settings} WHERE name = {p}"
        self.insert_setting = (
            f"INSERT INTO {settings} (name, value, set_at, set_by) VALUES ({p}, {p}, "
            f"CURRENT_TIMESTAMP, {p}) ON CONFLICT (name) DO NOTHING"
        )
        self.update_setting = (
            f"UPDATE {settings} SET value = {p}, set_at = CURRENT_TIMESTAMP, set_by = {p} "
            f"WHERE name = {p}"
        )
        self.any_key = f"SELECT 1 FROM {keys} LIMIT 1"
        self.select_key = f"SELECT key, erased_at FROM {keys} WHERE subject = {p}"
        self._select_keys = f"SELECT subject, key FROM {keys} WHERE subject IN ({{}})"
        self._placeholder = p
        self.insert_key = (
            f"INSERT INTO {keys} (subject, key, created_at) VALUES ({p}, {p}, CURRENT_TIMESTAMP)"
        )
        self.insert_payload = (
            f"INSERT INTO {payloads} (ref, subject, nonce, ciphertext) VALUES ({p}, {p}, {p}, {p})"
        )
        self.select_payload = (
            f"SELECT p.ref, p.subject, p.nonce, p.ciphertext, k.key FROM {payloads} p "
            f"LEFT JOIN {keys} k ON k.subject = p.subject WHERE p.ref = {p}"
        )
        self.select_payloads = (
            f"SELECT p.ref, p.subject, p.nonce, p.ciphertext, k.key FROM {payloads} p "
            f"LEFT JOIN {keys} k ON k.subject = p.subject WHERE p.ref IN "
        )
        self._mark = p
        self.select_tombstone = (
            f"SELECT erased_at, erased_by, reason FROM {keys} "
            f"WHERE subject = {p} AND erased_at IS NOT NULL"
        )
        self.erase_key = (
            f"UPDATE {keys} SET key = NULL, erased_at = {p}, erased_by = {p}, reason = {p} "
            f"WHERE subject = {p}"
        )
        self.insert_tombstone = (
            f"INSERT INTO {keys} (subject, key, created_at, erased_at, erased_by, reason) "
            f"VALUES ({p}, NULL, {p}, {p}, {p}, {p})"
        )
        self.delete_payloads = f"DELETE FROM {payloads} WHERE subject = {p}"
        self.select_page = (
            f"SELECT p.ref, p.subject, p.nonce, p.ciphertext, k.key FROM {payloads} p "
            f"LEFT JOIN {keys} k ON k.subject = p.subject WHERE p.ref > {p} "
            f"ORDER BY p.ref LIMIT {p}"
        )

    def select_keys(self, n: int) -> str:
        """The keys (and subjects) of `n` subjects."""
        return self._select_keys.format(", ".join([self._placeholder] * n))

    def put(self, curs: Any, events: Sequence[StoredEvent]) -> None:
        """Encrypt and store the sealed payloads of a save (inside its transaction).

        One lookup of the save's subjects' keys, one insert of the new keys and one of the
        payloads (a save of a streamed import's chunk holds ~2,000 sealed events of 500
        subjects: a statement per payload and two per subject were a fifth of its write).
        """
        sealed = [
            e.sealed for e in events if isinstance(e, HashedStoredEvent) and e.sealed is not None
        ]
        if not sealed:
            return
        subjects = list(dict.fromkeys(s.subject for s in sealed))
        keys = self._keys(curs, subjects)
        new = [(subject, new_key()) for subject in subjects if subject not in keys]
        if new:
            curs.executemany(self.insert_key, new)
            keys.update(new)
        rows = []
        for s in sealed:
            nonce, ciphertext = encrypt(keys[s.subject], s)
            rows.append((s.ref, s.subject, nonce, ciphertext))
        curs.executemany(self.insert_payload, rows)

    def _keys(self, curs: Any, subjects: Sequence[str]) -> dict[str, bytes]:
        """The keys held for these subjects; an erased one (the first, in order) is a conflict."""
        found: dict[str, bytes | None] = {}
        for start in range(0, len(subjects), _KEYS_AT_ONCE):
            batch = subjects[start : start + _KEYS_AT_ONCE]
            curs.execute(self.select_keys(len(batch)), batch)
            found.update((str(row["subject"]), row["key"]) for row in curs.fetchall())
        for subject in subjects:
            if subject in found and found[subject] is None:
                raise ConflictError(
                    f"case {subject} was erased: it takes no new personal payloads", field="case"
                )
        return {subject: bytes(key) for subject, key in found.items() if key is not None}

    def get(self, curs: Any, ref: str) -> StoredPayload | None:
        """The stored payload of `ref` (None: deleted by erasure, or never stored)."""
        curs.execute(self.select_payload, (ref,))
        row = curs.fetchone()
        return None if row is None else _payload(row)

    def get_many(self, curs: Any, refs: Sequence[str]) -> dict[str, StoredPayload]:
        """The stored payloads of `refs` by reference (erased or never stored: absent)."""
        found: dict[str, StoredPayload] = {}
        for i in range(0, len(refs), REFS_PER_QUERY):
            chunk = tuple(refs[i : i + REFS_PER_QUERY])
            curs.execute(f"{self.select_payloads}({', '.join([self._mark] * len(chunk))})", chunk)
            for row in curs.fetchall():
                stored = _payload(row)
                found[stored.ref] = stored
        return found

    def tombstone(self, curs: Any, subject: str) -> Tombstone | None:
        """The subject's erasure record, if it was erased."""
        curs.execute(self.select_tombstone, (subject,))
        row = curs.fetchone()
        if row is None:
            return None
        return Tombstone(str(row["erased_at"]), str(row["erased_by"]), str(row["reason"]))

    def erase(self, curs: Any, subject: str, tombstone: Tombstone) -> None:
        """Destroy the subject's key (keeping the tombstone) and delete its ciphertexts."""
        t = tombstone
        curs.execute(self.select_key, (subject,))
        if curs.fetchone() is not None:
            curs.execute(self.erase_key, (t.erased_at, t.erased_by, t.reason, subject))
        else:
            curs.execute(
                self.insert_tombstone,
                (subject, t.erased_at, t.erased_at, t.erased_by, t.reason),
            )
        curs.execute(self.delete_payloads, (subject,))

    def setting(self, curs: Any, name: str) -> str | None:
        """A store setting's recorded value (None: never recorded)."""
        curs.execute(self.select_setting, (name,))
        row = curs.fetchone()
        return None if row is None else str(row["value"])

    def record_setting(self, curs: Any, name: str, value: str, by: str) -> str:
        """Record a setting unless one is (the first writer wins); the value that stands."""
        curs.execute(self.insert_setting, (name, value, by))
        stored = self.setting(curs, name)
        return value if stored is None else stored

    def has_keys(self, curs: Any) -> bool:
        """Whether any subject key (live or erased) was ever stored: the store has sealed."""
        curs.execute(self.any_key)
        return curs.fetchone() is not None

    def page(self, curs: Any, after: str, limit: int) -> list[StoredPayload]:
        """Stored payloads with a reference after `after`, in reference order."""
        curs.execute(self.select_page, (after, limit))
        return [_payload(r) for r in curs.fetchall()]


def _payload(row: Any) -> StoredPayload:
    key = row["key"]
    return StoredPayload(
        str(row["ref"]),
        str(row["subject"]),
        bytes(row["nonce"]),
        bytes(row["ciphertext"]),
        None if key is None else bytes(key),
    )
