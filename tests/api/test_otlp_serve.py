"""OTLP/HTTP into a live `evaledger serve`: the real OpenTelemetry SDK and OpenAI instrumentations.

The exporter is the SDK's own `OTLPSpanExporter` (protobuf, gzip); JSON goes through the proto's
JSON mapping. The official `opentelemetry-instrumentation-openai-v2` and OpenInference's
instrumentation wrap the real `openai` client calling the loopback fake provider
(`tests/fake_judges.py`); the traces become cases whose transcript, model, tokens and latency are
what was called. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import gzip
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInferenceInstrumentor
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from evaledger.api.bootstrap import Settings, build_services
from evaledger.application.projects import issue_token
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests import fake_judges
from tests.api.test_serve import Server, launch
from tests.fake_judges import Answer, FakeJudges
from tests.otlp_helpers import chat_trace, export_body, export_json, recorder

QUIET = {"EVALEDGER_TRACE_QUIET": "0.3"}
WAIT_S = 60.0  # a bound on waiting for the completion loop, never an assertion on speed
REPLY = "Your order ships today."


@pytest.fixture
def served(tmp_path: Path, store_url: str) -> Iterator[Server]:
    with launch(tmp_path, db=store_url, env=QUIET) as server:
        yield server


@pytest.fixture
def provider() -> Iterator[FakeJudges]:
    fake = fake_judges.FakeJudges()
    fake.script = lambda kind, body: Answer(text=REPLY)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def _get(server: Server, path: str, token: str | None = None) -> Any:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(server.base + path, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _post(
    server: Server, body: bytes, media: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(
        server.base + "/v1/traces",
        data=body,
        method="POST",
        headers={"content-type": media, **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return (
                response.status,
                response.read(),
                {k.lower(): v for k, v in response.headers.items()},
            )
    except urllib.error.HTTPError as e:
        return e.code, e.read(), {k.lower(): v for k, v in e.headers.items()}


def _cases(server: Server, count: int, token: str | None = None) -> list[dict[str, Any]]:
    """The online runs' cases as exported (bundles) once `count` are recorded (async loop)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        runs = _get(server, "/runs?suite=online", token)["data"]
        cases = [
            case
            for run in runs
            for case in _get(server, f"/runs/{run['run_id']}/bundle", token)["cases"]
        ]
        if len(cases) >= count or time.monotonic() > deadline:
            return cases
        time.sleep(0.2)


def _provider(server: Server, service: str, token: str | None = None) -> tuple[Any, Any]:
    """A tracer provider exporting to the server (OTLP/HTTP protobuf, gzip), and a memory copy."""
    memory = InMemorySpanExporter()
    tp = TracerProvider(
        resource=Resource.create({"service.name": service, "service.version": "2.0.0"})
    )
    tp.add_span_processor(
        SimpleSpanProcessor(
            OTLPSpanExporter(
                endpoint=server.base + "/v1/traces",
                compression=Compression.Gzip,
                headers={"authorization": f"Bearer {token}"} if token else None,
            )
        )
    )
    tp.add_span_processor(SimpleSpanProcessor(memory))
    return tp, memory


def _turns(case: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(t["role"], t["content"]) for t in case["transcript"]]


def test_the_sdk_exporter_sends_traces_that_become_cases(served: Server) -> None:
    tp, memory = _provider(served, "support-bot")
    tracer = tp.get_tracer("tests")
    chat_trace(tracer, question="Where is my order?")
    chat_trace(tracer, question="Can I return it?")
    tp.shutdown()
    cases = _cases(served, 2)
    assert sorted(_turns(c)[0][1] or "" for c in cases) == [
        "Can I return it?",
        "Where is my order?",
    ]
    runs = _get(served, "/runs?suite=online")["data"]
    assert [r["run_key"].rsplit("/", 1)[0] for r in runs] == ["online/support-bot/2.0.0"]
    assert runs[0]["case_count"] == 2
    ids = {format(s.context.trace_id, "032x") for s in memory.get_finished_spans()}
    assert {c["test_case"]["key"] for c in cases} == ids


def test_the_official_openai_instrumentation_traces_become_cases(
    served: Server, provider: FakeJudges, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    tp, memory = _provider(served, "shop-assistant")
    instrumentor = OpenAIInstrumentor()  # type: ignore[no-untyped-call]
    instrumentor.instrument(tracer_provider=tp)
    try:
        client = openai.OpenAI(base_url=provider.openai_url, api_key="sk-test", max_retries=0)
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "You are a shop assistant."},
                {"role": "user", "content": "When does my order ship?"},
            ],
        )
    finally:
        instrumentor.uninstrument()
    tp.shutdown()
    _check_called(served, memory)


def test_the_openinference_instrumentation_traces_become_cases(
    served: Server, provider: FakeJudges
) -> None:
    tp, memory = _provider(served, "shop-assistant")
    instrumentor = OpenInferenceInstrumentor()
    instrumentor.instrument(tracer_provider=tp)
    try:
        client = openai.OpenAI(base_url=provider.openai_url, api_key="sk-test", max_retries=0)
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "You are a shop assistant."},
                {"role": "user", "content": "When does my order ship?"},
            ],
        )
    finally:
        instrumentor.uninstrument()
    tp.shutdown()
    _check_called(served, memory)


def _check_called(server: Server, memory: InMemorySpanExporter) -> None:
    """One case: the messages sent, the provider's reply, its model, tokens and the latency."""
    (case,) = _cases(server, 1)
    assert _turns(case) == [
        ("system", "You are a shop assistant."),
        ("user", "When does my order ship?"),
        ("assistant", REPLY),
    ]
    answer = case["transcript"][2]
    # The fake provider reports 1200 prompt and 300 completion tokens, model + "-2025-04-14".
    assert answer["usage"] == {"prompt_tokens": 1200, "completion_tokens": 300}
    assert "model:gpt-4o-mini-2025-04-14" in case["test_case"]["tags"]
    (span,) = [s for s in memory.get_finished_spans() if s.parent is None]
    assert span.end_time is not None and span.start_time is not None
    assert answer["latency_ms"] == pytest.approx((span.end_time - span.start_time) / 1e6)
    (run,) = _get(server, "/runs?suite=online")["data"]
    assert run["agent"]["model"] == "gpt-4o-mini-2025-04-14"
    assert run["run_key"].startswith("online/shop-assistant/2.0.0/")


def test_json_retries_errors_and_partial_success_over_http(served: Server) -> None:
    tracer, memory = recorder(service="json-bot")
    chat_trace(tracer)
    with tracer.start_as_current_span("broken") as bad:
        bad.set_attribute("ratio", float("inf"))
    spans = memory.get_finished_spans()
    body = export_json(spans)

    status, raw, headers = _post(served, body, "application/json")
    assert status == 200 and headers["content-type"] == "application/json"
    answer = json_format.Parse(raw, ExportTraceServiceResponse())
    assert answer.partial_success.rejected_spans == 1
    assert "infinity" in answer.partial_success.error_message
    # The exporter's retry (same spans, gzip this time) stores nothing new.
    status, raw, _ = _post(
        served,
        gzip.compress(export_body(spans)),
        "application/x-protobuf",
        {"content-encoding": "gzip"},
    )
    assert status == 200
    again = ExportTraceServiceResponse()
    again.ParseFromString(raw)
    assert again.partial_success.rejected_spans == 1  # the broken span, refused again
    (case,) = _cases(served, 1)
    assert _turns(case)[0] == ("user", "Where is my order?")

    status, raw, _ = _post(served, b"not protobuf \xff\xff", "application/x-protobuf")
    error = Status()
    error.ParseFromString(raw)
    assert status == 400 and "body" in error.message
    status, raw, _ = _post(served, b"{}", "text/plain")
    assert status == 415
    bomb = gzip.compress(b"\x00" * (48 * 1024 * 1024))
    status, raw, _ = _post(served, bomb, "application/json", {"content-encoding": "gzip"})
    assert status == 413 and b"inflated" in raw
    status, raw, _ = _post(served, b"[" * 100_000, "application/json")
    assert status in (400, 422) and b"nested" in raw


def test_a_token_sends_into_its_own_project(tmp_path: Path, store_url: str) -> None:
    services = build_services(Settings(db=store_url))
    try:
        issued = issue_token(services, "shop", TokenScope.WRITE, "exporter", Context(actor="admin"))
        reader = issue_token(services, "shop", TokenScope.READ, "viewer", Context(actor="admin"))
        other = issue_token(services, "other", TokenScope.READ, "else", Context(actor="admin"))
    finally:
        services.close()
    token = issued.token
    with launch(tmp_path, db=store_url, env=QUIET) as server:
        tracer, memory = recorder(service="tenant-bot")
        chat_trace(tracer)
        body = export_body(memory.get_finished_spans())
        assert _post(server, body, "application/x-protobuf")[0] == 401
        assert (
            _post(server, body, "application/x-protobuf", {"authorization": "Bearer nope"})[0]
            == 401
        )
        status, _, _ = _post(
            server, body, "application/x-protobuf", {"authorization": f"Bearer {token}"}
        )
        assert status == 200
        read_only = {"authorization": f"Bearer {reader.token}"}
        assert _post(server, body, "application/x-protobuf", read_only)[0] == 403
        (case,) = _cases(server, 1, token)
        # Another project's token sees no online run of this one.
        assert _get(server, "/runs?suite=online", other.token)["data"] == []
        (run,) = _get(server, "/runs?suite=online", token)["data"]
        assert run["project"] == "shop"
        assert case["test_case"]["key"] == format(
            memory.get_finished_spans()[0].context.trace_id, "032x"
        )
