"""Importing peer files: cases/s and peak RSS of `evaledger import`, beside a raw parse.

Two generated files per size (default 10,000 and 100,000 cases): a promptfoo output (v3, rows
cloned from the real `sample-export.json` with varied ids, vars and outputs) and an Inspect
`.eval` archive (samples cloned from the real `log_streaming.eval`). Each measurement runs in
its own child process so its peak RSS (`VmHWM`) is its own:

- raw: the same parse the importer starts from, and nothing else (ijson over the promptfoo rows;
  for Inspect, each archive member read and validated by Inspect's `EvalSample`);
- import: `open_imports` + `import_all` into a fresh SQLite store (two passes over the file:
  the validating dry run, then the chunked writes and the seal).

The ratio `import rate / raw rate` says how much of the parse speed the ledger keeps; RSS should
stay flat from 10k to 100k (the file is never held whole). Run from the repository root:

    .venv/bin/python bench/import_formats.py            # 10k and 100k (~15-30 min)
    .venv/bin/python bench/import_formats.py --quick    # 500 and 2,000 (seconds)
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench.common import (
    Goal,
    cpu_timed,
    machine_note,
    num,
    peak_rss_mb,
    print_goals,
    print_table,
    progress,
    ratio,
    write_bundle,
)

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "tests" / "fixtures" / "peers"
PROMPTFOO_SOURCE = PEERS / "promptfoo" / "sample-export.json"
INSPECT_SOURCE = PEERS / "inspect_ai" / "eval-logs" / "log_streaming.eval"
TAU_SOURCE = PEERS / "tau-bench" / "gpt-4o-airline.tasks-1-12-41.json"
CONNEXITY_SOURCE = PEERS / "connexity" / "run.completed.json"
AIM_RSS_MB = 300.0
"""Issue 13: peak RSS of `evaledger import` at most 300 MB ..."""
RSS_FLAT = 1.2
"""... and flat: the largest size at most 1.2 x the smallest."""


# ---------------------------------------------------------------------------------------------
# generators (deterministic)


def write_promptfoo(path: Path, cases: int) -> None:
    """A promptfoo v3 output with `cases` rows, written row by row."""
    source = json.loads(PROMPTFOO_SOURCE.read_text())
    template = source["results"]["results"]
    with path.open("wb") as f:
        f.write(b'{"evalId":"eval-bench-' + str(cases).encode() + b'","results":{"version":3,')
        f.write(b'"timestamp":"2025-10-01T20:08:11.168Z","prompts":')
        f.write(orjson.dumps(source["results"]["prompts"]))
        f.write(b',"results":[')
        successes = 0
        for i in range(cases):
            row = copy.deepcopy(template[i % len(template)])
            row["id"] = f"row-{i}"
            row["testIdx"] = i // 2
            row["vars"] = {"riddle": f"riddle number {i // 2}"}
            row["response"]["output"] = f"Answer {i}: an echo. " + "x" * (i % 200)
            passed = i % 3 != 0
            successes += passed
            row["success"] = passed
            row["gradingResult"]["pass"] = passed
            f.write((b"," if i else b"") + orjson.dumps(row))
        stats = {"successes": successes, "failures": cases - successes, "errors": 0}
        f.write(b'],"stats":' + orjson.dumps(stats) + b"},")
        f.write(b'"config":' + orjson.dumps(source["config"]) + b",")
        f.write(b'"shareableUrl":null,"metadata":' + orjson.dumps(source["metadata"]) + b"}")


def write_inspect(path: Path, cases: int) -> None:
    """An Inspect `.eval` archive with `cases` samples (one epoch), member by member."""
    with zipfile.ZipFile(INSPECT_SOURCE) as z:
        header = json.loads(z.read("header.json"))
        start = json.loads(z.read("_journal/start.json"))
        template = json.loads(z.read("samples/1_epoch_1.json"))
    header["eval"]["config"]["epochs"] = 1
    header["eval"]["config"]["limit"] = None
    header["eval"]["dataset"]["samples"] = cases
    header["eval"]["dataset"]["sample_ids"] = list(range(1, cases + 1))
    header["eval"]["run_id"] = f"bench-run-{cases}"
    header["eval"]["eval_id"] = f"bench-eval-{cases}"
    start["eval"] = header["eval"]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as out:
        out.writestr("_journal/start.json", orjson.dumps(start))
        for i in range(1, cases + 1):
            sample = copy.deepcopy(template)
            sample["id"] = i
            sample["epoch"] = 1
            sample["scores"]["match"]["value"] = "C" if i % 4 else "I"
            out.writestr(f"samples/{i}_epoch_1.json", orjson.dumps(sample))
        out.writestr("header.json", orjson.dumps(header))


def write_tau_bench(path: Path, cases: int) -> None:
    """A tau-bench trajectories list with `cases` records (one trial), record by record."""
    template = json.loads(TAU_SOURCE.read_text())
    with path.open("wb") as f:
        f.write(b"[")
        for i in range(cases):
            record = copy.deepcopy(template[i % len(template)])
            record["task_id"] = i
            record["trial"] = 0
            record["reward"] = float(i % 3 != 0)
            f.write((b"," if i else b"") + orjson.dumps(record))
        f.write(b"]")


def write_connexity(path: Path, cases: int) -> None:
    """A Connexity run file with `cases` results (one per test case id), result by result."""
    source = json.loads(CONNEXITY_SOURCE.read_text())
    template = source["results"]["data"]
    with path.open("wb") as f:
        run = dict(source["run"], id=f"bench-run-{cases}")
        f.write(b'{"run":' + orjson.dumps(run) + b',"results":{"data":[')
        for i in range(cases):
            result = copy.deepcopy(template[i % len(template)])
            result["id"] = f"bench-result-{i}"
            result["test_case_id"] = f"bench-test-case-{i}"
            result["repetition_index"] = 0
            f.write((b"," if i else b"") + orjson.dumps(result))
        f.write(b'],"count":' + str(cases).encode() + b"}}")


def write_bundle_file(path: Path, cases: int) -> None:
    """A run bundle with `cases` cases (bench/common.py's generator), case by case."""
    write_bundle(path, cases, 0, f"bench-import-{cases}")


WRITERS: dict[str, tuple[Callable[[Path, int], None], str]] = {
    "bundle": (write_bundle_file, ".json"),
    "promptfoo": (write_promptfoo, ".json"),
    "inspect": (write_inspect, ".eval"),
    "tau-bench": (write_tau_bench, ".json"),
    "connexity": (write_connexity, ".json"),
}


# ---------------------------------------------------------------------------------------------
# the child: one measurement in a fresh process


RAW_ITEMS = {
    "bundle": "cases.item",
    "promptfoo": "results.results.item",
    "tau-bench": "item",
    "connexity": "results.data.item",
}
"""Where each JSON format's cases are (the raw baseline parses them with ijson, as importers do)."""


def raw_parse(fmt: str, path: Path) -> int:
    """Parse every case the way the importer's reader does, and nothing more."""
    if fmt in RAW_ITEMS:
        import ijson

        with path.open("rb") as f:
            return sum(1 for _ in ijson.items(f, RAW_ITEMS[fmt], use_float=True))
    from inspect_ai.log import EvalSample

    n = 0
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if name.startswith("samples/"):
                data = orjson.loads(z.read(name))
                data.pop("events", None)
                EvalSample.model_validate(data)
                n += 1
    return n


def do_import(path: Path, store: Path) -> int:
    from evaledger.api.bootstrap import Settings, build_services
    from evaledger.domain.ledger import Context
    from evaledger.importers.load import import_all, open_imports

    services = build_services(Settings(db=f"sqlite:///{store}/"))
    try:
        (done,) = import_all(services.ledger, open_imports([path]), Context(actor="bench"))
        return done.result.cases
    finally:
        services.close()


def child(args: argparse.Namespace) -> None:
    path = Path(args.file)
    if args.child == "raw":
        cases, wall, cpu = cpu_timed(lambda: raw_parse(args.format, path))
    else:
        with tempfile.TemporaryDirectory(dir=args.tmp) as store:
            cases, wall, cpu = cpu_timed(lambda: do_import(path, Path(store)))
    print(json.dumps({"cases": cases, "seconds": wall, "cpu": cpu, "rss_mb": peak_rss_mb()}))


def measure(mode: str, fmt: str, path: Path, tmp: Path) -> dict[str, Any]:
    out = subprocess.run(
        [
            *(sys.executable, __file__, "--child", mode),
            *("--format", fmt, "--file", str(path), "--tmp", str(tmp)),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# ---------------------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="500 and 2,000 cases")
    p.add_argument("--sizes", default="10000,100000", help="comma-separated case counts")
    p.add_argument("--formats", default=",".join(WRITERS))
    p.add_argument("--tmp", default=None, help="folder for the files and stores")
    p.add_argument("--child", choices=["raw", "import"], help=argparse.SUPPRESS)
    p.add_argument("--format", help=argparse.SUPPRESS)
    p.add_argument("--file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    sizes = [500, 2000] if args.quick else [int(s) for s in args.sizes.split(",")]
    print(f"import_formats: {machine_note()}")
    rows = []
    goals = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as folder:
        tmp = Path(folder)
        for fmt in args.formats.split(","):
            writer, suffix = WRITERS[fmt]
            peaks: list[float] = []
            for n in sizes:
                path = tmp / f"{fmt}-{n}{suffix}"
                progress(f"writing {path.name}")
                started = time.perf_counter()
                writer(path, n)
                size_mb = path.stat().st_size / 1e6
                progress(f"  {size_mb:.1f} MB in {time.perf_counter() - started:.1f} s")
                progress(f"raw parse of {path.name}")
                raw = measure("raw", fmt, path, tmp)
                progress(f"import of {path.name}")
                imp = measure("import", fmt, path, tmp)
                path.unlink()
                assert raw["cases"] == imp["cases"] == n, (raw, imp)
                raw_rate, imp_rate = n / raw["seconds"], n / imp["seconds"]
                rss = float(imp["rss_mb"])
                peaks.append(rss)
                smallest = peaks[0]
                met = rss <= AIM_RSS_MB and rss <= RSS_FLAT * smallest
                row = [
                    fmt,
                    num(n),
                    f"{size_mb:.1f}",
                    num(imp_rate),
                    num(raw_rate),
                    ratio(imp_rate, raw_rate),
                    f"{rss:.0f}",
                    f"x{rss / smallest:.2f}",
                    f"{raw['rss_mb']:.0f}",
                    f"{imp['cpu'] / imp['seconds']:.2f}",
                    f"<= {AIM_RSS_MB:.0f} MB, <= x{RSS_FLAT}",
                    "met" if met else "NOT met",
                ]
                # Each row as soon as it is measured: a long run keeps what it measured.
                progress("  " + "  ".join(row))
                rows.append(row)
            flat = max(peaks) <= RSS_FLAT * peaks[0]
            goals.append(
                Goal(
                    f"peak RSS of `evaledger import` ({fmt}), {num(sizes[0])} -> {num(sizes[-1])}",
                    " -> ".join(f"{p:.0f} MB" for p in peaks),
                    "-",
                    f"x{max(peaks) / peaks[0]:.2f}",
                    f"<= {AIM_RSS_MB:.0f} MB, flat (x{RSS_FLAT})",
                    max(peaks) <= AIM_RSS_MB and flat if len(peaks) > 1 else None,
                )
            )
    print_table(
        "evaledger import (SQLite) vs raw parse of the same file",
        [
            "format",
            "cases",
            "file MB",
            "import cases/s",
            "raw cases/s",
            "ratio",
            "import peak RSS MB",
            "RSS x smallest",
            "raw peak RSS MB",
            "import CPU/wall",
            "goal (RSS)",
            "verdict",
        ],
        rows,
    )
    print_goals("issue 13 goal: flat import memory, per format", goals)
    print(f"\nend: {machine_note()}")


if __name__ == "__main__":
    main()
