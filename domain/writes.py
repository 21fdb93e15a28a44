"""The ledger's store and write unit: one transaction per command, retried on a conflict.

The `Ledger` (`ledger.py`) is built on `LedgerStore`: the commands (runs, cases, bundles,
tokens) live there; opening the store, loading aggregates, saving one command's events in one
transaction, retrying on a concurrent write and the idempotency records live here, with the
values every command shares (`Context`, `Written`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
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
from pydantic import BaseModel

from evaledger.domain import collector
from evaledger.domain.aggregates import (
    Aggregate,
    Case,
    IdempotencyRecord,
    Meta,
    MetricCatalogue,
    Run,
    catalogue_id_for,
    idempotency_id_for,
    replay,
    run_id_for,
)
from evaledger.domain.errors import ConflictError, NotFoundError, ValidationError
from evaledger.domain.events import (
    CaseOpened,
    DomainEvent,
    RunCreated,
    TokenScope,
    check_storable,
    request_digest,
    stored_hash,
)
from evaledger.domain.metrics import MetricDefinition
from evaledger.domain.store.chain import Block
from evaledger.domain.store.codec import EventMapper, OrjsonTranscoder
from evaledger.domain.store.recorder import LedgerRecorder, LogRow
from evaledger.domain.store.urls import StorageLocation
from evaledger.domain.tokens import Principal, VerifiedTokens

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


class LedgerStore:
    """One event store and the write unit every ledger command runs in.

    It opens the store, loads aggregates, saves the events of one command in one transaction
    (`_save`), re-runs a command on a concurrent write (`_retrying`), keeps idempotency records
    and reads a case's last hash; `Ledger` (`ledger.py`) holds the commands built on it.
    """

    def __init__(
        self,
        location: StorageLocation,
        clock: Callable[[], datetime] = utcnow,
        checkpoint_key: bytes | None = None,
        migrate: bool = False,
        app_role: str | None = None,
        seal_payloads: bool | None = None,
    ) -> None:
        """Open the store; on PostgreSQL, refuse one whose events table is not append-only.

        `migrate` (run as the migration role) creates or repairs the tables, triggers and the
        grants of `app_role`; otherwise they are created only when missing (single-role use).
        `seal_payloads` is the opening process's wish; the store's own record decides
        (`LedgerRecorder.sealing`: a new store records the wish, None meaning seal).
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
        cast(EventMapper, self.app.mapper).unseal = self.recorder.unseal
        self.recorder.prepare(env, migrate=migrate, app_role=app_role)
        self.seal_payloads = self.recorder.sealing(seal_payloads)
        """Seal new events' personal strings under per-case keys (`domain/payloads.py`)."""

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

    def log_rows(self, start: int, limit: int) -> list[LogRow]:
        """Up to `limit` events from position `start` as plain tuples (replay's direct cursor).

        Each is (position, aggregate id as text, version, topic, stored state).
        """
        return self.recorder.log_rows(start, limit)

    def lane_heads(self) -> dict[int, int]:
        """The last lane position of every lane holding events (`store/lanes.py`)."""
        return self.recorder.lane_heads()

    def lanes_upto(self, position: int) -> dict[int, int]:
        """Per lane, its last lane position among the events up to log position `position`."""
        return self.recorder.lanes_upto(position)

    def lane_log_rows(self, lane: int, after: int, limit: int) -> tuple[list[LogRow], list[int]]:
        """Up to `limit` events of one lane after lane position `after`, and their lane positions.

        What the projection runner reads: each lane in its own order, which is its commit order
        (the log's order is not, once lanes commit concurrently).
        """
        return self.recorder.lane_log_rows(lane, after, limit)

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

    # -- saving ------------------------------------------------------------------------------

    def _meta(self, ctx: Context, body: Any = None) -> Meta:
        return Meta(
            timestamp=self.clock(),
            actor=ctx.actor,
            idempotency_key=ctx.idempotency_key,
            request_digest=request_digest(body) if ctx.idempotency_key is not None else None,
            seal=self.seal_payloads,
        )

    def _save(
        self, *aggregates: Aggregate, run: Run | None = None, project: str | None
    ) -> tuple[int, int]:
        """Save in one transaction, in the write lane of `project` (None: store-wide, lane 0).

        `project` is keyword-only and has no default so that every command says which project
        it writes (the lane rule, `store/lanes.py`); a command touches one project.

        With a run, log order is: its creation, the case events,
        then its other events (attached cases, completion), so readers meet a run before its
        cases and a seal after the case events it covers.
        """
        events = self._in_save_order(run, aggregates)
        if not events:
            return self.position(), 0
        # Straight to the event store: `Application.save` would run a runtime Protocol check per
        # event (15 % of a large import) to sort events from aggregates; these are all events,
        # and no aggregate is handed over, so its cache and snapshot steps had nothing to do.
        recordings = self.app.events.put(events, lane=self.recorder.lane_for(project))
        return recordings[-1].notification.id, len(events)

    @staticmethod
    def _in_save_order(run: Run | None, aggregates: Iterable[Aggregate]) -> list[DomainEvent]:
        """The pending events of a save, in log order (see `_save`), each checked storable."""
        events: list[DomainEvent] = []
        run_events = run.collect_events() if run is not None else []
        events.extend(e for e in run_events if isinstance(e, RunCreated))
        for agg in aggregates:
            events.extend(agg.collect_events())
        events.extend(e for e in run_events if not isinstance(e, RunCreated))
        for event in events:
            check_storable(event)
        return events

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

    def _run_in_scope(self, run_id: UUID, ctx: Context, what: str | None = None) -> Run:
        """The run, if the context may touch it (else: not found)."""
        run = self.get_run(run_id)
        ctx.check_project(run.created.project, what or f"run {run_id}")
        return run

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


def jsonable(body: Mapping[str, Any]) -> dict[str, Any]:
    """A command body with models, UUIDs and datetimes as plain JSON values (for digests)."""

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
