"""Benchmark: the compare page of two 10,000-case runs, loaded in headless Chromium (issue 21).

Two generated runs (different seeds) are imported into a SQLite store, a real uvicorn server
answers on a free loopback port, and Chromium (/usr/bin/chromium, Playwright) loads
`/ui/compare` (page 1, a middle page, a class filter) `--repeat` times each. Printed: the HTML
bytes of the page, the browser's navigation timing (request start to the load event, median),
and beside them, measured in the same run, the JSON `GET /runs/compare` of the same pair (what
the page costs on top of the comparison itself). Goals: ≤ 300 KB and ≤ 1 s in the browser.
"""

from __future__ import annotations

import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvicorn

from bench.common import base_parser, generate_bundle, machine_note, num, print_table, progress
from evaledger.api.app import create_app
from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context

CHROMIUM = "/usr/bin/chromium"
GOAL_BYTES = 300_000
GOAL_SECONDS = 1.0


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    """Import two runs, serve them, load the compare pages in Chromium, print the figures."""
    p = base_parser(__doc__ or "")
    p.add_argument("--cases", type=int, default=10_000, help="cases in each run")
    p.add_argument("--repeat", type=int, default=5, help="loads per page (median)")
    args = p.parse_args()
    size = 300 if args.quick else args.cases
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="evaledger-bench-web-compare-"))
    services = build_services(Settings(db=f"sqlite:///{tmp}/store/"))
    try:
        for key, seed in (("baseline", args.seed), ("candidate", args.seed + 1)):
            progress(f"generating and importing the {key} run ({size:,} cases)")
            data = generate_bundle(size, seed=seed, run_key=key)
            services.ledger.import_bundle(RunBundle.model_validate(data), Context(actor="bench"))
        services.sync()
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(create_app(services=services), port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        try:
            rows = measure(base, args.repeat)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    finally:
        services.close()
    print_table(
        f"Compare page of two {size:,}-case runs in headless Chromium (median of {args.repeat})",
        ["page", "HTML bytes", "browser load ms", "JSON compare ms", "goal", "met"],
        rows,
    )
    print(machine_note())


def _json_ms(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        r.read()
    return (time.perf_counter() - start) * 1000


def measure(base: str, repeat: int) -> list[list[object]]:
    """Each page's bytes and median browser load time, with the JSON compare beside it."""
    from playwright.sync_api import sync_playwright

    pair = "baseline=baseline&candidate=candidate"
    pages = {
        "page 1": f"/ui/compare?{pair}",
        "page 100": f"/ui/compare?{pair}&page=100",
        "regressions only": f"/ui/compare?{pair}&show=regression",
    }
    ids = {}
    with urllib.request.urlopen(f"{base}/runs?project=bench", timeout=60) as r:
        import orjson

        for run in orjson.loads(r.read())["data"]:
            ids[run["run_key"]] = run["run_id"]
    json_url = f"{base}/runs/compare?baseline_run_id={ids['baseline']}"
    json_url += f"&candidate_run_id={ids['candidate']}"
    json_ms = statistics.median(_json_ms(json_url) for _ in range(repeat))
    rows: list[list[object]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page()
            for name, path in pages.items():
                progress(name)
                times, size = [], 0
                for _ in range(repeat):
                    response = page.goto(base + path, wait_until="load", timeout=300_000)
                    assert response is not None, path
                    assert response.status == 200, path
                    size = len(response.body())
                    times.append(
                        page.evaluate(
                            "() => { const n = performance.getEntriesByType('navigation')[0];"
                            " return n.loadEventEnd - n.startTime; }"
                        )
                    )
                ms = statistics.median(times)
                met = size <= GOAL_BYTES and ms <= GOAL_SECONDS * 1000
                rows.append(
                    [
                        name,
                        f"{size:,}",
                        num(ms, 0),
                        num(json_ms, 0),
                        "≤ 300 KB, ≤ 1 s",
                        "met" if met else "NOT met",
                    ]
                )
        finally:
            browser.close()
    return rows


if __name__ == "__main__":
    main()
