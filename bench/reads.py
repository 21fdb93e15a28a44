"""Benchmark: issue 32's reads from the CLI, each in a fresh process, CPU beyond start-up.

    .venv/bin/python bench/reads.py                 # 2 runs of 10,000 cases, SQLite + PostgreSQL
    .venv/bin/python bench/reads.py --quick         # 2 runs of 300 cases
    .venv/bin/python bench/reads.py --before /work/bench-before-reads   # + the same commands
                                                    # run by another checkout, interleaved

`evaledger compare A B --json` (every case comparison with its per-metric deltas, the CLI's
default) and `evaledger show A` (the first page of cases) on two generated runs, each command in
a fresh interpreter through `cli_child.py`: its CPU seconds after the CLI and the composition
root are imported (start-up, shown apart), its wall time and peak RSS; median of `--repeat`.
Beside them, in the same run: the raw floor of what each command reads and prints — both runs'
stored summary rows read with the driver and decoded with orjson, and the command's own output
dumped again with orjson (indented, sorted keys); for `show`, the run's summary row and its
first 50 case scores. With `--before DIR` the same commands also run from that checkout (its
own `.venv`), interleaved with this one's, so both sides share the machine's load.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contextlib import closing

import orjson

from bench.common import (
    Goal,
    base_parser,
    generate_bundle,
    machine_note,
    pg_available,
    pg_database,
    print_goals,
    print_table,
    progress,
)
from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.projections.tables import cases, run_summaries

CHILD = Path(__file__).resolve().parent / "cli_child.py"
AIM_COMPARE = 0.5
"""CLI `compare --json` of 2 × 10k cases: at most this many CPU seconds beyond start-up."""
AIM_SHOW = 0.5
"""CLI `show` of a 10k-case run: at most this many CPU seconds beyond start-up."""


def child(python: str, tree: str | None, args: list[str], work: Path) -> dict[str, Any]:
    """One CLI command in a fresh process (`cli_child.py`); its figures (stdout included)."""
    out = work / "cli-child.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if tree:
        env["EVALEDGER_BENCH_TREE"] = tree
    subprocess.run([python, str(CHILD), str(out), *args], check=True, env=env, cwd=work)
    figures: dict[str, Any] = orjson.loads(out.read_bytes())
    out.unlink()
    if figures["code"] not in (0, 1):  # compare exits 1 on a regression
        raise RuntimeError(f"evaledger {' '.join(args)} exited {figures['code']}")
    return figures


def import_runs(url: str, size: int, seed: int) -> list[str]:
    """Two generated runs of `size` cases in the store at `url`, caught up; their ids."""
    services = build_services(Settings(db=url))
    try:
        ids = []
        for i in range(2):
            progress(f"importing run {i + 1} of 2 ({size:,} cases)")
            data = generate_bundle(size, seed=seed + i, run_key=f"reads-{i}")
            ids.append(
                str(
                    services.ledger.import_bundle(
                        RunBundle.model_validate(data), Context(actor="bench")
                    ).run_id
                )
            )
        progress("catching up the read models")
        services.sync()
        return ids
    finally:
        services.close()


def raw_rows(url: str, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
    """Rows of a query through the bare driver (sqlite3 or psycopg), no SQLAlchemy."""
    if url.startswith("sqlite"):
        import sqlite3

        path = url.removeprefix("sqlite:///").rstrip("/") + "/views.sqlite"
        with closing(sqlite3.connect(path)) as conn:
            return conn.execute(sql.replace("%s", "?"), params).fetchall()
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def raw_compare(url: str, ids: list[str], printed: str) -> float:
    """CPU seconds: both summaries read and decoded, the printed answer dumped again."""
    start = time.process_time()
    for run_id in ids:
        for aggregate, test_cases in raw_rows(
            url,
            f"SELECT aggregate, test_cases FROM {run_summaries.name} WHERE run_id = %s",
            (run_id,),
        ):
            orjson.loads(aggregate)
            orjson.loads(test_cases)
    orjson.dumps(orjson.loads(printed), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    return time.process_time() - start


def raw_show(url: str, run_id: str) -> float:
    """CPU seconds: the run's summary row and its first 50 case scores read and decoded."""
    start = time.process_time()
    for (aggregate,) in raw_rows(
        url, f"SELECT aggregate FROM {run_summaries.name} WHERE run_id = %s", (run_id,)
    ):
        orjson.loads(aggregate)
    for (score,) in raw_rows(
        url,
        f"SELECT score FROM {cases.name} WHERE run_id = %s ORDER BY seq LIMIT 50",
        (run_id,),
    ):
        orjson.loads(score)
    return time.process_time() - start


def measure(
    store: str, url: str, ids: list[str], trees: dict[str, tuple[str, str | None]], repeat: int
) -> tuple[list[list[object]], list[Goal]]:
    """Each command from each tree `repeat` times, interleaved; table rows and goal rows."""
    commands = {
        "compare A B --json": ["compare", ids[0], ids[1], "--json", "--db", url],
        "show A": ["show", ids[0], "--db", url],
    }
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="evaledger-bench-reads-") as tmp:
        work = Path(tmp)
        for args in commands.values():  # untimed: bytecode written, pages cached
            for python, tree in trees.values():
                child(python, tree, args, work)
        for i in range(repeat):
            progress(f"{store}: round {i + 1} of {repeat}")
            for name, args in commands.items():
                for label, (python, tree) in trees.items():
                    runs.setdefault((label, name), []).append(child(python, tree, args, work))
    printed = runs[("this tree", "compare A B --json")][0]["stdout"]
    raw = {
        "compare A B --json": statistics.median(raw_compare(url, ids, printed) for _ in range(3)),
        "show A": statistics.median(raw_show(url, ids[0]) for _ in range(3)),
    }
    rows: list[list[object]] = []
    goals: list[Goal] = []
    for (label, name), found in runs.items():
        cpu = statistics.median(f["command_cpu_s"] for f in found)
        wall = statistics.median(f["command_s"] for f in found)
        start = statistics.median(f["startup_cpu_s"] for f in found)
        rss = max(f["peak_rss_mb"] for f in found)
        rows.append(
            [
                store,
                label,
                name,
                f"{cpu * 1000:.0f}",
                f"{wall * 1000:.0f}",
                f"{start * 1000:.0f}",
                f"{rss:.0f}",
                f"{raw[name] * 1000:.0f}",
                f"{cpu / raw[name]:.1f}x",
                f"{len(found[0]['stdout']):,}",
            ]
        )
        if label == "this tree":
            aim = AIM_COMPARE if name.startswith("compare") else AIM_SHOW
            goals.append(
                Goal(
                    f"CLI `{name}` ({store}), CPU beyond start-up",
                    f"{cpu * 1000:.0f} ms (wall {wall * 1000:.0f} ms)",
                    f"raw read + decode + dump {raw[name] * 1000:.0f} ms",
                    f"{cpu / raw[name]:.1f}x",
                    f"<= {aim * 1000:.0f} ms",
                    cpu <= aim,
                )
            )
    return rows, goals


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("--cases", type=int, default=10_000, help="cases in each of the two runs")
    p.add_argument("--repeat", type=int, default=5, help="runs of each command (median)")
    p.add_argument(
        "--before", default=None, help="another checkout (with its .venv) to run the same commands"
    )
    args = p.parse_args()
    size = 300 if args.quick else args.cases
    repeat = 2 if args.quick else args.repeat
    trees: dict[str, tuple[str, str | None]] = {"this tree": (sys.executable, None)}
    if args.before:
        before = Path(args.before).resolve()
        trees = {"before": (str(before / ".venv/bin/python"), str(before)), **trees}
    print(f"machine: {machine_note()}")
    rows: list[list[object]] = []
    goals: list[Goal] = []
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="evaledger-bench-reads-"))
    url = f"sqlite:///{tmp}/store/"
    ids = import_runs(url, size, args.seed)
    found = measure("SQLite", url, ids, trees, repeat)
    rows += found[0]
    goals += found[1]
    if args.pg and pg_available(args.pg_admin):
        with pg_database(args.pg_admin) as pg:
            ids = import_runs(pg, size, args.seed)
            found = measure("PostgreSQL", pg, ids, trees, repeat)
            rows += found[0]
            goals += found[1]
    elif args.pg:
        print("PostgreSQL: server not reachable, skipped")
    print_table(
        f"CLI reads, 2 runs of {size:,} cases, median of {repeat} fresh processes each",
        [
            "store",
            "tree",
            "command",
            "CPU ms beyond start-up",
            "wall ms",
            "start-up CPU ms",
            "peak RSS MB",
            "raw floor CPU ms",
            "CPU / floor",
            "stdout bytes",
        ],
        rows,
    )
    print_goals("issue 32 read goals (this tree)", goals)
    print(f"\nmachine: {machine_note()}")


if __name__ == "__main__":
    main()
