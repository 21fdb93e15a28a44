"""Two `evaledger project --follow` on one PostgreSQL store: one leads; kill -9 it, the other does."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.projections.queries import RunFilter
from tests.helpers import bundle
from tests.scale.processes import Process

WAIT_LIMIT_S = 60.0
"""A bound on waiting for a projector, never asserted."""


def wait_for(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def leading(log: Path) -> bool:
    return "projections: leading" in log.read_text()


@pytest.mark.slow
@pytest.mark.postgres
def test_a_standby_projector_takes_over_when_the_leader_is_killed(
    pg_url: str, tmp_path: Path
) -> None:
    services = build_services(Settings(db=pg_url, projections="external"))
    logs = [tmp_path / "projector-1.log", tmp_path / "projector-2.log"]
    projectors: list[Process] = []
    try:
        services.ledger.import_bundle(RunBundle.model_validate(bundle(key="r1")), Context())
        projectors.append(Process(["project", "--follow", "--db", pg_url], logs[0]))
        wait_for(lambda: leading(logs[0]), "the first projector to lead")
        projectors.append(Process(["project", "--follow", "--db", pg_url], logs[1]))
        wait_for(lambda: "standing by" in logs[1].read_text(), "the second to stand by")
        assert services.leader.projector_running()

        # The leader projects new writes; then it dies without a word.
        head = services.ledger.import_bundle(
            RunBundle.model_validate(bundle(key="r2")), Context()
        ).position
        wait_for(lambda: min(services.runner.positions().values()) >= head, "the leader")
        projectors[0].stop(signal.SIGKILL)

        # The standby takes the lock and projects what is written after.
        head = services.ledger.import_bundle(
            RunBundle.model_validate(bundle(key="r3")), Context()
        ).position
        wait_for(lambda: leading(logs[1]), "the standby to lead")
        wait_for(lambda: min(services.runner.positions().values()) >= head, "the new leader")
        listed, total = services.reads.list_runs(RunFilter())
        assert (total, {r.run_key for r in listed}) == (3, {"r1", "r2", "r3"})
    finally:
        for p in projectors:
            p.stop()
        services.close()
