"""Tamper evidence: recompute every hash chain, every run seal and the ledger-wide chain.

Three layers, each checked from the stored bytes in one walk over the log:
- per aggregate: each event's `prev_hash` is the hash of its predecessor, versions are dense;
- per run: `RunCompleted.seal` is the digest of its cases' last hashes at completion;
- ledger-wide: every event belongs to one commit block of `evaledger_chain`, whose link covers
  the previous block's link and each (position, aggregate, version, hash) of the commit, and
  (with the checkpoint key) whose signature matches. This layer catches what the first two
  cannot: a deleted or edited last event, anything after a seal, a deleted seal or run, and
  recomputed hashes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from uuid import UUID

import orjson
from eventsourcing.persistence import Notification

from evaledger.domain.aggregates import seal_of
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    GENESIS_HASH,
    CasesAttached,
    ChainAdopted,
    RunCompleted,
    stored_hash,
)
from evaledger.domain.ledger import Ledger
from evaledger.domain.store.chain import GENESIS_LINK, Block, link_of, mac_of

PAGE = 5000


@dataclass(frozen=True)
class Checkpoint:
    """A verified point of the log: the last position of a commit and its chain link."""

    position: int
    link: str
    signed: bool

    def __str__(self) -> str:
        return f"{self.position}:{self.link}"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """`POSITION:LINK`, as `verify` prints it."""
        position, _, link = text.partition(":")
        if not position.isdigit() or len(link) != 64 or link.strip("0123456789abcdef"):
            raise ValidationError(
                f"--expect: {text!r} is not POSITION:LINK (as `evaledger verify` prints it)",
                field="expect",
            )
        return cls(int(position), link, signed=False)


@dataclass
class VerifyReport:
    """What `evaledger verify` found."""

    events: int = 0
    aggregates: int = 0
    runs_sealed: int = 0
    commits: int = 0
    keyed: bool = False
    """Whether signatures were checked (a checkpoint key was given)."""
    adopted_until: int | None = None
    """Events up to here were chained when the chain was introduced, not when written."""
    adoption: dict[str, object] | None = None
    """The `ChainAdopted` record of that adoption: range, actor, time and reason."""
    checkpoint: Checkpoint | None = None
    """The last commit up to which the whole log verified (signed when `keyed`)."""
    findings: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No broken link, seal, chain block or signature."""
        return not self.findings

    @property
    def broken(self) -> list[str]:
        """Every finding, first broken position first."""
        return [message for _, message in sorted(self.findings, key=lambda f: f[0])]

    @property
    def first_broken_position(self) -> int | None:
        """The lowest log position where the stored log departs from what was written."""
        return min(p for p, _ in self.findings) if self.findings else None

    def as_json(self) -> dict[str, object]:
        """The report as the CLI's `--json` and `GET /verify` show it."""
        return {
            "ok": self.ok,
            "events": self.events,
            "aggregates": self.aggregates,
            "runs_sealed": self.runs_sealed,
            "commits": self.commits,
            "keyed": self.keyed,
            "adopted_until": self.adopted_until,
            "adoption": self.adoption,
            "checkpoint": None
            if self.checkpoint is None
            else {
                "position": self.checkpoint.position,
                "link": self.checkpoint.link,
                "signed": self.checkpoint.signed,
            },
            "first_broken_position": self.first_broken_position,
            "broken": self.broken,
        }


class _Aggregates:
    """Per-aggregate chains and run seals."""

    def __init__(self, report: VerifyReport) -> None:
        self.report = report
        self.last_hash: dict[str, str] = {}
        self.last_version: dict[str, int] = {}
        self.run_cases: dict[str, list[UUID]] = {}
        self.attached = CasesAttached.topic()
        self.completed = RunCompleted.topic()

    def check(self, n: Notification) -> str:
        oid = str(n.originator_id)
        try:
            state = orjson.loads(n.state)
            if not isinstance(state, dict):
                raise TypeError("not an object")
        except (orjson.JSONDecodeError, TypeError) as e:
            self.report.findings.append(
                (n.id, f"aggregate {oid} version {n.originator_version} (position {n.id}): "
                 f"the stored state is not a JSON object ({e})")
            )  # fmt: skip
            state = {}
        expected = self.last_hash.get(oid, GENESIS_HASH)
        before = self.last_version.get(oid, 0)
        if state.get("prev_hash") != expected:
            self.report.findings.append(
                (
                    n.id,
                    f"aggregate {oid} version {n.originator_version} (position {n.id}): "
                    f"prev_hash {str(state.get('prev_hash'))[:12]}… does not match the hash of "
                    f"version {before} ({expected[:12]}…)",
                )
            )
        if n.originator_version != before + 1:
            self.report.findings.append(
                (n.id, f"aggregate {oid}: version {n.originator_version} follows {before}")
            )
        if n.topic == self.attached:
            try:
                self.run_cases.setdefault(oid, []).extend(UUID(c) for c in state["case_ids"])
            except (KeyError, TypeError, ValueError, AttributeError):
                self.report.findings.append(
                    (n.id, f"run {oid} (position {n.id}): malformed case ids")
                )
        elif n.topic == self.completed:
            hashes = {
                cid: self.last_hash.get(str(cid), GENESIS_HASH)
                for cid in self.run_cases.get(oid, [])
            }
            if seal_of(hashes) != state.get("seal"):
                self.report.findings.append(
                    (n.id, f"run {oid} (position {n.id}): seal does not match its cases' hashes")
                )
            self.report.runs_sealed += 1
        ehash = stored_hash(n.topic, n.state)
        self.last_hash[oid] = ehash
        self.last_version[oid] = n.originator_version
        self.report.events += 1
        return ehash


def _pages(fetch: Callable[[int | None], Sequence[Notification]]) -> Iterator[Notification]:
    # From the lowest stored row, not from 1: a row forged at position 0 or below is read too.
    start: int | None = None
    while page := fetch(start):
        yield from page
        start = page[-1].id + 1


def _blocks(ledger: Ledger) -> Iterator[Block]:
    after = -(2**62)  # a chain row forged below position 1 is read too
    while page := ledger.chain_blocks(after, PAGE):
        yield from page
        after = page[-1].last_position


def verify(
    ledger: Ledger,
    progress: Callable[[int, int], None] | None = None,
    expect: Checkpoint | None = None,
) -> VerifyReport:
    """Walk the whole log once, checking all three layers; `expect` is an earlier checkpoint.

    With the ledger's checkpoint key, every commit from the first signed one on must carry a
    valid signature, and at least one must. Without it, signatures are not checked (a rewrite
    that recomputes every hash is then undetectable; the report says `keyed: false`).
    """
    head = ledger.position()
    walk = _ChainWalk(ledger, expect)
    for block in _blocks(ledger):
        walk.check_block(block)
        if progress is not None:
            progress(block.last_position, head)
    return walk.finish()


class _ChainWalk:
    """One pass over the log and the chain's blocks side by side, in log order."""

    def __init__(self, ledger: Ledger, expect: Checkpoint | None) -> None:
        self.key = ledger.checkpoint_key
        self.report = VerifyReport(keyed=self.key is not None)
        self.aggregates = _Aggregates(self.report)
        self.events = _pages(lambda start: ledger.notifications(start, PAGE))
        self.pending = next(self.events, None)
        self.expect = expect
        self.found_expected = expect is None
        self.signed_from: int | None = None
        self.prev_link = GENESIS_LINK
        self.adopted: Block | None = None

    def _find(self, position: int, message: str) -> None:
        self.report.findings.append((position, message))

    def _uncovered(self, n: Notification) -> None:
        below = " is below 1, the first position, and" if n.id < 1 else ""
        self._find(
            n.id,
            f"position {n.id} (aggregate {n.originator_id} version {n.originator_version}):"
            f"{below} not covered by the ledger chain (written outside evaledger)",
        )

    def _adoption_record(self, n: Notification) -> None:
        """A `ChainAdopted` event must describe the adopted block it was written with."""
        try:
            state = orjson.loads(n.state)
        except orjson.JSONDecodeError:
            state = None
        if not isinstance(state, dict):
            state = {}  # the aggregate check reports the unreadable state
        block = self.adopted
        if block is not None and (
            state.get("first_position"),
            state.get("last_position"),
            state.get("events"),
        ) == (block.first_position, block.last_position, block.events):
            self.report.adoption = {
                "first_position": block.first_position,
                "last_position": block.last_position,
                "events": block.events,
                "actor": state.get("actor"),
                "timestamp": state.get("timestamp"),
                "reason": state.get("reason"),
                "position": n.id,
            }
            self.adopted = None
        else:
            self._find(n.id, f"position {n.id}: a chain adoption record without its adopted block")

    def _events_until(self, block: Block) -> list[tuple[int, UUID | str, int, str]]:
        """Check the events up to the block's end; the chain entries of those inside it."""
        entries: list[tuple[int, UUID | str, int, str]] = []
        while self.pending is not None and self.pending.id <= block.last_position:
            n = self.pending
            ehash = self.aggregates.check(n)
            if n.topic == ChainAdopted.topic():
                self._adoption_record(n)
            if n.id < block.first_position:
                self._uncovered(n)
            else:
                entries.append((n.id, n.originator_id, n.originator_version, ehash))
            self.pending = next(self.events, None)
        return entries

    def check_block(self, block: Block) -> None:
        """Check one commit's block against the events it covers."""
        report = self.report
        entries = self._events_until(block)
        where = f"positions {block.first_position}–{block.last_position} (one commit)"
        if len(entries) != block.events:
            self._find(
                block.first_position,
                f"{where}: {block.events} events were committed, {len(entries)} remain "
                "(events deleted or inserted)",
            )
        elif link_of(self.prev_link, entries) != block.link:
            self._find(
                block.first_position,
                f"{where}: the chain link does not match (an event of this commit was "
                "edited, moved or reordered, or an earlier commit was deleted)",
            )
        if block.first_position < 1 or block.first_position > block.last_position:
            self._find(
                block.first_position,
                f"{where}: not a range of positions from 1 (a chain row written outside evaledger)",
            )
        if block.adopted:
            if report.commits:
                self._find(
                    block.first_position, f"{where}: an adopted block after the first commit"
                )
            report.adopted_until = block.last_position
            self.adopted = block
        if self.key is not None:
            self._check_signature(block, self.key, where)
        if self.expect is not None and block.last_position == self.expect.position:
            self.found_expected = block.link == self.expect.link
        # The next block follows the stored link, so one edited commit is named once.
        self.prev_link = block.link
        report.commits += 1
        if not report.findings:
            report.checkpoint = Checkpoint(
                block.last_position,
                block.link,
                signed=self.key is not None and block.mac is not None,
            )

    def _check_signature(self, block: Block, key: bytes, where: str) -> None:
        if block.mac is not None:
            if mac_of(key, block.last_position, block.link) != block.mac:
                self._find(
                    block.first_position,
                    f"{where}: signature does not match (the chain was rewritten "
                    "without the checkpoint key, or another key signed it)",
                )
            if self.signed_from is None:
                self.signed_from = block.first_position
        elif self.signed_from is not None:
            self._find(
                block.first_position,
                f"{where}: not signed although commits from position {self.signed_from} "
                "are (a signature was stripped, or a writer ran without the key)",
            )

    def finish(self) -> VerifyReport:
        """Check the events after the last block and what the whole walk must have met."""
        report = self.report
        while self.pending is not None:
            self.aggregates.check(self.pending)
            self._uncovered(self.pending)
            self.pending = next(self.events, None)
        if self.adopted is not None:
            self._find(
                self.adopted.first_position,
                f"positions {self.adopted.first_position}–{self.adopted.last_position} were "
                "adopted into the chain without a `chain adopt` record (the chain was rebuilt "
                "outside evaledger)",
            )
        if not report.commits and report.events:
            # First among the findings at that position: the cause, before its symptoms.
            report.findings.insert(
                0,
                (
                    min(p for p, _ in report.findings),
                    f"the ledger chain is empty but the log holds {report.events} events: the "
                    "chain table was emptied or dropped (a store written before the chain existed "
                    "is adopted once with `evaledger chain adopt --reason`)",
                ),
            )
        if self.key is not None and report.events and self.signed_from is None:
            self._find(
                1,
                "no commit is signed with the checkpoint key: the chain was rewritten or its "
                "signatures stripped (or the writers never had the key)",
            )
        if not self.found_expected:
            assert self.expect is not None
            self._find(
                self.expect.position,
                f"checkpoint {self.expect.position}:{self.expect.link[:12]}… verified earlier "
                "is no longer in the log (the log was rolled back or rewritten)",
            )
        report.aggregates = len(self.aggregates.last_hash)
        return report
