"""`evaledger online alert add|list|disable|check`: online alerts (issue 33).

An alert posts to its webhook when its measure over a trailing window crosses a threshold, and
again when it recovers; `evaledger worker` checks every 5 minutes, `alert check` now.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from evaledger.api.cli.inputs import Commands, HelpFormatter
from evaledger.api.console import EXIT_OK, emit_json, print_table

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services


def register(actions: Any, commands: Commands) -> None:
    """Add `online alert` and its actions under `online`."""
    help_ = "alerts on a measure over a window, posted to a webhook (add, list, disable, check)"
    p = actions.add_parser("alert", help=help_, description=help_)
    verbs = p.add_subparsers(dest="alert_action", required=True, metavar="ACTION")

    def verb(name: str, text: str) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = verbs.add_parser(
            name,
            parents=[commands.common],
            help=text,
            description=text,
            formatter_class=HelpFormatter,
        )
        a.add_argument("--json", action="store_true", help="machine-readable output")
        a.set_defaults(func=cmd_alert, reads=name == "list")
        return a

    a = verb("add", "add an alert (recorded as an event, with you as its author)")
    a.add_argument("name", metavar="NAME", help="the alert's name, unique in the project")
    a.add_argument(
        "--measure",
        default="pass_rate",
        help="pass_rate, score, latency_p95, cost or SCORER/METRIC (default: pass_rate)",
    )
    a.add_argument("--below", type=float, help="breached below this value (default: none)")
    a.add_argument("--above", type=float, help="breached above this value (default: none)")
    a.add_argument("--window", default="1h", help="trailing window: 30m, 1h, 1d (default: 1h)")
    a.add_argument("--webhook", required=True, metavar="URL", help="http(s) URL to POST to")
    a.add_argument("--agent", help="only this agent's cases (default: every agent)")
    a.add_argument("--version", help="only this agent version (default: every version)")
    verb("list", "the project's alerts, their state and last delivery")
    d = verb("disable", "turn an alert off (its history stays)")
    d.add_argument("name", metavar="NAME", help="the alert's name")
    d.add_argument("--reason", help="why (recorded; default: none)")
    c = verb("check", "evaluate the enabled alerts now and post their transitions")
    c.add_argument(
        "--all-projects", action="store_true", help="every project's alerts, not only --project's"
    )


def cmd_alert(services: Services, args: argparse.Namespace) -> int:
    """Run one alert action."""
    # lazy: the alert use cases (httpx, tenacity, the scoring models), for alerts only
    from evaledger.application import alerts
    from evaledger.domain.ledger import Context  # lazy: with the line above

    ctx = Context(actor=args.actor)
    private = services.settings.alert_private_webhooks
    action = args.alert_action
    if action == "add":
        given = alerts.parse_alert(
            project=args.project,
            name=args.name,
            measure=args.measure,
            below=args.below,
            above=args.above,
            window_s=alerts.parse_window(args.window),
            webhook=args.webhook,
            agent=args.agent,
            version=args.version,
        )
        _show([alerts.add_alert(services, given, ctx, allow_private=private)], args.json)
    elif action == "list":
        _show(alerts.list_alerts(services, args.project, ctx), args.json)
    elif action == "disable":
        _show(
            [alerts.disable_alert(services, args.project, args.name, ctx, args.reason)], args.json
        )
    else:
        project = None if args.all_projects else args.project
        readings = alerts.check_alerts(services, ctx, project=project, allow_private=private)
        if args.json:
            emit_json([r.__dict__ for r in readings])
        else:
            rows = [
                [
                    r.project,
                    r.name,
                    r.value,
                    r.n,
                    _state(r.breached),
                    r.transition or "",
                    r.delivered,
                ]
                for r in readings
            ]
            print_table(rows, ["project", "alert", "value", "n", "state", "transition", "posted"])
    return EXIT_OK


def _state(breached: bool | None) -> str:
    return "no data" if breached is None else ("breached" if breached else "ok")


def _show(views: list[Any], as_json: bool) -> None:
    if as_json:
        emit_json([v.model_dump(mode="json") for v in views])
        return
    rows = [
        [
            v.name,
            v.measure,
            _threshold(v.below, v.above),
            f"{v.window_s}s",
            "enabled" if v.enabled else "disabled",
            "firing" if v.firing else "ok",
            v.last_delivery or "",
            v.defined_by,
            v.webhook,
        ]
        for v in views
    ]
    print_table(
        rows,
        ["alert", "measure", "threshold", "window", "status", "state", "delivery", "by", "webhook"],
    )


def _threshold(below: float | None, above: float | None) -> str:
    parts = ([f"< {below:g}"] if below is not None else []) + (
        [f"> {above:g}"] if above is not None else []
    )
    return " or ".join(parts)
