"""Verify's lane check (issue 32 item 1): every event is in its project's write lane.

The writer puts a command's events in the lane of the project it names (`store/lanes.py`);
this check derives each aggregate's project from the stored events themselves and holds every
row to it. It is a second derivation on purpose (like verify's recomputed hashes): a row moved
to another lane, or stored without one, outside evaledger, is named at its position.

An aggregate's project is read from its first event: a `project` field (runs, datasets,
alerts, queues, traces, ...), a case's run's project (`CaseOpened.run_id`), or none for the
store-wide records (tokens, the metric catalogue, chain records: lane 0). An aggregate whose
first event names no project (an idempotency record, written with its command's events) keeps
the lane of its first event: an aggregate never changes lane. Within a lane, positions follow
one another in log order (each lane's order is its commit order).

A one-lane store (SQLite) stores no lane: nothing to check.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from eventsourcing.persistence import Notification

from evaledger.domain.events import (
    CaseOpened,
    ChainAdopted,
    MetricRegistered,
    SigningKeyRotated,
    TokenIssued,
)
from evaledger.domain.store.lanes import STORE_WIDE, lane_of
from evaledger.domain.store.recorder import LaneRow, LedgerRecorder

STORE_WIDE_FIRST = frozenset(
    t.topic() for t in (TokenIssued, MetricRegistered, ChainAdopted, SigningKeyRotated)
)
"""First events of the store-wide aggregates (lane 0 whatever project they name)."""

PAGE = 5000

Finding = tuple[int, str]


class LaneCheck:
    """Fed every event of a verify walk in log order; collects the lane findings."""

    def __init__(self, recorder: LedgerRecorder, *, full: bool) -> None:
        self.active = recorder.lanes > 1
        self.full = full
        """From the first event: a lane's first position must be 1 (else: from where seen)."""
        self.recorder = recorder
        self.pins = recorder.read_pins() if self.active else {}
        self.lane_of_aggregate: dict[str, int] = {}
        self.project_of: dict[str, str] = {}
        self.lane_heads: dict[int, int] = {}
        self.findings: list[Finding] = []
        """Not yet handed to the report (`take`)."""
        self._rows: Iterator[LaneRow] = iter(())
        self._row: LaneRow | None = None
        self._started = False

    def see(self, n: Notification, state: dict[str, Any]) -> None:
        """Check one event (its decoded state: `{}` when unreadable)."""
        if not self.active:
            return
        row = self._lane_row(n.id)
        oid = str(n.originator_id)
        where = f"position {n.id} (aggregate {oid} version {n.originator_version})"
        lane, lane_position = (None, None) if row is None else row[1:]
        if lane is None or lane_position is None:
            self.findings.append((n.id, f"{where}: stored without a lane (written outside "
                                        "evaledger)"))  # fmt: skip
            return
        expected = self._expected_lane(oid, n, state, lane)
        if lane != expected:
            self.findings.append(
                (
                    n.id,
                    f"{where}: in lane {lane} but its aggregate writes to lane {expected} (a row "
                    "moved between lanes outside evaledger)",
                )
            )
        head = self.lane_heads.get(lane)
        if (head is None and self.full and lane_position != 1) or (
            head is not None and lane_position != head + 1
        ):
            after = "the lane's start" if head is None else f"lane position {head}"
            self.findings.append(
                (
                    n.id,
                    f"{where}: lane {lane} position {lane_position} does not follow {after} "
                    "(a lane's rows were removed, added or renumbered outside evaledger)",
                )
            )
        self.lane_heads[lane] = lane_position

    def take(self) -> list[Finding]:
        """The findings since the last call.

        The walk adds them after its own for the event: a row written outside evaledger is
        first "not covered by the chain", the cause.
        """
        found, self.findings = self.findings, []
        return found

    def _expected_lane(self, oid: str, n: Notification, state: dict[str, Any], lane: int) -> int:
        known = self.lane_of_aggregate.get(oid)
        if known is not None:
            return known
        project = state.get("project")
        if n.originator_version != 1 and self.full:
            expected = lane  # its first event was reported already (not a version-1 row)
        elif n.topic in STORE_WIDE_FIRST:
            expected = STORE_WIDE
        elif n.topic == CaseOpened.topic() and str(state.get("run_id")) in self.project_of:
            expected = lane_of(self.project_of[str(state.get("run_id"))], self.pins)
        elif isinstance(project, str) and n.originator_version == 1:
            self.project_of[oid] = project
            expected = lane_of(project, self.pins)
        else:
            expected = lane  # no project named: the aggregate keeps its first event's lane
        self.lane_of_aggregate[oid] = expected
        return expected

    def _lane_row(self, position: int) -> LaneRow | None:
        """The lane row at `position` (rows read in pages, in step with the walk)."""
        if not self._started:
            self._started = True
            self._rows = self._pages(position)
            self._row = next(self._rows, None)
        while self._row is not None and self._row[0] < position:
            self._row = next(self._rows, None)
        if self._row is not None and self._row[0] == position:
            return self._row
        return None

    def _pages(self, start: int) -> Iterator[LaneRow]:
        while page := self.recorder.lane_rows(start, PAGE):
            yield from page
            start = page[-1][0] + 1
