"""Targets for the client: a SQLite store, a PostgreSQL store, a live server with a token."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.conftest import drop_pg_database, fresh_pg_database
from tests.reliability.test_tenancy import serving


@dataclass(frozen=True)
class Target:
    """Where the client records: `kwargs` for evaledger.run/open, `db` the store behind it."""

    kwargs: dict[str, Any]
    db: str


@pytest.fixture
def server_target(tmp_path: Path) -> Iterator[Target]:
    """A real `evaledger serve` on a free loopback port, requiring a write token."""
    db = f"sqlite:///{tmp_path}/served/"
    services = build_services(Settings(db=db))
    try:
        token = services.ledger.issue_token(
            "default", TokenScope.ADMIN, "client", Context(actor="ops")
        ).token
    finally:
        services.close()
    with serving(db, "127.0.0.1", tmp_path / "serve.log") as base:
        yield Target({"url": base, "token": token}, db)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("server", marks=pytest.mark.slow),
    ]
)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """The client's contract holds on every kind of target."""
    if request.param == "sqlite":
        db = f"sqlite:///{tmp_path}/store/"
        yield Target({"db": db}, db)
    elif request.param == "postgres":
        url, name = fresh_pg_database()
        try:
            yield Target({"db": url}, url)
        finally:
            drop_pg_database(name)
    else:
        yield request.getfixturevalue("server_target")


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The installed `evaledger` command."""
    from tests.api.test_serve import EVALEDGER

    return subprocess.run(
        [str(EVALEDGER), *args], capture_output=True, text=True, cwd=cwd, check=False
    )


def run_inspect(
    script: str, tmp_path: Path, store: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """Run an Inspect script (`python SCRIPT LOG_DIR ARGS…`) with the hook recording into `store`.

    `store` is the environment that names it (`{"EVALEDGER_DB": url}`, or a URL and token); the
    caller's own EVALEDGER_* variables are left out. The logs go to `tmp_path / "logs"`.
    """
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    env.update(store)
    path = tmp_path / "run_eval.py"
    path.write_text(script)
    return subprocess.run(
        [sys.executable, str(path), str(tmp_path / "logs"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
