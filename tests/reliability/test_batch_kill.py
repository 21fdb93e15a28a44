"""kill -9 of a writer in the middle of a batch of cases leaves all or nothing of it (issue 32).

A real process records a run's cases through the application layer in batches (`record_cases`:
one transaction per batch; on PostgreSQL a binary COPY), forever. Once some batches are stored,
it is killed with SIGKILL while it holds the store's write lock (inside a batch's transaction).
Every batch is then stored whole or not at all, the stored ones are the first ones, the run
lists exactly their cases, and the ledger verifies; the next writer appends after them.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from typing import IO, cast

import psycopg
import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import runs
from evaledger.domain.bundle import BundleCase
from evaledger.domain.events import CaseOpened
from evaledger.domain.ledger import Context
from evaledger.domain.store.postgres import WRITE_LOCK
from evaledger.domain.verify import verify
from tests.helpers import ROOT, case

pytestmark = pytest.mark.reliability

BATCH = 150
"""Cases per batch (3 events each, and the run's attaching event: 451 per transaction)."""

WRITER = f"""
import sys
from evaledger.api.bootstrap import Settings, build_services
from evaledger.application import runs
from evaledger.domain.bundle import BundleCase, BundleRun
from evaledger.domain.ledger import Context
from tests.helpers import bundle, case

services = build_services(Settings(db=sys.argv[1], projections="external"))
ctx = Context(actor="writer")
body = {{**bundle()["run"], "key": "killed", "status": "running", "completed_at": None}}
run_id = runs.create_run(services, BundleRun.model_validate(body), ctx).id
print(run_id, flush=True)
b = 0
while True:
    cases = [BundleCase.model_validate(case(f"b{{b}}-c{{i}}", 1 + i % 5)) for i in range({BATCH})]
    runs.record_cases(services, run_id, cases, ctx)
    print(b, flush=True)
    b += 1
"""


def _lock_held(services: Services) -> bool:
    """Whether a process is inside a write transaction of the events store."""
    if services.location.is_sqlite:
        probe = sqlite3.connect(services.location.events_env["SQLITE_DBNAME"], timeout=0)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.rollback()
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            probe.close()
    with psycopg.connect(services.settings.db, autocommit=True) as pg:
        row = pg.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND granted",
            (WRITE_LOCK,),
        ).fetchone()
    return row is not None and row[0] > 0


def _read_line(out: IO[str], proc: subprocess.Popen[str]) -> str:
    line = out.readline()
    assert line, f"the writer exited ({proc.wait()}) before writing a batch"
    return line.strip()


def test_kill_9_of_a_writer_mid_batch_leaves_all_or_nothing_of_the_batch(store_url: str) -> None:
    services = build_services(Settings(db=store_url))
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, store_url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        out = cast(IO[str], proc.stdout)
        run_id = _read_line(out, proc)
        assert _read_line(out, proc) == "0"  # a first batch is stored
        deadline = time.monotonic() + 120
        while not _lock_held(services):
            assert proc.poll() is None, "the writer stopped"
            assert time.monotonic() < deadline, "the writer never held the lock"
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        printed = [line.strip() for line in out.readlines()]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        cast(IO[str], proc.stdout).close()
    try:
        ledger = services.ledger
        run = ledger.get_run(ledger.find_run("default", "killed").id)  # type: ignore[union-attr]
        assert str(run.id) == run_id
        opened: Counter[int] = Counter()
        for case_id in run.case_ids:
            first = ledger.events_of(case_id)[0]
            assert isinstance(first, CaseOpened)
            opened[int(first.test_case.key.split("-")[0][1:])] += 1
        # Whole batches only, the first ones, at least the one seen stored.
        stored = sorted(opened)
        assert stored == list(range(len(stored))) and len(stored) >= 1 + len(printed)
        assert set(opened.values()) == {BATCH}
        # Nothing else of the killed batch: the log holds exactly the stored batches' events.
        assert ledger.position() == 1 + len(stored) * (3 * BATCH + 1)
        report = verify(ledger)
        assert report.ok, report
        assert (report.events, report.commits) == (ledger.position(), 1 + len(stored))
        # The next writer carries on after them, the chain unbroken.
        more = [BundleCase.model_validate(case(f"b{len(stored)}-c{i}", 2)) for i in range(3)]
        runs.record_cases(services, run.id, more, Context(actor="next"))
        report = verify(ledger)
        assert report.ok and report.commits == 2 + len(stored), report
    finally:
        services.close()
