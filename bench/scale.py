"""Scale-out figures on PostgreSQL (issue 24): events/s appended at 1–16 writers, reads/s at 1–4
API workers, judge calls/s of one `evaledger worker`. Printed as a table for docs/scaling.md.

    .venv/bin/python bench/scale.py [--seconds 5] [--pg postgresql://postgres@127.0.0.1:5432/x]

Each writer is its own process importing one-case runs (5 events each) into one fresh database;
reads are `GET /runs/{id}` from 8 client threads against `evaledger serve --workers N`; the judge
figure is one durable job of 60 cases against the loopback fake provider (no latency), so it is
the ledger's and the queue's cost per call, not a provider's.
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from tests.conftest import example_bundle_data
from tests.fake_judges import serve as fake_judges
from tests.judging.test_judging import unjudged_bundle
from tests.scale.processes import Process, Server, request

ADMIN = os.environ.get("EVALEDGER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def fresh_db() -> tuple[str, str]:
    name = f"evaledger_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return ADMIN.rsplit("/", 1)[0] + f"/{name}", name


def drop_db(name: str) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def one_case_bundle(key: str) -> RunBundle:
    data: dict[str, Any] = copy.deepcopy(example_bundle_data())
    data["run"]["key"] = key
    data["cases"] = data["cases"][:1]
    return RunBundle.model_validate(data)


def writer(url: str, seconds: float, index: int, out: Any, ready: Any) -> None:
    services = build_services(Settings(db=url))
    events = 0
    try:
        ready.wait()  # every writer connected: process start-up is not counted
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            events += services.ledger.import_bundle(
                one_case_bundle(f"w{index}-{n}"), Context()
            ).events
            n += 1
    finally:
        services.close()
    out.put(events)


def events_per_second(writers: int, seconds: float) -> float:
    url, name = fresh_db()
    try:
        build_services(Settings(db=url)).close()  # tables made once, not raced
        queue: Any = multiprocessing.Queue()
        ready = multiprocessing.Barrier(writers)
        procs = [
            multiprocessing.Process(target=writer, args=(url, seconds, i, queue, ready))
            for i in range(writers)
        ]
        for p in procs:
            p.start()
        total: int = sum(int(queue.get()) for _ in procs)
        for p in procs:
            p.join()
        # Every writer wrote for `seconds` from the same moment on.
        return total / seconds
    finally:
        drop_db(name)


def reads_per_second(workers: int, seconds: float, tmp: Path) -> float:
    url, name = fresh_db()
    server = None
    try:
        server = Server(url, tmp / f"serve-{workers}.log", "--workers", str(workers))
        status, imported = request(
            server.base, "POST", "/bundles", orjson.dumps(example_bundle_data())
        )
        assert status == 201, imported
        path = f"/runs/{imported['run_id']}"
        counts = [0] * 8
        deadline = time.monotonic() + seconds

        def client(i: int) -> None:
            while time.monotonic() < deadline:
                assert request(server.base, "GET", path)[0] == 200
                counts[i] += 1

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(counts) / (time.perf_counter() - started)
    finally:
        if server is not None:
            server.stop()
        drop_db(name)


def judge_calls_per_second(tmp: Path, cases: int = 60) -> float:
    url, name = fresh_db()
    gen = fake_judges()
    judges = next(gen)
    server = worker = None
    try:
        env = judges.env()
        server = Server(url, tmp / "serve-judge.log", env=env)
        data = unjudged_bundle()
        first = data["cases"][0]
        data["cases"] = []
        for i in range(cases):
            c = copy.deepcopy(first)
            c["test_case"]["key"] = c["test_case"]["name"] = f"case-{i}"
            data["cases"].append(c)
        status, imported = request(server.base, "POST", "/bundles", orjson.dumps(data))
        assert status == 201, imported
        body = orjson.dumps({"judges": ["openai:gpt-4.1"], "concurrency": 4})
        worker = Process(["worker", "--db", url], tmp / "worker.log", env)
        started = time.perf_counter()
        status, job = request(server.base, "POST", f"/runs/{imported['run_id']}/judge", body)
        assert status == 202, job
        while (found := request(server.base, "GET", f"/jobs/{job['job_id']}")[1])["status"] not in (
            "succeeded",
            "failed",
        ):
            time.sleep(0.1)
        assert found["status"] == "succeeded", found
        return int(found["report"]["calls"]) / (time.perf_counter() - started)
    finally:
        for proc in (worker, server):
            if proc is not None:
                proc.stop()
        next(gen, None)
        drop_db(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, {args.seconds:g} s per figure")
    print("| figure | value |\n|---|---|")
    for n in (1, 2, 4, 8, 16):
        print(f"| events/s appended, {n} writers | {events_per_second(n, args.seconds):,.0f} |")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1, 2, 4):
            rate = reads_per_second(n, args.seconds, Path(tmp))
            print(f"| GET /runs/{{id}}/s, {n} API workers, 8 clients | {rate:,.0f} |")
        rate = judge_calls_per_second(Path(tmp))
        print(f"| judge calls/s, 1 worker (fake provider, no latency) | {rate:,.1f} |")


if __name__ == "__main__":
    main()
