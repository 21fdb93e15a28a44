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


class TraceCommands(LedgerStore):
    """Receive spans into Trace aggregates; read them back."""

    def receive_spans(
        self, project: str, traces: Mapping[str, Sequence[Mapping[str, Any]]], ctx: Context
    ) -> SpansStored:
        """Record an export's spans, per trace, in one transaction; spans held already are not.

        `traces` maps a trace id (hex) to its spans (each with its `span_id`).
        """
        ctx.check_project(project, "project")

        def command() -> SpansStored:
            accepted = duplicates = late = 0
            changed: list[Trace] = []
            meta = Meta(timestamp=self.clock(), actor=ctx.actor)
            for trace_id, spans in traces.items():
                agg_id = trace_id_for(project, trace_id)
                trace = self._find(Trace, agg_id) or Trace(agg_id)
                before = trace.version
                new, held, refused = trace.receive(project, trace_id, spans, meta)
                accepted, duplicates, late = accepted + new, duplicates + held, late + refused
                if trace.version != before:
                    changed.append(trace)
            position, n = self._save(*changed)
            return SpansStored(accepted, duplicates, late, position, n)

        return self._retrying(command)

    def get_trace(self, project: str, trace_id: str) -> Trace | None:
        """The trace of a project, as received so far (None: no span of it arrived)."""
        return self._find(Trace, trace_id_for(project, trace_id))

    def load_trace(self, agg_id: UUID) -> Trace | None:
        """A Trace aggregate by its id."""
        return self._find(Trace, agg_id)

    def trace_notices(self, start: int, limit: int = 1000) -> list[TraceNotice]:
        """The trace events logged from position `start` on (at most `limit`), in log order."""
        page = self.app.recorder.select_notifications(start, limit, topics=list(TRACE_TOPICS))
        return [TraceNotice(n.id, UUID(str(n.originator_id)), self.decode(n)) for n in page]
