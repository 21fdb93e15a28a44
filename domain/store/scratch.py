"""Scratch state on disk: a streamed import's per-case ids and hashes, outside memory.

A streamed import keeps, for every case it built, the case's id (a case met twice is refused)
and the hash of its last event (the run's seal covers every case). Held in memory that grew with
the run (~0.6 KB per case: a 100,000-case import peaked ×1.46 over a 10,000-case one, issue 32);
here they live in a private temporary SQLite file (`sqlite3.connect("")`: on disk, deleted when
closed), with a small page cache, so memory stays flat in the run's size.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from uuid import UUID

_CACHE_KIB = 4096
"""The scratch file's page cache (KiB): what of it may sit in memory."""
_IN_BATCH = 500
"""Ids per `IN (...)` lookup (under every SQLite's limit of bound parameters)."""


class CaseIndex:
    """Case id → last hash (32 bytes) of the cases an import built, on disk, in id order."""

    def __init__(self) -> None:
        self._db = sqlite3.connect("", isolation_level=None)
        for pragma in ("journal_mode = OFF", "synchronous = OFF", f"cache_size = -{_CACHE_KIB}"):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute(
            "CREATE TABLE cases (id BLOB PRIMARY KEY, hash BLOB NOT NULL) WITHOUT ROWID"
        )
        self._count = 0

    def known(self, ids: Sequence[UUID]) -> set[UUID]:
        """Those of `ids` already held."""
        found: set[UUID] = set()
        for start in range(0, len(ids), _IN_BATCH):
            batch = [i.bytes for i in ids[start : start + _IN_BATCH]]
            marks = ",".join("?" * len(batch))
            rows = self._db.execute(f"SELECT id FROM cases WHERE id IN ({marks})", batch)
            found.update(UUID(bytes=r[0]) for r in rows)
        return found

    def add(self, pairs: Iterable[tuple[UUID, str]]) -> None:
        """Hold these (case id, last hash as lowercase hex); an id already held is an error."""
        rows = [(cid.bytes, _compact(cid, h)) for cid, h in pairs]
        self._db.execute("BEGIN")
        try:
            self._db.executemany("INSERT INTO cases (id, hash) VALUES (?, ?)", rows)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        self._count += len(rows)

    def __contains__(self, case_id: object) -> bool:
        if not isinstance(case_id, UUID):
            return False
        row = self._db.execute("SELECT 1 FROM cases WHERE id = ?", (case_id.bytes,)).fetchone()
        return row is not None

    def __len__(self) -> int:
        return self._count

    def in_id_order(self) -> Iterator[tuple[UUID, str]]:
        """Every (case id, last hash) in the order of the ids' bytes (= their text's order)."""
        for raw, digest in self._db.execute("SELECT id, hash FROM cases ORDER BY id"):
            yield UUID(bytes=raw), digest.hex()

    def close(self) -> None:
        """Delete the scratch file."""
        with contextlib.suppress(sqlite3.Error):
            self._db.close()

    def __enter__(self) -> CaseIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _compact(case_id: UUID, digest: str) -> bytes:
    raw = bytes.fromhex(digest)
    if raw.hex() != digest:  # not lowercase hex: no compact form
        raise AssertionError(f"case {case_id}: last hash {digest!r} is not hex")
    return raw
