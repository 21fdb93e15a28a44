"""`evaledger online complete|seal`: OTLP traces into online runs, and the days' runs sealed.

The server records complete traces by itself (its completion loop) and `evaledger worker` seals
the runs of days that are over; these commands do the same on demand (a cron job, a store
served by `serve` without a worker, a day to close now).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import evaledger.api.cli.alerts as alerts
from evaledger.api.cli.inputs import Commands
from evaledger.api.console import EXIT_OK, emit_json

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services


def register(commands: Commands) -> None:
    """Add online (complete, seal)."""
    p = commands.subparsers.add_parser(
        "online", help="record complete OTLP traces as cases; seal the online runs of past days"
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, help_ in (
        ("complete", "record the complete traces (root ended, quiet) as cases"),
        ("seal", "record what is complete, then seal the online runs of days over"),
    ):
        a = actions.add_parser(name, parents=[commands.common], help=help_, description=help_)
        a.add_argument("--json", action="store_true", help="machine-readable output")
        a.add_argument(
            "--quiet",
            type=_seconds,
            metavar="SECONDS",
            help="seconds without a new span before a trace is complete "
            "(default: EVALEDGER_TRACE_QUIET or 30)",
        )
        if name == "seal":
            a.add_argument(
                "--all-projects",
                action="store_true",
                help="seal every project's online runs, not only --project's",
            )
        a.set_defaults(func=cmd_online, reads=False)
    alerts.register(actions, commands)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"0 to 86400 seconds, got {text}")
    return value


def _quiet(services: Services, args: argparse.Namespace) -> float:
    return float(args.quiet if args.quiet is not None else services.settings.trace_quiet_s)


def cmd_online(services: Services, args: argparse.Namespace) -> int:
    """Record the complete traces; with `seal`, then seal the online runs of days over."""
    # lazy: the OTLP messages (protobuf) and the ledger, only for online commands
    from evaledger.application.traces import complete_traces, seal_online_runs
    from evaledger.domain.ledger import Context  # lazy: with the line above

    ctx, quiet = Context(actor=args.actor), _quiet(services, args)
    if args.action == "complete":
        done = complete_traces(services, ctx, quiet_s=quiet)
        if args.json:
            runs = {str(k): [str(c) for c in v] for k, v in done.recorded.items()}
            emit_json({"cases": done.cases, "runs": runs, "waiting": done.waiting})
        else:
            print(f"recorded {done.cases} trace(s) as cases; {done.waiting} still open")
        return EXIT_OK
    project = None if args.all_projects else args.project
    sealed = seal_online_runs(services, ctx, quiet_s=quiet, project=project)
    if args.json:
        emit_json(
            [{"run_id": str(s.run_id), "run_key": s.run_key, "project": s.project} for s in sealed]
        )
    else:
        for s in sealed:
            print(f"sealed {s.project}/{s.run_key} ({s.cases} cases)")
        print(f"{len(sealed)} online run(s) sealed")
    return EXIT_OK
