"""Issue 29: `evaledger.run(..., url=, token=)` with a project token records into the token's
project when no project is given (it was refused: "this token is for project 'acme', not
'default'"). A live `evaledger serve` on loopback, a real project token.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import evaledger
from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.aggregates import case_id_for, run_id_for
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.client.conftest import Target
from tests.reliability.test_tenancy import serving


@pytest.fixture
def acme(store_url: str, tmp_path: Path) -> Iterator[Target]:
    """A served store (SQLite, PostgreSQL) and a write token of project 'acme'."""
    db = store_url
    services = build_services(Settings(db=db))
    try:
        token = services.ledger.issue_token(
            "acme", TokenScope.WRITE, "ci", Context(actor="ops")
        ).token
    finally:
        services.close()
    with serving(db, "127.0.0.1", tmp_path / "serve.log") as base:
        yield Target({"url": base, "token": token}, db)


def _record(target: Target, key: str | None = None) -> evaledger.RunRecorder:
    with (
        evaledger.run("support", agent="bot", key=key, **target.kwargs) as run,
        run.case("refund", input="a refund please") as case,
    ):
        case.turn("assistant", "done", latency_ms=10)
        case.score("accuracy", 1.0)
    return run


@pytest.mark.slow
def test_a_project_token_records_into_its_project_when_none_is_given(acme: Target) -> None:
    run = _record(acme)
    assert run.id == run_id_for("acme", run.key)
    again = _record(acme, key="nightly-1")
    _record(acme, key="nightly-1")  # the same block again: found by key in 'acme', a no-op
    services = build_services(Settings(db=acme.db))
    try:
        for recorded in (run, again):
            assert services.ledger.project_of(recorded.id) == "acme"
            assert services.ledger.get_run(recorded.id).status.value == "completed"
        events = services.ledger.events_of(case_id_for(again.id, "refund", 0, ""))
        assert [type(e).__name__ for e in events].count("CaseOpened") == 1
        assert services.ledger.find_run("default", run.key) is None
    finally:
        services.close()
    # Reading names the project (the reader's default stays "default", as before).
    with evaledger.open(project="acme", **acme.kwargs) as reader:
        assert {r.run_key for r in reader.runs()} == {run.key, "nightly-1"}
        assert reader.show("nightly-1").run.run_id == again.id
    # A reader given no project reads the token's (GET /whoami), and names it when a key is
    # not there.
    with evaledger.open(**acme.kwargs) as reader:
        assert reader.project == "acme"
        assert {r.run_key for r in reader.runs()} == {run.key, "nightly-1"}
        assert reader.show("nightly-1").run.run_id == again.id
        with pytest.raises(evaledger.NotFoundError) as missing:
            reader.show("typo-1")
        assert str(missing.value) == "no run with id or key 'typo-1' in project 'acme'"
    # A project named explicitly is still held against the token's.
    with pytest.raises(evaledger.PermissionDeniedError) as refused:
        evaledger.run("support", agent="bot", project="default", **acme.kwargs).__enter__()
    assert refused.value.field == "run.project"


class _OlderServer(BaseHTTPRequestHandler):
    """A server from before `GET /whoami`: every path it does not know is FastAPI's 404."""

    def do_GET(self) -> None:
        body = b'{"detail":"Not Found"}'
        self.send_response(404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_reader_of_a_server_without_whoami_reads_the_default_project() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OlderServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with evaledger.open(url=url, token="evl_any") as reader:
            assert reader.project == "default"
    finally:
        server.shutdown()
        server.server_close()
