"""Benchmark: GET /runs/compare of two 10,000-case runs over real HTTP, 1 and 8 clients.

`--workers 1,2,4` serves the same imported runs with each number of API worker processes in
turn (`evaledger serve --workers N`, uvicorn's process workers; the store-wide answer cache is
emptied before each server starts, so every round's "uncached" and "first request" rows are
uncached). With one worker the server is pinned to one core and this process (the HTTP clients)
to the others where the machine has two or more, so the clients do not steal the measured
server's CPU; with several workers nothing is pinned (the workers need the cores the clients
use, which the client CPU column shows). Rows, new (uncached) requests first:

- uncached: every request a new pair of runs (`--runs` runs give (runs-1)(runs-2) ordered pairs
  apart from the cached pair; past those, a distinct `case_score_delta` per request, since the
  server caches whole answers keyed by the runs' summary positions and the thresholds). Each
  answer is computed afresh from the runs' stored per-test-case rows (whose decoded form the
  server keeps per run and summary position);
- the very first request after start-up (nothing cached at all, summaries not yet decoded);
- uncached with `case_limit=100`: a page of the test case comparisons (totals, verdict and
  statistics still cover every case), beside the default of every case;
- cached: the same request again (a separate row).

Each row also gives the server's CPU per request (user + system from /proc, the serving process
and its workers) and this process's (the clients'): with one server process the 8 clients queue
on it, so the 8-client p95 is about 8 times the server's; with W workers on C cores, about
8 × (server + client CPU) / min(W, C).

Baseline, same run: the physical floor of the answer, i.e. reading both runs' stored summaries
(the materialised per-test-case rows) with the raw driver + `orjson.loads`, plus `orjson.dumps`
of the answer. The default answer is the slim one (no per-case metric deltas, every test case).

    .venv/bin/python bench/compare.py                 # SQLite and PostgreSQL, 10,000 cases per run
    .venv/bin/python bench/compare.py --workers 1,2   # ... served by 1, then 2 worker processes
    .venv/bin/python bench/compare.py --quick --no-pg # smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench.common import (
    Goal,
    base_parser,
    generate_bundle,
    machine_note,
    num,
    pg_available,
    pg_database,
    print_goals,
    print_table,
    progress,
)
from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context

AIM_P95_MS = 250.0
PAGE = 100
"""`case_limit` of the paged row: totals, verdict and statistics still cover every case."""
CLIENTS = (1, 8)
GOALS: list[Goal] = []


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hammer(url: str, params_for: Callable[[int, int], dict[str, Any]], clients: int,
           per_client: int) -> list[float]:  # fmt: skip
    """Latencies (s) of `clients` threads each sending `per_client` requests."""
    import httpx2

    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[str] = []

    def worker(c: int) -> None:
        with httpx2.Client(base_url=url, timeout=300) as http:
            for i in range(per_client):
                t0 = time.perf_counter()
                r = http.get("/runs/compare", params=params_for(c, i))
                dt = time.perf_counter() - t0
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")
                with lock:
                    latencies.append(dt)

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, first: {errors[0]}")
    return latencies


def p(values: list[float], q: float) -> float:
    """Percentile (linear) in ms."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return 1000 * (ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo))


def summaries_floor(url: str, views: str, run_ids: list[str], answer: bytes, repeat: int) -> float:
    """Median seconds: raw read + decode of both stored summaries, plus encoding the answer."""
    decoded = orjson.loads(answer)
    sql = "SELECT aggregate, test_cases FROM run_summaries_v6 WHERE run_id = {p}"
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        if url.startswith("sqlite"):
            con = sqlite3.connect(views)
            try:
                rows = [con.execute(sql.format(p="?"), (r,)).fetchone() for r in run_ids]
            finally:
                con.close()
        else:
            import psycopg

            with psycopg.connect(url) as conn:
                rows = [conn.execute(sql.format(p="%s").encode(), (r,)).fetchone() for r in run_ids]
        for row in rows:
            orjson.loads(row[0])
            orjson.loads(row[1])
        orjson.dumps(decoded)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """The process ids below `pid` (its children, theirs, ...), from /proc's parent ids."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def tree_cpu(pid: int, pids: list[int]) -> float:
    """CPU seconds used so far by `pid` and the worker processes `pids`."""
    return process_cpu(pid) + sum(process_cpu(w) for w in pids)


@dataclass
class Served:
    """A running server: its URL, process id and worker process ids."""

    url: str
    pid: int
    workers: list[int]


def wait_until_up(url: str, pid: int, workers: int) -> list[int]:
    """Wait for /health, for `workers` worker processes and for their start-up CPU to settle."""
    import httpx2

    for _ in range(600):
        try:
            if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx2.HTTPError:
            time.sleep(0.05)
    kids: list[int] = []
    last = -1.0
    for _ in range(240):  # <= 60 s: every worker has imported the app and opened the store
        kids = descendants(pid) if workers > 1 else []
        used = tree_cpu(pid, kids)
        if len(kids) >= workers - (workers == 1) and used == last:
            break
        last = used
        time.sleep(0.25)
    return kids


@contextlib.contextmanager
def server(db: str, cwd: Path, workers: int) -> Iterator[Served]:
    """`evaledger serve --workers N` on a free port; one worker pinned to CPU 0, this process to
    the others; several workers unpinned (they need every core)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evaledger",
            "serve",
            "--port",
            str(port),
            "--workers",
            f"{workers}",
        ],
        env={**os.environ, "EVALEDGER_DB": db},
        cwd=str(cwd),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2 and workers == 1:
        os.sched_setaffinity(proc.pid, {cpus[0]})
        os.sched_setaffinity(0, set(cpus[1:]))
    url = f"http://127.0.0.1:{port}"
    try:
        yield Served(url, proc.pid, wait_until_up(url, proc.pid, workers))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        os.sched_setaffinity(0, set(cpus))


def clear_answer_cache(url: str, views: str) -> None:
    """Empty the store-wide answer cache, so a new server round starts with nothing cached."""
    sql = "DELETE FROM compare_cache_v1"
    if url.startswith("sqlite"):
        con = sqlite3.connect(views)
        try:
            with con:
                con.execute(sql)
        finally:
            con.close()
    else:
        import psycopg

        with psycopg.connect(url) as conn:
            conn.execute(sql.encode())


def import_runs(kind: str, db: str, cases: int, args: Any) -> tuple[list[str], str]:
    """Import `--runs` generated runs and catch the projections up: their ids, the views path."""
    services = build_services(Settings(db=db))
    run_ids: list[str] = []
    try:
        for n in range(args.runs):
            seed, key = args.seed + n, f"bench-compare-{n}"
            progress(f"{kind}: generating and importing {key} ({num(cases)} cases)")
            bundle = RunBundle.model_validate(generate_bundle(cases, seed=seed, run_key=key))
            run_ids.append(str(services.ledger.import_bundle(bundle, Context("bench")).run_id))
            del bundle
        progress(f"{kind}: projecting")
        services.sync()
        views = services.location.views_url.removeprefix("sqlite:///")
    finally:
        services.close()
    return run_ids, views


@dataclass
class Round:
    """One server's measurements: latencies and server / client CPU seconds per request."""

    cold_ms: float
    answer: bytes
    latencies: dict[tuple[int, str], list[float]]
    server_cpu: dict[tuple[int, str], float]
    client_cpu: dict[tuple[int, str], float]


def serve_round(kind: str, db: str, run_ids: list[str], workers: int, args: Any) -> Round:
    """Serve the store with `workers` processes and send every row's requests."""
    per_client = 5 if args.quick else args.requests
    uncached_per_client = max(2, per_client // 4)
    base = {"baseline_run_id": run_ids[0], "candidate_run_id": run_ids[1]}
    pairs = list(itertools.permutations(run_ids[1:], 2))  # run 0 is the cached pair's baseline
    order = itertools.count()
    lock = threading.Lock()

    def fresh(_c: int, _i: int) -> dict[str, Any]:
        # A new pair of runs per request while they last, then new thresholds on the pairs.
        with lock:
            n = next(order)
        a, b = pairs[n % len(pairs)]
        params: dict[str, Any] = {"baseline_run_id": a, "candidate_run_id": b}
        if n >= len(pairs):
            params["case_score_delta"] = 5.0 + n * 1e-6
        return params

    def paged(c: int, i: int) -> dict[str, Any]:
        return {**fresh(c, i), "case_limit": PAGE}

    progress(f"{kind}: serving with {workers} worker(s)")
    with server(db, Path(__file__).resolve().parents[1], workers) as served:
        import httpx2

        t0 = time.perf_counter()
        answer = httpx2.get(f"{served.url}/runs/compare", params=base, timeout=300).content
        out = Round(1000 * (time.perf_counter() - t0), answer, {}, {}, {})

        def measure(clients: int, label: str, params: Callable[[int, int], dict[str, Any]],
                    per: int) -> None:  # fmt: skip
            progress(f"{kind}, {workers} worker(s): {clients} client(s), {label}")
            before, mine = tree_cpu(served.pid, served.workers), time.process_time()
            lat = out.latencies[clients, label] = hammer(served.url, params, clients, per)
            out.client_cpu[clients, label] = (time.process_time() - mine) / len(lat)
            used = tree_cpu(served.pid, served.workers) - before
            out.server_cpu[clients, label] = used / len(lat)

        for clients in CLIENTS:
            measure(clients, "uncached", fresh, uncached_per_client)
        measure(8, f"uncached, case_limit={PAGE}", paged, uncached_per_client)
        for clients in CLIENTS:
            measure(clients, "cached", lambda c, i: base, per_client)
    return out


def report_round(kind: str, cases: int, workers: int, res: Round, floor_ms: float) -> None:
    """The round's table and goal rows."""
    rows = []
    for (clients, label), lat in res.latencies.items():
        rows.append([f"{label}, {clients} client(s)", len(lat), num(p(lat, 0.5), 1),
                     num(p(lat, 0.95), 1), f"{p(lat, 0.5) / floor_ms:.1f}x",
                     num(1000 * res.server_cpu[clients, label], 1),
                     num(1000 * res.client_cpu[clients, label], 1)])  # fmt: skip
    rows.append(["first request after start-up (nothing cached)", 1, num(res.cold_ms, 1), "-",
                 f"{res.cold_ms / floor_ms:.1f}x", "-", "-"])  # fmt: skip
    pinned = "server pinned to one core, clients to the rest" if workers == 1 else "unpinned"
    print_table(
        f"{kind}: GET /runs/compare, two runs of {num(cases)} cases, HTTP on loopback, "
        f"{workers} worker process(es) ({pinned}), answer {len(res.answer) / 1e6:.1f} MB "
        f"(slim default); {machine_note()}",
        [
            "requests",
            "n",
            "p50 ms",
            "p95 ms",
            "p50 / floor",
            "server CPU ms / req",
            "client CPU ms / req",
        ],
        rows,
    )
    cores = len(os.sched_getaffinity(0))
    print(
        "server CPU ms / req: user + system CPU of the serving process and its workers over the "
        "row's requests; client CPU: this process's (the 8 client threads). 8 clients queue on "
        f"min(workers, cores) = {min(workers, cores)} core(s): p95 ≈ 8 × server CPU / "
        f"{min(workers, cores)} when the clients have a core of their own"
    )
    print(
        f"physical floor (same run): raw read + orjson.loads of both stored summaries + "
        f"orjson.dumps of the answer = {floor_ms:.1f} ms"
    )
    p95 = p(res.latencies[8, "uncached"], 0.95)
    GOALS.append(
        Goal(
            f"{kind}: compare 2x{num(cases)} over HTTP, p95 at 8 clients, each request new, "
            f"{workers} worker(s)",
            f"{p95:.0f} ms",
            f"floor {floor_ms:.0f} ms",
            f"{p95 / floor_ms:.1f}x",
            f"<= {AIM_P95_MS:.0f} ms",
            p95 <= AIM_P95_MS,
        )
    )
    cached95 = p(res.latencies[8, "cached"], 0.95)
    GOALS.append(
        Goal(
            f"{kind}: (separate) the same, cached repeats, {workers} worker(s)",
            f"{cached95:.0f} ms",
            f"floor {floor_ms:.0f} ms",
            f"{cached95 / floor_ms:.1f}x",
            f"<= {AIM_P95_MS:.0f} ms",
            cached95 <= AIM_P95_MS,
        )
    )


def bench_store(kind: str, db: str, cases: int, args: Any) -> None:
    """Import the runs once, then hammer the comparison over HTTP for each worker count."""
    run_ids, views = import_runs(kind, db, cases, args)
    for workers in args.workers:
        clear_answer_cache(db, views)
        res = serve_round(kind, db, run_ids, workers, args)
        floor_ms = 1000 * summaries_floor(db, views, run_ids[:2], res.answer, 5)
        report_round(kind, cases, workers, res, floor_ms)


def worker_counts(text: str) -> list[int]:
    """`--workers`: comma-separated positive integers."""
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be at least 1, got {text!r}")
    return counts


def main() -> None:
    """Run the benchmark."""
    parser = base_parser(__doc__ or "")
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=40, help="cached requests per client")
    parser.add_argument(
        "--runs", type=int, default=6, help="runs imported: new pairs for the uncached requests"
    )
    parser.add_argument(
        "--workers",
        type=worker_counts,
        default=[1],
        metavar="N[,N...]",
        help="API worker processes of `serve` (1); a list serves the same runs with each in turn",
    )
    args = parser.parse_args()
    cases = 200 if args.quick else args.cases
    if args.quick:
        args.runs = min(args.runs, 4)
    print(f"machine: {machine_note()}")
    tmp = Path(tempfile.mkdtemp(prefix="evaledger-bench-compare-", dir=args.tmp))
    bench_store("sqlite", f"sqlite:///{tmp}/store/", cases, args)
    if args.pg:
        if not pg_available(args.pg_admin):
            print(f"\npostgresql: skipped, {args.pg_admin} does not answer")
        else:
            with pg_database(args.pg_admin) as url:
                bench_store("postgresql", url, cases, args)
    print_goals("issue 13 goals measured by compare.py", GOALS)
    print(f"\nmachine: {machine_note()}; stores in {tmp}")


if __name__ == "__main__":
    main()
