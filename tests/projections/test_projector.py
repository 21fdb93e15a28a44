"""`evaledger project --follow` as a separate process, readers waiting for it (read-your-writes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.projections.queries import RunFilter
from tests.helpers import bundle

ROOT = Path(__file__).resolve().parents[2]


def _follow(db: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "evaledger", "project", "--follow", "--poll", "0.05", "--db", db],
        cwd=ROOT,
        env={**os.environ, "EVALEDGER_DB": db},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_separate_projector_serves_readers_that_wait_for_their_writes(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/store/" if store == "sqlite" else request.getfixturevalue("pg_url")
    services = build_services(Settings(db=db, projections="external"))
    projector = _follow(db)
    try:
        written = services.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("ci"))
        # Reads never project themselves in external mode: they wait for the other process.
        services.runner.wait_for(written.position, timeout=30, inline=False)
        assert services.runner.position() >= written.position
        aggregate = services.reads.summary(written.run_id).aggregate
        assert (aggregate.passed_count, aggregate.error_count) == (1, 1)
        second = services.ledger.import_bundle(
            RunBundle.model_validate(bundle(key="second-run")), Context("ci")
        )
        services.sync(second.position)
        rows, total = services.reads.list_runs(RunFilter())
        assert total == 2
        assert {r.run_key for r in rows} == {
            "second-run",
            "northwind-support-v12-nightly-2026-11-20",
        }
    finally:
        projector.terminate()
        _, err = projector.communicate(timeout=20)
        services.close()
    assert b"Traceback" not in err, err.decode()


def test_waiting_without_a_projector_times_out(tmp_path: Path) -> None:
    services = build_services(Settings(db=f"sqlite:///{tmp_path}/store/", projections="external"))
    try:
        written = services.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("ci"))
        with pytest.raises(TimeoutError, match=f"position {written.position}"):
            services.runner.wait_for(written.position, timeout=0.3, inline=False)
    finally:
        services.close()
