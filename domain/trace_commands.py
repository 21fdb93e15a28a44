"""The commands and reads of received OpenTelemetry traces (the Trace aggregate).

`TraceCommands` is built on the store's write unit (`writes.LedgerStore`); `Ledger` (`ledger.py`)
on it adds `record_traces`, which records complete traces as cases of a run in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from evaledger.domain.aggregates import Meta
from evaledger.domain.events import DomainEvent, TraceRecorded, TraceSpansReceived
from evaledger.domain.traces import Trace, trace_id_for
from evaledger.domain.writes import Context, LedgerStore

TRACE_TOPICS = (TraceSpansReceived.topic(), TraceRecorded.topic())
SEEN_TRACES = 200_000
"""Trace ids a process remembers having received (past it, it starts again from none)."""


@dataclass(frozen=True)
class SpansStored:
    """What one export of spans wrote."""

    accepted: int
    """Spans new to the ledger, now recorded."""
    duplicates: int
    """Spans the ledger had already received (an exporter's retry, a span sent twice)."""
    late: int
    """Spans of a trace already recorded as a case: refused."""
    position: int
    events: int


@dataclass(frozen=True)
class TraceNotice:
    """One trace event as the log holds it (for the completion pass's scan)."""

    position: int
    trace: UUID
    event: DomainEvent
    lane_position: int = 0
    """Its position in its write lane (`lane_trace_notices`; 0 from `trace_notices`)."""


class TraceCommands(LedgerStore):
    """Receive spans into Trace aggregates; read them back."""

    def receive_spans(
        self, project: str, traces: Mapping[str, Sequence[Mapping[str, Any]]], ctx: Context
    ) -> SpansStored:
        """Record an export's spans, per trace, in one transaction; spans held already are not.

        `traces` maps a trace id (hex) to its spans (each with its `span_id`).
        """
        ctx.check_project(project, "project")
        seen = self._seen_traces()
        attempts = 0

        def command() -> SpansStored:
            nonlocal attempts
            attempts += 1
            accepted = duplicates = late = 0
            changed: list[Trace] = []
            meta = Meta(timestamp=self.clock(), actor=ctx.actor, seal=self.seal_payloads)
            for trace_id, spans in traces.items():
                agg_id = trace_id_for(project, trace_id)
                # A trace this process never received is taken as new without a read: if
                # another process (or this one before a restart) has it, the save conflicts
                # and the retry reads every trace of the export.
                stored = self._find(Trace, agg_id) if attempts > 1 or agg_id in seen else None
                trace = stored or Trace(agg_id)
                before = trace.version
                new, held, refused = trace.receive(project, trace_id, spans, meta)
                accepted, duplicates, late = accepted + new, duplicates + held, late + refused
                if trace.version != before:
                    changed.append(trace)
            position, n = self._save(*changed, project=project)
            if len(seen) > SEEN_TRACES:
                seen.clear()
            seen.update(t.id for t in changed)
            return SpansStored(accepted, duplicates, late, position, n)

        return self._retrying(command)

    def _seen_traces(self) -> set[UUID]:
        """The traces this process has received spans of (bounded; cleared when full)."""
        found: set[UUID] | None = self.__dict__.get("_trace_ids_seen")
        if found is None:
            found = self.__dict__["_trace_ids_seen"] = set()
        return found

    def get_trace(self, project: str, trace_id: str) -> Trace | None:
        """The trace of a project, as received so far (None: no span of it arrived)."""
        return self._find(Trace, trace_id_for(project, trace_id))

    def load_trace(self, agg_id: UUID) -> Trace | None:
        """A Trace aggregate by its id."""
        return self._find(Trace, agg_id)

    def lane_trace_notices(self, lane: int, after: int, limit: int = 1000) -> list[TraceNotice]:
        """The trace events of one write lane after lane position `after`, in the lane's order.

        What a reader that keeps its place reads by: once lanes commit concurrently, a log
        position can become visible after a higher one, and a place kept as one log position
        would pass over it (`store/lanes.py`).
        """
        page = self.recorder.lane_notifications(lane, after, TRACE_TOPICS, limit)
        return [TraceNotice(n.id, UUID(str(n.originator_id)), self.decode(n), at) for at, n in page]

    def trace_notices(self, start: int, limit: int = 1000) -> list[TraceNotice]:
        """The trace events logged from position `start` on (at most `limit`), in log order.

        For a scan of everything stored; a reader that resumes later reads by lane
        (`lane_trace_notices`).
        """
        page = self.app.recorder.select_notifications(start, limit, topics=list(TRACE_TOPICS))
        return [TraceNotice(n.id, UUID(str(n.originator_id)), self.decode(n)) for n in page]
