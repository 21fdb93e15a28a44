"""Runs projections over the ledger's notification log: catch-up, follow, rebuild, wait.

A page of notifications is decoded once and handed to every projection that has not yet seen
it; all their rows and their tracking positions are written in one transaction. The tracking
update is optimistic (`WHERE position = old`), so two processes can never apply a page twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from sqlalchemy import Connection, Engine, Table, delete, insert, select, update

from evaledger.domain import gc
from evaledger.domain.events import DomainEvent
from evaledger.domain.ledger import Ledger
from evaledger.projections.store import tracking

log = logging.getLogger(__name__)

Batch = Sequence[tuple[int, DomainEvent]]


class Projection(Protocol):
    """One read model: its versioned name, its tables, and how it folds a page of events."""

    name: str
    tables: Sequence[Table]

    def process(self, conn: Connection, batch: Batch) -> None:
        """Apply a page of (position, event) to the read model inside `conn`'s transaction."""

    def reset(self) -> None:
        """Forget in-memory caches (after a rebuild or a failed transaction)."""


class TrackingConflictError(RuntimeError):
    """Another process applied the same page first."""


class ProjectionRunner:
    """Catches projections up with the ledger; single-flight within the process."""

    def __init__(
        self,
        ledger: Ledger,
        engine: Engine,
        projections: Sequence[Projection],
        page_size: int = 1000,
    ) -> None:
        self.ledger = ledger
        self.engine = engine
        self.projections = list(projections)
        self.page_size = page_size
        self._lock = threading.Lock()
        with engine.begin() as conn:
            known = set(conn.scalars(select(tracking.c.name)))
            for p in self.projections:
                if p.name not in known:
                    conn.execute(insert(tracking).values(name=p.name, position=0))

    def positions(self) -> dict[str, int]:
        """Tracking position of every projection."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(tracking.c.name, tracking.c.position)).all()
        mine = {p.name for p in self.projections}
        return {name: pos for name, pos in rows if name in mine}

    def position(self) -> int:
        """The position every projection has reached."""
        positions = self.positions()
        return min(positions.values()) if positions else 0

    def catch_up(
        self, until: int | None = None, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Process notifications until `until` (or the end of the log); returns the position."""
        with self._lock:
            target = until if until is not None else self.ledger.position()
            while True:
                positions = self.positions()
                start = min(positions.values(), default=0)
                if start >= target:
                    return start
                notifications = self.ledger.notifications(start + 1, self.page_size)
                if not notifications:
                    return start
                try:
                    with gc.paused():
                        batch = [(n.id, self.ledger.decode(n)) for n in notifications]
                        self._apply(batch, positions)
                except TrackingConflictError:
                    for p in self.projections:
                        p.reset()
                    continue
                except Exception:
                    for p in self.projections:
                        p.reset()
                    raise
                if progress is not None:
                    progress(batch[-1][0], target)

    def _apply(self, batch: Batch, positions: dict[str, int]) -> None:
        last = batch[-1][0]
        with self.engine.begin() as conn:
            for p in self.projections:
                old = positions[p.name]
                todo = [(pos, ev) for pos, ev in batch if pos > old]
                if not todo:
                    continue
                p.process(conn, todo)
                done = conn.execute(
                    update(tracking)
                    .where(tracking.c.name == p.name, tracking.c.position == old)
                    .values(position=last)
                )
                if done.rowcount != 1:
                    raise TrackingConflictError(p.name)

    def wait_for(self, position: int, timeout: float = 30.0, inline: bool = True) -> None:
        """Read-your-writes: return once every projection has reached `position`."""
        if inline:
            self.catch_up(until=position)
            return
        deadline = time.monotonic() + timeout
        while self.position() < position:
            if time.monotonic() > deadline:
                raise TimeoutError(f"projections did not reach position {position} in {timeout}s")
            time.sleep(0.05)

    def rebuild(self, name: str) -> int:
        """Empty one projection's tables and tracking row, then catch it up from zero."""
        projection = next((p for p in self.projections if p.name == name), None)
        if projection is None:
            known = ", ".join(p.name for p in self.projections)
            raise KeyError(f"unknown projection {name!r} (known: {known})")
        with self._lock, self.engine.begin() as conn:
            for table in reversed(projection.tables):
                conn.execute(delete(table))
            conn.execute(update(tracking).where(tracking.c.name == name).values(position=0))
            projection.reset()
        return self.catch_up()

    def follow(
        self,
        stop: threading.Event,
        poll_interval: float = 0.2,
        safety_interval: float = 30.0,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        """Keep projections caught up until `stop` is set (the `evaledger project --follow` loop).

        Polls the log's head cheaply; every `safety_interval` it runs a full catch-up anyway, in
        case a notification was missed.
        """
        last_safety = time.monotonic()
        while not stop.is_set():
            head = self.ledger.position()
            now = time.monotonic()
            if head > self.position() or now - last_safety > safety_interval:
                reached = self.catch_up()
                last_safety = now
                if on_progress is not None:
                    on_progress(reached)
            stop.wait(poll_interval)
