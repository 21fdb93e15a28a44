"""`evaledger worker`'s periodic task records yesterday's complete traces and seals the day's run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.jobs import job_queue
from evaledger.application.traces import receive_traces
from evaledger.domain.ledger import Context
from evaledger.importers.otlp import PROTOBUF
from evaledger.projections.queries import RunFilter
from tests.otlp_helpers import export_body, recorder

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_services(pg_url: str) -> Iterator[Services]:
    services = build_services(Settings(db=pg_url))
    try:
        yield services
    finally:
        services.close()


def test_the_workers_periodic_task_seals_the_days_that_are_over(
    pg_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALEDGER_TRACE_QUIET", "0.01")
    tracer, memory = recorder(service="night-bot")
    yesterday = datetime.now(UTC) - timedelta(days=1)
    start = int(yesterday.timestamp() * 1e9)
    root = tracer.start_span("turn", start_time=start)
    root.end(end_time=start + 5_000_000)
    body = export_body(memory.get_finished_spans())
    receive_traces(pg_services, body, PROTOBUF, None, Context(actor="t"), max_bytes=1 << 20)
    queue = job_queue(pg_services)
    assert queue is not None
    time.sleep(0.05)
    # The task procrastinate runs every ONLINE_CRON, called as the worker calls it.
    queue.app.tasks["evaledger.seal_online_runs"](timestamp=int(time.time()))
    pg_services.sync()
    (run,), _ = pg_services.reads.list_runs(RunFilter(suite="online"))
    assert run.run_key == f"online/night-bot/1.2.0/{yesterday.date().isoformat()}"
    assert run.status == "completed" and run.case_count == 1
