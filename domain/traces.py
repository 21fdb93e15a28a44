"""The Trace aggregate: one OpenTelemetry trace of one project, from its spans to its case.

Spans are idempotent by (trace id, span id): the aggregate knows the span ids it received and
records only new ones. Whether a trace is complete is decided outside (its root ended and no
span arrived for a quiet period: `application/traces.py`); recording it closes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID, uuid5

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.errors import ConflictError
from evaledger.domain.events.base import DomainEvent
from evaledger.domain.events.trace import TraceRecorded, TraceSpansReceived


def trace_id_for(project: str, trace_id: str) -> UUID:
    """Id of the Trace aggregate of one OTLP trace id in one project (tenants never share)."""
    return uuid5(NAMESPACE, f"trace\x1f{project}\x1f{trace_id}")


class Trace(Aggregate):
    """The spans received for one trace, and the case it was recorded as."""

    project: str | None
    trace_id: str | None
    span_ids: set[str]
    spans: list[Mapping[str, Any]]
    last_received: datetime | None
    recorded: TraceRecorded | None

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.project = None
        self.trace_id = None
        self.span_ids = set()
        self.spans = []
        self.last_received = None
        self.recorded = None

    def receive(
        self, project: str, trace_id: str, spans: Sequence[Mapping[str, Any]], meta: Meta
    ) -> tuple[int, int, int]:
        """Record the spans not received before: (new, held already, refused as late).

        Spans of a trace already recorded as a case are not taken: they are late.
        """
        fresh: dict[str, Mapping[str, Any]] = {}
        for span in spans:
            sid = span["span_id"]
            if sid not in self.span_ids and sid not in fresh:
                fresh[sid] = span
        held = len(spans) - len(fresh)
        if self.recorded is not None:
            return 0, held, len(fresh)
        if fresh:
            self._trigger(
                TraceSpansReceived,
                meta,
                project=project,
                trace_id=trace_id,
                spans=[dict(s) for s in fresh.values()],
            )
        return len(fresh), held, 0

    def record(self, run_id: UUID, case_id: UUID, meta: Meta) -> None:
        """Record that the trace became `case_id` of `run_id` (once)."""
        if self.recorded is not None:
            if self.recorded.case_id == case_id:
                return
            raise ConflictError(f"trace {self.trace_id} is already recorded as another case")
        self._trigger(TraceRecorded, meta, run_id=run_id, case_id=case_id)

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, TraceSpansReceived):
            self.project = event.project
            self.trace_id = event.trace_id
            self.span_ids.update(s["span_id"] for s in event.spans)
            self.spans.extend(event.spans)
            self.last_received = event.timestamp
        elif isinstance(event, TraceRecorded):
            self.recorded = event
