"""Writes against a hung PostgreSQL (black-holed, not refused) end in 503 / exit 3, not a hang.

A loopback proxy in front of the test PostgreSQL stops forwarding bytes while its connections
stay open: the server neither answers nor refuses. The statuses are asserted, never the time;
the clients' own timeouts only keep a regression from hanging
the suite.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from evaledger.domain.store.liveness import SILENT_AFTER_S, WATCHDOG, BoundedConnection
from evaledger.domain.store.urls import POSTGRES_CONNECT_KWARGS
from tests.api.test_serve import EVALEDGER
from tests.helpers import bundle
from tests.scale.processes import Server, hanging_proxy, request

PROBE_BOUND_S = 2.0
"""The issue's bound on /health and /ready: the client gives up after it (a failure)."""
WRITE_GIVE_UP_S = 30.0
"""The client stops waiting for a write after this (the product answers within seconds)."""


def via(pg_url: str, port: int) -> str:
    """The store URL through the proxy's port."""
    parts = urlsplit(pg_url)
    return pg_url.replace(f":{parts.port}/", f":{port}/")


@pytest.mark.slow
@pytest.mark.postgres
def test_a_write_against_a_hung_store_answers_503_and_lands_once_after_it_resumes(
    pg_url: str, tmp_path: Path
) -> None:
    first = json.dumps(bundle(key="before-hang")).encode()
    second = json.dumps(bundle(key="during-hang")).encode()
    port = urlsplit(pg_url).port or 5432
    with hanging_proxy(port) as proxy:
        server = Server(via(pg_url, proxy.port), tmp_path / "serve.log")
        try:
            status, body = request(server.base, "POST", "/bundles", first)
            assert status == 201, body
            proxy.hang()
            answer: dict[str, Any] = {}

            def write() -> None:
                answer["reply"] = request(
                    server.base, "POST", "/bundles", second, timeout=WRITE_GIVE_UP_S
                )

            writer = threading.Thread(target=write)
            writer.start()
            # While the write is stuck on the store, the probes still answer in time.
            for path in ("/health", "/ready"):
                status, body = request(server.base, "GET", path, timeout=PROBE_BOUND_S)
                assert (status, body["code"]) == (503, "store_unavailable"), (path, body)
            writer.join(WRITE_GIVE_UP_S + 5)
            status, body = answer["reply"]
            assert status == 503, body
            assert body["code"] == "store_unavailable"
            assert "PostgreSQL at 127.0.0.1" in body["detail"]

            proxy.resume()
            status, body = request(server.base, "POST", "/bundles", second)
            assert status == 201, body
            status, runs = request(server.base, "GET", "/runs")
            assert status == 200
            keys = sorted(r["run_key"] for r in runs["data"])
            assert keys == ["before-hang", "during-hang"]
        finally:
            proxy.resume()
            server.stop()
    # Nothing half-written: every chain, seal and aggregate checks out, and the log holds the
    # two runs' events exactly (13 each).
    verified = subprocess.run(
        [str(EVALEDGER), "verify", "--db", pg_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("ok: 26 events in 8 aggregates, 2 sealed runs"), (
        verified.stdout
    )


@pytest.mark.slow
@pytest.mark.postgres
def test_a_cli_import_against_a_hung_store_exits_3_without_a_traceback(
    pg_url: str, tmp_path: Path
) -> None:
    source = tmp_path / "bundle.json"
    source.write_text(json.dumps(bundle(key="cli-during-hang")))
    port = urlsplit(pg_url).port or 5432
    # A store that exists and holds a run, then hangs.
    first = tmp_path / "first.json"
    first.write_text(json.dumps(bundle(key="cli-before-hang")))
    ready = subprocess.run(
        [str(EVALEDGER), "import", str(first), "--db", pg_url],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ready.returncode == 0, ready.stderr
    with hanging_proxy(port) as proxy:
        proxy.hang()
        hung = subprocess.run(
            [str(EVALEDGER), "import", str(source), "--db", via(pg_url, proxy.port)],
            capture_output=True,
            text=True,
            timeout=WRITE_GIVE_UP_S * 3,
            check=False,
        )
        proxy.resume()
    assert hung.returncode == 3, hung.stdout + hung.stderr
    assert f"127.0.0.1:{proxy.port}/" in hung.stderr
    assert "is unreachable" in hung.stderr
    assert "Traceback" not in hung.stderr
    runs = subprocess.run(
        [str(EVALEDGER), "runs", "--db", pg_url, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert runs.returncode == 0, runs.stderr
    assert [run["run_key"] for run in json.loads(runs.stdout)["data"]] == ["cli-before-hang"]


@pytest.mark.postgres
def test_a_slow_statement_on_a_live_server_is_not_cut_by_the_watchdog(pg_url: str) -> None:
    # Longer than the watchdog's silence: it probes, the server answers, the statement goes on.
    assert SILENT_AFTER_S + 1 < 4
    with BoundedConnection.connect(pg_url, **POSTGRES_CONNECT_KWARGS) as conn:
        row = conn.execute("SELECT pg_sleep(4), 'finished'").fetchone()
        assert row is not None and row[1] == "finished"
        assert not WATCHDOG.saw_hang()


@pytest.mark.postgres
def test_the_watchdog_breaks_a_call_waiting_on_a_hung_server(pg_url: str) -> None:
    port = urlsplit(pg_url).port or 5432
    with hanging_proxy(port) as proxy:
        conn = BoundedConnection.connect(via(pg_url, proxy.port), **POSTGRES_CONNECT_KWARGS)
        try:
            proxy.hang()
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
            assert WATCHDOG.saw_hang()
        finally:
            proxy.resume()
            conn.close()
