"""What importing a run works with: the chunk size, the result, chunks and compact case hashes.

The import commands themselves are the ledger's (`Ledger.import_bundle`, `Ledger.import_stream`
in `ledger.py`); this module holds what they use that needs no ledger (and what importers read:
`IMPORT_CHUNK`, `ImportResult`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from uuid import UUID

from evaledger.domain.aggregates import Case
from evaledger.domain.bundle import BundleCase

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


class CaseHashes(Mapping[UUID, str]):
    """The last hash of each case written, kept as 32 bytes rather than 64 hex characters."""

    def __init__(self) -> None:
        self._raw: dict[UUID, bytes] = {}

    def add(self, cases: Iterable[Case]) -> None:
        """Keep the last hash of each of these cases (lowercase hex, as 32 bytes)."""
        for c in cases:
            raw = bytes.fromhex(c.last_hash)
            if raw.hex() != c.last_hash:  # not lowercase hex: no compact form
                raise AssertionError(f"case {c.id}: last hash {c.last_hash!r} is not hex")
            self._raw[c.id] = raw

    def __getitem__(self, case_id: UUID) -> str:
        return self._raw[case_id].hex()

    def __iter__(self) -> Iterator[UUID]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, case_id: object) -> bool:
        return case_id in self._raw
