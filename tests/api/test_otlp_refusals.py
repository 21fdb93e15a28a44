"""Refusals of `POST /v1/traces` as OTLP exporters read them, against a live `evaledger serve`.

Every refusal — the route's and those of the shared layers before it (Host guard, body limit,
authentication, JSON depth, routing) — is a `google.rpc.Status` in the request's encoding with the
status the OTLP/HTTP specification gives: bad data 400, retryable 429/503 with Retry-After. The
in-flight limit is passed by real concurrent requests held open mid-body (no sleeps), and the
SDK's own `OTLPSpanExporter` meets the 429, honours Retry-After and stores its spans once. On
SQLite and PostgreSQL.
"""

from __future__ import annotations

import http.client
import select
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from google.protobuf import json_format
from google.rpc.code_pb2 import Code
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from evaledger.api.bootstrap import Settings, build_services
from evaledger.api.otlp_errors import RETRY_AFTER_S
from evaledger.api.routes.otlp import MAX_IN_FLIGHT
from evaledger.application.projects import issue_token
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_otlp_serve import QUIET, WAIT_S, _cases, _get, _post, _turns
from tests.api.test_serve import Server, launch
from tests.otlp_helpers import chat_trace, export_body, recorder

PROTOBUF, JSON = "application/x-protobuf", "application/json"
MAX_BODY = 200_000


class Tokens:
    """A writer and a reader of project `shop`."""

    def __init__(self, writer: str, reader: str) -> None:
        self.writer, self.reader = writer, reader

    def auth(self, token: str | None = None) -> dict[str, str]:
        """The Authorization header of `token` (the writer's by default)."""
        return {"authorization": f"Bearer {token or self.writer}"}


@pytest.fixture
def tokens(store_url: str) -> Tokens:
    services = build_services(Settings(db=store_url))
    try:
        ctx = Context(actor="admin")
        writer = issue_token(services, "shop", TokenScope.WRITE, "exporter", ctx)
        reader = issue_token(services, "shop", TokenScope.READ, "viewer", ctx)
    finally:
        services.close()
    return Tokens(writer.token, reader.token)


@pytest.fixture
def served(tmp_path: Path, store_url: str, tokens: Tokens) -> Iterator[Server]:
    env = {**QUIET, "EVALEDGER_MAX_BODY_BYTES": str(MAX_BODY)}
    with launch(tmp_path, db=store_url, env=env) as server:
        yield server


def _refusal(raw: bytes, headers: dict[str, str], media: str) -> Status:
    """The Status of a refusal, decoded as the request's encoding says it must be."""
    assert headers["content-type"] == media, headers
    status = Status()
    if media == JSON:
        json_format.Parse(raw, status)
    else:
        status.ParseFromString(raw)
    return status


def _raw(server: Server, method: str, headers: dict[str, str], body: Any = None) -> Any:
    """A request through `http.client` (chunked bodies, any Host), answered in full."""
    url = urlsplit(server.base)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        conn.request(method, "/v1/traces", body=body, headers=headers, encode_chunked=True)
        response = conn.getresponse()
        return response.status, response.read(), {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()


def test_the_shared_layers_refuse_as_otlp_says(served: Server, tokens: Tokens) -> None:
    tracer, memory = recorder(service="refused-bot")
    chat_trace(tracer)
    body = export_body(memory.get_finished_spans())

    # Authentication: 401 without or with an unknown token, 403 for a read-only one; never retried.
    for media in (PROTOBUF, JSON):
        status, raw, headers = _post(served, body, media)
        error = _refusal(raw, headers, media)
        assert (status, error.code) == (401, Code.UNAUTHENTICATED) and error.message
        assert "retry-after" not in headers
    status, raw, headers = _post(served, body, PROTOBUF, {"authorization": "Bearer nope"})
    assert (status, _refusal(raw, headers, PROTOBUF).code) == (401, Code.UNAUTHENTICATED)
    status, raw, headers = _post(served, body, PROTOBUF, tokens.auth(tokens.reader))
    assert (status, _refusal(raw, headers, PROTOBUF).code) == (403, Code.PERMISSION_DENIED)

    # The body limit: a declared length over it, and a streamed (chunked) body passing it.
    big = b"\x00" * (MAX_BODY + 1)
    status, raw, headers = _post(served, big, PROTOBUF, tokens.auth())
    error = _refusal(raw, headers, PROTOBUF)
    assert (status, error.code) == (413, Code.INVALID_ARGUMENT)
    assert "EVALEDGER_MAX_BODY_BYTES" in error.message
    chunks = iter([b"{" + b" " * 65_536] * 4)
    status, raw, headers = _raw(
        served, "POST", {"content-type": JSON, **tokens.auth()}, body=chunks
    )
    assert status == 413 and "EVALEDGER_MAX_BODY_BYTES" in _refusal(raw, headers, JSON).message

    # JSON nested past the limit: bad data, 400 (not the API's 422), the field named.
    status, raw, headers = _post(served, b"[" * 100_000, JSON, tokens.auth())
    error = _refusal(raw, headers, JSON)
    assert (status, error.code) == (400, Code.INVALID_ARGUMENT) and "nested" in error.message

    # A Host not served here (the browser guard, before everything) and a method not routed.
    status, raw, headers = _raw(
        served, "POST", {"host": "evil.example", "content-type": PROTOBUF}, body=body
    )
    assert status == 421 and "evil.example" in _refusal(raw, headers, PROTOBUF).message
    status, raw, headers = _raw(served, "GET", {"content-type": JSON, **tokens.auth()})
    assert (status, _refusal(raw, headers, JSON).code) == (405, Code.UNIMPLEMENTED)

    # Nothing of the refused exports was stored.
    assert _get(served, "/runs?suite=online", tokens.writer)["data"] == []
    # The API's other paths keep the API's shape.
    status, raw, _ = _raw_path(served, "/runs")
    assert status == 401 and b'"detail"' in raw


def _raw_path(server: Server, path: str) -> tuple[int, bytes, dict[str, str]]:
    url = urlsplit(server.base)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read(), dict(response.getheaders())
    finally:
        conn.close()


class Held:
    """An export sent up to the middle of its body: the receiver holds an in-flight slot."""

    def __init__(self, server: Server, body: bytes, auth: dict[str, str]) -> None:
        url = urlsplit(server.base)
        self.conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=60)
        self.rest = body[len(body) // 2 :]
        self.conn.putrequest("POST", "/v1/traces")
        for name, value in {"content-type": PROTOBUF, "content-length": str(len(body))}.items():
            self.conn.putheader(name, value)
        for name, value in auth.items():
            self.conn.putheader(name, value)
        self.conn.endheaders(body[: len(body) // 2])

    def finish(self) -> int:
        """Send the rest of the body; the export's status."""
        try:
            self.conn.send(self.rest)
            response = self.conn.getresponse()
            response.read()
            return response.status
        finally:
            self.conn.close()


def _first_answered(held: list[Held]) -> tuple[Held, int, bytes, dict[str, str]]:
    """The held export the receiver answered without waiting for its body: the one refused."""
    ready, _, _ = select.select([h.conn.sock for h in held], [], [], WAIT_S)
    assert ready, "no held export was answered"  # a bound on waiting, never on speed
    (first,) = [h for h in held if h.conn.sock is ready[0]]
    response = first.conn.getresponse()
    raw = response.read()
    first.conn.close()
    return first, response.status, raw, {k.lower(): v for k, v in response.getheaders()}


def test_more_exports_in_flight_than_the_limit_are_told_to_retry_and_the_sdk_does(
    served: Server, tokens: Tokens
) -> None:
    tracer, memory = recorder(service="busy-bot")
    chat_trace(tracer, question="Where is my order?")
    spans = memory.get_finished_spans()
    body = export_body(spans)
    # The same spans in every held export and in the exporter's: each span is stored once.
    seen: list[int] = []
    refused = threading.Event()

    def record(response: requests.Response, *_: Any, **__: Any) -> None:
        seen.append(response.status_code)
        if response.status_code == 429:
            refused.set()

    session = requests.Session()
    session.hooks["response"].append(record)
    exporter = OTLPSpanExporter(
        endpoint=served.base + "/v1/traces", headers=tokens.auth(), session=session, timeout=60
    )
    results: list[SpanExportResult] = []
    sender = threading.Thread(target=lambda: results.append(exporter.export(spans)))
    # One export more than the limit, all held mid-body: the receiver answers one at once.
    held = [Held(served, body, tokens.auth()) for _ in range(MAX_IN_FLIGHT + 1)]
    try:
        refused_one, status, raw, headers = _first_answered(held)
        held.remove(refused_one)
        error = _refusal(raw, headers, PROTOBUF)
        assert (status, error.code) == (429, Code.RESOURCE_EXHAUSTED)
        assert headers["retry-after"] == str(RETRY_AFTER_S)
        # The SDK's exporter meets the 429, waits Retry-After and sends again once released.
        sender.start()
        assert refused.wait(WAIT_S), "the exporter was never refused"
    finally:
        finished = [h.finish() for h in held]
    sender.join(WAIT_S)
    exporter.shutdown()  # type: ignore[no-untyped-call]
    assert finished == [200] * MAX_IN_FLIGHT
    assert results == [SpanExportResult.SUCCESS]
    assert seen[0] == 429 and seen[-1] == 200 and set(seen) == {429, 200}

    (case,) = _cases(served, 1, tokens.writer)
    assert _turns(case)[0] == ("user", "Where is my order?")
    assert len(_turns(case)) == len(set(_turns(case)))
    assert case["test_case"]["key"] == format(spans[0].context.trace_id, "032x")
