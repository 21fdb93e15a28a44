"""The events of a received OpenTelemetry trace: its spans as received, then the case it became.

A trace's spans arrive over several exports (and again when an exporter retries); each export
records, per trace, only the spans the ledger had not received yet (`TraceSpansReceived`), every
attribute kept, so what was received is in the ledger before it is mapped. When the trace is
complete its case is recorded in an online run, and `TraceRecorded` (in the same transaction)
names that case: the trace takes no more spans.
"""

from __future__ import annotations

from typing import ClassVar
from uuid import UUID

from pydantic import Field

from evaledger.domain.events.base import DomainEvent
from evaledger.domain.types import JsonObject


class TraceEvent(DomainEvent):
    """An event of a Trace aggregate (one OpenTelemetry trace of one project)."""


class TraceSpansReceived(TraceEvent):
    """Spans of the trace that arrived in one export and were not received before."""

    topic_name: ClassVar[str] = "evaledger.trace.spans_received"

    project: str = Field(min_length=1, description="The project whose token sent the spans.")
    trace_id: str = Field(min_length=32, max_length=32, description="OTLP trace id, hex.")
    spans: list[JsonObject] = Field(
        min_length=1,
        description="The spans as received (ids, name, kind, times in ns, status, attributes, "
        "events, resource and scope): every attribute kept, mapped or not.",
    )


class TraceRecorded(TraceEvent):
    """The complete trace was recorded as one case of an online run."""

    topic_name: ClassVar[str] = "evaledger.trace.recorded"

    run_id: UUID = Field(description="The online run the case is in.")
    case_id: UUID = Field(description="The case the trace became.")
