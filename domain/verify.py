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
from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID

import orjson
from eventsourcing.persistence import Notification, StoredEvent

from evaledger.domain.aggregates import seal_of
from evaledger.domain.erasure import payload_problems
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    GENESIS_HASH,
    CasesAttached,
    ChainAdopted,
    RunCompleted,
    stored_hash,
)
from evaledger.domain.lane_check import LaneCheck
from evaledger.domain.ledger import Ledger
from evaledger.domain.store.chain import (
    GENESIS_LINK,
    KEY_ENV,
    Block,
    link_of,
    mac_of,
    verified_mac,
)
from evaledger.domain.transparency import LogTree

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
    resumed_from: int | None = None
    """Incremental: the signed checkpoint this verify resumed from (events up to it not re-read)."""
    resumption: str = "full"
    """`incremental`, `full` (the default, or nothing to resume from) or `unsigned` (no key)."""
    findings: list[tuple[int, str]] = field(default_factory=list)
    merkle: dict[str, object] | None = None
    """The Merkle tree over the log and the signed heads held to it (`domain/transparency.py`);
    None when the walk built no tree (incremental, or not asked)."""

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
        """The report as the CLI's `--json` and `GET /verify` show it (`merkle` when built)."""
        found: dict[str, object] = {
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
            "resumed_from": self.resumed_from,
            "resumption": self.resumption,
        }
        if self.merkle is not None:
            found["merkle"] = self.merkle
        return found


class _Aggregates:
    """Per-aggregate chains and run seals."""

    def __init__(
        self, report: VerifyReport, prior: _Prior | None = None, lanes: LaneCheck | None = None
    ) -> None:
        self.report = report
        self.prior = prior
        self.lanes = lanes
        self.last_hash: dict[str, str] = {}
        self.last_version: dict[str, int] = {}
        self.run_cases: dict[str, list[UUID]] = {}
        self.attached = CasesAttached.topic()
        self.completed = RunCompleted.topic()

    def check(self, n: Notification) -> str:
        oid = str(n.originator_id)
        if self.prior is not None and oid not in self.last_hash:
            self._resume(oid, n)
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
        if self.lanes is not None:
            self.lanes.see(n, state)
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
            hashes = {cid: self._case_hash(cid) for cid in self.run_cases.get(oid, [])}
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

    def _resume(self, oid: str, n: Notification) -> None:
        """Incremental: the aggregate's last event before the checkpoint, and a run's cases."""
        assert self.prior is not None
        found = self.prior.before(n.originator_id, n.originator_version)
        if found is not None:
            self.last_version[oid], self.last_hash[oid] = found
        cases = self.prior.attached(n.originator_id, n.originator_version)
        if cases:
            self.run_cases[oid] = cases

    def _case_hash(self, cid: UUID) -> str:
        """A case's last hash now (in the walk), or, resuming, its last before the checkpoint."""
        known = self.last_hash.get(str(cid))
        if known is not None or self.prior is None:
            return known or GENESIS_HASH
        found = self.prior.last_before_checkpoint(cid)
        return GENESIS_HASH if found is None else found[1]


class _Prior:
    """Incremental verify: what the events before the checkpoint say, read per aggregate.

    Each aggregate met after the checkpoint costs one query for its previous event (hashed
    here, so an edit to it breaks the new event's `prev_hash`); a run sealed after the
    checkpoint reads its earlier attachments and its cases' last events.
    """

    def __init__(self, ledger: Ledger, first_new: dict[str, int]) -> None:
        self.select = cast(Any, ledger.recorder).select_events
        self.first_new = first_new
        """Lowest version of each aggregate after the checkpoint."""

    def before(self, oid: UUID | str, version: int) -> tuple[int, str] | None:
        """(version, hash) of the aggregate's last event below `version`."""
        if version <= 1:
            return None
        found = self.select(oid, lte=version - 1, desc=True, limit=1)
        return None if not found else (found[0].originator_version, _hash(found[0]))

    def attached(self, oid: UUID | str, version: int) -> list[UUID]:
        """The case ids a run attached before `version` (empty for anything else)."""
        cases: list[UUID] = []
        if version <= 1:
            return cases
        for e in self.select(oid, lte=version - 1):
            if e.topic == CasesAttached.topic():
                try:
                    cases.extend(UUID(c) for c in orjson.loads(e.state)["case_ids"])
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue  # before the checkpoint: a full verify reports it
        return cases

    def last_before_checkpoint(self, cid: UUID) -> tuple[int, str] | None:
        """(version, hash) of a case's last event at or before the checkpoint."""
        first = self.first_new.get(str(cid))
        if first is not None:
            return self.before(cid, first)
        found = self.select(cid, desc=True, limit=1)
        return None if not found else (found[0].originator_version, _hash(found[0]))


def _hash(e: StoredEvent) -> str:
    return stored_hash(e.topic, bytes(e.state))


def _pages(
    fetch: Callable[[int | None], Sequence[Notification]], start: int | None = None
) -> Iterator[Notification]:
    # From the lowest stored row, not from 1: a row forged at position 0 or below is read too.
    while page := fetch(start):
        yield from page
        start = page[-1].id + 1


def _blocks(ledger: Ledger, after: int = -(2**62)) -> Iterator[Block]:
    # By default from the lowest: a chain row forged below position 1 is read too.
    while page := ledger.chain_blocks(after, PAGE):
        yield from page
        after = page[-1].last_position


def verify(
    ledger: Ledger,
    progress: Callable[[int, int], None] | None = None,
    expect: Checkpoint | None = None,
    *,
    incremental: bool = False,
    tree: LogTree | None = None,
) -> VerifyReport:
    """Check all three layers; `expect` is an earlier checkpoint that must still be in the log.

    With the ledger's checkpoint key, every commit from the first signed one on must carry a
    valid signature, and at least one must. Without it, signatures cannot be checked: a signed
    commit is a finding (writers without the key refuse to extend it), and on an unsigned
    chain a rewrite that recomputes every hash is undetectable (the report says `keyed: false`).

    Every event is checked unless `incremental` (issue 29: full is the default); a full keyed
    walk still checks the recorded checkpoint below. With the key and `incremental`, the walk
    resumes from the last checkpoint a keyed verify recorded (`evaledger_verified`, signed with
    the key): that record's signature and the chain block it names (same link, valid
    signature) are re-checked, then only the events and blocks after it, so the cost follows
    the new events. Events before it are read only where a new event or seal depends on them;
    an edit elsewhere before it waits for a full walk.
    An ok keyed walk records its checkpoint for the next one.

    `tree`: an empty `LogTree` the walk fills with one leaf per event (a full walk only: a
    resumed one leaves it empty), for the caller to hold the signed tree heads to.
    """
    head = ledger.position()
    key = ledger.checkpoint_key
    # A full walk still checks the recorded checkpoint (a rolled-back tail loses it).
    resume = None if key is None else _resume_point(ledger, key)
    if resume is not None and not resume.findings and not incremental:
        resume = None
    walk = _ChainWalk(ledger, expect, resume)
    if walk.report.resumed_from is None:
        walk.tree = tree
    if key is None:
        walk.report.resumption = "unsigned"
    after = walk.report.resumed_from
    for block in _blocks(ledger, -(2**62) if after is None else after):
        walk.check_block(block)
        if progress is not None:
            progress(block.last_position, head)
    report = walk.finish()
    if report.resumed_from is None:  # a full walk also holds the sealed payloads to the log
        report.findings.extend(payload_problems(ledger))
    checkpoint = report.checkpoint
    if key is not None and report.ok and checkpoint is not None and checkpoint.signed:
        ledger.recorder.record_verified(
            checkpoint.position,
            checkpoint.link,
            verified_mac(key, checkpoint.position, checkpoint.link),
            datetime.now(UTC).isoformat(),
        )
    return report


@dataclass(frozen=True)
class _Resume:
    """A signed verified checkpoint whose chain block still stands: where a walk resumes."""

    position: int
    link: str
    findings: list[tuple[int, str]]
    """Why the record cannot be used (then the walk is full and reports them)."""


def _resume_point(ledger: Ledger, key: bytes) -> _Resume | None:
    """The last verified checkpoint, if its record and its chain block are intact."""
    found = ledger.recorder.last_verified()
    if found is None:
        return None
    position, link, mac = found
    bad: list[tuple[int, str]] = []
    block = next(iter(ledger.chain_blocks(position - 1, 1)), None)
    if mac != verified_mac(key, position, link):
        bad.append(
            (position, f"the verified checkpoint {position}:{link[:12]}… is not signed with the "
             "checkpoint key (a forged resumption point)")
        )  # fmt: skip
    elif block is None or block.last_position != position or block.link != link:
        bad.append(
            (position, f"checkpoint {position}:{link[:12]}… verified earlier is no longer in the "
             "log (the log was rolled back or rewritten)")
        )  # fmt: skip
    elif block.mac is None or block.mac != mac_of(key, position, block.link):
        bad.append(
            (position, f"the chain block ending at the verified checkpoint {position} lost its "
             "signature or carries another one (the chain was rewritten)")
        )  # fmt: skip
    return _Resume(position, link, bad)


def _first_versions(ledger: Ledger, start: int) -> dict[str, int]:
    """The lowest version of each aggregate written from `start` on (one pass, ids only kept)."""
    first: dict[str, int] = {}
    for n in _pages(lambda at: ledger.notifications(at, PAGE), start):
        first.setdefault(str(n.originator_id), n.originator_version)
    return first


class _ChainWalk:
    """One pass over the log and the chain's blocks side by side, in log order."""

    def __init__(
        self, ledger: Ledger, expect: Checkpoint | None, resume: _Resume | None = None
    ) -> None:
        self.key = ledger.checkpoint_key
        self.report = VerifyReport(keyed=self.key is not None)
        self.expect = expect
        self.found_expected = expect is None
        self.signed_from: int | None = None
        self.prev_link = GENESIS_LINK
        self.adopted: Block | None = None
        self.tree: LogTree | None = None
        start: int | None = None
        prior = None
        if resume is not None and resume.findings:
            self.report.findings.extend(resume.findings)  # and walk the whole log
        elif resume is not None:
            start = resume.position + 1
            self.prev_link, self.signed_from = resume.link, resume.position
            self.report.resumed_from, self.report.resumption = resume.position, "incremental"
            self.report.checkpoint = Checkpoint(resume.position, resume.link, signed=True)
            prior = _Prior(ledger, _first_versions(ledger, start))
            self._below_first(ledger)
            if expect is not None and expect.position <= resume.position:
                block = next(iter(ledger.chain_blocks(expect.position - 1, 1)), None)
                self.found_expected = (
                    block is not None
                    and block.last_position == expect.position
                    and block.link == expect.link
                )
        self.lanes = LaneCheck(ledger.recorder, full=start is None)
        self.aggregates = _Aggregates(self.report, prior, self.lanes)
        self.events = _pages(lambda at: ledger.notifications(at, PAGE), start)
        self.pending = next(self.events, None)

    def _below_first(self, ledger: Ledger) -> None:
        """Resuming: rows and chain rows below position 1 are still looked for (index reads)."""
        lowest = ledger.notifications(None, 1)
        if lowest and lowest[0].id < 1:
            for n in _pages(lambda at: ledger.notifications(at, PAGE, stop=0)):
                self._uncovered(n)
        block = next(iter(ledger.chain_blocks(-(2**62), 1)), None)
        if block is not None and block.first_position < 1:
            self._find(
                block.first_position,
                f"positions {block.first_position}–{block.last_position} (one commit): not a "
                "range of positions from 1 (a chain row written outside evaledger)",
            )

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
            if self.tree is not None:
                self.tree.add(n.id, str(n.originator_id), n.originator_version, ehash)
            if n.topic == ChainAdopted.topic():
                self._adoption_record(n)
            if n.id < block.first_position:
                self._uncovered(n)
            else:
                entries.append((n.id, n.originator_id, n.originator_version, ehash))
            self.report.findings.extend(self.lanes.take())
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
            if report.commits or report.resumed_from is not None:
                self._find(
                    block.first_position, f"{where}: an adopted block after the first commit"
                )
            report.adopted_until = block.last_position
            self.adopted = block
        if self.key is not None:
            self._check_signature(block, self.key, where)
        elif block.mac is not None and self.signed_from is None:
            # Writers without the key refuse to extend a signed chain: verify without it cannot
            # vouch for one either, so the two agree (issue 29), whether the key exists or the
            # signature was forged on a ledger that never had one.
            self.signed_from = block.first_position
            self._find(
                block.first_position,
                f"{where}: carries a signature this verify cannot check (no checkpoint key: set "
                f"{KEY_ENV}); writers without the key refuse to extend a signed chain, and on a "
                "ledger that never had a key the signature was written outside evaledger",
            )
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
        if block.adopted and block.mac is None:
            # Whoever empties the chain without the key could adopt what is left and let the
            # next keyed write sign on: on a keyed store an adoption is signed like a commit.
            self._find(
                block.first_position,
                f"{where}: an adoption without the checkpoint key's signature (on a keyed "
                "store `chain adopt` signs; an unsigned one re-chains a log emptied without "
                "the key)",
            )
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
            ehash = self.aggregates.check(self.pending)
            if self.tree is not None:
                n = self.pending
                self.tree.add(n.id, str(n.originator_id), n.originator_version, ehash)
            self._uncovered(self.pending)
            self.report.findings.extend(self.lanes.take())
            self.pending = next(self.events, None)
        if self.adopted is not None:
            self._find(
                self.adopted.first_position,
                f"positions {self.adopted.first_position}–{self.adopted.last_position} were "
                "adopted into the chain without a `chain adopt` record (the chain was rebuilt "
                "outside evaledger)",
            )
        if not report.commits and report.events and report.resumed_from is None:
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
            lost = (
                self.expect.position,
                f"checkpoint {self.expect.position}:{self.expect.link[:12]}… verified earlier "
                "is no longer in the log (the log was rolled back or rewritten)",
            )
            if lost not in report.findings:  # the recorded checkpoint may have said it already
                self._find(*lost)
        report.aggregates = len(self.aggregates.last_hash)
        return report
