"""The events of a received OpenTelemetry trace: its spans as received, then the case it became.

A trace's spans arrive over several exports (and again when an exporter retries); each export
records, per trace, only the spans the ledger had not received yet (`TraceSpansReceived`), every
attribute kept, so what was received is in the ledger before it is mapped. When the trace is
complete its case is recorded in an online run, and `TraceRecorded` (in the same transaction)
names that case: the trace takes no more spans.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar
from uuid import UUID

from pydantic import AfterValidator, Field

from evaledger.domain.events.base import DomainEvent


def _finite_spans(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """No NaN or infinity anywhere (as `JsonObject`), checked by the C JSON encoder.

    A trace's spans hold thousands of values; `JsonObject`'s walk in Python was most of the
    time spent building and decoding these events.
    """
    try:
        json.dumps(spans, allow_nan=False)
    except ValueError:
        raise ValueError("NaN and infinity are not allowed") from None
    return spans


Spans = Annotated[list[dict[str, Any]], AfterValidator(_finite_spans)]


class TraceEvent(DomainEvent):
    """An event of a Trace aggregate (one OpenTelemetry trace of one project)."""


class TraceSpansReceived(TraceEvent):
    """Spans of the trace that arrived in one export and were not received before."""

    topic_name: ClassVar[str] = "evaledger.trace.spans_received"

    project: str = Field(min_length=1, description="The project whose token sent the spans.")
    trace_id: str = Field(min_length=32, max_length=32, description="OTLP trace id, hex.")
    spans: Spans = Field(
        min_length=1,
        description="The spans as received (ids, name, kind, times in ns, status, attributes, "
        "events, resource and scope): every attribute kept, mapped or not.",
    )


class TraceRecorded(TraceEvent):
    """The complete trace was recorded as one case of an online run."""

    topic_name: ClassVar[str] = "evaledger.trace.recorded"

    run_id: UUID = Field(description="The online run the case is in.")
    case_id: UUID = Field(description="The case the trace became.")
