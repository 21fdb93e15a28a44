"""Spans made by the real OpenTelemetry SDK, encoded by its own OTLP encoder (test helpers)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def recorder(service: str = "support-bot", version: str = "1.2.0") -> tuple[Any, Any]:
    """A tracer of a fresh provider whose ended spans are kept in memory, and the memory."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "service.version": version})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider.get_tracer("tests.otlp"), memory


def chat_trace(
    tracer: Any, question: str = "Where is my order?", answer: str = "On its way."
) -> None:
    """One agent turn: a root span and a GenAI chat span (latest conventions) under it."""
    with (
        tracer.start_as_current_span("support turn"),
        tracer.start_as_current_span("chat gpt-4o-mini") as span,
    ):
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.provider.name", "openai")
        span.set_attribute("gen_ai.request.model", "gpt-4o-mini")
        span.set_attribute("gen_ai.response.model", "gpt-4o-mini-2024-07-18")
        span.set_attribute("gen_ai.usage.input_tokens", 21)
        span.set_attribute("gen_ai.usage.output_tokens", 7)
        span.set_attribute(
            "gen_ai.input.messages",
            json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}]),
        )
        span.set_attribute(
            "gen_ai.output.messages",
            json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": answer}],
                        "finish_reason": "stop",
                    }
                ]
            ),
        )
        span.set_attribute("app.customer_tier", "gold")
        time.sleep(0.01)


def export_body(spans: Sequence[ReadableSpan]) -> bytes:
    """The protobuf ExportTraceServiceRequest the SDK's OTLP exporter sends for `spans`."""
    return encode_spans(spans).SerializeToString()


def export_json(spans: Sequence[ReadableSpan]) -> bytes:
    """The same export as OTLP/JSON: the protobuf JSON mapping with hex trace and span ids."""
    request = encode_spans(spans)
    data = json_format.MessageToDict(request)
    for rs in data.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _b64_to_hex(span[key])
    return json.dumps(data).encode()


def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def parse(body: bytes) -> ExportTraceServiceRequest:
    """A protobuf export body read back."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return request
