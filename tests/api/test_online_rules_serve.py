"""Online rules end to end: a live `evaledger serve` (and, on PostgreSQL, a real `evaledger
worker` process) judge exactly the sampled traces the real OpenTelemetry SDK sent.

Traces go out through the SDK's own `OTLPSpanExporter` (protobuf, gzip) and as OTLP/JSON; the
rule is added over HTTP with a project token; the judge is the loopback fake provider. On
SQLite the server judges in its own process; on PostgreSQL the server queues and the worker
judges. The test computes the expected trace ids itself (SHA-256 of rule name and trace id).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from evaledger.api.bootstrap import Settings, build_services
from evaledger.application.projects import issue_token
from evaledger.domain.events import JudgeVerdictRecorded, OnlineCaseJudged, TokenScope
from evaledger.domain.ledger import Context
from evaledger.domain.online_rules import rule_day_id_for
from evaledger.projections.queries import RunFilter
from tests.api.test_serve import launch
from tests.application.test_online_rules import expected_sample
from tests.fake_judges import Answer, FakeJudges, default_script, serve
from tests.otlp_helpers import chat_trace, export_json
from tests.scale.processes import Process

WAIT_S = 90.0  # a bound on waiting for the completion loop and the worker, never asserted
RULE = {
    "name": "helpful",
    "sample": 0.5,
    "where": "agent=e2e-bot and attribute.service.version=3.1.0",
    "judge": "anthropic:claude-sonnet-4-6",
    "outcomes": ["The agent says where the order is"],
}


@pytest.fixture
def judges() -> Iterator[FakeJudges]:
    yield from serve()


def call(
    base: str, method: str, path: str, token: str, body: bytes | None = None, media: str = ""
) -> tuple[int, Any]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        headers["content-type"] = media or "application/json"
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def sdk_provider(base: str, token: str) -> tuple[TracerProvider, InMemorySpanExporter]:
    """The SDK exporting to the server (protobuf, gzip) with a memory copy of what it sent."""
    memory = InMemorySpanExporter()
    tp = TracerProvider(
        resource=Resource.create({"service.name": "e2e-bot", "service.version": "3.1.0"})
    )
    exporter = OTLPSpanExporter(
        endpoint=base + "/v1/traces",
        compression=Compression.Gzip,
        headers={"authorization": f"Bearer {token}"} if token else None,
    )
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tp.add_span_processor(SimpleSpanProcessor(memory))
    return tp, memory


def judged_trace_ids(db: str) -> set[str]:
    services = build_services(Settings(db=db))
    try:
        day = services.ledger.clock().date()
        events = services.ledger.events_of(rule_day_id_for("shop", "helpful", day))
        return {e.trace_id for e in events if isinstance(e, OnlineCaseJudged)}
    finally:
        services.close()


def wait_for(check: Any, what: str, logs: tuple[Path, ...] = ()) -> Any:
    deadline = time.monotonic() + WAIT_S
    while not (found := check()):
        if time.monotonic() > deadline:
            # The server's and the worker's own words: what a time-out alone cannot say.
            tails = "".join(
                f"\n--- {log.name} (last 4,000 characters)\n{log.read_text(errors='replace')[-4000:]}"
                for log in logs
                if log.exists()
            )
            pytest.fail(f"timed out waiting for {what}{tails}")
        time.sleep(0.3)
    return found


def test_a_sampled_rule_judges_the_expected_traces_through_serve_and_worker(
    tmp_path: Path, store_url: str, judges: FakeJudges
) -> None:
    services = build_services(Settings(db=store_url))
    try:
        admin = Context(actor="admin")
        shop = issue_token(services, "shop", TokenScope.ADMIN, "shop-admin", admin).token
        sender = issue_token(services, "shop", TokenScope.WRITE, "exporter", admin).token
        other = issue_token(services, "other", TokenScope.ADMIN, "intruder", admin).token
    finally:
        services.close()
    env = {**judges.env(), "EVALEDGER_TRACE_QUIET": "0.3"}
    with ExitStack() as stack:
        server = stack.enter_context(launch(tmp_path, db=store_url, env=env))
        if store_url.startswith("postgresql"):
            worker = Process(["worker", "--db", store_url], tmp_path / "worker.log", env)
            stack.callback(worker.stop)
        base, rules = server.base, "/projects/shop/online/rules"
        body = json.dumps(RULE).encode()

        # Another project's token can neither see nor add rules; a writer cannot add them.
        assert call(base, "POST", rules, other, body)[0] == 404
        assert call(base, "POST", rules, sender, body)[0] == 403
        status, added = call(base, "POST", rules, shop, body)
        assert status == 201, added
        assert added["added_by"].startswith("shop-admin (token ") and added["enabled"]
        assert call(base, "GET", rules, other)[0] == 404
        bad = json.dumps({**RULE, "name": "bad", "where": "colour=red"}).encode()
        status, refused = call(base, "POST", rules, shop, bad)
        assert status in (400, 422) and "where" in json.dumps(refused), refused
        assert call(base, "POST", rules, shop, body)[0] == 200  # a retry: nothing written
        changed = json.dumps({**RULE, "sample": 0.9}).encode()
        assert call(base, "POST", rules, shop, changed)[0] == 409
        assert [r["name"] for r in call(base, "GET", rules, shop)[1]["data"]] == ["helpful"]

        # Ten traces through the SDK's exporter (protobuf), ten as OTLP/JSON.
        tp, memory = sdk_provider(base, sender)
        tracer = tp.get_tracer("e2e")
        for i in range(10):
            chat_trace(tracer, question=f"Where is order {i}?", answer="It ships today.")
        json_tp = TracerProvider(
            resource=Resource.create({"service.name": "e2e-bot", "service.version": "3.1.0"})
        )
        json_memory = InMemorySpanExporter()
        json_tp.add_span_processor(SimpleSpanProcessor(json_memory))
        for i in range(10):
            chat_trace(json_tp.get_tracer("e2e"), question=f"Refund {i}?", answer="Done.")
        sent = call(
            base, "POST", "/v1/traces", sender, export_json(json_memory.get_finished_spans())
        )
        assert sent[0] == 200
        spans = [*memory.get_finished_spans(), *json_memory.get_finished_spans()]
        traces = sorted({format(s.context.trace_id, "032x") for s in spans})
        assert len(traces) == 20
        expected = expected_sample("helpful", traces, 0.5)
        assert 0 < len(expected) < 20

        found = wait_for(
            lambda: ids if len(ids := judged_trace_ids(store_url)) >= len(expected) else None,
            "the sampled traces to be judged",
            (server.log, tmp_path / "worker.log"),
        )
        assert found == expected
        time.sleep(1.0)  # nothing more arrives: every trace is recorded, each judged once
        assert judged_trace_ids(store_url) == expected
        assert judges.calls("anthropic") == len(expected)
        # The judge saw the rule's expected outcome, and the verdict is the case's own event.
        asked = json.dumps([b for _, b, _ in judges.requests])
        assert "The agent says where the order is" in asked
        check = build_services(Settings(db=store_url))
        try:
            check.sync()
            keys = {
                check.ledger.get_case(e.originator_id).opened.test_case.key
                for cid in _online_cases(check)
                for e in check.ledger.events_of(cid)
                if isinstance(e, JudgeVerdictRecorded)
            }
        finally:
            check.close()
        assert keys == expected

        assert call(base, "POST", rules + "/helpful/disable", other, b"{}")[0] == 404
        status, off = call(base, "POST", rules + "/helpful/disable", shop, b'{"reason": "done"}')
        assert (status, off["enabled"], off["disabled_reason"]) == (200, False, "done")


def _online_cases(services: Any) -> list[Any]:
    runs, _ = services.reads.list_runs(RunFilter(suite="online"))
    return [cid for r in runs for cid in services.ledger.get_run(r.run_id).case_ids]


def test_a_service_instrumented_by_the_official_openai_instrumentation_is_judged(
    tmp_path: Path, store_url: str, judges: FakeJudges, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's "done when": instrumented calls → cases → a rule judges them (a worker on PG)."""
    judges.script = lambda kind, body: (
        Answer(text="It ships today.") if kind == "openai" else default_script(kind, body)
    )
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    env = {**judges.env(), "EVALEDGER_TRACE_QUIET": "0.3"}
    with ExitStack() as stack:
        server = stack.enter_context(launch(tmp_path, db=store_url, env=env))
        if store_url.startswith("postgresql"):
            worker = Process(["worker", "--db", store_url], tmp_path / "worker.log", env)
            stack.callback(worker.stop)
        rule = {
            "name": "shop",
            "sample": 1.0,
            "where": "service=e2e-bot and model=gpt-4o-mini-2025-04-14",
            "judge": "anthropic:claude-sonnet-4-6",
        }
        status, _ = call(
            server.base, "POST", "/projects/default/online/rules", "", json.dumps(rule).encode()
        )
        assert status == 201
        tp, memory = sdk_provider(server.base, "")
        instrumentor = OpenAIInstrumentor()  # type: ignore[no-untyped-call]
        instrumentor.instrument(tracer_provider=tp)
        try:
            client = openai.OpenAI(base_url=judges.openai_url, api_key="sk-test", max_retries=0)
            for question in ("When does my order ship?", "Can I pay by invoice?"):
                client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": question}]
                )
        finally:
            instrumentor.uninstrument()
        tp.shutdown()
        traces = {format(s.context.trace_id, "032x") for s in memory.get_finished_spans()}
        assert len(traces) == 2

        def judged() -> set[str] | None:
            services = build_services(Settings(db=store_url))
            try:
                day = services.ledger.clock().date()
                events = services.ledger.events_of(rule_day_id_for("default", "shop", day))
            finally:
                services.close()
            found = {e.trace_id for e in events if isinstance(e, OnlineCaseJudged)}
            return found if len(found) >= 2 else None

        logs = (server.log, tmp_path / "worker.log")
        assert wait_for(judged, "the instrumented traces to be judged", logs) == traces
        assert judges.calls("anthropic") == 2
