"""Erasing a case recorded from an OTLP trace (issue 34): its spans' text is sealed too.

With sealing on, `TraceSpansReceived` keeps the content-carrying span attributes and `gen_ai.*`
span events sealed (`domain/payloads.is_content_attribute`) under the trace's key; erasing the
case recorded from the trace destroys that key as well. The trace is sent through the real OTLP
route (`POST /v1/traces`, protobuf from the OpenTelemetry SDK); SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application.traces import complete_traces
from evaledger.application.verification import check_views
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import TraceSpansReceived
from evaledger.domain.ledger import Context
from evaledger.domain.payloads import SEALED_FIELDS, is_content_attribute
from evaledger.domain.verify import verify
from evaledger.importers.otlp import PROTOBUF
from tests.domain.test_erasure import _raw, _store_bytes, _texts
from tests.otlp_helpers import chat_trace, export_body, recorder

MARKER = "ZQX-TRACE-MARKER-9902"
"""A string only the trace's messages hold."""


def _send(services: Services, subject: str | None = None) -> None:
    tracer, memory = recorder()
    with tracer.start_as_current_span("session") as root:
        if subject is not None:
            root.set_attribute("enduser.id", subject)
        chat_trace(tracer, question=f"my card is {MARKER}", answer=f"noted: {MARKER}")
        with tracer.start_as_current_span("openinference llm") as span:
            span.set_attribute("openinference.span.kind", "LLM")
            span.set_attribute("llm.input_messages.0.message.role", "user")
            span.set_attribute("llm.input_messages.0.message.content", f"again {MARKER}")
            span.add_event("gen_ai.user.message", {"content": f"event {MARKER}"})
    with TestClient(create_app(services=services)) as client:
        reply = client.post(
            "/v1/traces",
            content=export_body(memory.get_finished_spans()),
            headers={"content-type": PROTOBUF},
        )
        assert reply.status_code == 200, reply.text


def _holds(blob: bytes, text: str) -> bool:
    """Whether the bytes hold `text`, as is or hex-encoded (a `pg_dump` writes bytea as hex)."""
    return text.encode() in blob or text.encode().hex().encode() in blob


def _spans(services: Services, trace: UUID) -> list[dict[str, Any]]:
    return [
        s
        for e in services.ledger.events_of(trace)
        if isinstance(e, TraceSpansReceived)
        for s in e.spans
    ]


@pytest.fixture
def traced(store_url: str) -> Iterator[tuple[Services, UUID]]:
    services = build_services(Settings(db=store_url, seal_payloads=True))
    try:
        _send(services)
        later = datetime.now(UTC) + timedelta(seconds=60)
        completed = complete_traces(services, Context("otlp"), quiet_s=30, now=later)
        ((case_id,),) = completed.recorded.values()
        yield services, case_id
    finally:
        services.close()


def test_a_trace_case_is_erased_with_its_spans_text(
    traced: tuple[Services, UUID], tmp_path: Path
) -> None:
    services, case_id = traced
    (trace,) = [
        str(r[0])
        for r in _raw(services, "SELECT DISTINCT subject FROM evaledger_payloads")
        if str(r[0]) != str(case_id)
    ]
    # The case was mapped from the sealed spans (read back through the vault) ...
    assert any(MARKER in t for t in _texts(services, case_id))
    spans = _spans(services, UUID(trace))
    assert any(MARKER in str(s["attributes"]) for s in spans)
    # ... and no store file or dump holds the text; the model and tokens stay in the clear.
    blob = _store_bytes(services, tmp_path)
    assert not _holds(blob, MARKER)
    assert _holds(blob, "gpt-4o-mini-2024-07-18")  # the search sees the events' bytes
    position = services.ledger.position()

    erasure = services.ledger.erase_case(case_id, Context("dpo"), "deletion request 31")

    assert erasure.written is not None and services.ledger.position() == position + 1
    trace_refs = {r[0] for r in _raw(services, "SELECT ref FROM evaledger_payloads")}
    assert not trace_refs  # every payload of the case and its trace is gone
    assert not any(MARKER in t for t in _texts(services, case_id))
    spans = _spans(services, UUID(trace))
    assert not any(MARKER in str(s) for s in spans)
    assert any("deletion request 31" in str(s["attributes"]) for s in spans)
    chat = next(s for s in spans if "gen_ai.operation.name" in s["attributes"])
    assert chat["attributes"]["gen_ai.usage.input_tokens"] == 21  # metadata stays
    for key in (str(case_id), trace):
        assert _raw(services, "SELECT key FROM evaledger_payload_keys WHERE subject = ?", key) == [
            (None,)
        ]
    report = verify(services.ledger)
    assert report.ok, report.broken
    views = check_views(services)
    assert views.ok, views
    assert not _holds(_store_bytes(services, tmp_path), MARKER)
    again = services.ledger.erase_case(case_id, Context("dpo"), "again")
    assert again.written is None and services.ledger.position() == position + 1


def test_a_tampered_trace_payload_is_named_by_verify(traced: tuple[Services, UUID]) -> None:
    services, case_id = traced
    ((ref, subject, ciphertext),) = [
        r
        for r in _raw(services, "SELECT ref, subject, ciphertext FROM evaledger_payloads")
        if str(r[1]) != str(case_id)
    ]
    flipped = bytes([ciphertext[-1] ^ 1])
    _raw(
        services,
        "UPDATE evaledger_payloads SET ciphertext = ? WHERE ref = ?",
        bytes(ciphertext[:-1]) + flipped,
        ref,
    )
    report = verify(services.ledger)
    assert any(f"payload {ref[:12]}: the ciphertext does not open" in b for b in report.broken)
    assert subject


def test_what_a_span_seals() -> None:
    """The one rule: message text (GenAI, OpenInference), never ids, models or counts."""
    assert "evaledger.trace.spans_received" in SEALED_FIELDS
    for key in (
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.prompt.0.content",
        "gen_ai.completion.1.content",
        "llm.input_messages.0.message.content",
        "llm.output_messages.0.message.contents.0.message_content.text",
        "input.value",
    ):
        assert is_content_attribute(key), key
    for key in (
        "gen_ai.request.model",
        "gen_ai.prompt.0.role",
        "gen_ai.usage.input_tokens",
        "llm.input_messages.0.message.role",
        "app.customer_tier",
    ):
        assert not is_content_attribute(key), key


def test_a_trace_naming_its_end_user_is_erased_by_subject(store_url: str, tmp_path: Path) -> None:
    """`enduser.id` on a span makes the trace's case the subject's (`erase --subject`)."""
    services = build_services(Settings(db=store_url, seal_payloads=True))
    try:
        _send(services, subject="u-trace-7")
        later = datetime.now(UTC) + timedelta(seconds=60)
        completed = complete_traces(services, Context("otlp"), quiet_s=30, now=later)
        ((case_id,),) = completed.recorded.values()
        with pytest.raises(ValidationError, match="erase --subject"):
            services.ledger.erase_case(case_id, Context("dpo"), "deletion request 32")
        (erasure,) = services.ledger.erase_subject("u-trace-7", Context("dpo"), "request 32")
        assert erasure.case_id == case_id and erasure.written is not None
        assert not _raw(services, "SELECT ref FROM evaledger_payloads")
        assert not any(MARKER in t for t in _texts(services, case_id))
        report = verify(services.ledger)
        assert report.ok, report.broken
        assert not _holds(_store_bytes(services, tmp_path), MARKER)
    finally:
        services.close()
