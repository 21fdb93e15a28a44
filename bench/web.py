"""Benchmark: the web report's pages for one 10,000-case run, server time in-process (SQLite).

Each page is requested through the app (FastAPI TestClient: routing, query, template, HTML)
and timed as the median of `--repeat` requests. Beside each figure, measured in the same run:
the JSON API answering a page of the same size (`GET /runs/{id}/cases?limit=50`: it reads only
those rows, while the report filters and sorts every case), and the physical baseline of
reading all the run's case rows from the read-model file with `sqlite3` and decoding them with
orjson. The ratios say what a page costs on top.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contextlib import closing

import orjson
from fastapi.testclient import TestClient

from bench.common import (
    base_parser,
    cpu_timed,
    generate_bundle,
    machine_note,
    num,
    print_table,
    progress,
)
from bench.common import median_seconds as common_median_seconds
from evaledger.api.app import create_app
from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.projections.case_pages import forget_kept
from evaledger.projections.tables import cases


def raw_cases(views: Path, run_id: str) -> int:
    """Read the run's case rows with plain sqlite3 and decode their JSON: the floor."""
    with closing(sqlite3.connect(views)) as conn:
        rows = conn.execute(
            f"SELECT score FROM {cases.name} WHERE run_id = ?", (run_id,)
        ).fetchall()
    return len([orjson.loads(r[0]) for r in rows])


def median_wall_seconds(fn: Callable[[], object], repeat: int) -> tuple[float, list[float]]:
    """Median wall-clock seconds of `repeat` runs of `fn` (`bench.common.median_seconds`)."""
    return common_median_seconds(fn, repeat)


def median_cpu_seconds(fn: Callable[[], object], repeat: int) -> tuple[float, list[float]]:
    """Median CPU seconds of this process over `repeat` runs of `fn`, with every run's."""
    times = sorted(cpu_timed(fn)[2] for _ in range(repeat))
    mid = len(times) // 2
    return (times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2), times


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("--cases", type=int, default=10_000, help="cases in the run")
    p.add_argument("--repeat", type=int, default=7, help="requests per page (median)")
    p.add_argument(
        "--cpu",
        action="store_true",
        help="time this process's CPU seconds, not wall-clock (a loaded machine; the app is "
        "served in-process, so its work is this process's)",
    )
    args = p.parse_args()
    median_seconds = median_cpu_seconds if args.cpu else median_wall_seconds
    size = 200 if args.quick else args.cases
    repeat = 3 if args.quick else args.repeat
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="evaledger-bench-web-"))
    services = build_services(Settings(db=f"sqlite:///{tmp}/store/"))
    try:
        progress(f"generating and importing a {size:,}-case run")
        bundle = RunBundle.model_validate(generate_bundle(size, seed=args.seed))
        run_id = str(services.ledger.import_bundle(bundle, Context(actor="bench")).run_id)
        services.sync()
        views = Path(services.location.views_url.removeprefix("sqlite:///"))
        with TestClient(create_app(services=services), base_url="http://127.0.0.1") as client:
            listed: dict[str, Any] = client.get(
                f"/runs/{run_id}/cases", params={"status": "failed", "limit": 1}
            ).json()
            failed = listed["data"][0]["case_id"]
            last_page = (size + 49) // 50

            def get(path: str) -> None:
                r = client.get(path)
                assert r.status_code == 200, (path, r.status_code)

            json_s, _ = median_seconds(lambda: get(f"/runs/{run_id}/cases?limit=50"), repeat)
            raw_s, _ = median_seconds(lambda: raw_cases(views, run_id), repeat)
            # A run's first page view reads every case narrow; the process keeps those rows per
            # summary position, so the pages below (other pages, sorts, filters) reuse them.
            # Here each request is a first view (the kept rows dropped before it; the template
            # compiled by one request before).
            progress("run page 1, first view")
            get(f"/ui/runs/{run_id}")

            def first_view(path: str) -> None:
                forget_kept()
                get(path)

            first_s, _ = median_seconds(lambda: first_view(f"/ui/runs/{run_id}"), repeat)
            # The metric filter reads the metric scores column too (cases_v6), kept apart.
            metric_path = f"/ui/runs/{run_id}?metric=tool_routing&below=3"
            progress("run, metric below 3, first view")
            metric_first_s, _ = median_seconds(lambda: first_view(metric_path), repeat)
            pages = {
                "run page 1": f"/ui/runs/{run_id}",
                "run, failed only": f"/ui/runs/{run_id}?show=failed",
                "run, sorted by score": f"/ui/runs/{run_id}?sort=score&desc=true",
                f"run, last page ({last_page})": f"/ui/runs/{run_id}?page={last_page}",
                "run, metric below 3": metric_path,
                "case audit page": f"/ui/cases/{failed}",
                "runs list": "/ui/",
            }
            rows = [
                [
                    name,
                    num(seconds * 1000, 1),
                    num(seconds / json_s, 2) + "×",
                    num(seconds / raw_s, 1) + "×",
                ]
                for name, seconds in (
                    ("run page 1, first view", first_s),
                    ("run, metric below 3, first view", metric_first_s),
                )
            ]
            for name, path in pages.items():
                progress(name)
                seconds, _ = median_seconds(lambda path=path: get(path), repeat)  # type: ignore[misc]
                rows.append(
                    [
                        name,
                        num(seconds * 1000, 1),
                        num(seconds / json_s, 2) + "×",
                        num(seconds / raw_s, 1) + "×",
                    ]
                )
        print_table(
            f"Web report, {size:,}-case run, median of {repeat} requests (SQLite, in-process"
            + (", CPU time)" if args.cpu else ")"),
            ["page", "ms", "÷ JSON page of 50 cases", "÷ raw sqlite3 + orjson, all cases"],
            rows,
        )
        print(
            f"baselines: GET /runs/{{id}}/cases?limit=50 {num(json_s * 1000, 1)} ms; "
            f"raw read + decode of {size:,} case rows {num(raw_s * 1000, 1)} ms"
        )
        print(machine_note())
    finally:
        services.close()


if __name__ == "__main__":
    main()
