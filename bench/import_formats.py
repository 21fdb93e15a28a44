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
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench.common import (
    cpu_timed,
    machine_note,
    num,
    peak_rss_mb,
    print_table,
    progress,
    ratio,
)

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "tests" / "fixtures" / "peers"
PROMPTFOO_SOURCE = PEERS / "promptfoo" / "sample-export.json"
INSPECT_SOURCE = PEERS / "inspect_ai" / "eval-logs" / "log_streaming.eval"


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


WRITERS = {"promptfoo": (write_promptfoo, ".json"), "inspect": (write_inspect, ".eval")}


# ---------------------------------------------------------------------------------------------
# the child: one measurement in a fresh process


def raw_parse(fmt: str, path: Path) -> int:
    """Parse every case the way the importer's reader does, and nothing more."""
    if fmt == "promptfoo":
        import ijson

        with path.open("rb") as f:
            return sum(1 for _ in ijson.items(f, "results.results.item", use_float=True))
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
    from evaledger.api.bootstrap import Settings, build_ledger
    from evaledger.domain.ledger import Context
    from evaledger.importers.load import import_all, open_imports

    services = build_ledger(Settings(db=f"sqlite:///{store}/"))
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
    p.add_argument("--formats", default="promptfoo,inspect")
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
    with tempfile.TemporaryDirectory(dir=args.tmp) as folder:
        tmp = Path(folder)
        for fmt in args.formats.split(","):
            writer, suffix = WRITERS[fmt]
            for n in sizes:
                path = tmp / f"{fmt}-{n}{suffix}"
                progress(f"writing {path.name}")
                started = time.perf_counter()
                writer(path, n)
                progress(
                    f"  {path.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - started:.1f} s"
                )
                progress(f"raw parse of {path.name}")
                raw = measure("raw", fmt, path, tmp)
                progress(f"import of {path.name}")
                imp = measure("import", fmt, path, tmp)
                assert raw["cases"] == imp["cases"] == n, (raw, imp)
                raw_rate, imp_rate = n / raw["seconds"], n / imp["seconds"]
                row = [
                    fmt,
                    num(n),
                    f"{path.stat().st_size / 1e6:.1f}",
                    num(imp_rate),
                    num(raw_rate),
                    ratio(imp_rate, raw_rate),
                    f"{imp['rss_mb']:.0f}",
                    f"{raw['rss_mb']:.0f}",
                    f"{imp['cpu'] / imp['seconds']:.2f}",
                ]
                # Each row as soon as it is measured: a long run keeps what it measured.
                progress("  " + "  ".join(row))
                rows.append(row)
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
            "raw peak RSS MB",
            "import CPU/wall",
        ],
        rows,
    )
    print(f"\nend: {machine_note()}")


if __name__ == "__main__":
    main()
