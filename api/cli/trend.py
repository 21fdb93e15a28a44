"""`evaledger trend`: a project's measure per agent version by day or hour (issue 33).

The same use case as GET /projects/{project}/series (`application.trends.read_series`): a
table of the points, or the series as JSON with `--json`.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from evaledger.api.cli.inputs import Commands
from evaledger.api.console import EXIT_OK, emit_json, fmt, print_table

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services


def register(commands: Commands) -> None:
    """Add trend."""
    p = commands.add(
        "trend",
        cmd_trend,
        "a measure per agent version by UTC day or hour (online and offline runs)",
        reads=True,
    )
    p.add_argument(
        "--measure",
        default="pass_rate",
        help="pass_rate, score, latency_p95, cost or SCORER/METRIC (default: pass_rate)",
    )
    p.add_argument(
        "--by", choices=("day", "hour"), default="day", help="bucket size, UTC (default: day)"
    )
    p.add_argument("--agent", help="only this agent (default: every agent)")
    p.add_argument("--version", help="only this agent version (default: every version)")
    p.add_argument(
        "--since", type=instant, help="from this ISO instant, inclusive (default: the first case)"
    )
    p.add_argument(
        "--until", type=instant, help="to this ISO instant, exclusive (default: the last case)"
    )


def instant(text: str) -> datetime:
    """An argparse type: an ISO date or instant; without a zone it is UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date or time: {text!r}") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def cmd_trend(services: Services, args: argparse.Namespace) -> int:
    """Print the series (a table, or JSON)."""
    # lazy: the scoring models and the read side's series query, for trend only
    from evaledger.application.trends import parse_query, read_series
    from evaledger.domain.ledger import Context  # lazy: with the line above

    services.sync()
    query = parse_query(
        project=args.project,
        measure=args.measure,
        by=args.by,
        agent=args.agent,
        version=args.version,
        since=args.since,
        until=args.until,
    )
    series = read_series(services, query, Context(actor=args.actor))
    if args.json:
        emit_json(series.model_dump(mode="json"))
        return EXIT_OK
    fmt_at = "%Y-%m-%d" if series.by == "day" else "%Y-%m-%d %H:00"
    rows = [
        [
            line.agent,
            line.version,
            p.at.strftime(fmt_at),
            None if p.value is None else fmt(p.value, 4),
            p.n,
            ", ".join(r.run_key for r in p.runs),
        ]
        for line in series.lines
        for p in line.points
    ]
    if not rows:
        print(f"no cases in project {series.project!r} for these filters")
        return EXIT_OK
    print_table(rows, ["agent", "version", series.by, series.measure, "n", "runs"], fold=["runs"])
    return EXIT_OK
