"""The client over HTTP against a real `evaledger serve`: a request the network loses is retried
and stored once; a wrong token is a typed error."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

import evaledger
from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.aggregates import case_id_for
from tests.client.conftest import Target


@contextmanager
def flaky_proxy(upstream: str) -> Iterator[tuple[str, list[str]]]:
    """A loopback proxy to `upstream` that fails the first attempt of two writes: `POST /runs`
    gets a 503 (never forwarded), and the first case write is forwarded (so the server stores
    it) but its answer is lost (the connection dropped). Every request seen is logged."""
    seen: list[str] = []
    failed: set[str] = set()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def relay(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            line = f"{self.command} {self.path.split('?')[0]}"
            seen.append(line)
            if line == "POST /runs" and "503" not in failed:
                failed.add("503")
                self.send_response(503)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            answer = httpx.request(
                self.command, upstream + self.path, headers=headers, content=body, timeout=30
            )
            if line.endswith("/cases") and self.command == "POST" and "drop" not in failed:
                failed.add("drop")
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.send_response(answer.status_code)
            for k, v in answer.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(k, v)
            self.send_header("content-length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = relay

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.slow
def test_lost_requests_are_retried_and_stored_once(server_target: Target) -> None:
    token = server_target.kwargs["token"]
    with (
        flaky_proxy(server_target.kwargs["url"]) as (proxy, seen),
        evaledger.run("flaky", agent="bot", key="flaky-1", url=proxy, token=token) as run,
        run.case("c", input="hi") as case,
    ):
        case.turn("assistant", "hello", latency_ms=12)
        case.score("accuracy", 1.0)
    case_path = f"POST /runs/{run.id}/cases"
    # Both writes were attempted twice: the 503 and the dropped answer were retried.
    assert seen.count("POST /runs") == 2
    assert seen.count(case_path) == 2
    services = build_services(Settings(db=server_target.db))
    try:
        events = services.ledger.events_of(case_id_for(run.id, "c", 0, ""))
        runs = services.ledger.events_of(run.id)
    finally:
        services.close()
    # The case the server stored on the first attempt was not stored again.
    assert [type(e).__name__ for e in events] == [
        "CaseOpened",
        "TranscriptRecorded",
        "NamedScoresRecorded",
    ]
    assert [type(e).__name__ for e in runs].count("RunCreated") == 1
    with evaledger.open(**server_target.kwargs) as reader:
        report = reader.show("flaky-1")
    assert report.run.status == "completed"
    assert [c.test_case_key for c in report.cases] == ["c"]


@pytest.mark.slow
def test_a_wrong_or_missing_token_is_a_typed_error(server_target: Target) -> None:
    url = server_target.kwargs["url"]
    with pytest.raises(evaledger.AuthenticationError):
        evaledger.run("s", agent="bot", url=url, token="not-a-token").__enter__()
    with pytest.raises(evaledger.AuthenticationError), evaledger.open(url=url) as reader:
        reader.runs()
    with evaledger.open(**server_target.kwargs) as reader:
        assert reader.runs() == []  # nothing was stored by the refused writes
