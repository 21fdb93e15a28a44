"""`evaledger serve` as a real process on 127.0.0.1, spoken to over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLE_BUNDLE

EVALEDGER = Path(sys.executable).with_name("evaledger")
STARTUP_LIMIT_S = 60.0  # a bound on waiting, never an assertion on speed


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(
    base: str, method: str, path: str, body: bytes | None = None
) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        base + path,
        data=body,
        method=method,
        headers={"content-type": "application/json"} if body is not None else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Server:
    """A running `evaledger serve`."""

    def __init__(self, proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
        self.proc = proc
        self.base = base
        self.log = log


@contextmanager
def launch(
    tmp_path: Path,
    *args: str,
    db: str | None = None,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[Server]:
    """Start `evaledger serve` on a free loopback port with `args`; stop it (SIGTERM) after.

    A port another test's process took between `free_port` and the server's bind: the server is
    started again on another one (twice at most).
    """
    environment = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    environment.update(env or {})
    for attempt in range(3):
        server = _start(tmp_path, args, db, environment, preexec_fn)
        if not (attempt < 2 and _port_taken(server)):
            break
    proc, base, log = server.proc, server.base, server.log
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"serve exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if call(base, "GET", "/health")[0] in (200, 503):
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"serve did not answer /health:\n{log.read_text()}")
            time.sleep(0.1)
        yield Server(proc, base, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _port_taken(server: Server) -> bool:
    """Whether the server exited at start because its port was taken (else it keeps running)."""
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while server.proc.poll() is None and time.monotonic() < deadline:
        try:
            call(server.base, "GET", "/health")
            return False  # it answers: it has the port
        except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
            time.sleep(0.1)
    return server.proc.poll() is not None and "address already in use" in server.log.read_text(
        errors="replace"
    )


def _start(
    tmp_path: Path,
    args: tuple[str, ...],
    db: str | None,
    environment: dict[str, str],
    preexec_fn: Callable[[], None] | None,
) -> Server:
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(EVALEDGER),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--db",
                db or f"sqlite:///{tmp_path}/store/",
                *args,
            ],
            cwd=tmp_path,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec_fn,
        )
    return Server(proc, f"http://127.0.0.1:{port}", log)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with launch(tmp_path) as running:
        yield running


@pytest.mark.slow
def test_serve_answers_over_real_http(server: Server, tmp_path: Path) -> None:
    status, health = call(server.base, "GET", "/health")
    assert status == 200
    assert (health["status"], health["store"], health["log_position"]) == ("ok", "sqlite", 0)

    status, imported = call(server.base, "POST", "/bundles", EXAMPLE_BUNDLE.read_bytes())
    assert status == 201, imported
    assert (imported["events"], imported["cases"], imported["new_cases"]) == (13, 3, 3)
    run_id = imported["run_id"]

    status, run = call(server.base, "GET", f"/runs/{run_id}")
    assert status == 200
    aggregate = run["aggregate"]
    assert aggregate["weighted_metrics_score_pct"] == 68.0
    assert (aggregate["passed_count"], aggregate["error_count"]) == (1, 1)
    assert (aggregate["failed_count"], aggregate["total_executions"]) == (1, 3)

    status, cases = call(server.base, "GET", f"/runs/{run_id}/cases")
    assert status == 200 and cases["count"] == 3
    case_id = cases["data"][0]["case_id"]
    status, history = call(server.base, "GET", f"/cases/{case_id}/history")
    assert status == 200
    assert [e["type"] for e in history["events"]] == [
        "CaseOpened",
        "TranscriptRecorded",
        "JudgeVerdictRecorded",
        "ClaimsVerified",
    ]
    assert history["state"]["score"]["overall_score"] == 88.5

    status, again = call(server.base, "POST", "/bundles", EXAMPLE_BUNDLE.read_bytes())
    assert (status, again["events"]) == (200, 0)  # an idempotent replay writes nothing: 200
    status, missing = call(server.base, "GET", "/runs/00000000-0000-0000-0000-000000000000")
    assert (status, missing["code"], missing["status"]) == (404, "not_found", 404)

    # A clean shutdown on SIGTERM: the lifespan closes the store, then uvicorn re-raises the
    # signal it caught (so the exit status is "killed by SIGTERM", after a graceful stop).
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) in (0, -signal.SIGTERM)
    assert "Application shutdown complete." in server.log.read_text()
    assert (tmp_path / "store" / "events.sqlite").exists()
