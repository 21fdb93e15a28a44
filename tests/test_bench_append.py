"""Smoke runs of `bench/append.py --quick` (a few seconds): the script runs, prints its table and
its goal rows. Figures are never asserted (they live in bench/, not in timed tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_postgres

ROOT = Path(__file__).resolve().parents[1]


def run_bench(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "append.py"), "--quick", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_append_quick_on_sqlite() -> None:
    out = run_bench("--no-pg")
    assert "== appends through the write path" in out
    rows = [
        r
        for r in (line.split() for line in out.splitlines())
        if r[:1] == ["SQLite"] and r[1:2] != ["has"]
    ]
    assert [r[1:3] for r in rows] == [["1", "1"]], out
    assert float(rows[0][3].replace(",", "")) > 0, out
    assert "appends, 8 writers in 8 projects, PostgreSQL" in out
    assert "not measured" in out
    assert "load average" in out


@pytest.mark.postgres
def test_append_quick_on_postgres() -> None:
    admin = require_postgres()
    out = run_bench("--no-sqlite", "--pg-admin", admin, "--writers", "2", "--projects", "1,2")
    rows = [line.split() for line in out.splitlines() if line.startswith("PostgreSQL ")]
    assert [(r[1], r[2]) for r in rows] == [("2", "1"), ("2", "2")], out
    assert all(float(r[3].replace(",", "")) > 0 for r in rows), out
    assert "issue 32 goals (appends)" in out
    # The writers' lock was seen held while the ledger's writers ran (one row per figure).
    lock = out.split("== the writers' lock", 1)[1].splitlines()
    held = [r.split() for r in lock[3:5]]
    assert [(r[0], r[1]) for r in held] == [("2", "1"), ("2", "2")], out
    assert all(0 < int(r[2].rstrip("%")) <= 100 for r in held), out
