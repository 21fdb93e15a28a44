"""A client-side bound on every PostgreSQL call: a hung server's connections are broken in seconds.

A server-side `statement_timeout` cannot end a call the server never receives: when the database
host freezes or a network path black-holes packets, libpq waits for an answer forever (the audit
measured writes blocked 45 s). TCP keepalives and `tcp_user_timeout` (`CONNECT_KWARGS`) end a
connection whose packets go unacknowledged, but not one whose peer's kernel still acknowledges
them (a stopped PostgreSQL, a stuck proxy).

So every connection the ledger opens is a `BoundedConnection`: while it waits on the server, a
watchdog thread knows it. A wait longer than `SILENT_AFTER_S` makes the watchdog probe the server
(`server_answers`: a fresh socket asks for TLS, the first message of every session, and any
PostgreSQL answers it with one byte, before any login); a server that does not answer within
`PROBE_TIMEOUT_S` is hung, and every connection waiting on it is broken (its socket shut down):
the call fails with the driver's own "connection lost" error, the transaction is not committed,
and the caller reports the store unavailable (503 / exit 3). A slow statement on a live server is
left alone: the probe answers, and the server's `statement_timeout` bounds it. For a moment after
a failed probe (`HUNG_FOR_S`) further waits on that server are broken without probing again.

libpq's own `connect_timeout` cannot go below 2 s, so a new connection is preceded by the same
probe, and the events pool's wait for a connection is cut short when the probe fails
(`bounded_getconn`): a request answers 503 within 2 s when the server is down or hung (issue 29).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

SILENT_AFTER_S = 0.5
"""A wait on the server longer than this makes the watchdog check the server is alive."""
PROBE_TIMEOUT_S = 0.8
"""Seconds the server has to answer a probe (`server_answers`)."""
POOL_FIRST_WAIT_S = 0.5
"""A wait for a pooled connection longer than this probes the server (`bounded_getconn`)."""
_SSL_REQUEST = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")
"""The SSLRequest message: length 8, code 1234.5679 (PostgreSQL's protocol)."""
HUNG_FOR_S = 1.0
"""After a failed probe, waits on that server are broken at once for this long."""
TICK_S = 0.2
"""How often the watchdog looks at the waits."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait on the server is watched (see the module)."""

    _probe_args: tuple[str, dict[str, Any]] = ("", {})

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
        """Connect, remembering the settings so the watchdog can probe the same server.

        A server that does not answer the probe first is not waited on for libpq's 2 s or more.
        """
        params = psycopg.conninfo.conninfo_to_dict(conninfo, **kwargs)
        host, port = str(params.get("host") or ""), str(params.get("port") or "5432")
        # Refused fails at once by itself, with the driver's own words; silent would wait.
        if host and "," not in host and probe(host, port) == "silent":
            raise psycopg.OperationalError(
                f"connection to {host}:{port} failed: timeout expired (the server does not "
                f"answer within {PROBE_TIMEOUT_S} s: down or hung)"
            )
        conn = super().connect(conninfo, **kwargs)
        conn._probe_args = (conninfo, kwargs)
        return conn

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        """The driver's wait, registered with the watchdog for its duration."""
        token = WATCHDOG.enter(self)
        try:
            return super().wait(gen, *args, **kwargs)
        finally:
            WATCHDOG.leave(token)


@dataclass
class _Wait:
    conn: BoundedConnection
    server: tuple[str, str, str]
    started: float = field(default_factory=time.monotonic)


class Watchdog:
    """The waits of this process's bounded connections, and the thread that bounds them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: dict[int, _Wait] = {}
        self._next = 0
        self._pid = 0
        self._hung_until: dict[tuple[str, str, str], float] = {}
        self._alive_until: dict[tuple[str, str, str], float] = {}

    def enter(self, conn: BoundedConnection) -> int:
        """Register a wait on the server (starting the thread in this process if needed)."""
        info = conn.info
        server = (str(info.host), str(info.port), str(info.dbname))
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child without the thread
                self._pid = os.getpid()
                self._waits.clear()
                threading.Thread(target=self._watch, name="pg-watchdog", daemon=True).start()
            self._next += 1
            self._waits[self._next] = _Wait(conn, server)
            return self._next

    def leave(self, token: int) -> None:
        """The wait ended."""
        with self._lock:
            self._waits.pop(token, None)

    def saw_hang(self) -> bool:
        """Whether a server of this process failed a probe a moment ago (`HUNG_FOR_S`)."""
        now = time.monotonic()
        with self._lock:
            return any(until > now for until in self._hung_until.values())

    def _watch(self) -> None:
        while True:
            time.sleep(TICK_S)
            self.check()

    def check(self) -> None:
        """Probe the servers of long waits; break the waits on a server that does not answer."""
        now = time.monotonic()
        with self._lock:
            long = [
                (token, w) for token, w in self._waits.items() if now - w.started > SILENT_AFTER_S
            ]
            recent = [
                (token, w)
                for token, w in self._waits.items()
                if now - w.started > TICK_S and self._hung_until.get(w.server, 0.0) > now
            ]
        hung = {w.server for _, w in recent}
        for server in {w.server for _, w in long} - hung:
            if self._alive_until.get(server, 0.0) > now:
                continue  # answered a probe a moment ago: a slow statement, not a hung server
            waiter = next(w for _, w in long if w.server == server)
            if _answers(waiter.conn):
                self._alive_until[server] = time.monotonic() + SILENT_AFTER_S
                continue
            hung.add(server)
            with self._lock:
                self._hung_until[server] = time.monotonic() + HUNG_FOR_S
        with self._lock:
            doomed = [w for token, w in self._waits.items() if w.server in hung]
        for w in doomed:
            _break(w.conn)


def _answers(conn: BoundedConnection) -> bool:
    """Whether the server of `conn` answers a probe in time."""
    info = conn.info
    return server_answers(str(info.host), str(info.port))


def server_answers(host: str, port: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a PostgreSQL server answers the first message of a session within `timeout`.

    `host` is a name, an address or a socket folder; refused, silent or closed is False.
    """
    return probe(host, port, timeout) == "answers"


def probe(host: str, port: str, timeout: float = PROBE_TIMEOUT_S) -> str:
    """`answers`, `refused` (nothing listens, the socket closed) or `silent` (no byte in time)."""
    deadline = time.monotonic() + timeout
    try:
        if host.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(f"{host}/.s.PGSQL.{port}")
        else:
            sock = socket.create_connection((host, int(port)), timeout=timeout)
    except TimeoutError:
        return "silent"
    except (OSError, ValueError):
        return "refused"
    with sock:
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
            sock.sendall(_SSL_REQUEST)
            return "answers" if len(sock.recv(1)) == 1 else "refused"  # 'S' or 'N'
        except TimeoutError:
            return "silent"
        except OSError:
            return "refused"


def bounded_getconn(pool: Any) -> None:
    """Make `pool.getconn` (psycopg_pool) give up early when its server does not answer.

    A request waits `POOL_FIRST_WAIT_S` for a connection; past that the server is probed: a
    live server (a busy pool) gets the rest of the pool's timeout, a down or hung one fails now.
    """
    # lazy: psycopg_pool, only for a PostgreSQL store's pool
    from psycopg_pool import PoolTimeout

    original = pool.getconn

    def getconn(timeout: float | None = None) -> Any:
        total = pool.timeout if timeout is None else timeout
        try:
            return original(timeout=min(POOL_FIRST_WAIT_S, total))
        except PoolTimeout:
            kwargs = pool.kwargs or {}
            host, port = str(kwargs.get("host", "")), str(kwargs.get("port", "5432"))
            if total <= POOL_FIRST_WAIT_S or (host and not server_answers(host, port)):
                raise
        return original(timeout=total - POOL_FIRST_WAIT_S)

    pool.getconn = getconn


def _break(conn: BoundedConnection) -> None:
    """Shut the connection's socket down: its wait ends with the driver's connection error."""
    try:
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error):
        pass  # already closed


WATCHDOG = Watchdog()
"""The process's one watchdog (its thread starts with the first wait)."""
