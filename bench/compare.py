"""Benchmark: GET /runs/compare of two 10,000-case runs over real HTTP, 1 and 8 clients.

Beside it, in the same run: the same comparison recomputed straight from the stored events
(raw rows → decode → fold facts → score → reduce → compare), the work the read models save.
Reported: p50/p95 per concurrency, for cached answers (the same request again: the comparison
is cached per run positions) and uncached ones (a distinct threshold per request forces a full
recompute from the read models), and the ratio of each p50 to the from-events recompute.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    base_parser,
    generate_bundle,
    median_seconds,
    num,
    print_table,
    progress,
    sqlite_rows,
)
from evaledger.api.bootstrap import Settings, build_ledger
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import CaseOpened, RunCreated
from evaledger.domain.ledger import Context
from evaledger.domain.persistence import OrjsonTranscoder, decode_state
from evaledger.projections.comparison import ComparedRun, compare_results
from evaledger.projections.facts import CaseFacts, apply_fact, opened_facts
from evaledger.projections.scoring import reduce_repetitions, score_case, summarize_run


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def from_events(events_path: Path, run_ids: tuple[str, str]) -> Any:
    """The comparison recomputed from the raw stored events, no read model involved."""
    transcoder = OrjsonTranscoder()
    rows = sqlite_rows(events_path)
    created: dict[str, RunCreated] = {}
    facts: dict[str, CaseFacts] = {}
    for originator_id, version, topic, state in rows:
        cls, data = decode_state(topic, state, transcoder)
        data["originator_id"] = originator_id
        data["originator_version"] = version
        event = cls.model_validate(data)
        if isinstance(event, RunCreated):
            created[str(event.originator_id)] = event
        elif isinstance(event, CaseOpened):
            run = created[str(event.run_id)]
            facts[str(event.originator_id)] = opened_facts(event, run.agent.provider)
        elif str(event.originator_id) in facts:
            apply_fact(facts[str(event.originator_id)], event)
    sides = []
    for run_id in run_ids:
        run = created[run_id]
        scores = [score_case(f, run.spec) for f in facts.values() if str(f.run_id) == run_id]
        sides.append(
            (
                ComparedRun(
                    run_id=run_id,
                    status="completed",
                    suite_name=run.suite.name,
                    suite_version=run.suite.version,
                    agent=run.agent,
                    config=run.config.model_dump(mode="json"),
                    judge=run.config.judge.model_dump(mode="json"),
                    spec=run.spec,
                    aggregate=summarize_run(scores, run.spec),
                ),
                reduce_repetitions(scores, run.spec),
            )
        )
    (base, base_results), (cand, cand_results) = sides
    return compare_results(base, cand, base_results, cand_results)


def hammer(url: str, params_for: Any, clients: int, per_client: int) -> list[float]:
    """Latencies (s) of `clients` threads each sending `per_client` requests."""
    import httpx2

    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[str] = []

    def worker(c: int) -> None:
        with httpx2.Client(base_url=url, timeout=120) as http:
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


def main() -> None:
    """Run the benchmark."""
    parser = base_parser(__doc__ or "")
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=40, help="requests per client")
    args = parser.parse_args()
    cases = 200 if args.quick else args.cases
    per_client = 5 if args.quick else args.requests
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="evaledger-bench-compare-"))
    db = f"sqlite:///{tmp}/store/"
    services = build_ledger(Settings(db=db))
    run_ids: list[str] = []
    for seed, key in ((args.seed, "bench-baseline"), (args.seed + 1, "bench-candidate")):
        progress(f"generating and importing {key} ({cases} cases)")
        bundle = RunBundle.model_validate(generate_bundle(cases, seed=seed, run_key=key))
        run_ids.append(str(services.ledger.import_bundle(bundle, Context("bench")).run_id))
    progress("projecting")
    services.sync()
    services.close()
    events_path = tmp / "store" / "events.sqlite"

    direct_s, _ = median_seconds(
        lambda: from_events(events_path, (run_ids[0], run_ids[1])), 1 if args.quick else 3
    )

    port = free_port()
    env = {**os.environ, "EVALEDGER_DB": db}
    server = subprocess.Popen(
        [sys.executable, "-m", "evaledger", "serve", "--port", str(port)],
        env=env,
        cwd=str(Path(__file__).resolve().parents[1]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx2

        for _ in range(200):
            try:
                if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                time.sleep(0.05)
        base = {"baseline_run_id": run_ids[0], "candidate_run_id": run_ids[1]}
        t0 = time.perf_counter()
        hammer(url, lambda c, i: base, 1, 1)
        cold_ms = 1000 * (time.perf_counter() - t0)
        rows = []
        for clients in (1, 8):
            cached = hammer(url, lambda c, i: base, clients, per_client)
            uncached = hammer(
                url,
                lambda c, i, n=clients: {
                    **base,
                    "case_score_delta": 5.0 + (n * 1000 + c * 100 + i) * 1e-6,
                },
                clients,
                max(2, per_client // 4),
            )
            for label, lat in (("cached", cached), ("uncached", uncached)):
                rows.append(
                    (
                        f"{clients} client(s), {label}",
                        len(lat),
                        num(p(lat, 0.5), 1),
                        num(p(lat, 0.95), 1),
                        f"{p(lat, 0.5) / (1000 * direct_s):.4f}",
                    )
                )
    finally:
        server.terminate()
        server.wait(timeout=10)
    print_table(
        f"GET /runs/compare, two runs of {cases} cases each, SQLite, HTTP on loopback",
        ["load", "requests", "p50 ms", "p95 ms", "p50 / from-events"],
        rows,
    )
    print_table(
        "baseline: the same comparison straight from the stored events (same run)",
        ["what", "ms"],
        [
            ("recompute from stored events (median)", num(1000 * direct_s, 1)),
            ("first HTTP request (cold cache)", num(cold_ms, 1)),
            ("cold / from-events", f"{cold_ms / (1000 * direct_s):.3f}"),
        ],
    )
    print(f"\naim: p95 under 250 ms with 8 clients; store in {tmp}")


if __name__ == "__main__":
    main()
