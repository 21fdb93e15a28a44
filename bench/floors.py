"""The catch-up's floor ladder: what each stage of the cases projection costs, cumulatively.

Over the whole log, in one process, each stage adds one piece of work the catch-up does to the
stage before it, all in memory (no read-model write), so that each figure reads as "the catch-up
can be no faster than this while it does this":

1. read: the ledger's direct cursor (`Ledger.log_rows`, pages of 1,000), rows kept as tuples;
2. + decode: `decode_rows` (orjson + upcast into `Decoded`), what the projections receive;
3. + fold: every case event folded into its `CaseFacts` (`open_case` / `fold_event`);
4. + score: `score_case` of every case once, under its run's own spec (scoring once per case,
   the least a catch-up that stores each case's `CaseScore` does);
5. + rows: the case rows' JSON (`encoding.dumps` of facts and score, `cases_v6`).

Beside them the raw read + `orjson.loads` of the same rows (`bench.common`). Then
`per_projection`: each projection of the composition root caught up alone from position 0 into
a fresh SQLite read-model file (its own CPU, with the read + decode every catch-up pays), which
says where a whole catch-up's time goes beyond the cases projection (issue 32: the search
projection is a third of it). Used by `bench/replay.py` (the "floor ladder" and "each
projection alone" tables) and runnable on its own:

    .venv/bin/python bench/floors.py sqlite:///path/to/store/
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import num, pg_raw_decode, print_table, sqlite_raw_decode
from evaledger.domain import collector
from evaledger.domain.events import CaseEvent, CaseOpened, RunCreated
from evaledger.domain.ledger import Ledger
from evaledger.domain.spec import ScoringSpec
from evaledger.domain.store.urls import parse_db_url
from evaledger.projections import encoding
from evaledger.projections.decode import Decoded, decode_rows
from evaledger.projections.fold import fold_event, open_case
from evaledger.projections.projectors import all_projections
from evaledger.projections.runner import ProjectionRunner
from evaledger.projections.tables import make_engine
from evaledger.scoring.case import score_case
from evaledger.scoring.facts import CaseFacts

PAGE = 1000
STAGES = ("read", "decode", "fold", "score", "rows")


def _pages(ledger: Ledger) -> Any:
    start = 1
    while rows := ledger.log_rows(start, PAGE):
        yield rows
        start = rows[-1][0] + 1


def _stage(ledger: Ledger, upto: str) -> tuple[float, float, int]:
    """Seconds (wall, CPU) of the ladder up to stage `upto` over the whole log; events read."""
    depth = STAGES.index(upto)
    runs: dict[str, tuple[ScoringSpec, str | None]] = {}
    facts: dict[str, CaseFacts] = {}
    events = 0
    gc.collect()
    with collector.paused():
        start, cpu = time.perf_counter(), time.process_time()
        for rows in _pages(ledger):
            events += len(rows)
            if depth < 1:
                continue
            batch = decode_rows(rows, ledger.decode)
            if depth < 2:
                continue
            for _, d in batch:
                _fold(d, runs, facts)
        if depth >= 3:
            scores = [score_case(f, runs[str(f.run_id)][0]) for f in facts.values()]
            if depth >= 4:
                dumps = encoding.dumps
                for f, s in zip(facts.values(), scores, strict=True):
                    dumps(f)
                    dumps(s)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, events


def _fold(
    d: Decoded, runs: dict[str, tuple[ScoringSpec, str | None]], facts: dict[str, CaseFacts]
) -> None:
    cls = d.cls
    if cls is CaseOpened:
        facts[d.oid] = open_case(d, runs[d.data["run_id"]][1])
    elif issubclass(cls, CaseEvent):
        fold_event(facts[d.oid], d)
    elif cls is RunCreated:
        event = d.event
        assert isinstance(event, RunCreated)
        runs[d.oid] = (event.spec, event.agent.provider)


def ladder(url: str, best_of: int = 2) -> dict[str, Any]:
    """Each stage's best of `best_of` seconds (wall and CPU), and the raw read + decode's."""
    location = parse_db_url(url)
    raw: Callable[[], Any]
    if location.is_sqlite:
        path = Path(location.events_env["SQLITE_DBNAME"])
        raw = lambda: sqlite_raw_decode(path)  # noqa: E731
    else:
        raw = lambda: pg_raw_decode(url)  # noqa: E731
    out: dict[str, Any] = {"raw_s": float("inf"), "raw_cpu_s": float("inf")}
    for _ in range(best_of):
        cpu = time.process_time()
        wall = raw().seconds
        out["raw_cpu_s"] = min(out["raw_cpu_s"], time.process_time() - cpu)
        out["raw_s"] = min(out["raw_s"], wall)
    ledger = Ledger(location)
    try:
        for name in STAGES:
            runs = [_stage(ledger, name) for _ in range(best_of)]
            out[f"{name}_s"] = min(s for s, _, _ in runs)
            out[f"{name}_cpu_s"] = min(c for _, c, _ in runs)
            out["events"] = runs[0][2]
    finally:
        ledger.close()
    return out


def report_ladder(
    kind: str,
    found: dict[str, Any],
    catch_up_s: float | None = None,
    catch_up_cpu_s: float | None = None,
) -> None:
    """The ladder as a table: each stage's seconds and its rate as a fraction of raw.

    Wall and CPU (process time) apiece: on a shared machine the wall clock also counts the
    waits for the cores and the disk; the CPU ratio is the one that carries over.
    """
    raw, raw_cpu = found["raw_s"], found["raw_cpu_s"]
    labels = {
        "read": "ledger direct cursor (log_rows), tuples",
        "decode": "+ decode_rows (orjson + upcast, Decoded)",
        "fold": "+ fold every case event into CaseFacts",
        "score": "+ score_case of every case once",
        "rows": "+ JSON of the case rows (facts, score)",
    }
    rows = [["raw read + orjson.loads (baseline)", f"{raw:.3f}", "100.0%", f"{raw_cpu:.3f}"]]
    rows[0].append("100.0%")
    stages = [(labels[n], found[f"{n}_s"], found[f"{n}_cpu_s"]) for n in STAGES]
    if catch_up_s is not None and catch_up_cpu_s is not None:
        stages.append(
            ("catch-up of every projection (the rebuild above)", catch_up_s, catch_up_cpu_s)
        )
    for label, s, c in stages:
        rows.append([label, f"{s:.3f}", _pct(raw, s), f"{c:.3f}", _pct(raw_cpu, c)])
    print_table(
        f"{kind}: floor ladder over {num(found['events'])} events (in memory, no read-model "
        "write; rate vs raw = raw time / stage time)",
        ["stage (cumulative)", "wall s", "rate vs raw", "CPU s", "CPU rate vs raw"],
        rows,
    )


def per_projection(url: str) -> list[tuple[str, float, float]]:
    """Each projection caught up alone from 0 into a fresh SQLite file: (name, wall s, CPU s)."""
    ledger = Ledger(parse_db_url(url))
    out: list[tuple[str, float, float]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="evaledger-floors-") as tmp:
            for projection in all_projections():
                engine = make_engine(f"sqlite:///{Path(tmp) / projection.name}.sqlite")
                try:
                    runner = ProjectionRunner(ledger, engine, [projection])
                    gc.collect()
                    start, cpu = time.perf_counter(), time.process_time()
                    runner.catch_up()
                    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
                finally:
                    engine.dispose()
                out.append((projection.name, wall, cpu))
    finally:
        ledger.close()
    return out


def report_per_projection(
    kind: str, found: list[tuple[str, float, float]], ladder_found: dict[str, Any]
) -> None:
    """Each projection alone: its CPU, beyond the read + decode every catch-up pays, vs raw."""
    raw_cpu, decode_cpu = ladder_found["raw_cpu_s"], ladder_found["decode_cpu_s"]
    beyond = sum(max(c - decode_cpu, 0.0) for _, _, c in found)
    rows = []
    for name, wall, cpu in found:
        own = max(cpu - decode_cpu, 0.0)
        share = f"{100 * own / beyond:.0f}%" if beyond else "-"
        rows.append([name, f"{wall:.2f}", f"{cpu:.3f}", f"{own:.3f}", share, _pct(raw_cpu, cpu)])
    rows.append(["read + decode (ladder), paid once", "-", f"{decode_cpu:.3f}", "-", "-", "-"])
    rows.append(
        ["sum: decode once + each beyond it", "-", f"{decode_cpu + beyond:.3f}", "-", "-", "-"]
    )
    print_table(
        f"{kind}: each projection caught up alone from 0 (fresh SQLite read models), CPU",
        ["projection", "wall s", "CPU s", "beyond decode s", "share", "CPU rate vs raw"],
        rows,
    )


def _pct(raw: float, stage: float) -> str:
    return f"{100 * raw / stage:.1f}%" if stage else "-"


def main(argv: list[str]) -> int:
    """Print the ladder of the store at argv[0]."""
    kind = argv[0].split(":", 1)[0]
    found = ladder(argv[0])
    report_ladder(kind, found)
    report_per_projection(kind, per_projection(argv[0]), found)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
