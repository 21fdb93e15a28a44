"""`evaledger serve --workers N` on PostgreSQL: probes, metrics, JSON logs, SIGTERM, a hung store."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import EXAMPLE_BUNDLE
from tests.scale.processes import Server, hanging_proxy, json_lines, request

PROBE_BOUND_S = 2.0
"""The issue's bound on /health and /ready: the client gives up after it (a failure)."""


@pytest.mark.slow
@pytest.mark.postgres
def test_four_workers_serve_one_postgresql_store(pg_url: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    server = Server(pg_url, log, "--workers", "4", "--log-format", "json")
    try:
        deadline = time.monotonic() + 60  # a bound on waiting, never asserted
        while log.read_text().count("Started server process") < 4:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        status, imported = request(server.base, "POST", "/bundles", EXAMPLE_BUNDLE.read_bytes())
        assert status == 201, imported
        run_id = imported["run_id"]
        # Every worker reads the same store: whichever answers, the run is there.
        answers = [request(server.base, "GET", f"/runs/{run_id}") for _ in range(40)]
        assert {status for status, _ in answers} == {200}
        assert {body["aggregate"]["weighted_metrics_score_pct"] for _, body in answers} == {68.0}

        status, ready = request(server.base, "GET", "/ready", timeout=PROBE_BOUND_S)
        assert status == 200
        assert (ready["status"], ready["store"], ready["log_position"]) == (
            "ready",
            "postgresql",
            13,
        )
        assert ready["projection_lag"] == 0

        status, metrics = request(server.base, "GET", "/metrics", timeout=PROBE_BOUND_S)
        assert status == 200
        # Summed over the 4 workers (multiprocess mode): all 40 reads are counted once.
        reads = re.search(
            r'evaledger_http_requests_total\{method="GET",route="/runs/\{run_id\}",'
            r'status="200"\} (\d+)',
            metrics,
        )
        assert reads is not None, metrics
        assert float(reads.group(1)) == 40
        assert "evaledger_log_position 13.0" in metrics
        assert "evaledger_projection_lag_events 0.0" in metrics
    finally:
        code = server.stop(signal.SIGTERM)
    assert code == 0
    lines = json_lines(log)  # every line is one JSON object
    started = {
        line["pid"] for line in lines if line["message"].startswith("Started server process")
    }
    assert len(started) == 4
    assert {"time", "level", "logger", "message", "pid"} <= set(lines[0])


@pytest.mark.slow
@pytest.mark.postgres
def test_health_and_ready_answer_503_in_time_while_postgresql_hangs(
    pg_url: str, tmp_path: Path
) -> None:
    parts = urlsplit(pg_url)
    with hanging_proxy(parts.port or 5432) as proxy:
        via_proxy = pg_url.replace(f":{parts.port}/", f":{proxy.port}/")
        server = Server(via_proxy, tmp_path / "serve.log")
        try:
            assert request(server.base, "GET", "/ready", timeout=PROBE_BOUND_S)[0] == 200
            proxy.hang()
            for path in ("/health", "/ready", "/health"):
                status, body = request(server.base, "GET", path, timeout=PROBE_BOUND_S)
                assert status == 503, (path, body)
                assert body["code"] == "store_unavailable"
            proxy.resume()
            # Recovered once the server answers again: a request inside the moment after a failed
            # probe (liveness.HUNG_FOR_S) is still refused at once, so wait for the state.
            deadline = time.monotonic() + 30
            while True:
                status, health = request(server.base, "GET", "/health", timeout=30)
                if (status, health["status"]) == (200, "ok") or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert (status, health["status"]) == (200, "ok")
        finally:
            proxy.resume()
            server.stop()
