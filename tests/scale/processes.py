"""Real processes for the scale tests: `evaledger` servers and workers, a loopback TCP proxy."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_serve import EVALEDGER, STARTUP_LIMIT_S, free_port


def request(
    base: str, method: str, path: str, body: bytes | None = None, timeout: float = 30
) -> tuple[int, Any]:
    """One HTTP request; (status, parsed JSON body or text)."""
    req = urllib.request.Request(
        base + path,
        data=body,
        method=method,
        headers={"content-type": "application/json"} if body is not None else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


class Process:
    """A running `evaledger` command, its output in a log file."""

    def __init__(self, args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.log = log
        environment = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
        environment.update(env or {})
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(EVALEDGER), *args],
                env=environment,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Signal the process (its session: workers too) and wait for it."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


class Server(Process):
    """`evaledger serve` on a free loopback port, answering /health."""

    def __init__(
        self,
        db: str,
        log: Path,
        *extra: str,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        super().__init__(
            ["serve", "--host", "127.0.0.1", "--port", str(self.port), "--db", db, *extra],
            log,
            env,
        )
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"serve exited with {self.proc.returncode}:\n{log.read_text()}")
            try:
                if request(self.base, "GET", "/health", timeout=5)[0] == 200:
                    return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"serve did not answer /health:\n{log.read_text()}")
            time.sleep(0.1)


class HangingProxy:
    """A loopback TCP proxy to PostgreSQL that can stop forwarding (a hung database).

    While hung it accepts connections and keeps them open but passes no byte either way: what a
    client sees when the database host freezes or a network path black-holes packets.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.forwarding = threading.Event()
        self.forwarding.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.forwarding.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def hang(self) -> None:
        """Stop forwarding (connections stay open)."""
        self.forwarding.clear()

    def resume(self) -> None:
        """Forward again."""
        self.forwarding.set()

    def close(self) -> None:
        """Stop accepting and release the listener."""
        self.closed = True
        self.forwarding.set()
        self.listener.close()


@contextmanager
def hanging_proxy(target_port: int) -> Iterator[HangingProxy]:
    """A HangingProxy, closed afterwards."""
    proxy = HangingProxy(target_port)
    try:
        yield proxy
    finally:
        proxy.close()


def json_lines(log: Path) -> list[dict[str, Any]]:
    """The JSON objects of a `--log-format json` log (other lines are a failure)."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
