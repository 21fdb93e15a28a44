"""Runs projections over the ledger's write lanes: catch-up, follow, rebuild, wait.

Each write lane is read in its own order (its commit order). A page of one lane's events is
decoded once and handed to every projection that has not yet seen it; all their rows and their
tracking positions are written in one transaction. The projection's row for the lane is
claimed first (`UPDATE … WHERE position = old`), so of two processes applying the same page
the second waits, finds the position moved, and writes no row: no unique-key race.

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
from evaledger.projections.tables import lane_tracking, projection_failures, tracking

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


Lanes = dict[int, int]
"""A position in each write lane (lane → lane position; a lane not named is at 0)."""


def _total(lanes: Lanes) -> int:
    """A projection's place as one number: its lane positions' sum (one lane: the log position)."""
    return sum(lanes.values())


class ProjectionRunner:
    """Catches projections up with the ledger, lane by lane; single-flight within the process.

    Each write lane is read in its own order (`Ledger.lane_log_rows`), which is its commit
    order, and each projection keeps one position per lane (`projection_lanes`): once lanes
    commit concurrently the log's positions are no longer commit order, and a reader paging
    the log by position would pass over a position committed after a higher one. Projections
    fold each project's events in order; nothing they fold depends on the order of two lanes
    (docs/scaling.md, "Next: per-project lanes"). `projection_tracking` keeps one number per
    projection, the sum of its lane positions, updated in the same transaction.
    """

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
        self._applied: dict[str, Lanes] = {}
        """Lane positions each projection reached through this runner (its caches match them)."""
        names = [p.name for p in self.projections]
        self._dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        with engine.begin() as conn:
            # Two processes starting together both insert: the second one's rows are no-ops.
            conn.execute(
                self._dialect.insert(tracking)
                .values([{"name": name, "position": 0} for name in names])
                .on_conflict_do_nothing()
            )
            self._seed_lanes(conn, names)
            # A restart retries failed projections (the cause may be fixed by now).
            conn.execute(delete(projection_failures).where(projection_failures.c.name.in_(names)))

    def _seed_lanes(self, conn: Connection, names: Sequence[str]) -> None:
        """Read models from before lanes: their log position becomes a position per lane.

        Written under one global lock, the log's order was commit order, so the events up to
        the tracked position are, in each lane, the prefix up to `lanes_upto(position)`.
        """
        laned = set(conn.scalars(select(lane_tracking.c.name).distinct()))
        tracked = conn.execute(
            select(tracking.c.name, tracking.c.position).where(tracking.c.name.in_(names))
        ).all()
        for name, position in tracked:
            if name in laned or not position:
                continue
            rows = [
                {"name": name, "lane": lane, "position": at}
                for lane, at in self.ledger.lanes_upto(int(position)).items()
            ]
            if rows:
                conn.execute(
                    self._dialect.insert(lane_tracking).values(rows).on_conflict_do_nothing()
                )

    def lane_positions(self) -> dict[str, Lanes]:
        """Every projection's position in each lane, for those that have not failed."""
        failed = projection_failures.c.name
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(tracking.c.name, failed).select_from(
                    tracking.outerjoin(projection_failures, failed == tracking.c.name)
                )
            ).all()
            lanes = conn.execute(
                select(lane_tracking.c.name, lane_tracking.c.lane, lane_tracking.c.position)
            ).all()
        mine = {p.name for p in self.projections}
        found: dict[str, Lanes] = {name: {} for name, fail in rows if name in mine and fail is None}
        for name, lane, position in lanes:
            if name in found and position:
                found[name][int(lane)] = int(position)
        return found

    def positions(self) -> dict[str, int]:
        """Tracking position of every projection that has not failed (its lane positions' sum)."""
        return {name: _total(lanes) for name, lanes in self.lane_positions().items()}

    def failures(self) -> list[dict[str, object]]:
        """Projections stopped by an event they could not apply: which event, why."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(projection_failures)).mappings().all()
        return [dict(row) for row in rows]

    def position(self) -> int:
        """The position every projection has reached (the least sum of lane positions)."""
        positions = self.positions()
        return min(positions.values()) if positions else 0

    def target(self, until: int | Lanes | None = None) -> Lanes:
        """Lane positions to reach.

        None: everything written so far; an int: the events up to that log position (what
        `Written.position` gives); lane positions: as they are.
        """
        if until is None:
            return self.ledger.lane_heads()
        if isinstance(until, int):
            return self.ledger.lanes_upto(until)
        return dict(until)

    def reached(self, target: Lanes) -> bool:
        """Whether every projection that has not failed reached `target` in every lane."""
        return not self._behind(target, self.lane_positions())

    @staticmethod
    def _behind(target: Lanes, positions: dict[str, Lanes]) -> list[int]:
        """The lanes where some projection has not reached `target`, in lane order."""
        return [
            lane
            for lane in sorted(target)
            if any(lanes.get(lane, 0) < target[lane] for lanes in positions.values())
        ]

    def catch_up(
        self,
        until: int | Lanes | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Process events until `until` (see `target`; None: the head of every lane).

        Returns the position reached (`position`). Lane by lane, a page at a time.

        The cyclic collector is paused for the whole catch-up, page reads included: the fold
        makes no reference cycles (a 5,000-case catch-up leaves none for `gc.collect()` to find),
        but a pause per page let a full collection run between pages over every object the
        projections keep for open runs (their facts and scores), ~20 % of the catch-up's CPU
        (bench/README.md, issue 17).
        """
        with self._lock, collector.paused():
            target = self.target(until)
            goal = _total(target)
            while True:
                positions = self.lane_positions()
                if not positions:
                    return 0  # every projection has failed: nothing to catch up
                behind = self._behind(target, positions)
                if not behind:
                    return min(_total(lanes) for lanes in positions.values())
                lane = behind[0]
                start = min(lanes.get(lane, 0) for lanes in positions.values())
                rows, at = self.ledger.lane_log_rows(lane, start, self.page_size)
                if not rows:
                    del target[lane]  # nothing more in this lane (a target past its head)
                    continue
                batch = self._decode(rows, positions)
                # No batch: the first event could not be decoded (recorded as a failure).
                if not (bool(batch) and self._apply_page(lane, batch, at, positions)):
                    continue
                if progress is not None:
                    done = min(_total(lanes) for lanes in self.lane_positions().values())
                    progress(done if len(target) > 1 else at[len(batch) - 1], goal)

    def _apply_page(
        self, lane: int, batch: DecodedBatch, at: Sequence[int], positions: dict[str, Lanes]
    ) -> bool:
        """Apply a page; False when it was not applied whole (conflict, or a failure isolated)."""
        try:
            self._apply(lane, batch, at, positions)
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
            self._isolate(lane, batch, at, positions)
            return False
        return True

    def _apply(
        self,
        lane: int,
        batch: DecodedBatch,
        at: Sequence[int],
        positions: dict[str, Lanes],
        only: Sequence[Projection] | None = None,
    ) -> None:
        """Apply a page of one lane (`at`: each event's lane position) in one transaction."""
        last = at[len(batch) - 1]
        applied: list[str] = []
        with self.engine.begin() as conn:
            for p in only or self.projections:
                if p.name not in positions:
                    continue  # failed
                old = positions[p.name].get(lane, 0)
                todo = (
                    batch
                    if at[0] > old
                    else [e for e, lp in zip(batch, at, strict=False) if lp > old]
                )
                if not todo:
                    continue
                if self._applied.get(p.name) != positions[p.name]:
                    # Another process (or a rebuild) moved it: in-memory caches may be stale.
                    p.reset()
                self._claim(conn, p.name, lane, old, last)
                p.process(conn, todo)
                applied.append(p.name)
        for name in applied:
            self._applied[name] = {**positions[name], lane: last}
        for p in only or self.projections:
            # Optional: work that cannot run inside the page's transaction (search's scrub).
            settle = getattr(p, "settle", None)
            if p.name in applied and settle is not None:
                settle(self.engine)

    def _claim(self, conn: Connection, name: str, lane: int, old: int, last: int) -> None:
        """Move a projection's lane position from `old` to `last` (its sum too), claiming first.

        A concurrent applier of the same page waits on the row here, then conflicts.
        """
        if not old:
            conn.execute(
                self._dialect.insert(lane_tracking)
                .values(name=name, lane=lane, position=0)
                .on_conflict_do_nothing()
            )
        done = conn.execute(
            update(lane_tracking)
            .where(
                lane_tracking.c.name == name,
                lane_tracking.c.lane == lane,
                lane_tracking.c.position == old,
            )
            .values(position=last)
        )
        if done.rowcount != 1:
            raise TrackingConflictError(name)
        conn.execute(
            update(tracking)
            .where(tracking.c.name == name)
            .values(position=tracking.c.position + (last - old))
        )

    def _isolate(
        self, lane: int, batch: DecodedBatch, at: Sequence[int], positions: dict[str, Lanes]
    ) -> None:
        """A page failed: apply it per projection, and a failing one event by event."""
        for p in self.projections:
            if p.name not in positions:
                continue
            try:
                self._apply(lane, batch, at, positions, only=[p])
                continue
            except (TrackingConflictError, InfrastructureError):
                raise
            except Exception:
                p.reset()  # locate the event below, one by one
            reached = dict(positions[p.name])
            for (position, event), lp in zip(batch, at, strict=False):
                if lp <= reached.get(lane, 0):
                    continue
                try:
                    self._apply(lane, [(position, event)], [lp], {p.name: reached}, only=[p])
                    reached = {**reached, lane: lp}
                except (TrackingConflictError, InfrastructureError):
                    raise
                except Exception as e:
                    p.reset()  # recorded, reported by /health; the others go on
                    self._record_failure(p.name, position, event, e)
                    break

    def _decode(self, rows: Sequence[LogRow], positions: dict[str, Lanes]) -> DecodedBatch:
        """The page decoded up to its first undecodable event (a failure of every projection).

        Read through one direct cursor as plain tuples (`Ledger.lane_log_rows`) and decoded to state
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

    def wait_for(
        self, position: int | Lanes | None, timeout: float = 30.0, inline: bool = True
    ) -> None:
        """Read-your-writes: return once every projection has reached `position` (`target`)."""
        if inline:
            self.catch_up(until=position)
            return
        target = self.target(position)
        deadline = time.monotonic() + timeout
        while not self.reached(target):
            if time.monotonic() > deadline:
                raise TimeoutError(f"projections did not reach position {position} in {timeout}s")
            time.sleep(0.05)

    def rebuild(self, name: str) -> int:
        """Empty one projection's tables and tracking row, then catch it up from zero."""
        projection = next((p for p in self.projections if p.name == name), None)
        if projection is None:
            known = ", ".join(p.name for p in self.projections)
            raise KeyError(f"unknown projection {name!r} (known: {known})")
        self._applied.pop(name, None)
        with self._lock, self.engine.begin() as conn:
            for table in reversed(projection.tables):
                conn.execute(delete(table))
            conn.execute(update(tracking).where(tracking.c.name == name).values(position=0))
            conn.execute(delete(lane_tracking).where(lane_tracking.c.name == name))
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
                heads = self.ledger.lane_heads()
                now = time.monotonic()
                if not self.reached(heads) or now - last_safety > safety_interval:
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
