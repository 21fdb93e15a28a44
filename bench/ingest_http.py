"""HTTP ingest benchmark (issue 32): cases sent to a live `evaledger serve`, beside raw writes.

One client sends a generated run (default 2,000 cases) to a server on loopback, two ways, each
into a fresh store:
- **case by case**: `POST /runs`, `/start`, one `POST /runs/{id}/cases` per case, `/complete`
  (what the Python client and the pytest plugin sent before issue 32);
- **`POST /ingest` batches**: the run header and `--batch` cases per request (one transaction
  each; the last batch's header says `completed`, which seals the run). A server without
  `/ingest` (before issue 32) gets a note instead.
The request bodies are encoded before the clock starts: the figure is the server's. After each
way, the stored rows are read back from the store and written by the raw driver into a fresh
table of the same schema in one transaction (`sqlite3 executemany`; psycopg binary `COPY` on
PostgreSQL): **ratio** = ingest events/s / raw events/s of the same rows, same run.

    .venv/bin/python bench/ingest_http.py             # 2,000 cases, SQLite + PostgreSQL
    .venv/bin/python bench/ingest_http.py --quick     # 200 cases, seconds
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import orjson

from bench.common import (
    Goal,
    base_parser,
    bundle_header,
    generate_cases,
    machine_note,
    num,
    pg_available,
    pg_database,
    pg_raw_insert,
    pg_rows,
    print_goals,
    print_table,
    progress,
    ratio_goal,
    sqlite_raw_insert,
    sqlite_rows,
)
from bench.compare import server
from evaledger.api.bootstrap import Settings, build_services

GOALS: list[Goal] = []
AIM_INGEST_OF_RAW = 0.10
"""Issue 32 sets no row for POST /ingest alone; its append rows ask >= 10 % of raw COPY."""

Sender = Callable[[httpx.Client], int]
"""Sends the run; answers the events the server says it wrote."""


def check(response: httpx.Response) -> Any:
    if response.status_code not in (200, 201):
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text[:300]}")
    return response.json()


def case_by_case(header: dict[str, Any], cases: list[bytes]) -> Sender:
    run = orjson.dumps({**header, "status": "running"})
    json = {"content-type": "application/json"}

    def send(http: httpx.Client) -> int:
        written = check(http.post("/runs", content=run, headers=json))
        run_id, events = written["id"], written["events"]
        events += check(http.post(f"/runs/{run_id}/start"))["events"]
        for body in cases:
            events += check(http.post(f"/runs/{run_id}/cases", content=body, headers=json))[
                "events"
            ]
        return int(events + check(http.post(f"/runs/{run_id}/complete"))["events"])

    return send


def ingest_batches(header: dict[str, Any], cases: list[bytes], batch: int) -> Sender:
    bodies = []
    for start in range(0, len(cases), batch):
        last = start + batch >= len(cases)
        run = orjson.dumps({**header, "status": "completed" if last else "running"})
        bodies.append(b'{"run":' + run + b',"cases":[' + b",".join(cases[start : start + batch]))
        bodies[-1] += b"]}"
    json = {"content-type": "application/json"}

    def send(http: httpx.Client) -> int:
        return sum(
            int(check(http.post("/ingest", content=b, headers=json))["events"]) for b in bodies
        )

    return send


def has_ingest(url: str) -> bool:
    paths = httpx.get(f"{url}/openapi.json", timeout=60).json()["paths"]
    return "/ingest" in paths


def measure(kind: str, db: str, workdir: Path, send: Sender, args: Any) -> list[object] | None:
    """One way into a fresh store: events, seconds, events/s, raw, ratio."""
    with server(db, workdir, 1) as served:
        if send.__qualname__.startswith("ingest_batches") and not has_ingest(served.url):
            print(f"{kind}: this server has no POST /ingest (before issue 32)")
            return None
        with httpx.Client(base_url=served.url, timeout=600) as http:
            start = time.perf_counter()
            events = send(http)
            took = time.perf_counter() - start
    progress(f"{kind}: the raw baseline over the same stored rows")
    if db.startswith("sqlite"):
        services = build_services(Settings(db=db))
        try:
            events_file = Path(services.location.events_env["SQLITE_DBNAME"])
        finally:
            services.close()
        rows = sqlite_rows(events_file)
        raw_name = "sqlite3 executemany"
        target = workdir / "raw.sqlite"
        raw_s = sqlite_raw_insert(rows, target)
        target.unlink()
        Path(f"{target}-wal").unlink(missing_ok=True)
    else:
        pg = pg_rows(db)
        rows = pg  # type: ignore[assignment]
        raw_name = "psycopg COPY (binary)"
        raw_s = pg_raw_insert(pg, db, "copy")
    stored = len(rows)
    ours, raw = stored / took, stored / raw_s
    GOALS.append(ratio_goal(f"{kind} events/s vs raw", ours, raw, "ev/s", raw_name, args.aim))
    return [kind, num(events), num(stored), f"{took:.2f}", num(ours), num(raw), f"{ours / raw:.1%}"]


def stores(
    args: Any, root: Path
) -> Iterator[tuple[str, Callable[[str], contextlib.AbstractContextManager[str]]]]:
    @contextlib.contextmanager
    def sqlite(tag: str) -> Iterator[str]:
        yield f"sqlite:///{root}/{tag}/"

    yield "sqlite", sqlite
    if args.pg:
        if pg_available(args.pg_admin):
            yield "postgresql", lambda _tag: pg_database(args.pg_admin)
        else:
            print(f"\npostgresql: skipped, {args.pg_admin} does not answer")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success."""
    p = base_parser(__doc__ or "")
    p.add_argument("--cases", type=int, default=None, help="cases in the run (2,000)")
    p.add_argument("--batch", type=int, default=100, help="cases per POST /ingest (100)")
    p.add_argument("--aim", type=float, default=AIM_INGEST_OF_RAW, help="ratio aimed at")
    args = p.parse_args(argv)
    cases = args.cases or (200 if args.quick else 2000)
    print(f"machine: {machine_note()}")
    progress(f"generating {num(cases)} cases (seed {args.seed})")
    key = f"bench-ingest-http-{args.seed}"
    header = bundle_header(cases, key, "bench")
    header = {k: v for k, v in header["run"].items() if k != "completed_at"}
    bodies = [orjson.dumps(c) for c in generate_cases(cases, args.seed, key)]
    root = Path(tempfile.mkdtemp(prefix="evaledger-bench-http-", dir=args.tmp))
    rows: list[list[object]] = []
    try:
        for kind, store in stores(args, root):
            ways = (
                ("case by case", case_by_case(header, bodies)),
                (f"POST /ingest x{args.batch}", ingest_batches(header, bodies, args.batch)),
            )
            for i, (way, send) in enumerate(ways):
                progress(f"{kind}: {way}, {num(cases)} cases over HTTP")
                with store(f"{kind}-{i}") as db:
                    row = measure(f"{kind}: {way}", db, root, send, args)
                if row is not None:
                    rows.append(row)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(
        f"{num(cases)} cases to `evaledger serve` (1 worker) from 1 client, beside raw writes",
        ["way", "events (answered)", "rows stored", "s", "events/s", "raw events/s", "ratio"],
        rows,
    )
    print_goals("POST /ingest vs raw (ratios from this run)", GOALS)
    print(f"\nmachine: {machine_note()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
