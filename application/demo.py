"""The demo's own use cases: load its runs and judge one with recorded replies, offline.

`evaledger demo` (`api/demo/`) ships the run bundles and the replay judge's replies; these use
cases write them into the store idempotently (a second demo writes nothing) and say what was
written. What the demo then shows is read through the read use cases (`reports`, `compare`,
`grades`) and a rescore. `send_demo_traces` sends a few support conversations through the
real OpenTelemetry SDK into an online run (`docs/online.md`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

import orjson
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator

from evaledger.application.traces import complete_traces, online_run_key, receive_traces
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import JudgeVerdictRecorded, TranscriptRecorded
from evaledger.domain.ledger import Context
from evaledger.domain.model import StrictModel
from evaledger.importers.otlp import PROTOBUF
from evaledger.judging.runner import JudgeOptions, plan, run_plan

if TYPE_CHECKING:
    from evaledger.application.ports import Services

DEMO = Context(actor="demo")


class DemoRun(StrictModel):
    """One demo run as loaded: its id and key, its cases, the events written (0: already)."""

    run_id: str
    run_key: str
    cases: int
    events: int


def load_demo_runs(services: Services, bundles: Sequence[RunBundle]) -> list[DemoRun]:
    """Import the demo's bundles (importing one again writes nothing)."""
    loaded = []
    for bundle in bundles:
        r = services.ledger.import_bundle(bundle, DEMO)
        loaded.append(
            DemoRun(run_id=str(r.run_id), run_key=r.run_key, cases=r.cases, events=r.events)
        )
    return loaded


class JudgedExample(StrictModel):
    """One case traced end to end: transcript → prompt → reply → scores."""

    case_id: str
    transcript_turns: int
    template_id: str | None
    template_hash: str | None
    prompt: str | None
    raw_output: str | None
    parse_status: str
    metric_scores: dict[str, int | None]


class DemoJudged(StrictModel):
    """How many verdicts the replay judge recorded (0: already recorded), and one example."""

    recorded: int
    example: JudgedExample


def judge_with_replay(services: Services, run_id: UUID, replies: Path) -> DemoJudged:
    """Judge the run once with the offline `replay` judge (the recorded replies in `replies`).

    A second call finds the replay verdicts and writes nothing.
    """
    run = services.ledger.get_run(run_id)
    first_case = run.case_ids[0]
    already = any(
        isinstance(e, JudgeVerdictRecorded) and e.judge.provider == "replay"
        for e in services.ledger.events_of(first_case)
    )
    recorded = 0
    if not already:
        options = JudgeOptions(judges=(f"replay:{replies}",), concurrency=8)
        report = run_plan(services.ledger, plan(services.ledger, run_id, options, {}), DEMO)
        recorded = report.verdicts
    events = services.ledger.events_of(first_case)
    verdict = next(
        e
        for e in reversed(events)
        if isinstance(e, JudgeVerdictRecorded) and e.judge.provider == "replay"
    )
    turns = next(len(e.turns) for e in events if isinstance(e, TranscriptRecorded))
    return DemoJudged(
        recorded=recorded,
        example=JudgedExample(
            case_id=str(first_case),
            transcript_turns=turns,
            template_id=verdict.template_id,
            template_hash=verdict.template_hash,
            prompt=verdict.prompt,
            raw_output=verdict.raw_output,
            parse_status=verdict.parse_status.value,
            metric_scores={m.metric: m.score for m in verdict.metric_scores},
        ),
    )


# -- production traces ------------------------------------------------------------------------

DEMO_AGENT = ("demo-support-bot", "1.0.0")
DEMO_TRACES = (
    ("Where is my order 1042?", "It left our warehouse this morning; tracking code ZX81."),
    ("Can I change the delivery address?", "Yes, until it ships: I have updated it for you."),
    ("Do you ship to Norway?", "We do, in 3 to 5 working days."),
    ("I want a refund for order 977.", "Done: the refund reaches your card within 5 days."),
)
DEMO_START_NS = 1_764_000_000_000_000_000
"""2025-11-24 16:00 UTC: the demo's traces have fixed times and ids, so a second demo adds none."""


class DemoTraces(StrictModel):
    """The demo's traces sent through the OpenTelemetry SDK, and the online run they became."""

    sent: int
    spans_recorded: int
    cases_recorded: int
    events: int
    """Events written (0: a second demo): the spans per export, the cases and their run."""
    run_key: str
    run_id: str


class _CountingIds(IdGenerator):
    """Trace and span ids 1, 2, 3…: the same traces on every demo (an exporter's retry, too)."""

    def __init__(self) -> None:
        self.trace, self.span = 0x0DE0_0000_0000_0000_0000_0000_0000_0000, 0x0DE0_0000_0000_0000

    def generate_trace_id(self) -> int:
        self.trace += 1
        return self.trace

    def generate_span_id(self) -> int:
        self.span += 1
        return self.span


class _LedgerExporter(SpanExporter):
    """The SDK's spans, encoded by the official OTLP encoder, received as `POST /v1/traces` is."""

    def __init__(self, services: Services) -> None:
        self.services, self.recorded = services, 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        body = encode_spans(spans).SerializeToString()
        done = receive_traces(self.services, body, PROTOBUF, None, DEMO, max_bytes=1 << 20)
        self.recorded += done.accepted
        return SpanExportResult.SUCCESS


def send_demo_traces(services: Services) -> DemoTraces:
    """Send four support conversations through the real OpenTelemetry SDK; record them as cases.

    Each trace is a turn span with a GenAI chat span under it (the semantic conventions the
    official OpenAI instrumentation writes); they land in the online run of their agent and day.
    """
    agent, version = DEMO_AGENT
    before = services.ledger.position()
    exporter = _LedgerExporter(services)
    provider = TracerProvider(
        resource=Resource.create({"service.name": agent, "service.version": version}),
        id_generator=_CountingIds(),
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("evaledger.demo")
    for i, (question, answer) in enumerate(DEMO_TRACES):
        start = DEMO_START_NS + i * 60_000_000_000
        root = tracer.start_span("support turn", start_time=start)
        with trace.use_span(root, end_on_exit=False):
            chat = tracer.start_span("chat gpt-4o-mini", start_time=start + 5_000_000)
            for name, value in _chat_attributes(question, answer).items():
                chat.set_attribute(name, value)
            chat.end(end_time=start + 805_000_000)
        root.end(end_time=start + 810_000_000)
    provider.shutdown()
    # Complete at once: the SDK has ended and sent every span (no quiet period to wait out).
    completed = complete_traces(services, DEMO, quiet_s=0, now=datetime.now(UTC))
    day = datetime.fromtimestamp(DEMO_START_NS / 1e9, UTC).date()
    key = online_run_key(agent, version, day)
    run = services.ledger.find_run("default", key)
    assert run is not None
    return DemoTraces(
        sent=len(DEMO_TRACES),
        spans_recorded=exporter.recorded,
        cases_recorded=completed.cases,
        events=services.ledger.position() - before,
        run_key=key,
        run_id=str(run.id),
    )


def _chat_attributes(question: str, answer: str) -> dict[str, str | int]:
    """A chat call as the GenAI semantic conventions record it (latest, messages on the span)."""
    said = [{"role": "user", "parts": [{"type": "text", "content": question}]}]
    reply = [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": answer}],
            "finish_reason": "stop",
        }
    ]
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.usage.input_tokens": 18 + len(question) // 4,
        "gen_ai.usage.output_tokens": 6 + len(answer) // 4,
        "gen_ai.input.messages": orjson.dumps(said).decode(),
        "gen_ai.output.messages": orjson.dumps(reply).decode(),
    }
