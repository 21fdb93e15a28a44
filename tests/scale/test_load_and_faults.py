"""The deployment under load and faults: 2 servers, 2 judge workers, 2 projectors, 8 clients.

For a bounded time 8 clients write runs (some twice: an idempotent retry), read them back and
enqueue judge jobs against a loopback fake provider, spread over two `evaledger serve`
processes. Midway one of each kind is killed with SIGKILL (a server, a judge worker, the leading
projector) and the server is started again on its port. Then: no answer was a 5xx other than
503, every job finished, no case has a second verdict from a judge, every acknowledged write is
stored once, and the read models equal their rebuild.
"""

from __future__ import annotations

import http.client
import itertools
import signal
import threading
import time
import urllib.error
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.projections.queries import RunFilter
from tests.fake_judges import Answer, FakeJudges, default_script, serve
from tests.judging.test_judging import unjudged_bundle
from tests.projections.test_rebuild_property import snapshot
from tests.scale.processes import Process, Server, request
from tests.scale.test_jobs import JUDGES, verdicts

CLIENTS = 8
LOAD_S = 36.0
"""How long the clients drive the deployment (the faults come at the half)."""
WAIT_LIMIT_S = 120.0
"""A bound on waiting for the jobs and the projectors afterwards, never asserted."""


@pytest.fixture
def judges() -> Any:
    yield from serve()


def paced(kind: str, body: dict[str, Any]) -> Answer:
    """Verdicts after 50 ms, so a judge worker is killed in the middle of a job."""
    answer = default_script(kind, body)
    answer.delay_s = 0.05
    return answer


@dataclass
class Tally:
    """What the clients saw, shared between their threads."""

    statuses: Counter[int] = field(default_factory=Counter)
    away: int = 0  # requests to a server that was not there (connection refused or cut)
    acked: dict[str, str] = field(default_factory=dict)  # run key -> run id (201 or 200)
    jobs: dict[str, str] = field(default_factory=dict)  # job id -> run id
    lock: threading.Lock = field(default_factory=threading.Lock)


def call(tally: Tally, base: str, method: str, path: str, body: bytes | None = None) -> Any:
    """One request; the answer's body, or None when it was not a success."""
    try:
        status, answer = request(base, method, path, body)
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError):
        with tally.lock:
            tally.away += 1
        return None
    with tally.lock:
        tally.statuses[status] += 1
    return answer if status in (200, 201, 202) else None


def client(n: int, bases: list[str], tally: Tally, stop: threading.Event) -> None:
    """Write, re-send, read and judge in turn, alternating between the servers."""
    mine: list[str] = []
    judged: set[str] = set()
    for i in itertools.count():
        if stop.is_set():
            return
        base = bases[(n + i) % len(bases)]
        step = i % 4
        if step == 0 or not mine:
            data = unjudged_bundle()
            data["run"]["key"] = f"load-{n}-{i}"
            written = call(tally, base, "POST", "/bundles", orjson.dumps(data))
            # A retry of the same write (another server) is answered, never stored twice.
            again = call(tally, bases[(n + i + 1) % 2], "POST", "/bundles", orjson.dumps(data))
            for answer in (written, again):
                if answer is not None:
                    with tally.lock:
                        tally.acked[data["run"]["key"]] = answer["run_id"]
                    mine.append(answer["run_id"])
        elif step == 1:
            call(tally, base, "GET", f"/runs/{mine[-1]}")
        elif step == 2 and mine[-1] not in judged:
            body = orjson.dumps({"judges": JUDGES, "concurrency": 2})
            job = call(tally, base, "POST", f"/runs/{mine[-1]}/judge", body)
            if job is not None:
                judged.add(mine[-1])
                with tally.lock:
                    tally.jobs[job["job_id"]] = mine[-1]
        else:
            call(tally, base, "GET", "/runs?limit=5")


def leader(logs: list[Path]) -> int:
    """The projector that logged it leads last."""
    return max(range(len(logs)), key=lambda k: logs[k].read_text().rfind("projections: leading"))


def wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.postgres
def test_the_deployment_survives_kill_9_of_each_kind_under_load(
    pg_url: str, tmp_path: Path, judges: FakeJudges
) -> None:
    judges.script = paced
    env = judges.env()
    services = build_services(Settings(db=pg_url, projections="external"))
    procs: list[Process] = []
    try:
        servers = [Server(pg_url, tmp_path / f"serve-{k}.log", env=env) for k in range(2)]
        workers = [Process(["worker", "--db", pg_url], tmp_path / f"w{k}.log", env) for k in (0, 1)]
        plogs = [tmp_path / f"projector-{k}.log" for k in range(2)]
        projectors = [Process(["project", "--follow", "--db", pg_url], log) for log in plogs]
        procs += [*servers, *workers, *projectors]
        tally = Tally()
        stop = threading.Event()
        bases = [s.base for s in servers]
        threads = [
            threading.Thread(target=client, args=(n, bases, tally, stop)) for n in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        time.sleep(LOAD_S / 2)
        # One of each kind dies without a word; the server comes back on its port.
        servers[0].stop(signal.SIGKILL)
        workers[0].stop(signal.SIGKILL)
        projectors[leader(plogs)].stop(signal.SIGKILL)
        restarted = Server(pg_url, tmp_path / "serve-0b.log", port=servers[0].port, env=env)
        procs.append(restarted)
        time.sleep(LOAD_S / 2)
        stop.set()
        for t in threads:
            t.join()

        print(f"load: {dict(tally.statuses)}, away {tally.away}, jobs {len(tally.jobs)}")
        assert set(tally.statuses) <= {200, 201, 202, 503}, tally.statuses
        assert tally.statuses[201] >= CLIENTS and tally.jobs, tally
        check_jobs(restarted.base, tally, pg_url)
        head = services.ledger.position()
        wait_until(lambda: min(services.runner.positions().values()) >= head, "the projectors")
        for p in projectors:
            p.stop()
        check_writes(services, tally)
        check_views_equal_a_rebuild(services)
    finally:
        for p in procs:
            p.stop()
        services.close()


def check_jobs(base: str, tally: Tally, pg_url: str) -> None:
    """Every job succeeded, and each case has one verdict per judge (none judged twice)."""

    def finished() -> bool:
        states = [request(base, "GET", f"/jobs/{job}")[1]["status"] for job in tally.jobs]
        return all(s in ("succeeded", "failed", "canceled") for s in states)

    wait_until(finished, "every job")
    for job, run_id in tally.jobs.items():
        status, answer = request(base, "GET", f"/jobs/{job}")
        assert (status, answer["status"]) == (200, "succeeded"), answer
        votes = verdicts(pg_url, run_id)
        per_case_judge = Counter((v.originator_id, v.judge.provider) for v in votes)
        assert set(per_case_judge.values()) == {1}, per_case_judge
        assert len(per_case_judge) == answer["cases_total"] * len(JUDGES)


def check_writes(services: Services, tally: Tally) -> None:
    """Every acknowledged run is stored once, whole (its 13 events), under its key."""
    keys: Counter[str] = Counter()
    for offset in itertools.count(0, 500):
        rows, total = services.reads.list_runs(RunFilter(limit=500, offset=offset))
        keys.update(r.run_key for r in rows)
        if offset + 500 >= total:
            break
    assert all(keys[key] == 1 for key in tally.acked), keys
    for key, run_id in tally.acked.items():
        run = services.ledger.get_run(UUID(run_id))
        assert run.created.run_key == key
        assert run.status == "completed"


def check_views_equal_a_rebuild(services: Services) -> None:
    """The read models the projectors built (through the faults) equal a rebuild from zero."""
    built = snapshot(services)
    for projection in services.runner.projections:
        services.runner.rebuild(projection.name)
    rebuilt = snapshot(services)
    assert built == rebuilt
