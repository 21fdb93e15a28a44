"""Scale-out figures on PostgreSQL (issue 24): events/s appended at 1–16 writers, reads/s at 1–4
API workers, judge calls/s of one `evaledger worker`. Printed as a table for docs/scaling.md.

    EVALEDGER_TEST_PG=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/scale.py \
        [--seconds 5]

Each writer is its own process importing one-case runs (5 events each) into one fresh database;
reads are `GET /runs/{id}` from 8 client threads against `evaledger serve --workers N`; the judge
figure is one durable job of 60 cases against the loopback fake provider (no latency), so it is
the ledger's and the queue's cost per call, not a provider's.

Every figure is printed beside a raw baseline measured in the same run, on the same machine and
load, and their ratio:
- appends: as many processes doing plain psycopg INSERTs of the same stored events (same bytes,
  one transaction per run, no lock, no chain, no aggregate);
- reads: a bare ASGI app under uvicorn with the same number of workers answering the same JSON
  body (the HTTP stack's ceiling on this machine);
- judge calls: the very requests the worker sent, replayed to the fake provider from the job's
  concurrency (4) threads (the provider's and the loopback's ceiling).
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from tests.api.test_serve import free_port
from tests.conftest import example_bundle_data
from tests.fake_judges import serve as fake_judges
from tests.judging.test_judging import unjudged_bundle
from tests.scale.processes import Process, Server, hanging_proxy, request
from tests.scale.test_jobs import verdicts

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


def stored_events(url: str) -> list[tuple[str, bytes]]:
    """(topic, state) of the events one one-case run stores (the raw writers' rows)."""
    services = build_services(Settings(db=url))
    try:
        result = services.ledger.import_bundle(one_case_bundle("sample"), Context())
        run = services.ledger.get_run(result.run_id)
        ids = [run.id, *run.case_ids]
        recorder: Any = services.ledger.recorder  # the PostgreSQL recorder
        rows = recorder.select_notifications(start=1, limit=100)
        return [(n.topic, bytes(n.state)) for n in rows if n.originator_id in ids]
    finally:
        services.close()


RAW_TABLE = (
    "CREATE TABLE raw_events (id bigserial PRIMARY KEY, originator_id uuid NOT NULL, "
    "originator_version int NOT NULL, topic text NOT NULL, state bytea NOT NULL)"
)


def raw_writer(url: str, seconds: float, rows: Any, out: Any, ready: Any) -> None:
    """Plain INSERTs of one run's stored events, a transaction per run, for `seconds`."""
    events = 0
    with psycopg.connect(url) as conn:
        ready.wait()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            oid = uuid.uuid4()
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO raw_events (originator_id, originator_version, topic, state) "
                    "VALUES (%s, %s, %s, %s)",
                    [(oid, v, topic, state) for v, (topic, state) in enumerate(rows, 1)],
                )
            events += len(rows)
    out.put(events)


def events_per_second(writers: int, seconds: float, *, raw: bool = False) -> float:
    """Events/s appended by `writers` processes (the ledger's imports, or the raw baseline)."""
    url, name = fresh_db()
    try:
        build_services(Settings(db=url)).close()  # tables made once, not raced
        queue: Any = multiprocessing.Queue()
        ready = multiprocessing.Barrier(writers)
        jobs: list[tuple[Any, tuple[Any, ...]]]
        if raw:
            rows = stored_events(url)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(RAW_TABLE)
            jobs = [(raw_writer, (url, seconds, rows, queue, ready)) for _ in range(writers)]
        else:
            jobs = [(writer, (url, seconds, i, queue, ready)) for i in range(writers)]
        procs = [multiprocessing.Process(target=t, args=a) for t, a in jobs]
        for p in procs:
            p.start()
        total: int = sum(int(queue.get()) for _ in procs)
        for p in procs:
            p.join()
        # Every writer wrote for `seconds` from the same moment on.
        return total / seconds
    finally:
        drop_db(name)


def drive(base: str, path: str, seconds: float, clients: int = 8) -> float:
    """GET `path` from `clients` threads for `seconds`; answers/s (every answer must be 200)."""
    counts = [0] * clients
    deadline = time.monotonic() + seconds

    def client(i: int) -> None:
        while time.monotonic() < deadline:
            assert request(base, "GET", path)[0] == 200
            counts[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - started)


def reads_per_second(workers: int, seconds: float, tmp: Path) -> tuple[float, bytes]:
    """GET /runs/{id}/s against `serve --workers N`, and the answer's bytes."""
    url, name = fresh_db()
    server = None
    try:
        server = Server(url, tmp / f"serve-{workers}.log", "--workers", str(workers))
        status, imported = request(
            server.base, "POST", "/bundles", orjson.dumps(example_bundle_data())
        )
        assert status == 201, imported
        path = f"/runs/{imported['run_id']}"
        status, answer = request(server.base, "GET", path)
        assert status == 200, answer
        return drive(server.base, path, seconds), orjson.dumps(answer)
    finally:
        if server is not None:
            server.stop()
        drop_db(name)


RAW_BODY_ENV = "EVALEDGER_BENCH_RAW_BODY"


async def raw_app(scope: Any, receive: Any, send: Any) -> None:
    """The read baseline: a bare ASGI app answering the same JSON body to every GET."""
    if scope["type"] != "http":
        return
    body = Path(os.environ[RAW_BODY_ENV]).read_bytes()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def raw_reads_per_second(workers: int, seconds: float, body: bytes, tmp: Path) -> float:
    """GETs/s of `raw_app` under uvicorn with `workers` processes (same clients, same body)."""
    body_file = tmp / "raw-body.json"
    body_file.write_bytes(body)
    port = free_port()
    root = Path(__file__).resolve().parents[1]
    env = os.environ | {RAW_BODY_ENV: str(body_file), "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "uvicorn", "bench.scale:raw_app", "--port", str(port)]
    command += ["--workers", str(workers), "--log-level", "warning"]
    proc = subprocess.Popen(command, cwd=root, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if request(base, "GET", "/", timeout=2)[0] == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        return drive(base, "/", seconds)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def judge_calls_per_second(tmp: Path, cases: int = 60) -> tuple[float, float]:
    """(judge calls/s of one worker, calls/s of the same requests sent straight to the provider).

    The worker's rate is its steady state: from its first verdict to its last (the ledger's
    timestamps), so the worker's start-up and the queue's polling before the first are not in it.
    """
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
        body = orjson.dumps({"judges": ["openai:gpt-4.1"], "concurrency": JUDGE_CONCURRENCY})
        worker = Process(["worker", "--db", url], tmp / "worker.log", env)
        status, job = request(server.base, "POST", f"/runs/{imported['run_id']}/judge", body)
        assert status == 202, job
        while (found := request(server.base, "GET", f"/jobs/{job['job_id']}")[1])["status"] not in (
            "succeeded",
            "failed",
        ):
            time.sleep(0.1)
        assert found["status"] == "succeeded", found
        stamps = sorted(v.timestamp for v in verdicts(url, imported["run_id"]))
        rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]).total_seconds()
        sent = [b for kind, b, _ in judges.requests if kind == "openai"]
        return rate, raw_calls_per_second(judges.openai_url + "/chat/completions", sent)
    finally:
        for proc in (worker, server):
            if proc is not None:
                proc.stop()
        next(gen, None)
        drop_db(name)


JUDGE_CONCURRENCY = 4


def raw_calls_per_second(url: str, bodies: list[dict[str, Any]]) -> float:
    """The worker's requests replayed straight to the provider from as many threads."""
    pending = list(bodies)
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                if not pending:
                    return
                body = pending.pop()
            req = urllib.request.Request(
                url, orjson.dumps(body), headers={"content-type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=30) as answer:
                answer.read()

    threads = [threading.Thread(target=client) for _ in range(JUDGE_CONCURRENCY)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(bodies) / (time.perf_counter() - started)


def hung_write_seconds(tmp: Path) -> float:
    """Seconds a write takes to answer 503 once PostgreSQL hangs (a proxy stops forwarding)."""
    url, name = fresh_db()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    try:
        with hanging_proxy(port) as proxy:
            server = Server(url.replace(f":{port}/", f":{proxy.port}/"), tmp / "serve-hung.log")
            try:
                data: Any = copy.deepcopy(example_bundle_data())
                assert request(server.base, "POST", "/bundles", orjson.dumps(data))[0] == 201
                data["run"]["key"] = "during-hang"
                proxy.hang()
                started = time.perf_counter()
                status, answer = request(server.base, "POST", "/bundles", orjson.dumps(data))
                elapsed = time.perf_counter() - started
                assert status == 503, answer
                return elapsed
            finally:
                proxy.resume()
                server.stop()
    finally:
        drop_db(name)


def row(figure: str, value: float, baseline: float, unit: str = "") -> str:
    """A table row: the figure, its same-run raw baseline, the ratio."""
    return f"| {figure} | {value:,.1f}{unit} | {baseline:,.1f}{unit} | {value / baseline:.2f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"cores: {os.cpu_count()}, {args.seconds:g} s per figure, load average at start: {load}")
    print("| figure | evaledger | raw baseline | ratio |\n|---|---|---|---|")
    for n in (1, 2, 4, 8, 16):
        ledger = events_per_second(n, args.seconds)
        raw = events_per_second(n, args.seconds, raw=True)
        print(row(f"events/s appended, {n} writers", ledger, raw), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1, 2, 4):
            rate, body = reads_per_second(n, args.seconds, Path(tmp))
            raw = raw_reads_per_second(n, args.seconds, body, Path(tmp))
            print(row(f"GET /runs/{{id}}/s, {n} API workers, 8 clients", rate, raw), flush=True)
        rate, raw = judge_calls_per_second(Path(tmp))
        print(row("judge calls/s, 1 worker, concurrency 4 (fake provider)", rate, raw))
        print(f"a write answers 503 {hung_write_seconds(Path(tmp)):.1f} s into a hang")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
