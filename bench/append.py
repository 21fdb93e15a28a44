"""Appends through the ledger's write path at 1-16 writers, in 1 and in 8 projects (issue 32).

    .venv/bin/python bench/append.py [--writers 1,4,8,16] [--projects 1,8] [--seconds 10]

Each writer is its own process with its own `Services` (as one `evaledger serve` worker or one
client process would be), recording runs through the application layer's use cases the HTTP
API calls: `create_run`, then the run's cases with `record_cases` (`--batch` cases per call and
transaction; `--batch 1` uses `record_case`, one case per transaction, what the client and the
pytest plugin send today), then `complete_run`. The cases are the realistic ones of
`bench/common.py`'s generator (`--cases-per-run`, parsed into `BundleCase` before the clock:
the figure is the ledger's write path, not JSON parsing). Writer `i` writes into project
`p{i % projects}`, so "8 writers in 8 projects" is one writer per project. Every writer starts
when all are connected (a barrier) and appends for `--seconds`; the rate is the events all of
them stored over the longest writer's time (its last transaction may end past the deadline).

The raw baselines of the same run (same machine, same load, same number of processes): each
raw writer takes the stored rows of its ledger writer's first run (`originator_id`,
`originator_version`, `topic`, `state`: the same bytes) and writes them again and again, with
fresh originator ids each time, into a plain table with the same columns as the events table,
in transactions of the same sizes as the ledger's (one per `create_run`, per batch, per
`complete_run`), for the same seconds:
- PostgreSQL: binary `COPY ... FROM STDIN` and psycopg `executemany` (pipelined INSERTs);
- SQLite: `sqlite3` `executemany` into a table of `stored_events`' schema in another file (WAL).

SQLite has one writer by design (a database-wide write lock), so it is measured at 1 writer in
1 project only. On PostgreSQL a thread samples `pg_locks` while the ledger's writers run: how
much of the time a writer held the writers' lock and how many waited for it. The goal rows of
issue 32 are printed at the end with met / NOT met.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    PG_EVENTS_DDL,
    SQLITE_EVENTS_DDL,
    Goal,
    base_parser,
    bundle_header,
    generate_cases,
    machine_note,
    num,
    pg_available,
    pg_database,
    print_goals,
    print_table,
    progress,
    ratio,
)
from evaledger.api.bootstrap import Settings, build_services
from evaledger.application import runs
from evaledger.domain.bundle import BundleCase, BundleRun
from evaledger.domain.ledger import Context
from evaledger.domain.store.postgres import WRITE_LOCK

GOAL_RATE = 5_000.0
"""Issue 32: appends, 8 writers in 8 projects, PostgreSQL: >= 5,000 events/s ..."""
GOAL_COPY_8_IN_8 = 0.10
"""... and >= 10 % of raw COPY."""
GOAL_COPY_8_IN_1 = 0.05
"""Issue 32: appends, 8 writers in 1 project: >= 5 % of raw COPY."""

Row = tuple[Any, int, str, bytes]
"""A stored event: originator id, version, topic, state bytes."""


@dataclass(frozen=True)
class Shape:
    """What every ledger writer records per run."""

    cases_per_run: int
    batch: int
    seed: int


@dataclass(frozen=True)
class Sample:
    """The stored rows of one writer's first run and the sizes of its transactions."""

    rows: list[Row]
    transactions: list[int]


@dataclass(frozen=True)
class Rate:
    """Events appended by some processes over the longest one's seconds."""

    events: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class LockUse:
    """The writers' lock as sampled from `pg_locks` while the ledger's writers ran."""

    held: float
    """Share of the samples in which a writer held it (between the first and last such)."""
    waiting: float
    """Writers waiting for it, on average over those samples."""
    samples: int


class LockSampler:
    """Samples `pg_locks` every `LOCK_SAMPLE_S` on its own connection, in a thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.seen: list[tuple[int, int]] = []
        self.thread = threading.Thread(target=self._run, name="lock-sampler", daemon=True)

    def __enter__(self) -> LockSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        import psycopg  # lazy: only the PostgreSQL figures need the driver in this process

        query = (
            "SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted) "
            "FROM pg_locks WHERE locktype = 'advisory' AND objid = %s"
        )
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.wait(LOCK_SAMPLE_S):
                row = conn.execute(query, (WRITE_LOCK,)).fetchone()
                if row is not None:
                    self.seen.append((int(row[0]), int(row[1])))

    def use(self) -> LockUse | None:
        """The lock's use between the first and the last sample that saw it held."""
        held = [i for i, (h, _) in enumerate(self.seen) if h]
        if not held:
            return None
        window = self.seen[held[0] : held[-1] + 1]
        return LockUse(
            held=sum(1 for h, _ in window if h) / len(window),
            waiting=sum(w for _, w in window) / len(window),
            samples=len(window),
        )


LOCK_SAMPLE_S = 0.01


@dataclass(frozen=True)
class Figure:
    """One line of the table: the ledger's rate beside its raw baselines of the same run."""

    store: str
    writers: int
    projects: int
    ledger: Rate
    raw: dict[str, Rate]
    load: float
    """The 1-minute load average when the figure's last baseline ended."""
    lock: LockUse | None = None
    """How the ledger's writers used the writers' lock (PostgreSQL only)."""


# ---------------------------------------------------------------------------------------------
# the ledger's writers


def bundle_run(key: str, project: str, cases: int) -> BundleRun:
    """The generator's run header (agent with tools, labels, judge config), open for cases."""
    run = bundle_header(cases, key, project)["run"]
    run.update(status="running", completed_at=None)
    return BundleRun.model_validate(run)


def record_one_run(
    services: Any, key: str, project: str, cases: Sequence[BundleCase], batch: int
) -> tuple[list[uuid.UUID], list[int]]:
    """create_run, the cases in batches, complete_run: ids written, events per transaction."""
    ctx = Context()
    created = runs.create_run(services, bundle_run(key, project, len(cases)), ctx)
    run_id = created.ids[0]
    ids: list[uuid.UUID] = [run_id]
    sizes = [created.events]
    for i in range(0, len(cases), batch):
        if batch == 1:
            w = runs.record_case(services, run_id, cases[i], ctx)
        else:
            w = runs.record_cases(services, run_id, cases[i : i + batch], ctx)
        ids.extend(x for x in w.ids if x != run_id)
        sizes.append(w.events)
    done = runs.complete_run(services, run_id, ctx)
    sizes.append(done.events)
    return ids, sizes


def ledger_writer(
    db: str, index: int, projects: int, shape: Shape, seconds: float, ready: Any, out: Any
) -> None:
    """One writer process: runs for `seconds` after the barrier; reports its events and a sample."""
    cases = [
        BundleCase.model_validate(c)
        for c in generate_cases(shape.cases_per_run, shape.seed + index, f"writer-{index}")
    ]
    project = f"p{index % projects}"
    services = build_services(Settings(db=db, projections="external"))
    try:
        services.ledger  # noqa: B018  (opened before the clock)
        ready.wait()
        start = time.perf_counter()
        deadline = start + seconds
        events = n = 0
        first: tuple[list[uuid.UUID], list[int]] | None = None
        while time.perf_counter() < deadline:
            ids, sizes = record_one_run(services, f"w{index}-{n}", project, cases, shape.batch)
            events += sum(sizes)
            first = first or (ids, sizes)
            n += 1
        elapsed = time.perf_counter() - start
        assert first is not None
        recorder: Any = services.ledger.recorder  # eventsourcing's, with select_events
        rows: list[Row] = [
            (e.originator_id, e.originator_version, e.topic, bytes(e.state))
            for oid in first[0]
            for e in recorder.select_events(oid)
        ]
        # The first run's own rows only (a later run's completion never touches it).
        assert len(rows) == sum(first[1]), (len(rows), first[1])
        out.put((events, elapsed, Sample(rows, first[1])))
    finally:
        services.close()


def run_processes(
    target: Callable[..., None], args: Sequence[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """Start one process per argument tuple (each gets a shared barrier and queue last)."""
    queue: Any = multiprocessing.Queue()
    ready = multiprocessing.Barrier(len(args))
    procs = [multiprocessing.Process(target=target, args=(*a, ready, queue)) for a in args]
    for p in procs:
        p.start()
    results: list[tuple[Any, ...]] = []
    try:
        while len(results) < len(procs):
            try:
                results.append(queue.get(timeout=1))
            except Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    raise RuntimeError("a writer process failed (its traceback is above)") from None
        for p in procs:
            p.join(timeout=60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    return results


def ledger_rate(
    db: str, writers: int, projects: int, shape: Shape, seconds: float
) -> tuple[Rate, list[Sample]]:
    """Events/s appended by `writers` ledger processes, and each one's sample for the baselines."""
    build_services(Settings(db=db)).close()  # the tables made once, not raced
    results = run_processes(
        ledger_writer, [(db, i, projects, shape, seconds) for i in range(writers)]
    )
    rate = Rate(sum(r[0] for r in results), max(r[1] for r in results))
    return rate, [r[2] for r in results]


# ---------------------------------------------------------------------------------------------
# the raw writers


def repeated(sample: Sample, make_id: Callable[[], Any]) -> list[list[Row]]:
    """The sample's rows under fresh originator ids, cut into its transactions."""
    fresh: dict[Any, Any] = {}
    rows = [(fresh.setdefault(r[0], make_id()), r[1], r[2], r[3]) for r in sample.rows]
    out, at = [], 0
    for size in sample.transactions:
        out.append(rows[at : at + size])
        at += size
    return out


def pg_raw_writer(
    url: str, method: str, sample: Sample, seconds: float, ready: Any, out: Any
) -> None:
    """Binary COPY or executemany of the sample's rows, per transaction, for `seconds`."""
    import psycopg  # lazy: only the PostgreSQL baselines need the driver in this process

    columns = "raw_events (originator_id, originator_version, topic, state)"
    with psycopg.connect(url) as conn:
        ready.wait()
        start = time.perf_counter()
        deadline = start + seconds
        events = 0
        while time.perf_counter() < deadline:
            for rows in repeated(sample, uuid.uuid4):
                with conn.transaction(), conn.cursor() as cur:
                    if method == "copy":
                        sql = f"COPY {columns} FROM STDIN (FORMAT BINARY)"
                        with cur.copy(sql.encode()) as copy:
                            copy.set_types(["uuid", "int8", "text", "bytea"])
                            for r in rows:
                                copy.write_row(r)
                    else:
                        cur.executemany(
                            f"INSERT INTO {columns} VALUES (%s, %s, %s, %s)".encode(), rows
                        )
                events += len(rows)
        out.put((events, time.perf_counter() - start))


def pg_raw_rate(url: str, method: str, samples: Sequence[Sample], seconds: float) -> Rate:
    """The PostgreSQL baseline at as many processes as ledger writers, in a fresh table."""
    import psycopg  # lazy: only with PostgreSQL

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(b"DROP TABLE IF EXISTS raw_events")
        for stmt in PG_EVENTS_DDL.format(table="raw_events").split("; "):
            conn.execute(stmt.encode())
    results = run_processes(pg_raw_writer, [(url, method, s, seconds) for s in samples])
    return Rate(sum(r[0] for r in results), max(r[1] for r in results))


def sqlite_raw_writer(path: str, sample: Sample, seconds: float, ready: Any, out: Any) -> None:
    """`executemany` of the sample's rows, transaction by transaction, for `seconds`."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        ready.wait()
        start = time.perf_counter()
        deadline = start + seconds
        events = 0
        while time.perf_counter() < deadline:
            for rows in repeated(sample, lambda: str(uuid.uuid4())):
                con.execute("BEGIN")
                con.executemany("INSERT INTO stored_events VALUES (?,?,?,?)", rows)
                con.execute("COMMIT")
                events += len(rows)
        out.put((events, time.perf_counter() - start))
    finally:
        con.close()


def sqlite_raw_rate(path: Path, samples: Sequence[Sample], seconds: float) -> Rate:
    """The SQLite baseline in a fresh file with the ledger's journal mode (WAL)."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(SQLITE_EVENTS_DDL.format(table="stored_events"))
    finally:
        con.close()
    results = run_processes(sqlite_raw_writer, [(str(path), s, seconds) for s in samples])
    return Rate(sum(r[0] for r in results), max(r[1] for r in results))


# ---------------------------------------------------------------------------------------------
# the figures


def pg_figure(admin: str, writers: int, projects: int, shape: Shape, seconds: float) -> Figure:
    """Ledger, raw COPY and raw executemany at `writers` processes, each in a fresh database."""
    with pg_database(admin) as url, LockSampler(url) as sampler:
        ledger, samples = ledger_rate(url, writers, projects, shape, seconds)
    raw = {}
    for method in ("copy", "executemany"):
        with pg_database(admin) as url:
            raw[method] = pg_raw_rate(url, method, samples, seconds)
    return Figure("PostgreSQL", writers, projects, ledger, raw, os.getloadavg()[0], sampler.use())


def sqlite_figure(tmp: Path, shape: Shape, seconds: float) -> Figure:
    """Ledger and raw executemany at 1 writer in 1 project (SQLite has one writer)."""
    store = tmp / "ledger"
    ledger, samples = ledger_rate(f"sqlite:///{store}", 1, 1, shape, seconds)
    raw = sqlite_raw_rate(tmp / "raw.sqlite", samples, seconds)
    return Figure("SQLite", 1, 1, ledger, {"executemany": raw}, os.getloadavg()[0])


def print_figures(figures: Sequence[Figure], shape: Shape) -> None:
    """The table: ledger events/s, each raw baseline and the ratios."""
    rows = []
    for f in figures:
        copy = f.raw.get("copy")
        many = f.raw["executemany"]
        rows.append(
            [
                f.store,
                f.writers,
                f.projects,
                num(f.ledger.per_second),
                num(copy.per_second) if copy else "-",
                ratio(f.ledger.per_second, copy.per_second) if copy else "-",
                num(many.per_second),
                ratio(f.ledger.per_second, many.per_second),
                num(f.ledger.events),
                f"{f.load:.2f}",
            ]
        )
    how = (
        "record_case (1 case per transaction)"
        if shape.batch == 1
        else f"record_cases of {shape.batch} cases per transaction"
    )
    print_table(
        f"appends through the write path (create_run, {how}, complete_run; "
        f"{shape.cases_per_run} cases per run)",
        [
            "store",
            "writers",
            "projects",
            "ledger events/s",
            "raw COPY events/s",
            "ledger / COPY",
            "raw executemany events/s",
            "ledger / executemany",
            "events stored",
            "load (1 min)",
        ],
        rows,
    )
    locks = [(f, f.lock) for f in figures if f.lock is not None]
    if locks:
        print_table(
            "the writers' lock (WRITE_LOCK) while the ledger's writers ran, PostgreSQL "
            f"(pg_locks sampled every {LOCK_SAMPLE_S * 1000:g} ms)",
            ["writers", "projects", "held", "writers waiting (mean)", "samples"],
            [
                [f.writers, f.projects, f"{u.held:.0%}", f"{u.waiting:.1f}", u.samples]
                for f, u in locks
            ],
        )


def goals(figures: Sequence[Figure]) -> list[Goal]:
    """The rows of issue 32's target table this script measures."""

    def find(writers: int, projects: int) -> Figure | None:
        return next(
            (
                f
                for f in figures
                if (f.store, f.writers, f.projects) == ("PostgreSQL", writers, projects)
            ),
            None,
        )

    out = []
    f88 = find(8, 8)
    if f88 is None:
        out.append(
            Goal(
                "appends, 8 writers in 8 projects, PostgreSQL",
                "-",
                "-",
                "not run (needs --writers 8 --projects 8 and PostgreSQL)",
                f">= {num(GOAL_RATE)} events/s and >= {GOAL_COPY_8_IN_8:.0%} of raw COPY",
                None,
            )
        )
    else:
        ours, raw = f88.ledger.per_second, f88.raw["copy"].per_second
        got = ours / raw if raw else 0.0
        out.append(
            Goal(
                "appends, 8 writers in 8 projects, PostgreSQL",
                f"{num(ours)} events/s",
                f"raw COPY {num(raw)} events/s",
                f"{got:.1%}",
                f">= {num(GOAL_RATE)} events/s and >= {GOAL_COPY_8_IN_8:.0%} of raw COPY",
                ours >= GOAL_RATE and got >= GOAL_COPY_8_IN_8,
            )
        )
    f81 = find(8, 1)
    if f81 is None:
        out.append(
            Goal(
                "appends, 8 writers in 1 project, PostgreSQL",
                "-",
                "-",
                "not run (needs --writers 8 --projects 1 and PostgreSQL)",
                f">= {GOAL_COPY_8_IN_1:.0%} of raw COPY",
                None,
            )
        )
    else:
        ours, raw = f81.ledger.per_second, f81.raw["copy"].per_second
        got = ours / raw if raw else 0.0
        out.append(
            Goal(
                "appends, 8 writers in 1 project, PostgreSQL",
                f"{num(ours)} events/s",
                f"raw COPY {num(raw)} events/s",
                f"{got:.1%}",
                f">= {GOAL_COPY_8_IN_1:.0%} of raw COPY",
                got >= GOAL_COPY_8_IN_1,
            )
        )
    return out


def int_list(text: str) -> list[int]:
    """`1,4,16` -> [1, 4, 16]."""
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument(
        "--writers", type=int_list, default=None, help="writer processes (1,4,8,16; quick: 1,2)"
    )
    parser.add_argument(
        "--projects", type=int_list, default=None, help="projects written (1,8; quick: 1,2)"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per figure (10)")
    parser.add_argument("--cases-per-run", type=int, default=100, help="cases per run (100)")
    parser.add_argument(
        "--batch", type=int, default=25, help="cases per record_cases call (25; 1: record_case)"
    )
    parser.add_argument(
        "--sqlite",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the SQLite row (1 writer)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.cases_per_run, args.batch = 1.0, 6, 3
    args.writers = args.writers or ([1, 2] if args.quick else [1, 4, 8, 16])
    args.projects = args.projects or ([1, 2] if args.quick else [1, 8])
    shape = Shape(args.cases_per_run, args.batch, args.seed)
    print(f"machine at start: {machine_note()}")
    print(
        f"{args.seconds:g} s per figure; writers {args.writers}, projects {args.projects}; "
        f"{shape.cases_per_run} cases per run, {shape.batch} per transaction",
        flush=True,
    )
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        if args.sqlite:
            progress("SQLite, 1 writer, 1 project")
            figures.append(sqlite_figure(Path(tmp), shape, args.seconds))
    if args.pg and not pg_available(args.pg_admin):
        print(f"\nPostgreSQL at {args.pg_admin} does not answer: its figures are not measured")
    elif args.pg:
        for projects in args.projects:
            for writers in args.writers:
                progress(f"PostgreSQL, {writers} writers, {projects} projects")
                figures.append(pg_figure(args.pg_admin, writers, projects, shape, args.seconds))
                progress(f"  load: {machine_note()}")
    print_figures(figures, shape)
    print_goals("issue 32 goals (appends)", goals(figures))
    print(f"\nmachine at end: {machine_note()}")
    print(
        "SQLite has one writer by design (a database-wide write lock): it is measured at 1 writer "
        "in 1 project only."
    )


if __name__ == "__main__":
    main()
