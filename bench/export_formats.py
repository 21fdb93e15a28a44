"""Benchmark: `export --format` of one 10,000-case run in each format (SQLite, in-process).

Each format is the `export_run_file` use case (read the run's scores and every case's events,
lay them out), timed as the median of `--repeat` exports. Beside each figure, measured in the
same run: the run bundle's export (the default format, which reads the same events), and the
physical baseline of reading the run's stored events with `sqlite3` and `orjson`-decoding them.
The ratios say what each layout costs on top of reading the log.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    base_parser,
    generate_bundle,
    machine_note,
    median_seconds,
    num,
    print_table,
    progress,
    sqlite_raw_decode,
)
from evaledger.api.bootstrap import Settings, build_services
from evaledger.application.exports import export_run_file
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("--cases", type=int, default=10_000, help="cases in the run")
    p.add_argument("--repeat", type=int, default=3, help="exports per format (median)")
    args = p.parse_args()
    size = 200 if args.quick else args.cases
    repeat = 1 if args.quick else args.repeat
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="evaledger-bench-export-"))
    services = build_services(Settings(db=f"sqlite:///{tmp}/store/"))
    try:
        progress(f"generating and importing a {size:,}-case run")
        bundle = RunBundle.model_validate(generate_bundle(size, seed=args.seed))
        run_id = services.ledger.import_bundle(bundle, Context(actor="bench")).run_id
        services.sync()
        events = Path(services.location.events_env["SQLITE_DBNAME"])
        raw = sqlite_raw_decode(events)
        progress("bundle")
        bundle_s, _ = median_seconds(lambda: export_run_file(services, run_id, "bundle"), repeat)
        rows = []
        for fmt in ("bundle", "csv", "jsonl", "junit", "parquet"):
            progress(fmt)
            size_bytes = len(export_run_file(services, run_id, fmt).content)
            seconds, _ = median_seconds(
                lambda fmt=fmt: export_run_file(services, run_id, fmt),  # type: ignore[misc]
                repeat,
            )
            rows.append(
                [
                    fmt,
                    num(seconds * 1000, 0),
                    num(size / seconds, 0),
                    num(size_bytes / 1e6, 1),
                    num(seconds / bundle_s, 2) + "×",
                    num(seconds / raw.seconds, 1) + "×",
                ]
            )
        print_table(
            f"Export of a {size:,}-case run, median of {repeat} (SQLite, in-process)",
            ["format", "ms", "cases/s", "MB", "÷ bundle export", "÷ raw read + decode"],
            rows,
        )
        print(
            f"baselines: bundle export {num(bundle_s * 1000, 0)} ms; raw sqlite3 read + orjson "
            f"decode of the store's {raw.rows:,} events {num(raw.seconds * 1000, 0)} ms"
        )
        print(machine_note())
    finally:
        services.close()


if __name__ == "__main__":
    main()
