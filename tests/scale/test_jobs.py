"""Durable judge jobs on PostgreSQL: a job outlives its worker (kill -9), is canceled, listed."""

from __future__ import annotations

import copy
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.events import JudgeVerdictRecorded
from tests.fake_judges import Answer, FakeJudges, default_script, serve
from tests.judging.test_judging import unjudged_bundle
from tests.scale.processes import Process, Server, request

JUDGES = ["openai:gpt-4.1", "anthropic:claude-sonnet-4-6"]
WAIT_LIMIT_S = 60.0
"""A bound on waiting for a job (a stalled job is retried after ~10-15 s), never asserted."""


@pytest.fixture
def judges() -> Iterator[FakeJudges]:
    yield from serve()


def slow(kind: str, body: dict[str, Any]) -> Answer:
    """Each verdict after 0.2 s: a job lasts long enough to be killed in the middle."""
    answer = default_script(kind, body)
    answer.delay_s = 0.2
    return answer


def many_cases(n: int) -> bytes:
    data = unjudged_bundle()
    first = data["cases"][0]
    data["cases"] = []
    for i in range(n):
        c = copy.deepcopy(first)
        c["test_case"]["key"] = f"case-{i}"
        c["test_case"]["name"] = f"case {i}"
        data["cases"].append(c)
    return orjson.dumps(data)


def wait_until(check: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not (found := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)
    return found


def verdicts(db: str, run_id: str) -> list[JudgeVerdictRecorded]:
    services = build_services(Settings(db=db))
    try:
        run = services.ledger.get_run(UUID(run_id))
        return [
            e
            for cid in run.case_ids
            for e in services.ledger.events_of(cid)
            if isinstance(e, JudgeVerdictRecorded)
        ]
    finally:
        services.close()


@pytest.mark.slow
@pytest.mark.postgres
def test_a_job_killed_with_its_worker_is_finished_by_another_without_a_second_verdict(
    pg_url: str, tmp_path: Path, judges: FakeJudges
) -> None:
    judges.script = slow
    env = judges.env()
    server = Server(pg_url, tmp_path / "serve.log", env=env)
    first = Process(["worker", "--db", pg_url], tmp_path / "worker-1.log", env)
    second: Process | None = None
    try:
        status, imported = request(server.base, "POST", "/bundles", many_cases(12))
        assert status == 201, imported
        run_id = imported["run_id"]
        body = orjson.dumps({"judges": JUDGES, "concurrency": 1})
        status, job = request(server.base, "POST", f"/runs/{run_id}/judge", body)
        assert status == 202, job
        assert (job["status"], job["cases_total"]) in {("queued", 12), ("running", 12)}
        assert job["finished_at"] is None
        job_id = job["job_id"]

        # Kill -9 the worker once it has written some verdicts, not all.
        wait_until(lambda: len(verdicts(pg_url, run_id)) >= 3, "the first verdicts")
        first.stop(signal.SIGKILL)
        written = len(verdicts(pg_url, run_id))
        assert 3 <= written < 24

        # A second job, canceled while queued: it never runs.
        status, other = request(server.base, "POST", f"/runs/{run_id}/judge", body)
        assert status == 202, other
        status, canceled = request(server.base, "POST", f"/jobs/{other['job_id']}/cancel")
        assert (status, canceled["status"]) == (200, "canceled")

        second = Process(["worker", "--db", pg_url], tmp_path / "worker-2.log", env)
        done = wait_until(
            lambda: (
                (j := request(server.base, "GET", f"/jobs/{job_id}")[1])["status"]
                in ("succeeded", "failed")
                and j
            ),
            "the job to finish on the second worker",
        )
        assert done["status"] == "succeeded", done
        assert done["cases_done"] == 12
        # The retried job reports when it ended (issue 29: it was null).
        assert done["finished_at"] is not None, done
        ended, created = (datetime.fromisoformat(done[k]) for k in ("finished_at", "created_at"))
        assert ended >= created
        report = done["report"]
        assert (report["verdicts"] + written, report["errors"]) == (24, 0)

        # Every case has exactly one verdict from each judge: none was judged twice.
        votes = verdicts(pg_url, run_id)
        per_case_judge: dict[tuple[UUID, str | None], int] = {}
        for vote in votes:
            key = (vote.originator_id, vote.judge.provider)
            per_case_judge[key] = per_case_judge.get(key, 0) + 1
        assert len(votes) == 24
        assert set(per_case_judge.values()) == {1}
        assert len(per_case_judge) == 24

        status, listed = request(server.base, "GET", "/jobs")
        assert status == 200
        assert [j["job_id"] for j in listed["data"]] == [other["job_id"], job_id]
        assert [j["status"] for j in listed["data"]] == ["canceled", "succeeded"]
        assert all(j["finished_at"] is not None for j in listed["data"]), listed
        status, ready = request(server.base, "GET", "/ready", timeout=2)
        assert (status, ready["queue_depth"]) == (200, 0)
    finally:
        for proc in (first, second, server):
            if proc is not None:
                proc.stop()
