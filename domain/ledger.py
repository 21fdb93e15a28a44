"""The ledger application service: every write goes through one of its commands.

Each command loads the aggregates it needs, checks invariants, and saves once (one transaction).
It returns the log position of what it wrote so callers can wait for projections.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import (
    InfrastructureFactory,
    IntegrityError,
    Mapper,
    Notification,
    StoredEvent,
    Transcoder,
)

from evaledger.domain import collector, importing
from evaledger.domain.aggregates import (
    Aggregate,
    Case,
    IdempotencyRecord,
    Meta,
    MetricCatalogue,
    Run,
    case_id_for,
    catalogue_id_for,
    idempotency_id_for,
    replay,
    run_id_for,
)
from evaledger.domain.bundle import (
    BundleCase,
    BundleRun,
    RunBundle,
)
from evaledger.domain.case_opening import open_recorded_case
from evaledger.domain.errors import (
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from evaledger.domain.events import (
    HUMAN_ACTS,
    CaseEvent,
    CaseOpened,
    DomainEvent,
    RunCreated,
    TokenIssued,
    TokenRevoked,
    TokenScope,
    case_digest,
    check_storable,
    request_digest,
    stored_hash,
)
from evaledger.domain.importing import IMPORT_CHUNK, ImportResult
from evaledger.domain.metrics import MetricDefinition
from evaledger.domain.spec import ScoringSpec, resolve_spec
from evaledger.domain.store.chain import Block
from evaledger.domain.store.codec import EventMapper, OrjsonTranscoder
from evaledger.domain.store.recorder import LedgerRecorder
from evaledger.domain.store.urls import StorageLocation
from evaledger.domain.tokens import (
    ApiToken,
    NewToken,
    Principal,
    TokenInfo,
    VerifiedTokens,
    issued_tokens,
    new_secret,
    secret_hash,
    split_token,
    token_aggregate_id,
)

A = TypeVar("A", bound=Aggregate)
T = TypeVar("T")
MAX_RETRIES = 25


def utcnow() -> datetime:
    """The ledger's clock (UTC)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class Context:
    """Who sends a command, what they may touch, with an optional idempotency key.

    `project` None and scope admin: the CLI or an open loopback server (the store's owner).
    A token narrows both: commands outside its project act as if the target did not exist,
    and baselines, overrides, invalidations and catalogue changes need the admin scope.
    """

    actor: str = "anonymous"
    idempotency_key: str | None = None
    project: str | None = None
    scope: TokenScope = TokenScope.ADMIN

    @classmethod
    def of(cls, principal: Principal, actor: str, idempotency_key: str | None = None) -> Context:
        """The context of a principal; a token's own actor wins over the one given."""
        return cls(
            actor=principal.actor or actor,
            idempotency_key=idempotency_key,
            project=principal.project,
            scope=principal.scope,
        )

    def check_project(self, project: str, what: str) -> None:
        """Outside the token's project the target does not exist (no existence leak)."""
        if self.project is not None and project != self.project:
            raise NotFoundError(f"no {what}")

    def check_admin(self, what: str) -> None:
        """Baselines, overrides, invalidations and catalogue changes need the admin scope."""
        self.scope.require(TokenScope.ADMIN, what)


def require_reason(reason: str | None, what: str) -> str:
    """Admin actions say why (the reason goes into the event)."""
    if reason is None or not reason.strip():
        raise ValidationError(f"reason: {what} needs a reason", field="reason")
    return reason


@dataclass(frozen=True)
class Written:
    """What a command wrote: the ids it touched, the log position, how many events."""

    ids: tuple[UUID, ...]
    position: int
    events: int

    @property
    def id(self) -> UUID:
        """The main id (run or case)."""
        return self.ids[0]


class LedgerApplication(Application[UUID]):
    """eventsourcing application storing evaledger's pydantic events."""

    name = "evaledger"

    def construct_mapper(self) -> Mapper[UUID]:
        """Mapper with stable topics and the orjson transcoder."""
        return EventMapper(transcoder=self.construct_transcoder())

    def construct_transcoder(self) -> Transcoder:
        """Events are plain JSON (orjson)."""
        return OrjsonTranscoder()


class Ledger:
    """Commands (writes) and audit reads over the event store."""

    def __init__(
        self,
        location: StorageLocation,
        clock: Callable[[], datetime] = utcnow,
        checkpoint_key: bytes | None = None,
        migrate: bool = False,
        app_role: str | None = None,
    ) -> None:
        """Open the store; on PostgreSQL, refuse one whose events table is not append-only.

        `migrate` (run as the migration role) creates or repairs the tables, triggers and the
        grants of `app_role`; otherwise they are created only when missing (single-role use).
        """
        env = dict(location.events_env)
        env.setdefault("AGGREGATE_CACHE_MAXSIZE", "256")
        self.location = location
        self.app = LedgerApplication(env=env)
        # The recorder named by the location (domain/store/) also keeps the ledger's chain.
        self.recorder = cast(LedgerRecorder, self.app.recorder)
        self.clock = clock
        self._projects: dict[UUID, str] = {}
        self.checkpoint_key = checkpoint_key
        self._tokens = VerifiedTokens(
            lambda oid: self.recorder.commit_verifies(oid, 1, self.checkpoint_key)
        )
        self.recorder.use_checkpoint_key(checkpoint_key)
        self.recorder.prepare(env, migrate=migrate, app_role=app_role)

    def check_store(self) -> int:
        """The log's head, after checking the store answers and (PostgreSQL) is append-only."""
        head = self.position()
        self.recorder.check_append_only()
        return head

    # -- infrastructure ----------------------------------------------------------------------

    @property
    def factory(self) -> InfrastructureFactory:
        """The eventsourcing infrastructure factory (used by projections)."""
        return self.app.factory

    def position(self) -> int:
        """The last position in the notification log (0 when empty)."""
        return self.app.recorder.max_notification_id() or 0

    def notifications(
        self, start: int | None, limit: int, stop: int | None = None
    ) -> Sequence[Notification]:
        """Notifications from `start` (inclusive; None: from the lowest stored), in log order."""
        return self.app.recorder.select_notifications(start=start, limit=limit, stop=stop)

    def chain_blocks(self, after: int, limit: int) -> list[Block]:
        """Blocks of the ledger chain ending after position `after`, in log order."""
        return self.recorder.chain_blocks(after, limit)

    def decode(self, stored: StoredEvent) -> DomainEvent:
        """A stored event (or notification) as a domain event (upcast)."""
        return cast(DomainEvent, self.app.mapper.to_domain_event(stored))

    def close(self) -> None:
        """Release the store's connections."""
        self.app.close()

    # -- reads (audit) -----------------------------------------------------------------------

    def _get(self, cls: type[A], aggregate_id: UUID, version: int | None = None) -> A:
        try:
            project: Any = lambda agg, events: replay(cls, cast(Iterable[DomainEvent], events), agg)  # noqa: E731
            return cast(
                A, self.app.repository.get(aggregate_id, version=version, projector_func=project)
            )
        except AggregateNotFoundError:
            raise NotFoundError(f"no {cls.__name__.lower()} {aggregate_id}") from None

    def _find(self, cls: type[A], aggregate_id: UUID) -> A | None:
        try:
            return self._get(cls, aggregate_id)
        except NotFoundError:
            return None

    def get_run(self, run_id: UUID, version: int | None = None) -> Run:
        """A run as of now, or as of a version."""
        return self._get(Run, run_id, version)

    def get_case(self, case_id: UUID, version: int | None = None) -> Case:
        """A case as of now, or as of a version."""
        case = self._get(Case, case_id, version)
        if not hasattr(case, "opened"):
            raise NotFoundError(f"no case {case_id}")
        return case

    def events_of(self, aggregate_id: UUID) -> list[DomainEvent]:
        """Every event of one aggregate, in order."""
        return cast(list[DomainEvent], list(self.app.events.get(aggregate_id)))

    def stored_events_of(self, aggregate_id: UUID) -> list[Any]:
        """Every stored (raw) event of one aggregate, in order."""
        return list(self.app.recorder.select_events(aggregate_id))

    def catalogue(self, project: str = "default") -> dict[str, MetricDefinition]:
        """Built-in and custom metrics of a project."""
        found = self._find(MetricCatalogue, catalogue_id_for(project))
        return (found or MetricCatalogue(catalogue_id_for(project))).metrics()

    def find_run(self, project: str, run_key: str) -> Run | None:
        """The run with this key in this project, if any."""
        return self._find(Run, run_id_for(project, run_key))

    def project_of(self, aggregate_id: UUID) -> str | None:
        """The project a run or case belongs to (None: no such run or case).

        Read from the aggregate's first event, which never changes: cached for good.
        """
        cached = self._projects.get(aggregate_id)
        if cached is not None:
            return cached
        stored = list(self.app.recorder.select_events(aggregate_id, lte=1))
        if not stored:
            return None
        first = self.decode(stored[0])
        if isinstance(first, RunCreated):
            project: str | None = first.project
        elif isinstance(first, CaseOpened):
            project = self.project_of(first.run_id)
        else:
            return None
        if project is not None:
            if len(self._projects) >= 100_000:
                self._projects.clear()
            self._projects[aggregate_id] = project
        return project

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
        position, _ = self._save(token_agg)
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
            position, n = self._save(t)
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

    # -- saving ------------------------------------------------------------------------------

    def _meta(self, ctx: Context, body: Any = None) -> Meta:
        return Meta(
            timestamp=self.clock(),
            actor=ctx.actor,
            idempotency_key=ctx.idempotency_key,
            request_digest=request_digest(body) if ctx.idempotency_key is not None else None,
        )

    def _save(self, *aggregates: Aggregate, run: Run | None = None) -> tuple[int, int]:
        """Save in one transaction.

        With a run, log order is: its creation, the case events,
        then its other events (attached cases, completion), so readers meet a run before its
        cases and a seal after the case events it covers.
        """
        events: list[DomainEvent] = []
        run_events = run.collect_events() if run is not None else []
        head = [e for e in run_events if isinstance(e, RunCreated)]
        events.extend(head)
        for agg in aggregates:
            events.extend(agg.collect_events())
        events.extend(e for e in run_events if not isinstance(e, RunCreated))
        if not events:
            return self.position(), 0
        for event in events:
            check_storable(event)
        # Straight to the event store: `Application.save` would run a runtime Protocol check per
        # event (15 % of a large import) to sort events from aggregates; these are all events,
        # and no aggregate is handed over, so its cache and snapshot steps had nothing to do.
        recordings = self.app.events.put(events)
        return recordings[-1].notification.id, len(events)

    def _retrying(self, command: Callable[[], T]) -> T:
        """Re-run a command on an optimistic-concurrency conflict (someone wrote first)."""
        for attempt in range(MAX_RETRIES):
            try:
                with collector.paused():
                    return command()
            except IntegrityError:
                if attempt == MAX_RETRIES - 1:
                    raise ConflictError("too many concurrent writers; try again") from None
                # Jittered exponential backoff: writers on one hot run spread out.
                time.sleep(random.uniform(0, min(0.5, 0.005 * 2**attempt)))  # noqa: S311
        raise AssertionError("unreachable")

    # -- run commands ------------------------------------------------------------------------

    def create_run(self, run: BundleRun, ctx: Context) -> Written:
        """Create a run with its resolved config snapshot (idempotent on the same body)."""
        run = _in_project(run, ctx)
        body = run.creation_body()
        # Keys are per project: two tenants may pick the same key.
        scope = f"POST /runs\x1f{run.project}"

        def command() -> Written:
            record, done = self._idempotent(scope, ctx, body)
            if done is not None:
                return Written(tuple(done), self.position(), 0)
            created = self._prepare_run(run, ctx)
            self._use_key(record, ctx, body, scope, [created.id])
            position, n = self._save(*_present(record), created)
            return Written((created.id,), position, n)

        return self._retrying(command)

    def _idempotent(
        self, scope: str, ctx: Context, body: Any
    ) -> tuple[IdempotencyRecord | None, list[UUID] | None]:
        """The key's record and, when the key was used with this body, what it created."""
        if ctx.idempotency_key is None:
            return None, None
        rid = idempotency_id_for(scope, ctx.idempotency_key)
        record = self._find(IdempotencyRecord, rid) or IdempotencyRecord(rid)
        return record, record.check(request_digest(body))

    def _use_key(
        self,
        record: IdempotencyRecord | None,
        ctx: Context,
        body: Any,
        scope: str,
        ids: Sequence[UUID],
    ) -> None:
        if record is not None:
            record.use(self._meta(ctx, body), scope, ids)

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
        )

    def _run_in_scope(self, run_id: UUID, ctx: Context, what: str | None = None) -> Run:
        """The run, if the context may touch it (else: not found)."""
        run = self.get_run(run_id)
        ctx.check_project(run.created.project, what or f"run {run_id}")
        return run

    def _resolve(self, run: BundleRun) -> ScoringSpec:
        return resolve_spec(run.config, self.catalogue(run.project))

    def _run_command(
        self, run_id: UUID, ctx: Context, action: Callable[[Run, Meta], None]
    ) -> Written:
        def command() -> Written:
            run = self._run_in_scope(run_id, ctx)
            meta = self._meta(ctx, {"run": str(run_id)})
            if not run.seen(meta):
                action(run, meta)
            position, n = self._save(run)
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

    def _last_hashes(self, case_ids: Iterable[UUID]) -> dict[UUID, str]:
        """The hash of each case's last stored event (what its aggregate's `last_hash` is).

        Read from the last stored row alone (the hash is over its stored topic and bytes), not
        by replaying every case: sealing a 10,000-case run replayed ~37,000 events.
        """
        ids = list(case_ids)
        last = self.recorder.last_stored(ids)
        hashes: dict[UUID, str] = {}
        for cid in ids:
            if cid not in last:
                raise NotFoundError(f"no case {cid}")
            hashes[cid] = stored_hash(*last[cid])
        return hashes

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
            position, n = self._save(cat)
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
            position, n = self._save(*built, *_present(record), run=run)
            return Written(tuple(ids), position, n)

        return self._retrying(command)

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
            )
            try:
                built.append(
                    open_recorded_case(
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

    def record(
        self,
        case_id: UUID,
        cls: type[CaseEvent],
        ctx: Context,
        body: Mapping[str, Any],
        *,
        judgement: bool = False,
    ) -> Written:
        """Record one fact of a case (transcript, verdict, outcomes, claims, check, error...).

        `judgement`: a verdict the ledger's own judge reached about a recorded transcript. Like a
        correction it is allowed on a closed run: it is a fact about the transcript, not a new
        execution, and the run's seal covers only the executions (DESIGN §10, re-judging).
        """
        act = HUMAN_ACTS.get(cls)  # a person's act: corrections, labels, flags
        overrides = judgement or act is not None
        if act is not None:
            ctx.scope.require(*act)

        def command() -> Written:
            case = self.get_case(case_id)
            run = self._run_in_scope(case.run_id, ctx, f"case {case_id}")
            if not overrides:
                run.ensure_open()
            meta = self._meta(ctx, {"type": cls.topic(), **jsonable(body)})
            if not case.seen(meta):
                case.record(cls, meta, self.catalogue(run.created.project), **body)
            position, n = self._save(case)
            return Written((case_id,), position, n)

        return self._retrying(command)

    # -- bundles -----------------------------------------------------------------------------

    def import_bundle(self, bundle: RunBundle, ctx: Context) -> ImportResult:
        """Import a whole run atomically (one transaction); importing it again writes nothing."""
        bundle = bundle.model_copy(update={"run": _in_project(bundle.run, ctx)})
        if any(c.overrides for c in bundle.cases):
            ctx.check_admin("recording overrides or invalidations")
        return self._retrying(partial(importing.import_bundle, self, bundle, ctx))

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

        `cases` opens the stream afresh each time it is called; it is read twice. The first
        pass builds every chunk without saving it, so every invariant (and every parse error of
        the source) is met before anything is written: bad input stores nothing. The second pass
        writes one transaction per chunk, then the run's lifecycle (the seal) last. Memory stays
        bounded by one chunk plus one id and hash per case. An interrupted second pass leaves the
        run open with the chunks written so far; the same import run again finds those cases
        already recorded with the same content, writes the rest and seals: no duplicates.
        """
        run = _in_project(run, ctx)
        # Parsing, validating and building cases allocate short-lived objects in no cycles: with
        # the collector on, its generation scans were a large share of a streamed import.
        with collector.paused():
            return importing.import_stream(self, run, cases, ctx, chunk_size, progress)

    def _write_chunk(
        self,
        run: Run,
        chunk: Sequence[BundleCase],
        ctx: Context,
        catalogue: Mapping[str, MetricDefinition],
        offset: int,
    ) -> tuple[Run, list[Case], int]:
        """One chunk in one transaction; on a concurrent write, reload the run and retry."""
        attempts = 0

        def command() -> tuple[Run, list[Case], int]:
            nonlocal attempts
            # The run in hand is current unless a concurrent writer made this save fail.
            current = run if attempts == 0 else self.get_run(run.id)
            attempts += 1
            built = self._build_cases(current, chunk, ctx, catalogue, offset)
            _, n = self._save(*built, run=current)
            return current, built, n

        return self._retrying(command)


def _in_project(run: BundleRun, ctx: Context) -> BundleRun:
    """A token's run lands in the token's project (its own unless the body names another)."""
    if ctx.project is None:
        return run
    if "project" not in run.model_fields_set:
        return run.model_copy(update={"project": ctx.project})
    if run.project != ctx.project:
        raise PermissionDeniedError(
            f"run.project: this token is for project {ctx.project!r}, not {run.project!r}",
            field="run.project",
        )
    return run


def _present(record: IdempotencyRecord | None) -> tuple[IdempotencyRecord, ...]:
    return () if record is None else (record,)


def jsonable(body: Mapping[str, Any]) -> dict[str, Any]:
    """A command body with models, UUIDs and datetimes as plain JSON values (for digests)."""
    from pydantic import BaseModel

    def conv(x: Any) -> Any:
        if isinstance(x, BaseModel):
            return x.model_dump(mode="json")
        if isinstance(x, list | tuple):
            return [conv(i) for i in x]
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        if isinstance(x, UUID | datetime):
            return str(x)
        return x

    return {k: conv(v) for k, v in body.items()}
