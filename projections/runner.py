"""Runs projections over the ledger's notification log: catch-up, follow, rebuild, wait.

A page of notifications is decoded once and handed to every projection that has not yet seen
it; all their rows and their tracking positions are written in one transaction. The tracking
row is claimed first (`UPDATE … WHERE position = old`), so of two processes applying the same
page the second waits, finds the position moved, and writes no row: no unique-key race.

A projection that fails on an event (not a store outage) is isolated: its failure (event,
position, error) is recorded in `projection_failures` and reported by `/health`; it stops at
the event before, and the other projections keep going. A restart or a rebuild retries it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from sqlalchemy import Connection, Engine, Table, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from evaledger.domain import collector
from evaledger.domain.errors import InfrastructureError
from evaledger.domain.ledger import Ledger, utcnow
from evaledger.domain.store.recorder import LogRow
from evaledger.projections.decode import Decoded, DecodedBatch, decode_rows
from evaledger.projections.tables import projection_failures, tracking

log = logging.getLogger(__name__)

MAX_BACKOFF = 30.0
"""Longest wait between retries of `follow` while the store is down (seconds)."""


class Projection(Protocol):
    """One read model: its versioned name, its tables, and how it folds a page of events.

    The page comes decoded to plain state dicts (`projections.decode`); no pydantic event is
    built for a projection unless it asks (`Decoded.event`).
    """

    name: str
    tables: Sequence[Table]

    def process(self, conn: Connection, batch: DecodedBatch) -> None:
        """Apply a page of (position, event) to the read model inside `conn`'s transaction."""

    def reset(self) -> None:
        """Forget in-memory caches (after a rebuild or a failed transaction)."""

    # A projection may also define `settle(engine)`: run after each committed page it applied,
    # outside the transaction (the search projection scrubs erased text from SQLite's file).


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
        self._applied: dict[str, int] = {}
        """Position each projection reached through this runner (its caches match it)."""
        names = [p.name for p in self.projections]
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        with engine.begin() as conn:
            # Two processes starting together both insert: the second one's rows are no-ops.
            conn.execute(
                dialect.insert(tracking)
                .values([{"name": name, "position": 0} for name in names])
                .on_conflict_do_nothing()
            )
            # A restart retries failed projections (the cause may be fixed by now).
            conn.execute(delete(projection_failures).where(projection_failures.c.name.in_(names)))

    def positions(self) -> dict[str, int]:
        """Tracking position of every projection that has not failed."""
        failed = projection_failures.c.name
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(tracking.c.name, tracking.c.position, failed).select_from(
                    tracking.outerjoin(projection_failures, failed == tracking.c.name)
                )
            ).all()
        mine = {p.name for p in self.projections}
        return {name: pos for name, pos, fail in rows if name in mine and fail is None}

    def failures(self) -> list[dict[str, object]]:
        """Projections stopped by an event they could not apply: which event, why."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(projection_failures)).mappings().all()
        return [dict(row) for row in rows]

    def position(self) -> int:
        """The position every projection has reached."""
        positions = self.positions()
        return min(positions.values()) if positions else 0

    def catch_up(
        self, until: int | None = None, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Process notifications until `until` (or the end of the log); returns the position.

        The cyclic collector is paused for the whole catch-up, page reads included: the fold
        makes no reference cycles (a 5,000-case catch-up leaves none for `gc.collect()` to find),
        but a pause per page let a full collection run between pages over every object the
        projections keep for open runs (their facts and scores), ~20 % of the catch-up's CPU
        (bench/README.md, issue 17).
        """
        with self._lock, collector.paused():
            target = until if until is not None else self.ledger.position()
            while True:
                positions = self.positions()
                if not positions:
                    return 0  # every projection has failed: nothing to catch up
                start = min(positions.values())
                if start >= target:
                    return start
                rows = self.ledger.log_rows(start + 1, self.page_size)
                if not rows:
                    return start
                batch = self._decode(rows, positions)
                # No batch: the first event could not be decoded (recorded as a failure).
                if not (bool(batch) and self._apply_page(batch, positions)):
                    continue
                if progress is not None:
                    progress(batch[-1][0], target)

    def _apply_page(self, batch: DecodedBatch, positions: dict[str, int]) -> bool:
        """Apply a page; False when it was not applied whole (conflict, or a failure isolated)."""
        try:
            self._apply(batch, positions)
        except TrackingConflictError:
            for p in self.projections:
                p.reset()
            return False
        except InfrastructureError:
            for p in self.projections:
                p.reset()
            raise
        except Exception:
            for p in self.projections:
                p.reset()
            self._isolate(batch, positions)
            return False
        return True

    def _apply(
        self,
        batch: DecodedBatch,
        positions: dict[str, int],
        only: Sequence[Projection] | None = None,
    ) -> None:
        last = batch[-1][0]
        applied: list[str] = []
        with self.engine.begin() as conn:
            for p in only or self.projections:
                if p.name not in positions:
                    continue  # failed
                old = positions[p.name]
                todo = batch if batch[0][0] > old else [(pos, d) for pos, d in batch if pos > old]
                if not todo:
                    continue
                if self._applied.get(p.name) != old:
                    # Another process (or a rebuild) moved it: in-memory caches may be stale.
                    p.reset()
                # Claim first: a concurrent applier of the same page waits here, then conflicts.
                done = conn.execute(
                    update(tracking)
                    .where(tracking.c.name == p.name, tracking.c.position == old)
                    .values(position=last)
                )
                if done.rowcount != 1:
                    raise TrackingConflictError(p.name)
                p.process(conn, todo)
                applied.append(p.name)
        for name in applied:
            self._applied[name] = last
        for p in only or self.projections:
            # Optional: work that cannot run inside the page's transaction (search's scrub).
            settle = getattr(p, "settle", None)
            if p.name in applied and settle is not None:
                settle(self.engine)

    def _isolate(self, batch: DecodedBatch, positions: dict[str, int]) -> None:
        """A page failed: apply it per projection, and a failing one event by event."""
        for p in self.projections:
            if p.name not in positions:
                continue
            try:
                self._apply(batch, positions, only=[p])
                continue
            except (TrackingConflictError, InfrastructureError):
                raise
            except Exception:
                p.reset()  # locate the event below, one by one
            reached = positions[p.name]
            for position, event in batch:
                if position <= reached:
                    continue
                try:
                    self._apply([(position, event)], {p.name: reached}, only=[p])
                    reached = position
                except (TrackingConflictError, InfrastructureError):
                    raise
                except Exception as e:
                    p.reset()  # recorded, reported by /health; the others go on
                    self._record_failure(p.name, position, event, e)
                    break

    def _decode(self, rows: Sequence[LogRow], positions: dict[str, int]) -> DecodedBatch:
        """The page decoded up to its first undecodable event (a failure of every projection).

        Read through one direct cursor as plain tuples (`Ledger.log_rows`) and decoded to state
        dicts only (orjson + upcast). An event whose state the full decode would refuse fails the
        projections that ask for it (`Decoded.event`), each isolated on that event.
        """

        def failed(row: LogRow, e: Exception) -> None:
            position, oid, version, topic, _ = row
            for name in positions:
                self._record_failure(name, position, f"{topic} of {oid} v{version}", e)

        return decode_rows(
            rows, self.ledger.decode, failed, self.ledger.opened, self.ledger.opened_many
        )

    def _record_failure(self, name: str, position: int, event: Decoded | str, e: Exception) -> None:
        error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        log.error("projection %s failed on position %d (%s): %s", name, position, event, error)
        if isinstance(event, Decoded):
            event = event.describe()
        row = {
            "name": name,
            "position": position,
            "event": event,
            "error": error[:2000],
            "failed_at": utcnow().isoformat(),
        }
        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(projection_failures).values(row)
        with self.engine.begin() as conn:
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["name"], set_={k: v for k, v in row.items() if k != "name"}
                )
            )

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
            conn.execute(delete(projection_failures).where(projection_failures.c.name == name))
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
        backoff = 0.0
        while not stop.is_set():
            try:
                head = self.ledger.position()
                now = time.monotonic()
                if head > self.position() or now - last_safety > safety_interval:
                    reached = self.catch_up()
                    last_safety = now
                    if on_progress is not None:
                        on_progress(reached)
            except InfrastructureError as e:
                # The store is down or locked: wait and retry, never give up or crash.
                backoff = min(MAX_BACKOFF, max(poll_interval, backoff * 2))
                log.warning("projections: %s; retrying in %.1fs", e.detail, backoff)
                stop.wait(backoff)
                continue
            if backoff:
                log.warning("projections: the store is back")
                backoff = 0.0
            stop.wait(poll_interval)
