"""What importing a run works with: chunk size, result, chunks, the event spool.

The import commands themselves are the ledger's (`Ledger.import_bundle`, `Ledger.import_stream`
in `ledger.py`); this module holds what they use that needs no ledger (and what importers read:
`IMPORT_CHUNK`, `ImportResult`).
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO
from uuid import UUID

import orjson
from eventsourcing.persistence import StoredEvent

from evaledger.domain.bundle import BundleCase
from evaledger.domain.payloads import Sealed
from evaledger.domain.store.chain import HashedStoredEvent

IMPORT_CHUNK = 500
"""Cases per transaction of a streamed import: big enough to amortise a commit, small enough
to keep memory flat."""


@dataclass
class ImportResult:
    """Outcome of importing one bundle."""

    run_id: UUID
    run_key: str
    position: int
    events: int
    cases: int
    new_cases: int = 0
    case_ids: list[UUID] = field(default_factory=list)


def chunks(cases: Iterable[BundleCase], size: int) -> Iterator[list[BundleCase]]:
    """The cases in lists of `size` (the last one shorter)."""
    chunk: list[BundleCase] = []
    for case in cases:
        chunk.append(case)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


_HEAD = struct.Struct("<16sqIIIB")
"""One spooled event's head: originator id, version, topic, state and sealed payload lengths,
and the length of its hash (hex) as the domain computed it (0: none, the chain computes it)."""


def _sealed_bytes(sealed: Sealed) -> bytes:
    return orjson.dumps([sealed.ref, sealed.subject, sealed.plaintext.decode()])


def _sealed_of(data: bytes) -> Sealed:
    ref, subject, plaintext = orjson.loads(data)
    return Sealed(ref, subject, plaintext.encode())


class EventSpool:
    """The stored events of an import, validated and built once, kept on disk until written.

    A streamed import builds every chunk (each case validated once) before it writes any, so
    bad input stores nothing; the built events wait here, in a temporary file (not in memory),
    with the boundaries of the chunks they were built in: each chunk is written in one
    transaction, in order. Memory stays one chunk's events.
    """

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="evaledger-import-")  # noqa: SIM115
        self._chunks: list[tuple[int, int]] = []
        """(events, cases) of each chunk, in order."""

    def add(self, events: Sequence[StoredEvent], cases: int) -> None:
        """Keep one chunk's stored events (in write order) and how many cases it holds."""
        parts: list[bytes] = []
        put = parts.append
        for e in events:
            topic = e.topic.encode()
            oid = e.originator_id if isinstance(e.originator_id, UUID) else UUID(e.originator_id)
            # A sealed event's payload goes with it, for the vault to encrypt at the write, and
            # its hash, which the chain would otherwise compute again.
            sealed, digest = (
                (e.sealed, e.hash.encode()) if isinstance(e, HashedStoredEvent) else (None, b"")
            )
            payload = b"" if sealed is None else _sealed_bytes(sealed)
            put(
                _HEAD.pack(
                    oid.bytes,
                    e.originator_version,
                    len(topic),
                    len(e.state),
                    len(payload),
                    len(digest),
                )
            )
            put(topic)
            put(e.state)
            put(payload)
            put(digest)
        self._file.write(b"".join(parts))
        self._chunks.append((len(events), cases))

    def chunks(self) -> Iterator[tuple[list[StoredEvent], int]]:
        """Each chunk's stored events and its number of cases, in the order they were added."""
        self._file.seek(0)
        read = self._file.read
        for count, cases in self._chunks:
            events: list[StoredEvent] = []
            for _ in range(count):
                raw, version, topic_n, state_n, sealed_n, hash_n = _HEAD.unpack(read(_HEAD.size))
                topic = read(topic_n).decode()
                state = read(state_n)
                sealed = _sealed_of(read(sealed_n)) if sealed_n else None
                digest = read(hash_n).decode()
                events.append(
                    HashedStoredEvent(
                        UUID(bytes=raw), version, topic, state, hash=digest, sealed=sealed
                    )
                )
            yield events, cases

    def close(self) -> None:
        """Remove the temporary file."""
        self._file.close()

    def __enter__(self) -> EventSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
