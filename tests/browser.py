"""A live `evaledger serve` for the browser tests: started on a free loopback port, answering
/health before the test goes on, stopped after it (shared by the `test_web_browser_*` files)."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.api.test_serve import EVALEDGER, STARTUP_LIMIT_S, free_port


@contextmanager
def live_server(db: str, root: Path, env: dict[str, str]) -> Iterator[str]:
    """`evaledger serve --db DB` run in `root` with `env`; its base URL while it answers."""
    port = free_port()
    log = root / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(EVALEDGER), "serve", "--port", str(port), "--db", db],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"serve exited with {proc.returncode}:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"serve did not answer /health:\n{log.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
