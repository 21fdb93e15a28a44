"""OTLP ingest (issue 33): traces × 5 spans through `POST /v1/traces` of one `evaledger serve`.

    .venv/bin/python bench/otlp.py [--traces 10000] [--batch 512] [--retries 0.05]

The spans are made by the real OpenTelemetry SDK (a root "agent turn", two GenAI chat spans with
messages and tokens, a tool span, a retrieval span: 5 per trace) and encoded by its own OTLP
encoder into protobuf exports of `--batch` spans in the order they ended (what the SDK's
BatchSpanProcessor sends; a trace's spans often straddle two exports). Before the clock.

One `evaledger serve` process (SQLite, then PostgreSQL), quiet period 0.5 s. One client posts
the exports over a keep-alive HTTP connection, then resends `--retries` of them (an exporter's
retries: stored nothing new). Figures:
- **receive spans/s**: spans sent (retries excluded) over the time to the last answer;
- **end-to-end spans/s**: the same spans over the time until every trace is a case of the online
  run (the server's completion loop; polled on `GET /runs?suite=online`);
- checks: cases == traces, and the spans the ledger recorded (`TraceSpansReceived`) == spans sent,
  each (trace id, span id) once: nothing lost, nothing duplicated.

Raw baseline of the same run: the bare protobuf decode of the same exports
(`ExportTraceServiceRequest.ParseFromString`, each span's ids and attributes read into a row)
plus a raw `executemany` of the resulting rows (trace id, span id, orjson of the span) into a
plain table (`sqlite3` into a WAL file; psycopg into a fresh database), one transaction per
export. Ratio = end-to-end / raw. Goal (issue 33): ≥ 2,000 spans/s end to end on one server.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.common import (
    Goal,
    base_parser,
    machine_note,
    num,
    pg_available,
    pg_database,
    print_goals,
    print_table,
    progress,
)

EVALEDGER = Path(sys.executable).with_name("evaledger")
SPANS_PER_TRACE = 5
GOAL_SPANS_S = 2000.0


def make_spans(traces: int, seed: int) -> list[ReadableSpan]:
    """`traces` traces of 5 spans each, as the SDK ends them."""
    rng = random.Random(seed)
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "bench-bot", "service.version": "1.0.0"})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench.otlp")
    for i in range(traces):
        question = f"order {rng.randrange(10**6)}: where is it? ({i})"
        with tracer.start_as_current_span("agent turn") as root:
            root.set_attribute("gen_ai.agent.name", "bench-bot")
            root.set_attribute("app.session", f"s-{i % 97}")
            _chat(tracer, [question], "Let me look it up.", tool_call=True)
            with tracer.start_as_current_span("execute_tool lookup_order") as tool:
                tool.set_attribute("gen_ai.operation.name", "execute_tool")
                tool.set_attribute("gen_ai.tool.name", "lookup_order")
                tool.set_attribute("gen_ai.tool.call.id", "call_1")
                tool.set_attribute("gen_ai.tool.call.result", '{"status": "shipped"}')
            with tracer.start_as_current_span("retrieve faq") as retrieval:
                retrieval.set_attribute("db.system", "pgvector")
                retrieval.set_attribute("app.documents", rng.randrange(1, 9))
            _chat(tracer, [question, "Let me look it up."], "It shipped yesterday.")
    return list(memory.get_finished_spans())


def _chat(tracer: Any, history: Sequence[str], answer: str, tool_call: bool = False) -> None:
    with tracer.start_as_current_span("chat gpt-4o-mini") as span:
        messages = [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "parts": [{"type": "text", "content": m}],
            }
            for i, m in enumerate(history)
        ]
        parts: list[dict[str, Any]] = [{"type": "text", "content": answer}]
        if tool_call:
            parts.append(
                {"type": "tool_call", "id": "call_1", "name": "lookup_order", "arguments": {"n": 1}}
            )
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.provider.name", "openai")
        span.set_attribute("gen_ai.request.model", "gpt-4o-mini")
        span.set_attribute("gen_ai.usage.input_tokens", 120)
        span.set_attribute("gen_ai.usage.output_tokens", 30)
        span.set_attribute("gen_ai.input.messages", json.dumps(messages))
        span.set_attribute(
            "gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": parts}])
        )


def exports(spans: Sequence[ReadableSpan], batch: int) -> list[bytes]:
    """The protobuf export bodies of `batch` spans each, in the order the spans ended."""
    return [
        encode_spans(spans[i : i + batch]).SerializeToString() for i in range(0, len(spans), batch)
    ]


# -- the raw baseline ---------------------------------------------------------------------------


def decode_rows(body: bytes) -> list[tuple[str, str, bytes]]:
    """Bare protobuf decode of one export into (trace id, span id, span JSON) rows."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    rows = []
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                attrs = {
                    kv.key: getattr(kv.value, kv.value.WhichOneof("value") or "string_value")
                    for kv in s.attributes
                }
                span = {
                    "name": s.name,
                    "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano,
                    "attributes": attrs,
                }
                rows.append((s.trace_id.hex(), s.span_id.hex(), orjson.dumps(span)))
    return rows


def raw_sqlite(bodies: Sequence[bytes], folder: Path) -> float:
    """Seconds to decode every export and executemany its rows into a WAL SQLite file."""
    path = folder / "raw.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE spans (trace_id TEXT, span_id TEXT, state BLOB, "
        "PRIMARY KEY (trace_id, span_id))"
    )
    start = time.perf_counter()
    for body in bodies:
        with conn:
            conn.executemany("INSERT OR IGNORE INTO spans VALUES (?, ?, ?)", decode_rows(body))
    took = time.perf_counter() - start
    conn.close()
    return took


def raw_pg(bodies: Sequence[bytes], url: str) -> float:
    """Seconds to decode every export and executemany its rows into PostgreSQL."""
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TABLE spans (trace_id text, span_id text, state bytea, "
            "PRIMARY KEY (trace_id, span_id))"
        )
        conn.commit()
        start = time.perf_counter()
        for body in bodies:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO spans VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    decode_rows(body),
                )
        return time.perf_counter() - start


# -- the server ---------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(db: str, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "EVALEDGER_TRACE_QUIET": "0.5", "EVALEDGER_MAX_BODY_BYTES": str(64 << 20)}
    env.pop("EVALEDGER_DB", None)
    log = (folder / f"serve-{port}.log").open("wb")
    proc = subprocess.Popen(
        [str(EVALEDGER), "serve", "--port", str(port), "--db", db],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            status, _ = get(base, "/health")
            if status in (200, 503):
                return proc, base
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("serve did not start")


def get(base: str, path: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(base, timeout=120)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def post_all(base: str, bodies: Sequence[bytes]) -> None:
    host, _, port = base.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    for body in bodies:
        while True:
            conn.request("POST", "/v1/traces", body, {"content-type": "application/x-protobuf"})
            r = conn.getresponse()
            r.read()
            if r.status == 200:
                break
            if r.status in (429, 503):
                time.sleep(float(r.getheader("retry-after") or 1))
                continue
            raise RuntimeError(f"POST /v1/traces answered {r.status}")
    conn.close()


def cases_recorded(base: str) -> int:
    _, runs = get(base, "/runs?suite=online&limit=500")
    return sum(r["case_count"] for r in runs["data"])


def spans_recorded(db: str) -> tuple[int, int]:
    """(spans recorded in TraceSpansReceived events, distinct (trace, span) ids among them)."""
    from evaledger.api.bootstrap import Settings, build_services
    from evaledger.domain.events import TraceSpansReceived

    services = build_services(Settings(db=db))
    try:
        total, start = 0, 1
        ids: set[tuple[str, str]] = set()
        while notices := services.ledger.trace_notices(start, 1000):
            for n in notices:
                if isinstance(n.event, TraceSpansReceived):
                    total += len(n.event.spans)
                    ids.update((n.event.trace_id, s["span_id"]) for s in n.event.spans)
            start = notices[-1].position + 1
        return total, len(ids)
    finally:
        services.close()


def measure(
    db: str, bodies: list[bytes], retried: list[bytes], spans: int, traces: int, folder: Path
) -> dict[str, float]:
    proc, base = serve(db, folder)
    try:
        start = time.perf_counter()
        post_all(base, bodies)
        received = time.perf_counter() - start
        post_all(base, retried)
        while (done := cases_recorded(base)) < traces:
            progress(f"  {done}/{traces} traces recorded")
            time.sleep(1.0)
        end_to_end = time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    stored, distinct = spans_recorded(db)
    return {
        "receive": spans / received,
        "end_to_end": spans / end_to_end,
        "cases": float(done),
        "stored": float(stored),
        "distinct": float(distinct),
    }


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("--traces", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=512, help="spans per export (the SDK's default)")
    p.add_argument("--retries", type=float, default=0.05, help="share of exports sent twice")
    args = p.parse_args()
    traces = 300 if args.quick else args.traces
    print(machine_note())
    progress(f"making {traces} traces x {SPANS_PER_TRACE} spans with the OpenTelemetry SDK")
    spans = make_spans(traces, args.seed)
    bodies = exports(spans, args.batch)
    rng = random.Random(args.seed)
    retried = rng.sample(bodies, max(1, int(len(bodies) * args.retries)))
    n = len(spans)
    rows: list[list[object]] = []
    goals: list[Goal] = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        folder = Path(tmp)
        stores: list[tuple[str, str | None, str | None]] = [
            ("SQLite", f"sqlite:///{folder}/store/", None)
        ]
        if args.pg and pg_available(args.pg_admin):
            stores.append(("PostgreSQL", None, args.pg_admin))
        elif args.pg:
            print("PostgreSQL not reachable: its rows are skipped")
        for name, url, admin in stores:
            progress(f"{name}: {len(bodies)} exports ({n} spans), {len(retried)} sent again")
            if admin is None:
                assert url is not None
                got = measure(url, bodies, retried, n, traces, folder)
                raw = n / raw_sqlite(bodies, folder)
                baseline = "decode + sqlite3 executemany"
            else:
                with pg_database(admin) as db:
                    got = measure(db, bodies, retried, n, traces, folder)
                with pg_database(admin) as raw_db:
                    raw = n / raw_pg(bodies, raw_db)
                baseline = "decode + psycopg executemany"
            ok = got["cases"] == traces and got["stored"] == got["distinct"] == n
            rows.append(
                [
                    name,
                    num(got["receive"]),
                    num(got["end_to_end"]),
                    f"{baseline} {num(raw)}",
                    f"{got['end_to_end'] / raw:.1%}",
                    f"{int(got['cases'])}/{traces}",
                    f"{int(got['stored'])} ({int(got['distinct'])} distinct) / {n}",
                    "ok" if ok else "LOST OR DUPLICATED",
                ]
            )
            goals.append(
                Goal(
                    f"OTLP ingest end to end, {name}, {traces} traces x 5 spans",
                    f"{num(got['end_to_end'])} spans/s",
                    f"{baseline} {num(raw)} spans/s",
                    f"{got['end_to_end'] / raw:.1%}",
                    f">= {num(GOAL_SPANS_S)} spans/s, nothing lost or duplicated",
                    ok and got["end_to_end"] >= GOAL_SPANS_S,
                )
            )
    print_table(
        "OTLP ingest (one `evaledger serve`, spans/s)",
        [
            "store",
            "receive",
            "end to end",
            "raw (same run)",
            "ratio",
            "cases",
            "spans stored",
            "check",
        ],
        rows,
    )
    print(machine_note())
    print_goals("Goal (issue 33)", goals)


if __name__ == "__main__":
    main()
