"""Shared fixtures: fresh stores per test (SQLite files, PostgreSQL databases), the example bundle."""

from __future__ import annotations

import os
import queue
import threading
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from evaledger.api.bootstrap import Services, Settings, build_services

try:
    from starlette.testclient import TestClient

    _init = TestClient.__init__

    def _loopback_init(
        self: TestClient, app: object, base_url: str = "http://localhost", *a: object, **k: object
    ) -> None:
        # In-process requests come from a loopback name, as a local browser's would: open-mode
        # servers answer only those (api/security.py), and Starlette's default is "testserver".
        _init(self, app, base_url, *a, **k)  # type: ignore[arg-type]

    TestClient.__init__ = _loopback_init  # type: ignore[method-assign]
except ImportError:  # pragma: no cover - the API extras are part of [dev]
    pass

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE_BUNDLE = FIXTURES / "run-bundle.example.json"
PG_ADMIN_URL = os.environ.get("EVALEDGER_TEST_PG", "")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def example_bundle_data() -> dict[str, object]:
    """The format example bundle committed in tests/fixtures (see tests/fixtures/README.md)."""
    data: dict[str, object] = orjson.loads(EXAMPLE_BUNDLE.read_bytes())
    return data


_pg_reachable = False


def _pg_available() -> bool:
    global _pg_reachable
    if _pg_reachable:  # checked once per process: a test that needs it fails loudly anyway
        return True
    if not PG_ADMIN_URL:
        return False
    import psycopg

    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            _pg_reachable = True
            return True
    except psycopg.OperationalError:
        return False


def require_postgres() -> str:
    """The admin URL of the test PostgreSQL; fail in CI, skip locally when it is missing."""
    if _pg_available():
        return PG_ADMIN_URL
    message = "PostgreSQL not reachable: set EVALEDGER_TEST_PG=postgresql://user@host:port/db"
    if IN_CI:
        pytest.fail(message + " (CI must run PostgreSQL tests, never skip them)")
    pytest.skip(message)


class _PgDatabases:
    """Empty test databases, made one ahead and dropped behind by a background thread.

    CREATE DATABASE and DROP DATABASE take ~0.3-0.6 s each (WAL, fsync): done here while the
    tests run, they are off the tests' clock. Each database is the same as before (a fresh,
    empty copy of template1 with a unique name, used by one test); only *when* it is made and
    dropped moves. A failed background drop is raised at the next use and at the session's end.
    """

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.ours: set[str] = set()
        self.errors: list[str] = []
        self._jobs: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._ready: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="pg-databases", daemon=True)
        self._thread.start()
        self._jobs.put(("create", self._new_name()))

    @staticmethod
    def _new_name() -> str:
        return f"evaledger_t_{uuid.uuid4().hex[:12]}"

    def _execute(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(statement)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            action, name = job
            try:
                if action == "create":
                    self._execute(f'CREATE DATABASE "{name}"')
                    self._ready.put(name)
                else:
                    self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except Exception as exc:  # reported to the tests' thread, never lost
                self.errors.append(f"background {action} of database {name} failed: {exc!r}")
                if action == "create":
                    self._ready.put("")
            finally:
                self._jobs.task_done()

    def _raise_errors(self) -> None:
        if self.errors:
            message = "; ".join(self.errors)
            self.errors.clear()
            raise RuntimeError(message)

    def take(self) -> str:
        """The name of a new empty database (made ahead when possible)."""
        # One create per take (and one at the start): each take gets the one made before it.
        self._jobs.put(("create", self._new_name()))  # the next test's, made during this one
        name = self._ready.get()
        if self.errors:  # a failed create (name "") or drop: this test's set-up error
            if name:
                self._jobs.put(("drop", name))
            self._raise_errors()
        self.ours.add(name)
        return name

    def drop(self, name: str) -> None:
        self.ours.discard(name)
        self._jobs.put(("drop", name))

    def close(self) -> None:
        """Drop what was made ahead, wait for every drop; raise a failed one."""
        self._jobs.join()
        while not self._ready.empty():
            if name := self._ready.get():
                self._jobs.put(("drop", name))
        self._jobs.put(None)
        self._thread.join()
        self._raise_errors()


_pg_databases: _PgDatabases | None = None


def fresh_pg_database() -> tuple[str, str]:
    """Create an empty database; returns (its URL, its name)."""
    global _pg_databases
    admin = require_postgres()
    if _pg_databases is None:
        _pg_databases = _PgDatabases(admin)
    name = _pg_databases.take()
    base, _, _ = admin.rpartition("/")
    return f"{base}/{name}", name


def drop_pg_database(name: str) -> None:
    """Drop a test database (its connections are closed first).

    One from `fresh_pg_database` is dropped in the background (it has no further use); any
    other at once, as its caller may go on to drop the roles that own it.
    """
    if _pg_databases is not None and name in _pg_databases.ours:
        _pg_databases.drop(name)
        return
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def shard_of(nodeid: str, shards: int) -> int:
    """The shard a test belongs to: a CRC-32 of its node id (stable across runs and workers)."""
    return zlib.crc32(nodeid.encode()) % shards


def _test_shard() -> tuple[int, int] | None:
    """`EVALEDGER_TEST_SHARD=K/N` parsed (None when unset); a malformed value is a usage error."""
    shard = os.environ.get("EVALEDGER_TEST_SHARD", "")
    if not shard:
        return None
    try:
        index, count = (int(part) for part in shard.split("/"))
    except ValueError:
        raise pytest.UsageError(f"EVALEDGER_TEST_SHARD: expected K/N, got {shard!r}") from None
    if not 0 <= index < count:
        raise pytest.UsageError(f"EVALEDGER_TEST_SHARD: K must be in 0..N-1, got {shard!r}")
    return index, count


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a malformed shard before anything is collected (not an empty or a whole run)."""
    _test_shard()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep one shard of the suite when `EVALEDGER_TEST_SHARD=K/N` is set (CI, `.ci/run`).

    CI runs the whole suite on the default Python and splits the fast suite between Python 3.12
    and 3.13, each test on one of them (docs/decisions.md, "CI time"). By node id rather than by
    file, so the shards are even; every xdist worker computes the same shard from the same ids.
    A plugin for this (pytest-shard) is a dozen lines of the same and unmaintained since 2020.
    """
    shard = _test_shard()
    if shard is None:
        return
    index, count = shard
    kept = [item for item in items if shard_of(item.nodeid, count) == index]
    dropped = [item for item in items if shard_of(item.nodeid, count) != index]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop the databases still queued or made ahead before the process ends."""
    global _pg_databases
    if _pg_databases is not None:
        databases, _pg_databases = _pg_databases, None
        databases.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite store in a temporary folder."""
    return f"sqlite:///{tmp_path}/store/"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database."""
    url, name = fresh_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Contract tests run on both stores."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/store/"
        return
    url, name = fresh_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


@pytest.fixture
def services(sqlite_url: str) -> Iterator[Services]:
    """Wired services on a fresh SQLite store."""
    s = build_services(Settings(db=sqlite_url))
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def store_services(store_url: str) -> Iterator[Services]:
    """Wired services on SQLite and on PostgreSQL."""
    s = build_services(Settings(db=store_url))
    try:
        yield s
    finally:
        s.close()
