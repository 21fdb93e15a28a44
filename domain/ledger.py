"""The ledger application service: every write goes through one of its commands.

Each command loads the aggregates it needs, checks invariants, and saves once (one transaction).
It returns the log position of what it wrote so callers can wait for projections. The commands
are built in three layers, each on the one before: the store and its write unit
(`writes.LedgerStore`: load, save, retry, idempotency records), the facts of a recorded case
(`case_commands.CaseCommands`: one named command per fact, `record_transcript`,
`record_verdict`, `override_verdict`, `label_case`, ...), and `Ledger` here: runs, tokens, the
catalogue, and the cases opened from bundles (one case, a batch, a whole run imported at once or
streamed in chunks and sealed last).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, NoReturn
from uuid import UUID

from eventsourcing.persistence import Notification, StoredEvent

from evaledger.domain import collector
from evaledger.domain.adoption import CHAIN_RECORD_ID, Adoption, ChainRecord
from evaledger.domain.aggregates import (
    Aggregate,
    Case,
    IdempotencyRecord,
    Meta,
    MetricCatalogue,
    Run,
    RunStatus,
    Seal,
    case_id_for,
    catalogue_id_for,
    run_id_for,
    seal_in_order,
)
from evaledger.domain.alerts import AlertCommands
from evaledger.domain.bundle import END_LABELS, BundleCase, BundleRun, BundleRunStatus, RunBundle
from evaledger.domain.calibration import CalibrationCommands
from evaledger.domain.case_commands import CaseCommands
from evaledger.domain.case_commands import ClaimsFields as ClaimsFields
from evaledger.domain.case_commands import VerdictFields as VerdictFields
from evaledger.domain.dataset_commands import DatasetCommands
from evaledger.domain.erasure import ErasureCommands
from evaledger.domain.errors import (
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from evaledger.domain.events import (
    TokenIssued,
    TokenRevoked,
    TokenScope,
    case_digest,
    request_digest,
)
from evaledger.domain.importing import (
    IMPORT_CHUNK,
    EventSpool,
    ImportResult,
    chunks,
)
from evaledger.domain.metrics import MetricDefinition
from evaledger.domain.online_rules import OnlineRuleCommands
from evaledger.domain.review_commands import ReviewCommands
from evaledger.domain.share_commands import ShareCommands
from evaledger.domain.signing import PublicKey, SigningKey, sign_rotation
from evaledger.domain.spec import ScoringSpec, resolve_spec
from evaledger.domain.store.scratch import CaseIndex
from evaledger.domain.store.urls import KEY_ENV
from evaledger.domain.tokens import (
    ApiToken,
    NewToken,
    Principal,
    TokenInfo,
    issued_tokens,
    new_secret,
    secret_hash,
    split_token,
    token_aggregate_id,
)
from evaledger.domain.trace_commands import TraceCommands
from evaledger.domain.traces import Trace
from evaledger.domain.writes import Context as Context
from evaledger.domain.writes import LedgerApplication as LedgerApplication
from evaledger.domain.writes import Written as Written
from evaledger.domain.writes import jsonable as jsonable
from evaledger.domain.writes import require_reason as require_reason
from evaledger.domain.writes import utcnow as utcnow


class Ledger(
    ErasureCommands,
    CaseCommands,
    TraceCommands,
    ReviewCommands,
    OnlineRuleCommands,
    ShareCommands,
    AlertCommands,
    DatasetCommands,
    CalibrationCommands,
):
    """Commands (writes) and audit reads over the event store."""

    # -- tokens ------------------------------------------------------------------------------

    def issue_token(
        self, project: str, scope: TokenScope, name: str | None, ctx: Context
    ) -> NewToken:
        """Issue an API token; the returned secret is stored nowhere (only its hash)."""
        ctx.check_admin("issuing a token")
        ctx.check_project(project, f"project {project!r}")
        token_id, token = new_secret()
        parts = split_token(token)
        assert parts is not None
        token_agg = ApiToken.issue(
            token_id,
            Meta(timestamp=self.clock(), actor=ctx.actor),
            project=project,
            scope=scope,
            name=name or f"token-{token_id}",
            secret_sha256=secret_hash(parts[1]),
        )
        position, _ = self._save(token_agg, project=None)
        return NewToken(token_id, token, position)

    def revoke_token(self, token_id: str, ctx: Context, reason: str | None = None) -> Written:
        """Revoke a token: from now on it authenticates nothing."""
        ctx.check_admin("revoking a token")
        token = self._find(ApiToken, token_aggregate_id(token_id))
        if token is None:
            raise NotFoundError(f"no token {token_id!r}")
        ctx.check_project(token.issued.project, f"token {token_id!r}")

        def command() -> Written:
            t = self._get(ApiToken, token_aggregate_id(token_id))
            t.revoke(Meta(timestamp=self.clock(), actor=ctx.actor), reason)
            position, n = self._save(t, project=None)
            return Written((t.id,), position, n)

        return self._retrying(command)

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a valid, unrevoked token; None otherwise."""
        parts = split_token(token)
        return None if parts is None else self.token_principal(*parts)

    def token_principal(self, token_id: str, secret: str | None = None) -> Principal | None:
        """An unrevoked token's principal (its secret checked if given; a web session has none)."""
        return self._tokens.principal(self._find(ApiToken, token_aggregate_id(token_id)), secret)

    def tokens(self) -> list[TokenInfo]:
        """Every token ever issued, oldest first (read from the log: tokens are few)."""
        topics = (TokenIssued.topic(), TokenRevoked.topic())
        return issued_tokens(self.decode(n) for n in self._notifications_of(topics))

    def has_tokens(self) -> bool:
        """True once any token was ever issued (serving then requires tokens)."""
        return bool(self.app.recorder.select_notifications(None, 1, topics=[TokenIssued.topic()]))

    def _notifications_of(self, topics: Sequence[str]) -> Iterable[Notification]:
        start: int | None = None  # every stored row, a forged one below 1 included
        while True:
            page = self.app.recorder.select_notifications(start, 1000, topics=topics)
            if not page:
                return
            yield from page
            start = page[-1].id + 1

    # -- run commands ------------------------------------------------------------------------

    def create_run(self, run: BundleRun, ctx: Context) -> Written:
        """Create a run with its resolved config snapshot (idempotent on the same body)."""
        run = self._in_project(run, ctx)
        body = run.creation_body()
        # Keys are per project: two tenants may pick the same key.
        scope = f"POST /runs\x1f{run.project}"

        def command() -> Written:
            record, done = self._idempotent(scope, ctx, body)
            if done is not None:
                return Written(tuple(done), self.position(), 0)
            created = self._prepare_run(run, ctx)
            self._use_key(record, ctx, body, scope, [created.id])
            position, n = self._save(*_present(record), created, project=run.project)
            return Written((created.id,), position, n)

        return self._retrying(command)

    def _run_command(
        self, run_id: UUID, ctx: Context, action: Callable[[Run, Meta], None]
    ) -> Written:
        def command() -> Written:
            run = self._run_in_scope(run_id, ctx)
            meta = self._meta(ctx, {"run": str(run_id)})
            if not run.seen(meta):
                action(run, meta)
            position, n = self._save(run, project=run.created.project)
            return Written((run_id,), position, n)

        return self._retrying(command)

    def start_run(self, run_id: UUID, ctx: Context) -> Written:
        """Mark a run as running."""
        return self._run_command(run_id, ctx, lambda run, meta: run.start(meta))

    def complete_run(
        self, run_id: UUID, ctx: Context, completed_at: datetime | None = None
    ) -> Written:
        """Complete a run and seal it over its cases' last hashes."""

        def action(run: Run, meta: Meta) -> None:
            run.complete(meta, completed_at or meta.timestamp, self._last_hashes(run.case_ids))

        return self._run_command(run_id, ctx, action)

    def cancel_run(self, run_id: UUID, ctx: Context, reason: str | None = None) -> Written:
        """Cancel a run."""
        return self._run_command(run_id, ctx, lambda run, meta: run.cancel(meta, reason))

    def fail_run(self, run_id: UUID, ctx: Context, reason: str) -> Written:
        """Mark a run as failed."""
        return self._run_command(run_id, ctx, lambda run, meta: run.fail(meta, reason))

    def approve_baseline(self, run_id: UUID, ctx: Context, reason: str | None = None) -> Written:
        """Approve a completed run as the baseline of its (agent, suite); admin, with a reason."""
        ctx.check_admin("approving a baseline")
        why = require_reason(reason, "approving a baseline")
        return self._run_command(run_id, ctx, lambda run, meta: run.approve_baseline(meta, why))

    def revoke_baseline(self, run_id: UUID, ctx: Context, reason: str | None = None) -> Written:
        """Revoke a run's baseline approval; admin, with a reason."""
        ctx.check_admin("revoking a baseline")
        why = require_reason(reason, "revoking a baseline")
        return self._run_command(run_id, ctx, lambda run, meta: run.revoke_baseline(meta, why))

    def register_metric(
        self, definition: MetricDefinition, ctx: Context, project: str = "default"
    ) -> Written:
        """Add a custom metric to a project's catalogue (idempotent); admin scope."""
        ctx.check_admin("changing the metric catalogue")
        if ctx.project is not None and project != ctx.project:
            raise PermissionDeniedError(
                f"project: this token is for project {ctx.project!r}", field="project"
            )

        def command() -> Written:
            cid = catalogue_id_for(project)
            cat = self._find(MetricCatalogue, cid) or MetricCatalogue(cid)
            meta = self._meta(ctx, definition.model_dump(mode="json"))
            cat.register(definition, meta, project)
            position, n = self._save(cat, project=None)
            return Written((cid,), position, n)

        return self._retrying(command)

    # -- case commands -----------------------------------------------------------------------

    def open_case(self, run_id: UUID, case: BundleCase, ctx: Context) -> Written:
        """Open one case, with whatever of its facts the body already holds."""
        return self.ingest_cases(run_id, [case], ctx)

    def ingest_cases(self, run_id: UUID, cases: Sequence[BundleCase], ctx: Context) -> Written:
        """Open many cases with their facts in one transaction (the batch endpoint)."""
        scope = f"POST /runs/{run_id}/cases"
        body = [c.model_dump(mode="json") for c in cases] if ctx.idempotency_key else None

        if any(c.overrides for c in cases):
            ctx.check_admin("recording overrides or invalidations")

        def command() -> Written:
            run = self._run_in_scope(run_id, ctx)
            record, done = self._idempotent(scope, ctx, body)
            if done is not None:
                return Written(tuple(done), self.position(), 0)
            catalogue = self.catalogue(run.created.project)
            built = self._build_cases(run, cases, ctx, catalogue)
            ids = [c.id for c in built] or [run_id]
            self._use_key(record, ctx, body, scope, ids)
            position, n = self._save(
                *built, *_present(record), run=run, project=run.created.project
            )
            return Written(tuple(ids), position, n)

        return self._retrying(command)

    def record_traces(
        self, run_id: UUID, traces: Sequence[tuple[Trace, BundleCase]], ctx: Context
    ) -> Written:
        """Record complete traces as cases of a run, each trace marked recorded, at once.

        `traces` pairs a Trace aggregate (as just loaded: a retry after a concurrent write
        loads it again) with the case it maps to. One transaction: a trace is recorded exactly
        when its case is.
        """
        attempts = 0

        def command() -> Written:
            nonlocal attempts
            attempts += 1
            run = self._run_in_scope(run_id, ctx)
            catalogue = self.catalogue(run.created.project)
            built = self._build_cases(run, [c for _, c in traces], ctx, catalogue)
            meta = Meta(timestamp=self.clock(), actor=ctx.actor)
            marked: list[Aggregate] = []
            for (given, _), case in zip(traces, built, strict=True):
                trace = given if attempts == 1 else self._get(Trace, given.id)
                trace.record(run_id, case.id, meta)
                marked.append(trace)
            position, n = self._save(*built, *marked, run=run, project=run.created.project)
            return Written(tuple(c.id for c in built), position, n)

        return self._retrying(command)

    # -- bundles -----------------------------------------------------------------------------

    def import_bundle(self, bundle: RunBundle, ctx: Context) -> ImportResult:
        """Import a whole run atomically (one transaction); importing it again writes nothing."""
        bundle = bundle.model_copy(update={"run": self._in_project(bundle.run, ctx)})
        if any(c.overrides for c in bundle.cases):
            ctx.check_admin("recording overrides or invalidations")
        return self._retrying(partial(self._import_bundle_once, bundle, ctx))

    def ingest(self, bundle: RunBundle, ctx: Context) -> ImportResult:
        """Create or append to a run with many cases in one transaction (`POST /ingest`).

        The run is created when it is new, found when it exists with the same body (else a
        conflict), and its header's status is applied as a bundle's is: `running` leaves it
        open (started), `completed` seals it over its cases. A case already recorded with the
        same content is kept, with other content it is a conflict: nothing of the batch is
        stored. With an idempotency key, the same key and body again writes nothing and answers
        what it wrote the first time; another body under the key is a conflict.
        """
        bundle = bundle.model_copy(update={"run": self._in_project(bundle.run, ctx)})
        if any(c.overrides for c in bundle.cases):
            ctx.check_admin("recording overrides or invalidations")
        # Keys are per project: two tenants may pick the same key.
        scope = f"POST /ingest\x1f{bundle.run.project}"
        body = bundle.model_dump(mode="json") if ctx.idempotency_key else None

        def command() -> ImportResult:
            record, done = self._idempotent(scope, ctx, body)
            if done is not None:
                return ImportResult(
                    run_id=done[0],
                    run_key=bundle.run.key,
                    position=self.position(),
                    events=0,
                    cases=len(done) - 1,
                    new_cases=0,
                    case_ids=list(done[1:]),
                )
            return self._import_bundle_once(bundle, ctx, (record, body, scope))

        return self._retrying(command)

    def import_stream(
        self,
        run: BundleRun,
        cases: Callable[[], Iterable[BundleCase]],
        ctx: Context,
        *,
        chunk_size: int = IMPORT_CHUNK,
        progress: Callable[[int, int], None] | None = None,
    ) -> ImportResult:
        """Import a run whose cases arrive as a stream: chunked transactions, sealed at the end.

        One pass over the source (issue 32): `cases` is opened once, each case parsed,
        validated and built into its stored events once, chunk by chunk; the stored events wait
        in a spool on disk (`EventSpool`) until the whole stream was built, so every invariant
        (and every parse error of the source) is met before anything is written: bad input
        stores nothing. Then each chunk is written in one transaction, the run's lifecycle (the
        seal) last. Memory stays bounded by one chunk plus one id and hash per case. An
        interrupted write leaves the run open with the chunks written so far; the same import
        run again finds those cases already recorded with the same content, writes the rest and
        seals: no duplicates. A concurrent writer to the run met while writing makes the import
        start again (`cases` is then opened again): the cases it wrote are found, not repeated.
        """
        run = self._in_project(run, ctx)
        # Parsing, validating and building cases allocate short-lived objects in no cycles: with
        # the collector on, its generation scans were a large share of a streamed import.
        with collector.paused():
            return self._retrying(
                partial(self._import_stream, run, cases, ctx, chunk_size, progress)
            )

    def adopt_chain(self, ctx: Context, reason: str | None, *, unsigned: bool = False) -> Adoption:
        """Chain every stored event in one adopted block; only over an empty chain, and once.

        The adopted block is signed with the ledger's checkpoint key: a keyed `verify` refuses an
        unsigned adoption (issue 29). Without a key the caller says `unsigned`, so an operator of
        a keyed store who forgot the key is stopped before writing an adoption verify refuses.
        """
        ctx.check_admin("adopting unchained events")
        why = require_reason(reason, "adopting unchained events")
        if self.checkpoint_key is None and not unsigned:
            raise ValidationError(
                f"chain adopt: no checkpoint key ({KEY_ENV}): on a keyed store the adoption must "
                "be signed with it; for a store never verified with a key, pass --unsigned",
                field="unsigned",
            )
        if self.chain_blocks(-(2**62), 1):
            raise ConflictError(
                "the ledger chain already has commits: events outside it were written outside "
                "evaledger (tampering, see `evaledger verify`) and are not adopted"
            )
        first, last, count = None, 0, 0
        start: int | None = None
        while page := self.notifications(start, 5000):
            first = page[0].id if first is None else first
            last, count, start = page[-1].id, count + len(page), page[-1].id + 1
        if first is None:
            raise ValidationError("chain adopt: the store holds no events to adopt", field="reason")
        if first < 1:
            raise ConflictError(
                f"position {first} is below 1: written outside evaledger, it is not adopted "
                "(see `evaledger verify`)"
            )
        found = self._find(ChainRecord, CHAIN_RECORD_ID)
        record: ChainRecord = found or ChainRecord(CHAIN_RECORD_ID)
        record.adopt(Meta(timestamp=self.clock(), actor=ctx.actor), why, first, last, count)
        chain = self.recorder.chain
        chain.adopting = why
        try:
            position, _ = self._save(record, project=None)
        finally:
            chain.adopting = None
        return Adoption(first, last, count, position)

    def rotate_signing_key(
        self, ctx: Context, old: SigningKey, new: PublicKey, reason: str | None
    ) -> int:
        """Record, signed by the old key, that `new` signs the checkpoints from now on (admin).

        The position of the `SigningKeyRotated` record.
        """
        ctx.check_admin("rotating the checkpoint signing key")
        if new == old.public:
            raise ValidationError("key rotate: the new key is the old one", field="new_key")
        record = self._find(ChainRecord, CHAIN_RECORD_ID) or ChainRecord(CHAIN_RECORD_ID)
        record.rotate_key(
            Meta(timestamp=self.clock(), actor=ctx.actor),
            str(old.public),
            str(new),
            sign_rotation(old, new),
            reason,
        )
        position, _ = self._save(record, project=None)
        return position

    def key_rotations(self) -> list[tuple[str, str, str]]:
        """Every recorded hand-over of the signing key: (old key, new key, old key's signature)."""
        record = self._find(ChainRecord, CHAIN_RECORD_ID)
        if record is None:
            return []
        return [(r.old_key, r.new_key, r.signature) for r in record.rotations]

    def _write_chunk(self, events: Sequence[StoredEvent], project: str) -> int:
        """One built chunk's stored events in one transaction; the last one's log position."""
        return self._insert(events, project)

    def _write_run_events(self, events: Sequence[StoredEvent], project: str) -> int:
        """A run's own built events (its creation, its seal) in one transaction."""
        return self._insert(events, project)

    def _insert(self, events: Sequence[StoredEvent], project: str) -> int:
        ids = self.app.recorder.insert_events(events, lane=self.recorder.lane_for(project))
        assert ids, "the store answered no positions"
        return ids[-1]

    def _import_bundle_once(
        self,
        bundle: RunBundle,
        ctx: Context,
        key: tuple[IdempotencyRecord | None, Any, str] | None = None,
    ) -> ImportResult:
        """Build and save a whole bundle's run in one transaction (one attempt of the command).

        `key`: the idempotency record to save with it (record, body, scope), if any.
        """
        run = self._prepare_run(bundle.run, ctx)
        catalogue = self.catalogue(bundle.run.project)
        before = set(run.case_ids) if run.version else set()
        cases = self._build_cases(run, bundle.cases, ctx, catalogue)
        meta = Meta(timestamp=self.clock(), actor=ctx.actor)
        self._close_as_bundled(run, bundle.run, meta, {c.id: c.last_hash for c in cases})
        record = None
        if key is not None:
            record, body, scope = key
            self._use_key(record, ctx, body, scope, [run.id, *(c.id for c in cases)])
        position, n = self._save(*cases, *_present(record), run=run, project=run.created.project)
        return ImportResult(
            run_id=run.id,
            run_key=bundle.run.key,
            position=position,
            events=n,
            cases=len(cases),
            new_cases=len([c for c in cases if c.id not in before]),
            case_ids=[c.id for c in cases],
        )

    def _import_stream(
        self,
        run: BundleRun,
        cases: Callable[[], Iterable[BundleCase]],
        ctx: Context,
        chunk_size: int,
        progress: Callable[[int, int], None] | None,
    ) -> ImportResult:
        """The import a `Ledger.import_stream` runs, with the collector paused."""
        with EventSpool() as spool, CaseIndex() as index:
            current, new_cases, total = self._build_stream(
                run, cases, ctx, chunk_size, spool, index, progress
            )
            position, written, done = self.position(), 0, 0
            for events, n in spool.chunks():
                if events:
                    # A chunk of cases, or the run's own events (its creation, its seal).
                    position = (self._write_chunk if n else self._write_run_events)(
                        events, current.created.project
                    )
                written += len(events)
                done += n
                if progress is not None and n:
                    progress(done, total)
        return ImportResult(
            run_id=current.id,
            run_key=run.key,
            position=position,
            events=written,
            cases=total,
            new_cases=new_cases,
        )

    def _build_stream(
        self,
        run: BundleRun,
        cases: Callable[[], Iterable[BundleCase]],
        ctx: Context,
        chunk_size: int,
        spool: EventSpool,
        index: CaseIndex,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[Run, int, int]:
        """Validate and build every case of the stream once, spooling its stored events.

        Returns the run as it will be once written, the stream's new cases, and its cases.
        Progress is reported with a total of 0: the stream's length is not known yet. Each
        case's id and last hash go to `index` (on disk): the run aggregate keeps in memory only
        the ids it had before, so memory stays flat in the stream's length.
        """
        current = self._prepare_run(run, ctx)
        before = len(current.case_ids)
        catalogue = self.catalogue(run.project)
        to_stored = self.app.mapper.to_stored_event
        # A new run is written on its own first (as before the single pass: a resumed import
        # finds the run it was interrupted in).
        spool.add([to_stored(e) for e in self._in_save_order(current, [])], 0)
        total = new = 0
        for chunk in chunks(cases(), chunk_size):
            if any(c.overrides for c in chunk):
                ctx.check_admin("recording overrides or invalidations")
            ids = [case_id_for(current.id, c.test_case.key, c.repetition, c.variant) for c in chunk]
            held = index.known(ids)
            seen: set[UUID] = set()
            for i, (case_id, bc) in enumerate(zip(ids, chunk, strict=True), start=total):
                if case_id in seen or case_id in held:
                    self._twice(current.id, cases, case_id, bc, i)
                seen.add(case_id)
            built = self._build_cases(current, chunk, ctx, catalogue, offset=total)
            index.add((c.id, c.last_hash) for c in built)
            spool.add([to_stored(e) for e in self._in_save_order(current, built)], len(chunk))
            new += len(current.release_attached(before))
            total += len(chunk)
            if progress is not None:
                progress(total, 0)
        meta = Meta(timestamp=self.clock(), actor=ctx.actor)
        self._close_as_bundled(current, run, meta, sealed=partial(self._seal_from, index, current))
        spool.add([to_stored(e) for e in self._in_save_order(current, [])], 0)
        return current, new, total

    def _seal_from(self, index: CaseIndex, run: Run) -> Seal:
        """The seal of a streamed run: its cases before the import join the index, read in order."""
        index.add(self._last_hashes([cid for cid in run.case_ids if cid not in index]).items())
        return seal_in_order(index.in_id_order())

    def _twice(
        self,
        run_id: UUID,
        cases: Callable[[], Iterable[BundleCase]],
        case_id: UUID,
        bc: BundleCase,
        index: int,
    ) -> NoReturn:
        """A case met a second time in a stream: the error names both places."""
        first = next(
            j
            for j, other in enumerate(cases())
            if case_id_for(run_id, other.test_case.key, other.repetition, other.variant) == case_id
        )
        raise ValidationError(
            f"cases[{index}]: test case {bc.test_case.key!r} repetition {bc.repetition} "
            f"appears twice (first at cases[{first}])",
            field=f"cases[{index}].test_case.key",
        )

    def _close_as_bundled(
        self,
        run: Run,
        body: BundleRun,
        meta: Meta,
        hashes: Mapping[UUID, str] | None = None,
        *,
        sealed: Callable[[], Seal] | None = None,
    ) -> None:
        """Move a run to the status its bundle gives (complete seals over its cases).

        First, what the bundle knows of the source's end and the run does not say yet (a run
        created live, before its source ended) is recorded (`SourceResultsRecorded`). The seal
        is over `hashes` (cases just built) and the stored last hashes of the run's other cases,
        or, for a streamed import, `sealed()` (computed only when the run is sealed).
        """
        run.record_source_results(
            meta, {k: body.labels[k] for k in END_LABELS if k in body.labels}, body.config.scorers
        )
        status = body.status
        if status is BundleRunStatus.COMPLETED and run.status is not RunStatus.COMPLETED:
            completed_at = body.completed_at or meta.timestamp
            if sealed is not None:
                run.complete(meta, completed_at, sealed())
            else:
                known = hashes or {}
                missing = self._last_hashes([cid for cid in run.case_ids if cid not in known])
                seal = {cid: known[cid] if cid in known else missing[cid] for cid in run.case_ids}
                run.complete(meta, completed_at, seal)
        elif status is BundleRunStatus.CANCELED and run.status is not RunStatus.CANCELED:
            run.cancel(meta, body.reason)
        elif status is BundleRunStatus.FAILED and run.status is not RunStatus.FAILED:
            run.fail(meta, body.reason or "failed")
        elif status is BundleRunStatus.RUNNING and run.status is RunStatus.CREATED:
            run.start(meta)

    def _prepare_run(self, run: BundleRun, ctx: Context) -> Run:
        """The run to write to: an existing one with the same body, or a new one (unsaved)."""
        spec = self._resolve(run)
        run_id = run_id_for(run.project, run.key)
        body = run.creation_body()
        digest = request_digest(body)
        existing = self._find(Run, run_id)
        if existing is not None:
            # A run stored by an older body rule (v1) is still the same run.
            if existing.created.request_digest not in run.creation_digests():
                raise ConflictError(
                    f"run {run.key!r} already exists in project {run.project!r} "
                    "with a different body",
                    field="run",
                )
            return existing
        meta = Meta(
            timestamp=self.clock(),
            actor=ctx.actor,
            idempotency_key=ctx.idempotency_key,
            request_digest=digest,
        )
        return Run.create(
            run_id,
            meta,
            run_key=run.key,
            project=run.project,
            name=run.name,
            suite=run.suite,
            agent=run.agent,
            labels=run.labels,
            config=run.config,
            spec=spec,
            created_at=run.created_at,
            dataset=run.dataset,
        )

    def _resolve(self, run: BundleRun) -> ScoringSpec:
        return resolve_spec(run.config, self.catalogue(run.project))

    def _build_cases(
        self,
        run: Run,
        cases: Sequence[BundleCase],
        ctx: Context,
        catalogue: Mapping[str, MetricDefinition],
        offset: int = 0,
    ) -> list[Case]:
        built: list[Case] = []
        new_ids: list[UUID] = []
        seen_ids: set[UUID] = set()
        for index, bc in enumerate(cases, start=offset):
            case_id = case_id_for(run.id, bc.test_case.key, bc.repetition, bc.variant)
            if case_id in seen_ids:
                raise ValidationError(
                    f"cases[{index}]: test case {bc.test_case.key!r} repetition {bc.repetition} "
                    "appears twice",
                    field=f"cases[{index}].test_case.key",
                )
            seen_ids.add(case_id)
            # One python-mode dump of the case: its digest and its events' states share it.
            dumped = bc.model_dump()
            digest = case_digest(dumped)
            existing = self._find(Case, case_id) if run.has_case(case_id) else None
            if existing is not None:
                stored = existing.opened.request_digest
                if not bc.is_recorded_as(stored, digest):
                    raise ConflictError(
                        f"cases[{index}]: case {bc.test_case.key!r} repetition {bc.repetition} "
                        "is already recorded with different content",
                        field=f"cases[{index}]",
                    )
                built.append(existing)
                continue
            run.ensure_open()
            meta = Meta(
                timestamp=self.clock(),
                actor=ctx.actor,
                idempotency_key=ctx.idempotency_key,
                request_digest=digest,
                seal=self.seal_payloads,
            )
            try:
                built.append(
                    Case.open_from_bundle(
                        case_id,
                        run.id,
                        bc,
                        meta,
                        catalogue,
                        # A bundle may name who overrode (an export keeps authors); a token may not.
                        bundle_authors=ctx.project is None,
                        dumped=dumped,
                    )
                )
            except ValidationError as e:
                raise ValidationError(
                    f"cases[{index}].{e.detail}", field=f"cases[{index}].{e.field}"
                ) from None
            new_ids.append(case_id)
        if new_ids:
            run.attach_cases(new_ids, Meta(timestamp=self.clock(), actor=ctx.actor))
        return built

    def _in_project(self, run: BundleRun, ctx: Context) -> BundleRun:
        """A token's run lands in the token's project (its own unless the body names another).

        Its dataset reference is then completed from the project's datasets (`resolve_ref`).
        """
        if ctx.project is not None:
            if "project" not in run.model_fields_set:
                run = run.model_copy(update={"project": ctx.project})
            elif run.project != ctx.project:
                raise PermissionDeniedError(
                    f"run.project: this token is for project {ctx.project!r}, not {run.project!r}",
                    field="run.project",
                )
        if run.dataset is None:
            return run
        return run.model_copy(update={"dataset": self.resolve_ref(run.project, run.dataset)})


def _present(record: IdempotencyRecord | None) -> tuple[IdempotencyRecord, ...]:
    return () if record is None else (record,)
