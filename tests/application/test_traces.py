"""OTLP exports → spans recorded once per (trace, span) → complete traces → cases of online runs.

The spans are made by the real OpenTelemetry SDK and encoded by its own OTLP encoder; the use
cases run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import audit, compare, reports, runs, verification
from evaledger.application.traces import (
    TraceCursor,
    complete_traces,
    online_run_key,
    receive_traces,
    seal_online_runs,
)
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import TraceSpansReceived
from evaledger.domain.ledger import Context
from evaledger.domain.spec import RunConfig
from evaledger.domain.traces import trace_id_for
from evaledger.importers.otlp import (
    JSON,
    MAX_VALUE_DEPTH,
    PROTOBUF,
    BodyTooLarge,
    UnsupportedMediaType,
)
from evaledger.projections.queries import RunFilter
from tests.otlp_helpers import chat_trace, export_body, export_json, parse, recorder

CTX = Context(actor="otlp-test")
LIMIT = 4 * 1024 * 1024
LATER = timedelta(seconds=60)


def _receive(services: Services, body: bytes, media: str = PROTOBUF, coding: str | None = None):
    return receive_traces(services, body, media, coding, CTX, max_bytes=LIMIT)


def _complete(services: Services, quiet_s: float = 30.0):
    return complete_traces(services, CTX, quiet_s=quiet_s, now=datetime.now(UTC) + LATER)


def test_a_trace_becomes_one_case_of_its_agents_online_run(store_services: Services) -> None:
    tracer, memory = recorder()
    chat_trace(tracer)
    spans = memory.get_finished_spans()
    trace_id = format(spans[0].context.trace_id, "032x")
    done = _receive(store_services, export_body(spans))
    assert (done.accepted, done.duplicates, done.rejected) == (2, 0, 0)

    completed = _complete(store_services)
    assert completed.cases == 1 and completed.waiting == 0
    store_services.sync()
    (run_id,) = completed.recorded
    run = store_services.reads.get_run(run_id)
    root = next(s for s in spans if s.parent is None)
    day = datetime.fromtimestamp(root.end_time / 1e9, UTC).date()
    assert run.run_key == online_run_key("support-bot", "1.2.0", day)
    assert run.status == "running" and run.labels == {"source": "otlp"}
    assert run.agent["name"] == "support-bot" and run.agent["version"] == "1.2.0"
    assert run.agent["model"] == "gpt-4o-mini-2024-07-18"

    case = store_services.ledger.get_case(completed.recorded[run_id][0])
    assert case.opened.test_case.key == trace_id
    assert "model:gpt-4o-mini-2024-07-18" in case.opened.test_case.tags
    transcript = next(
        e
        for e in store_services.ledger.events_of(case.id)
        if type(e).__name__ == "TranscriptRecorded"
    )
    turns = transcript.turns  # type: ignore[attr-defined]
    assert [(t.role, t.content) for t in turns] == [
        ("user", "Where is my order?"),
        ("assistant", "On its way."),
    ]
    chat = next(s for s in spans if s.name.startswith("chat"))
    assert turns[1].latency_ms == pytest.approx((chat.end_time - chat.start_time) / 1e6)
    assert (turns[1].usage.prompt_tokens, turns[1].usage.completion_tokens) == (21, 7)

    # The unmapped attribute is kept in the recorded spans.
    trace = store_services.ledger.get_trace("default", trace_id)
    assert trace is not None and trace.recorded is not None
    kept = [s["attributes"].get("app.customer_tier") for s in trace.spans]
    assert "gold" in kept


def test_retries_and_split_exports_store_each_span_once(store_services: Services) -> None:
    tracer, memory = recorder()
    chat_trace(tracer)
    spans = memory.get_finished_spans()
    child, root = spans  # the child ends first
    first = _receive(store_services, export_body([child]))
    again = _receive(store_services, export_body([child]))  # the exporter retried
    both = _receive(store_services, export_body([child, root]))  # and the next batch holds both
    assert (first.accepted, again.accepted, again.duplicates) == (1, 0, 1)
    assert (both.accepted, both.duplicates) == (1, 1)

    trace_id = format(root.context.trace_id, "032x")
    agg = trace_id_for("default", trace_id)
    received = [
        e for e in store_services.ledger.events_of(agg) if isinstance(e, TraceSpansReceived)
    ]
    stored_ids = [s["span_id"] for e in received for s in e.spans]
    assert sorted(stored_ids) == sorted(format(s.context.span_id, "016x") for s in spans)

    assert _complete(store_services).cases == 1
    assert _complete(store_services).cases == 0  # recorded once
    late = _receive(store_services, export_body([root]))
    assert (late.accepted, late.duplicates) == (0, 1)


def test_a_trace_waits_for_its_root_and_the_quiet_period(store_services: Services) -> None:
    tracer, memory = recorder()
    chat_trace(tracer)
    child, root = memory.get_finished_spans()
    _receive(store_services, export_body([child]))
    cursor = TraceCursor()
    assert (
        complete_traces(store_services, CTX, now=datetime.now(UTC) + LATER, cursor=cursor).cases
        == 0
    )
    _receive(store_services, export_body([root]))
    # Quiet period not over yet: the trace may still grow.
    assert complete_traces(store_services, CTX, quiet_s=3600, cursor=cursor).cases == 0
    done = complete_traces(store_services, CTX, now=datetime.now(UTC) + LATER, cursor=cursor)
    assert done.cases == 1 and done.waiting == 0


def test_json_and_gzip_exports_read_like_protobuf(store_services: Services) -> None:
    tracer, memory = recorder()
    chat_trace(tracer, question="first")
    chat_trace(tracer, question="second")
    spans = memory.get_finished_spans()
    assert _receive(store_services, export_json(spans[:2]), JSON).accepted == 2
    gz = gzip.compress(export_body(spans[2:]))
    assert _receive(store_services, gz, PROTOBUF, "gzip").accepted == 2
    # The same spans again, as gzip JSON: all held already.
    again = _receive(store_services, gzip.compress(export_json(spans)), JSON, "gzip")
    assert (again.accepted, again.duplicates) == (0, 4)
    assert _complete(store_services).cases == 2


def test_projects_keep_their_own_traces(store_services: Services) -> None:
    tracer, memory = recorder()
    chat_trace(tracer)
    body = export_body(memory.get_finished_spans())
    alpha = Context(actor="a", project="alpha")
    beta = Context(actor="b", project="beta")
    assert (
        receive_traces(store_services, body, PROTOBUF, None, alpha, max_bytes=LIMIT).accepted == 2
    )
    # The same trace id sent by another project's token is that project's own trace.
    assert receive_traces(store_services, body, PROTOBUF, None, beta, max_bytes=LIMIT).accepted == 2
    done = _complete(store_services)
    store_services.sync()
    projects = sorted(store_services.reads.get_run(r).project for r in done.recorded)
    assert projects == ["alpha", "beta"]


def test_a_span_that_cannot_be_stored_is_rejected_alone(store_services: Services) -> None:
    tracer, memory = recorder()
    with tracer.start_as_current_span("root") as root:
        root.set_attribute("ok", 1)
        with tracer.start_as_current_span("bad") as bad:
            bad.set_attribute("ratio", float("nan"))
        with tracer.start_as_current_span("nul") as nul:
            nul.set_attribute("text", "a\x00b")
    done = _receive(store_services, export_body(memory.get_finished_spans()))
    assert (done.accepted, done.rejected) == (1, 2)
    assert "NaN" in done.message and "NUL" in done.message


def test_hostile_bodies_are_refused_and_store_nothing(store_services: Services) -> None:
    before = store_services.ledger.position()
    bomb = gzip.compress(b"\x00" * (64 * 1024 * 1024))  # 64 MiB of zeros in ~64 KiB
    with pytest.raises(BodyTooLarge, match="inflated"):
        _receive(store_services, bomb, PROTOBUF, "gzip")
    deep = b'{"resourceSpans": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(ValidationError, match="nested deeper"):
        _receive(store_services, deep, JSON)
    with pytest.raises(ValidationError, match="protobuf"):
        _receive(store_services, b"\xff\xff\xff\xff not protobuf", PROTOBUF)
    with pytest.raises(ValidationError, match="gzip"):
        _receive(store_services, b"not gzip at all", PROTOBUF, "gzip")
    with pytest.raises(UnsupportedMediaType, match="Content-Type"):
        _receive(store_services, b"{}", "text/plain")
    with pytest.raises(UnsupportedMediaType, match="Content-Encoding"):
        _receive(store_services, b"{}", JSON, "br")
    assert store_services.ledger.position() == before


def test_online_runs_of_days_that_are_over_are_sealed(store_services: Services) -> None:
    tracer, memory = recorder()
    chat_trace(tracer)
    _receive(store_services, export_body(memory.get_finished_spans()))
    now = datetime.now(UTC)
    # Today's run is open and stays so.
    assert seal_online_runs(store_services, CTX, now=now + LATER) == []
    store_services.sync()
    (row,), _ = store_services.reads.list_runs(_online_filter())
    assert row.status == "running" and row.case_count == 1
    tomorrow = now + timedelta(days=1, minutes=5)
    sealed = seal_online_runs(store_services, CTX, now=tomorrow)
    assert [s.run_key for s in sealed] == [row.run_key]
    store_services.sync()
    assert store_services.reads.get_run(row.run_id).status == "completed"
    assert seal_online_runs(store_services, CTX, now=tomorrow) == []


def _online_filter() -> RunFilter:
    return RunFilter(suite="online")


def test_every_view_works_on_online_runs(store_services: Services) -> None:
    """Two days' online runs, sealed: run page, explain, history, rescore, compare, verify."""
    tracer, memory = recorder()
    yesterday = datetime.now(UTC) - timedelta(days=1)
    for day in (yesterday - timedelta(days=1), yesterday):
        start = int(day.timestamp() * 1e9)
        with tracer.start_as_current_span("turn", start_time=start, end_on_exit=False) as root:
            chat_trace(tracer)
        root.end(end_time=start + 2_000_000_000)
    _receive(store_services, export_body(memory.get_finished_spans()))
    sealed = seal_online_runs(store_services, CTX, now=datetime.now(UTC) + LATER)
    assert len(sealed) == 2
    store_services.sync()
    older, newer = sorted(sealed, key=lambda s: s.run_key)
    shown = reports.show_run(store_services, newer.run_id)
    assert shown is not None
    (case,) = reports.case_scores(store_services, newer.run_id)
    assert audit.explain(store_services, case.case_id) is not None
    assert len(audit.case_history(store_services, case.case_id).events) >= 2
    rescored = runs.rescore_run(store_services, newer.run_id, RunConfig())
    assert rescored is not None
    comparison = compare.compare_runs(store_services, older.run_id, newer.run_id)
    assert comparison is not None
    assert runs.recorded_run(store_services, newer.run_id) is not None  # export
    assert verification.verify_log(store_services).ok


def _nested_export(depth: int) -> bytes:
    """A one-span export whose attribute nests key-value lists `depth` deep.

    Written on the wire by hand past the depth the protobuf runtime builds messages to.
    """
    request = parse(export_body(_one_span()))
    value = AnyValue(string_value="bottom").SerializeToString()
    for _ in range(depth):
        pair = _field(1, b"k") + _field(2, value)  # KeyValue {key, value}
        value = _field(6, _field(1, pair))  # AnyValue {kvlist_value: KeyValueList {values}}
    span = request.resource_spans[0].scope_spans[0].spans[0]
    extra = _field(9, _field(1, b"deep") + _field(2, value))  # Span.attributes += KeyValue
    wire = span.SerializeToString() + extra
    scope = request.resource_spans[0].scope_spans[0]
    del scope.spans[:]
    # ExportTraceServiceRequest {resource_spans: ResourceSpans {scope_spans: {spans}}}: the
    # scope spans message again, with the hand-made span appended as its field 2.
    del request.resource_spans[0].scope_spans[:]
    resource = request.resource_spans[0].SerializeToString()
    scope_bytes = scope.SerializeToString() + _field(2, wire)
    return _field(1, resource + _field(2, scope_bytes))


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _one_span() -> list[ReadableSpan]:
    tracer, memory = recorder()
    with tracer.start_as_current_span("only"):
        pass
    return list(memory.get_finished_spans())


def test_deeply_nested_attributes_are_refused(store_services: Services) -> None:
    # Deeper than a span may carry: that span is rejected, the export answered.
    done = _receive(store_services, _nested_export(MAX_VALUE_DEPTH + 2))
    assert (done.accepted, done.rejected) == (0, 1) and "nested deeper" in done.message
    # Deeper than the protobuf parser goes: the body is refused whole, nothing stored.
    before = store_services.ledger.position()
    with pytest.raises(ValidationError, match="protobuf"):
        _receive(store_services, _nested_export(200))
    assert store_services.ledger.position() == before
    assert _receive(store_services, _nested_export(3)).accepted == 1


def test_two_processes_receiving_one_trace_store_each_span_once(store_url: str) -> None:
    """A process takes a trace it never saw as new; the store's conflict makes it read again."""
    first = build_services(Settings(db=store_url))
    second = build_services(Settings(db=store_url))
    try:
        tracer, memory = recorder()
        chat_trace(tracer)
        child, root = memory.get_finished_spans()
        assert _receive(first, export_body([child])).accepted == 1
        # `second` never received this trace: its first try conflicts, the retry reads it.
        again = _receive(second, export_body([child, root]))
        assert (again.accepted, again.duplicates) == (1, 1)
        assert _complete(second).cases == 1
        late = _receive(first, export_body([root]))  # first's own view is stale by now
        assert (late.accepted, late.duplicates) == (0, 1)
        trace = second.ledger.get_trace("default", format(root.context.trace_id, "032x"))
        assert trace is not None and len(trace.spans) == 2
    finally:
        first.close()
        second.close()
