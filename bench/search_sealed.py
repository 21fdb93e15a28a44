"""Search over sealed text: rebuilding `search_v1` on a sealing store beside an inline one.

On a sealing store (the default since issue 34) the search projection reads each transcript and
judge reply through the vault (`Decoded.opened`: one vault read and an AES-GCM open per sealed
event). The baseline is the same rebuild of the same bundle on a store created with
`seal_payloads=False`, in the same run: the ratio sealed / inline is the figure. CPU seconds of
this process (the machine is shared) and wall seconds, the median of `--repeat` rebuilds.
On PostgreSQL the server's CPU is not in this process's figure: read its wall ratio too.

    .venv/bin/python bench/search_sealed.py --cases 2000            # SQLite and PostgreSQL
    .venv/bin/python bench/search_sealed.py --quick --no-pg         # smoke run
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    base_parser,
    cpu_timed,
    generate_bundle,
    machine_note,
    pg_available,
    pg_database,
    print_table,
    ratio,
)
from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.projections.tables import SEARCH_PROJECTION


def rebuild_seconds(url: str, seal: bool, bundle: RunBundle, repeat: int) -> tuple[float, float]:
    """Median (CPU, wall) seconds of rebuilding `search_v1` after importing `bundle`."""
    services = build_services(Settings(db=url, seal_payloads=seal))
    try:
        assert services.ledger.seal_payloads is seal
        services.ledger.import_bundle(bundle, Context("bench"))
        services.sync()
        cpu: list[float] = []
        wall: list[float] = []
        for _ in range(repeat):
            _, w, c = cpu_timed(lambda: services.runner.rebuild(SEARCH_PROJECTION))
            cpu.append(c)
            wall.append(w)
        return statistics.median(cpu), statistics.median(wall)
    finally:
        services.close()


def main() -> None:
    p = base_parser(__doc__ or "")
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    cases = 100 if args.quick else args.cases
    bundle = RunBundle.model_validate(generate_bundle(cases, args.seed))
    print(f"search_v1 rebuild, {cases} cases; {machine_note()}")
    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        sealed = rebuild_seconds(f"sqlite:///{tmp}/sealed/", True, bundle, args.repeat)
        inline = rebuild_seconds(f"sqlite:///{tmp}/inline/", False, bundle, args.repeat)
        rows.append(("SQLite", *_cells(sealed, inline)))
    if args.pg and pg_available(args.pg_admin):
        with pg_database(args.pg_admin) as a, pg_database(args.pg_admin) as b:
            sealed = rebuild_seconds(a, True, bundle, args.repeat)
            inline = rebuild_seconds(b, False, bundle, args.repeat)
            rows.append(("PostgreSQL", *_cells(sealed, inline)))
    elif args.pg:
        print("PostgreSQL: not reachable, skipped")
    headers = ["store", "sealed cpu s", "inline cpu s", "cpu ratio", "sealed wall s", "wall ratio"]
    print_table("sealed / inline (the baseline, same run)", headers, rows)
    print(f"after: {machine_note()}")


def _cells(sealed: tuple[float, float], inline: tuple[float, float]) -> list[str]:
    return [
        f"{sealed[0]:.3f}",
        f"{inline[0]:.3f}",
        ratio(sealed[0], inline[0]),
        f"{sealed[1]:.3f}",
        ratio(sealed[1], inline[1]),
    ]


if __name__ == "__main__":
    main()
