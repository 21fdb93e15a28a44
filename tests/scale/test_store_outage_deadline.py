"""Issue 29: with PostgreSQL down (a refused port) or hung (a socket that accepts and never
answers), reads and writes answer 503 within 2 s (the audit measured 6.0-6.7 s).

A real `evaledger serve` reaches the test PostgreSQL through a loopback proxy; the proxy then
stops forwarding (hung: connections accepted, no byte answered) or stops listening while the
server's sessions are ended (down: refused). The 2 s bound is the issue's own, measured around
the whole request by the client.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.helpers import bundle
from tests.scale.processes import HangingProxy, Server, hanging_proxy, request

BOUND_S = 2.0
"""The issue's bound on a 503 while the store is down or hung."""


def _timed(base: str, method: str, path: str, body: bytes | None = None) -> tuple[float, Any]:
    started = time.monotonic()
    status, answer = request(base, method, path, body, timeout=30)
    return time.monotonic() - started, (status, answer)


def _cut(proxy: HangingProxy, mode: str, pg_url: str) -> None:
    if mode == "hung":
        proxy.hang()
        return
    proxy.close()  # new connections are refused; end the open ones as a restart would
    dbname = urlsplit(pg_url).path.lstrip("/")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["hung", "down"])
def test_reads_and_writes_answer_503_within_2_s(pg_url: str, tmp_path: Path, mode: str) -> None:
    port = urlsplit(pg_url).port or 5432
    with hanging_proxy(port) as proxy:
        via = pg_url.replace(f":{port}/", f":{proxy.port}/")
        server = Server(via, tmp_path / "serve.log")
        try:
            status, written = request(server.base, "POST", "/bundles", _bundle("before"))
            assert status == 201, written
            assert request(server.base, "GET", "/runs")[0] == 200
            _cut(proxy, mode, pg_url)
            for i in range(2):  # the first call on a pooled connection, then fresh ones
                for method, path, body in (
                    ("GET", "/runs", None),
                    ("GET", f"/runs/{written['run_id']}/cases", None),
                    ("POST", "/bundles", _bundle(f"during-{i}")),
                ):
                    took, (status, answer) = _timed(server.base, method, path, body)
                    assert (status, answer["code"]) == (503, "store_unavailable"), answer
                    assert took < BOUND_S, (mode, method, path, round(took, 2))
            if mode == "hung":
                proxy.resume()
                status, answer = request(server.base, "POST", "/bundles", _bundle("after"))
                assert status == 201, answer
        finally:
            proxy.resume()
            server.stop()


def _bundle(key: str) -> bytes:
    return json.dumps(bundle(key=key)).encode()
