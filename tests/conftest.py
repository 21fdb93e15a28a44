"""Shared fixtures: fresh stores per test (SQLite files, PostgreSQL databases), the example bundle."""

from __future__ import annotations

import os
import uuid
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


def _pg_available() -> bool:
    if not PG_ADMIN_URL:
        return False
    import psycopg

    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
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


def fresh_pg_database() -> tuple[str, str]:
    """Create an empty database; returns (its URL, its name)."""
    import psycopg

    admin = require_postgres()
    name = f"evaledger_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin.rpartition("/")
    return f"{base}/{name}", name


def drop_pg_database(name: str) -> None:
    """Drop a test database (its connections are closed first)."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
