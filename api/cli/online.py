"""`evaledger online complete|seal|rule`: OTLP traces into online runs; online evaluators.

The server records complete traces by itself (its completion loop) and `evaledger worker` seals
the runs of days that are over; `complete` and `seal` do the same on demand (a cron job, a store
served by `serve` without a worker, a day to close now). `rule add|list|disable` records the
project's online evaluators (`application/online_rules.py`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    _register_rule(commands, actions)
    alerts.register(actions, commands)


def _register_rule(commands: Commands, actions: Any) -> None:
    """Add online rule (add, list, disable)."""
    r = actions.add_parser(
        "rule", help="online evaluators: judge a sample of the traces as they are recorded"
    )
    verbs = r.add_subparsers(dest="verb", required=True, metavar="VERB")
    add = verbs.add_parser(
        "add",
        parents=[commands.common],
        help="record a new rule of --project",
        description="record a new rule of --project: matching traces whose draw (by rule name "
        "and trace id) is below --sample are judged when recorded",
    )
    add.add_argument("name", metavar="NAME", help="the rule's name (unique in the project)")
    add.add_argument(
        "--sample", type=float, required=True, metavar="RATE", help="0 to 1: share judged"
    )
    add.add_argument(
        "--where",
        default="",
        metavar="FILTER",
        help="key=value joined by 'and'; keys agent, version, model, service, attribute.NAME "
        "(default: every trace)",
    )
    add.add_argument("--judge", required=True, metavar="PROVIDER:MODEL", help="the judge")
    add.add_argument(
        "--rubric", metavar="FILE", help="judge rubrics (evaledger.rubric/1, JSON or YAML)"
    )
    add.add_argument(
        "--outcome",
        action="append",
        default=[],
        metavar="TEXT",
        help="an expected outcome the judge checks (repeatable; default: none)",
    )
    add.add_argument(
        "--max-cost-per-day",
        type=float,
        metavar="USD",
        help="past this day's cost, sampled traces are skipped (default: no budget)",
    )
    add.add_argument(
        "--allow-self-judge",
        action="store_true",
        help="allow a judge of the agent's own vendor (flagged)",
    )
    listed = verbs.add_parser(
        "list", parents=[commands.common], help="the rules of --project, enabled and disabled"
    )
    off = verbs.add_parser(
        "disable", parents=[commands.common], help="stop a rule (its history stays)"
    )
    off.add_argument("name", metavar="NAME", help="the rule")
    off.add_argument("--reason", help="why (recorded; default: none)")
    for p in (add, listed, off):
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=cmd_rule, reads=False)


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


def cmd_rule(services: Services, args: argparse.Namespace) -> int:
    """Add, list or disable the project's online rules."""
    # lazy: the judge runner and its providers, only for online rule commands
    from evaledger.application import online_rules as rules
    from evaledger.domain.ledger import Context  # lazy: with the line above
    from evaledger.judging.rubric import load_rubrics  # lazy: jinja2, yaml, the rubrics

    ctx = Context(actor=args.actor)
    if args.verb == "add":
        rubrics = list(load_rubrics(Path(args.rubric)).values()) if args.rubric else []
        body = rules.OnlineRuleInput(
            name=args.name,
            sample=args.sample,
            where=args.where,
            judge=args.judge,
            rubrics=rubrics,
            outcomes=args.outcome,
            max_cost_per_day_usd=args.max_cost_per_day,
            allow_self_judge=args.allow_self_judge,
        )
        shown = [rules.add_online_rule(services, args.project, body, ctx).rule]
    elif args.verb == "disable":
        shown = [rules.disable_online_rule(services, args.project, args.name, args.reason, ctx)]
    else:
        shown = rules.list_online_rules(services, args.project, ctx).data
    if args.json:
        emit_json([r.model_dump(mode="json") for r in shown])
        return EXIT_OK
    for r in shown:
        state = "enabled" if r.enabled else f"disabled by {r.disabled_by}"
        budget = f"${r.max_cost_per_day_usd:g}/day" if r.max_cost_per_day_usd else "no budget"
        print(
            f"{r.name}  {state}  sample {r.sample:g}  where {r.where or '(all)'}  "
            f"judge {r.judge}  {budget}  added by {r.added_by} {r.added_at:%Y-%m-%d %H:%M}Z"
        )
    if args.verb == "list":
        print(f"{len(shown)} rule(s)")
    return EXIT_OK
