"""Importing a whole run: a bundle in one transaction, or a stream of cases in chunks, sealed last.

These are steps of the ledger's import commands (`Ledger.import_bundle`, `Ledger.import_stream`),
kept apart from its other commands; they use the ledger's own building and saving steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from uuid import UUID

from evaledger.domain.aggregates import Case, Meta, Run, RunStatus, case_id_for
from evaledger.domain.bundle import END_LABELS, BundleCase, BundleRun, BundleRunStatus, RunBundle
from evaledger.domain.errors import ValidationError

if TYPE_CHECKING:
    from evaledger.domain.ledger import Context, Ledger

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


def import_bundle(ledger: Ledger, bundle: RunBundle, ctx: Context) -> ImportResult:
    """Build and save a whole bundle's run in one transaction (one attempt of the command)."""
    run = ledger._prepare_run(bundle.run, ctx)
    catalogue = ledger.catalogue(bundle.run.project)
    before = set(run.case_ids) if run.version else set()
    cases = ledger._build_cases(run, bundle.cases, ctx, catalogue)
    meta = Meta(timestamp=ledger.clock(), actor=ctx.actor)
    close_as_bundled(ledger, run, bundle.run, meta, {c.id: c.last_hash for c in cases})
    position, n = ledger._save(*cases, run=run)
    return ImportResult(
        run_id=run.id,
        run_key=bundle.run.key,
        position=position,
        events=n,
        cases=len(cases),
        new_cases=len([c for c in cases if c.id not in before]),
        case_ids=[c.id for c in cases],
    )


def import_stream(
    ledger: Ledger,
    run: BundleRun,
    cases: Callable[[], Iterable[BundleCase]],
    ctx: Context,
    chunk_size: int,
    progress: Callable[[int, int], None] | None,
) -> ImportResult:
    """The import a `Ledger.import_stream` runs, with the collector paused."""
    total = _check_stream(ledger, run, cases, ctx, chunk_size, progress)
    catalogue = ledger.catalogue(run.project)
    current = ledger._prepare_run(run, ctx)
    before = len(current.case_ids)
    _, written = ledger._save(run=current)  # a new run is created on its own first
    hashes = _Hashes()
    done = 0
    for chunk in _chunks(cases(), chunk_size):
        current, built, n = ledger._write_chunk(current, chunk, ctx, catalogue, done)
        hashes.add(built)
        del built
        written += n
        done += len(chunk)
        if progress is not None:
            progress(done, total)

    attempts = 0

    def finish() -> tuple[int, int]:
        nonlocal attempts
        # The run in hand is current unless a concurrent writer made a save fail (and
        # replaying it would hold a second copy of every case id).
        closing = current if attempts == 0 else ledger.get_run(current.id)
        attempts += 1
        meta = Meta(timestamp=ledger.clock(), actor=ctx.actor)
        close_as_bundled(ledger, closing, run, meta, hashes)
        return ledger._save(closing)

    position, n = ledger._retrying(finish)
    return ImportResult(
        run_id=current.id,
        run_key=run.key,
        position=position,
        events=written + n,
        cases=total,
        new_cases=len(current.case_ids) - before,
    )


def _check_stream(
    ledger: Ledger,
    run: BundleRun,
    cases: Callable[[], Iterable[BundleCase]],
    ctx: Context,
    chunk_size: int,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Build every case of the stream without saving (the dry first pass); count them.

    Progress is reported with a total of 0: the stream's length is not known yet. Memory
    stays flat: a new run is tried afresh for each chunk (it forgets the ids it attached),
    and the ids seen so far are kept as 16 bytes each.
    """
    trial = ledger._prepare_run(run, ctx)
    new = ledger._find(Run, trial.id) is None
    catalogue = ledger.catalogue(run.project)
    seen: set[bytes] = set()
    total = 0
    for chunk in _chunks(cases(), chunk_size):
        if any(c.overrides for c in chunk):
            ctx.check_admin("recording overrides or invalidations")
        for i, bc in enumerate(chunk, start=total):
            case_id = case_id_for(trial.id, bc.test_case.key, bc.repetition, bc.variant)
            if case_id.bytes in seen:
                first = next(
                    j
                    for j, other in enumerate(cases())
                    if case_id_for(trial.id, other.test_case.key, other.repetition, other.variant)
                    == case_id
                )
                raise ValidationError(
                    f"cases[{i}]: test case {bc.test_case.key!r} repetition {bc.repetition} "
                    f"appears twice (first at cases[{first}])",
                    field=f"cases[{i}].test_case.key",
                )
            seen.add(case_id.bytes)
        if new and total:
            trial = ledger._prepare_run(run, ctx)
        ledger._build_cases(trial, chunk, ctx, catalogue, offset=total)
        trial.collect_events()  # drop what a real pass would have written
        total += len(chunk)
        if progress is not None:
            progress(total, 0)
    return total


def close_as_bundled(
    ledger: Ledger, run: Run, body: BundleRun, meta: Meta, hashes: Mapping[UUID, str] | None = None
) -> None:
    """Move a run to the status its bundle gives (complete seals over its cases).

    First, what the bundle knows of the source's end and the run does not say yet (a run
    created live, before its source ended) is recorded (`SourceResultsRecorded`).
    """
    run.record_source_results(
        meta, {k: body.labels[k] for k in END_LABELS if k in body.labels}, body.config.scorers
    )
    status = body.status
    if status is BundleRunStatus.COMPLETED and run.status is not RunStatus.COMPLETED:
        known = hashes or {}
        missing = ledger._last_hashes([cid for cid in run.case_ids if cid not in known])
        seal = {cid: known[cid] if cid in known else missing[cid] for cid in run.case_ids}
        run.complete(meta, body.completed_at or meta.timestamp, seal)
    elif status is BundleRunStatus.CANCELED and run.status is not RunStatus.CANCELED:
        run.cancel(meta, body.reason)
    elif status is BundleRunStatus.FAILED and run.status is not RunStatus.FAILED:
        run.fail(meta, body.reason or "failed")
    elif status is BundleRunStatus.RUNNING and run.status is RunStatus.CREATED:
        run.start(meta)


def _chunks(cases: Iterable[BundleCase], size: int) -> Iterator[list[BundleCase]]:
    chunk: list[BundleCase] = []
    for case in cases:
        chunk.append(case)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Hashes(Mapping[UUID, str]):
    """The last hash of each case written, kept as 32 bytes rather than 64 hex characters."""

    def __init__(self) -> None:
        self._raw: dict[UUID, bytes] = {}

    def add(self, cases: Iterable[Case]) -> None:
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
