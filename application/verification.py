"""Verify the log and keep the store in shape: chain, seals, read-model drift, projections.

The use cases of `evaledger verify`, `chain adopt`, `project`, `migrate`'s report, `GET /verify`,
`/health`, `/ready` and `/metrics`. The checks themselves are the domain's (`domain/verify.py`:
hash chains, run seals, chain signatures; `domain/adoption.py`) and the projections'
(`projections/drift.py`: the read models against a scratch rebuild); these name them for the
entry points, over the wired store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import Engine

from evaledger.application.ports import Services
from evaledger.domain.adoption import Adoption
from evaledger.domain.ledger import Context
from evaledger.domain.store.urls import StorageLocation
from evaledger.domain.verify import Checkpoint, VerifyReport, verify
from evaledger.projections import drift
from evaledger.projections.drift import ViewsReport
from evaledger.projections.leadership import follow_as_leader
from evaledger.projections.runner import ProjectionRunner

Progress = Callable[[int, int], None]


class StoreServices(Services, Protocol):
    """The wired store with what operating it needs: the projections' runner, the engine."""

    @property
    def runner(self) -> ProjectionRunner:
        """The projections' runner (catch up, follow, rebuild; positions and failures)."""

    @property
    def engine(self) -> Engine:
        """The read models' database."""

    @property
    def location(self) -> StorageLocation:
        """Where the store is (sqlite or postgresql)."""


@dataclass(frozen=True)
class Verification:
    """One verification: the log's report, and the read models' when they were compared."""

    report: VerifyReport
    views: ViewsReport | None
    verified_at: datetime

    @property
    def ok(self) -> bool:
        """The log is whole and (when compared) the read models match a rebuild."""
        return self.report.ok and (self.views is None or self.views.ok)


@dataclass(frozen=True)
class StoreHealth:
    """The store answered: the log's head, each projection's position, stopped projections."""

    kind: str
    log_position: int
    projections: dict[str, int]
    failures: list[dict[str, object]]
    events: int = 0
    """The sum of the write lanes' heads: what a projection's position (its lane positions'
    sum) reaches when it is caught up. One lane: the log's head."""

    @property
    def projection_lag(self) -> dict[str, int]:
        """Events each projection is behind the heads of the write lanes."""
        return {name: self.events - pos for name, pos in self.projections.items()}


@dataclass(frozen=True)
class Lag:
    """The log's head and how many events the slowest projection is behind it."""

    log_position: int
    projection_lag: int


def verify_log(
    services: Services,
    *,
    expect: Checkpoint | None = None,
    incremental: bool = False,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check every hash chain, run seal and chain signature; name the first break.

    `expect`: an earlier checkpoint the log must still contain. `incremental` (with the
    checkpoint key): resume from the last verified checkpoint.
    """
    return verify(services.ledger, progress, expect=expect, incremental=incremental)


def check_views(services: StoreServices, progress: Progress | None = None) -> ViewsReport:
    """Bring the read models up to the log, then compare them with a rebuild from it."""
    services.sync()
    return drift.check_views(services.ledger, services.engine, progress)


def verify_store(
    services: StoreServices,
    *,
    expect: Checkpoint | None = None,
    incremental: bool = False,
    views: bool = False,
) -> Verification:
    """The log (from `expect`, incrementally if asked) and, with `views`, the read models."""
    report = verify_log(services, expect=expect, incremental=incremental)
    verified_at = datetime.now(UTC)
    found = check_views(services) if views else None
    return Verification(report, found, verified_at)


def adopt_chain(
    services: Services, ctx: Context, reason: str | None, *, unsigned: bool = False
) -> Adoption:
    """Chain, once and on the record, the events of a store written before the chain (admin)."""
    return services.ledger.adopt_chain(ctx, reason, unsigned=unsigned)


def store_health(services: StoreServices) -> StoreHealth:
    """The store answers and is append-only (else an infrastructure error); projection state."""
    head = services.ledger.check_store()
    return StoreHealth(
        kind=services.location.kind,
        log_position=head,
        projections=services.runner.positions(),
        failures=services.runner.failures(),
        events=_lanes_head(services, head),
    )


def _lanes_head(services: StoreServices, head: int) -> int:
    """The sum of the write lanes' heads (one lane, SQLite: the log's head, no query).

    Projections track the sum of their lane positions; the log's head may pass it by the
    positions a rolled-back transaction took (a sequence gap), so lag is counted against this.
    """
    if services.location.kind == "sqlite":
        return head
    return sum(services.ledger.lane_heads().values())


def projection_lag(services: StoreServices) -> Lag:
    """The log's head, and the events the slowest projection still has to apply."""
    head = services.ledger.position()
    events = _lanes_head(services, head)
    positions = services.runner.positions().values()
    return Lag(head, max((events - p for p in positions), default=events))


def log_position(services: Services) -> int:
    """The last position in the event log."""
    return services.ledger.position()


def seals_payloads(services: Services) -> bool:
    """Whether the store seals personal text (its record, `LedgerRecorder.sealing`)."""
    return services.ledger.seal_payloads


def catch_up_projections(services: StoreServices, progress: Progress | None = None) -> int:
    """Run every projection to the log's head; the position reached."""
    return services.runner.catch_up(progress=progress)


def rebuild_projection(services: StoreServices, name: str) -> int:
    """Empty one projection and catch it up from position 0 (KeyError: no such projection)."""
    return services.runner.rebuild(name)


def follow_projections(
    services: StoreServices,
    stop: threading.Event,
    *,
    poll_interval: float = 0.2,
    safety_interval: float = 30.0,
) -> None:
    """Keep the projections caught up until `stop`; on PostgreSQL only the leader follows."""
    follow_as_leader(
        services.engine,
        stop,
        lambda until: services.runner.follow(
            until, poll_interval=poll_interval, safety_interval=safety_interval
        ),
    )
