"""The Merkle log over the ledger's events: leaves, signed tree heads, and their checks.

One leaf per event, in log order: `leaf_hash("POSITION␟AGGREGATE␟VERSION␟EVENT HASH")` (the
same entry the hash chain links, so an edited, moved or reordered event changes its leaf). The
tree itself (`merkle.py`) knows only leaves; a lane's log or the heads of several lanes are both
sequences of leaves.

A checkpoint is a signed tree head (`signing.py`): the log's origin, the tree size and root,
signed with the ledger's Ed25519 key. Signing one extends the frontier stored with the last
checkpoint by the events written since (nothing is paid per write beyond what the chain pays).
`verify` rebuilds the tree from the events and holds every stored checkpoint, the head this
machine remembers (outside the store) and a published head to it through consistency proofs,
so a store restored from an older backup, or a rewritten prefix, fails without `--expect`.
"""

from __future__ import annotations

import hashlib
from array import array
from bisect import bisect_left
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from uuid import UUID

import orjson

from evaledger.domain.errors import InfrastructureError
from evaledger.domain.events import stored_hash
from evaledger.domain.merkle import Frontier, ProofError, Tree, leaf_hash, verify_consistency
from evaledger.domain.signing import (
    PublicKey,
    SignatureError,
    SignedCheckpoint,
    SigningKey,
    TreeHead,
    open_checkpoint,
    sign_checkpoint,
)
from evaledger.domain.store.recorder import CheckpointRow, LogRow
from evaledger.domain.writes import LedgerStore

PAGE = 5000
FIRST = -(2**62)
"""Read from the lowest stored row: a row forged below position 1 is a leaf too."""
HEADS_ENV = "EVALEDGER_HEADS_DIR"
"""Where this machine remembers the latest verified head of each log (outside the store)."""


def entry_text(position: int, aggregate: str, version: int, event_hash: str) -> str:
    """The leaf's data, as text: what a receipt lists for each event."""
    return f"{position}\x1f{aggregate}\x1f{version}\x1f{event_hash}"


def event_leaf(position: int, aggregate: str, version: int, event_hash: str) -> bytes:
    """The Merkle leaf hash of one event."""
    return leaf_hash(entry_text(position, aggregate, version, event_hash).encode())


def origin_of(first_leaf: bytes) -> str:
    """The log's name in its checkpoints: fixed by its first event."""
    return f"evaledger/{first_leaf.hex()[:32]}"


@dataclass
class LogTree:
    """The tree over the whole log, with each leaf's position (the receipts' and verify's)."""

    tree: Tree = field(default_factory=Tree)
    positions: array[int] = field(default_factory=lambda: array("q"))

    def add(self, position: int, aggregate: str, version: int, event_hash: str) -> bytes:
        """Append one event's leaf; the leaf."""
        leaf = event_leaf(position, aggregate, version, event_hash)
        self.tree.append(leaf)
        self.positions.append(position)
        return leaf

    @property
    def size(self) -> int:
        """How many leaves (events)."""
        return self.tree.size

    @property
    def origin(self) -> str | None:
        """The log's origin (None while empty)."""
        return origin_of(self.tree.leaf(0)) if self.size else None

    def index_of(self, position: int) -> int | None:
        """The leaf index of the event at `position`."""
        i = bisect_left(self.positions, position)
        return i if i < len(self.positions) and self.positions[i] == position else None


def _rows(ledger: LedgerStore, start: int) -> Iterator[LogRow]:
    while page := ledger.log_rows(start, PAGE):
        yield from page
        start = page[-1][0] + 1


def build_tree(
    ledger: LedgerStore,
    wanted: Container[str] = (),
    keep: Callable[[LogRow], None] | None = None,
) -> LogTree:
    """The tree over every stored event; `keep` is called with the rows of `wanted` aggregates."""
    log = LogTree()
    for row in _rows(ledger, FIRST):
        position, aggregate, version, topic, state = row
        log.add(position, aggregate, version, stored_hash(topic, bytes(state)))
        if keep is not None and aggregate in wanted:
            keep(row)
    return log


def sign_head(
    ledger: LedgerStore, key: SigningKey, trusted: list[PublicKey], now: datetime
) -> CheckpointRow | None:
    """Sign the log's current tree head and store it; the last one when nothing is new.

    Extends the frontier stored with the last checkpoint by the events after it (checked first:
    its note must open with a trusted key and state the frontier's root). None: empty log.
    """
    last = ledger.recorder.last_checkpoint()
    frontier, start, origin = Frontier(), FIRST, None
    if last is not None:
        try:
            head = open_checkpoint(last.note, trusted).head
            frontier = Frontier.from_hex(last.tree_size, orjson.loads(last.frontier))
        except (SignatureError, ValueError, orjson.JSONDecodeError) as e:
            raise InfrastructureError(
                f"the stored checkpoint of {last.tree_size} events cannot be extended ({e}); "
                "nothing was signed. Run `evaledger verify`"
            ) from None
        if frontier.root() != head.root or (head.size, head.root.hex()) != (
            last.tree_size,
            last.root,
        ):
            raise InfrastructureError(
                f"the stored checkpoint of {last.tree_size} events does not match its signed "
                "note (the checkpoints table was edited); nothing was signed. Run `evaledger "
                "verify`"
            )
        start, origin = last.last_position + 1, head.origin
    last_position = None if last is None else last.last_position
    for position, aggregate, version, topic, state in _rows(ledger, start):
        leaf = event_leaf(position, aggregate, version, stored_hash(topic, bytes(state)))
        origin = origin or origin_of(leaf)
        frontier.append(leaf)
        last_position = position
    if origin is None or last_position is None:
        return None
    if last is not None and frontier.size == last.tree_size:
        return last
    note = sign_checkpoint(TreeHead(origin, frontier.size, frontier.root()), key)
    row = CheckpointRow(
        frontier.size,
        last_position,
        frontier.root().hex(),
        orjson.dumps(frontier.to_hex()).decode(),
        note,
        now.isoformat(),
    )
    ledger.recorder.record_checkpoint(row)
    return row


def stored_checkpoints(ledger: LedgerStore) -> Iterator[CheckpointRow]:
    """Every stored signed tree head, smallest first."""
    after = -1
    while page := ledger.recorder.checkpoints(after, PAGE):
        yield from page
        after = page[-1].tree_size


@dataclass
class TreeReport:
    """What the Merkle check found: the tree, and the signed heads it was held to."""

    size: int = 0
    root: str = ""
    origin: str | None = None
    checkpoints: int = 0
    """Stored signed heads checked (signature, then consistency with the log)."""
    signers: list[str] = field(default_factory=list)
    remembered: int | None = None
    """The size of the head remembered outside the store that was checked, if any."""
    against: int | None = None
    """The size of the published head (`--against`) that was checked, if any."""
    findings: list[tuple[int, str]] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        """The report's `merkle` part."""
        return {
            "size": self.size,
            "root": self.root,
            "origin": self.origin,
            "checkpoints": self.checkpoints,
            "signers": self.signers,
            "remembered": self.remembered,
            "against": self.against,
        }


def check_heads(
    log: LogTree,
    rows: list[CheckpointRow],
    trusted: list[PublicKey],
    remembered: str | None = None,
    against: str | None = None,
) -> TreeReport:
    """Hold every signed head to the log: signature, origin, then a consistency proof."""
    report = TreeReport(log.size, log.tree.root().hex(), log.origin)
    for row in rows:
        opened = _check_head(log, row.note, trusted, f"stored checkpoint {row.tree_size}", report)
        report.checkpoints += 1
        if opened is not None and (
            opened.head.size != row.tree_size or opened.head.root.hex() != row.root
        ):
            report.findings.append(
                (_position(log, row.tree_size), f"stored checkpoint {row.tree_size}: the row "
                 "does not state what its signed note states (the checkpoints table was edited)")
            )  # fmt: skip
    if remembered is not None:
        opened = _check_head(log, remembered, trusted, "the head remembered here", report)
        report.remembered = None if opened is None else opened.head.size
    if against is not None:
        opened = _check_head(log, against, trusted, "the published head", report)
        report.against = None if opened is None else opened.head.size
    return report


def _position(log: LogTree, size: int) -> int:
    """The position a finding about a head of `size` leaves points at."""
    if 0 < size <= log.size:
        return log.positions[size - 1]
    return log.positions[-1] + 1 if log.size else 1


def _check_head(
    log: LogTree, text: str, trusted: list[PublicKey], label: str, report: TreeReport
) -> SignedCheckpoint | None:
    try:
        opened = open_checkpoint(text, trusted)
    except SignatureError as e:
        report.findings.append((_position(log, 0), f"{label}: {e}"))
        return None
    head = opened.head
    if opened.signer.key_id not in report.signers:
        report.signers.append(opened.signer.key_id)
    where = _position(log, head.size)
    if log.origin is not None and head.origin != log.origin:
        report.findings.append(
            (where, f"{label} is of another log ({head.origin}, this one is {log.origin})")
        )
    elif head.size > log.size:
        report.findings.append(
            (where, f"{label} was signed over {head.size} events but the log holds {log.size}: "
             "the store was rolled back (restored from an older backup) or events were deleted")
        )  # fmt: skip
    else:
        proof = log.tree.consistency_proof(head.size)
        try:
            verify_consistency(head.size, log.size, proof, head.root, log.tree.root())
        except ProofError:
            report.findings.append(
                (where, f"{label} ({head.size} events) is not a prefix of the log: the first "
                 f"{head.size} events are not those it signed (a rewritten or rolled-back log)")
            )  # fmt: skip
    return opened


class HeadMemory:
    """The latest verified head of each log, remembered on this machine outside the store.

    A restored backup brings its own, older checkpoints with it; the head remembered here does
    not go back, so the next verify holds the restored log to it.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def _path(self, origin: str) -> Path:
        return self.folder / f"{hashlib.sha256(origin.encode()).hexdigest()[:32]}.checkpoint"

    def recall(self, origin: str) -> str | None:
        """The remembered head of the log `origin`, if any."""
        try:
            return self._path(origin).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise InfrastructureError(f"remembered heads in {self.folder}: {e.strerror}") from None

    def remember(self, origin: str, note: str, size: int, previous: int | None) -> None:
        """Keep `note` as the log's head when it is larger than the one remembered."""
        if previous is not None and previous >= size:
            return
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = self._path(origin)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(note, encoding="utf-8")
            tmp.replace(path)
        except OSError as e:
            raise InfrastructureError(f"remembered heads in {self.folder}: {e.strerror}") from None


def aggregate_text(aggregate: UUID | str) -> str:
    """An aggregate id as the leaves spell it (canonical UUID text)."""
    return str(aggregate if isinstance(aggregate, UUID) else UUID(aggregate))
