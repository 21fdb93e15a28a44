"""The `evaledger` command line.

Exit codes: 0 ok, 1 regression or failed gate, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn
from uuid import UUID

import orjson
import pydantic

from api.bootstrap import Services, Settings, build_ledger
from domain.bundle import RunBundle
from domain.errors import EvaledgerError, NotFoundError, ValidationError
from domain.export import bundle_to_json, export_bundle
from domain.ledger import Context
from domain.spec import RunConfig, ScoringSpec, resolve_spec
from domain.verify import verify

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments or input: exit 2."""


# ---------------------------------------------------------------------------------------------
# output helpers


def emit_json(data: Any) -> None:
    """Print JSON (pretty, stable key order)."""
    sys.stdout.write(
        orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"
    )


class Progress:
    """A one-line progress indicator on a TTY (stderr); silent otherwise."""

    def __init__(self, label: str, enabled: bool | None = None) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._last = -1

    def __call__(self, done: int, total: int) -> None:
        """Report progress."""
        if not self.enabled or total <= 0:
            return
        pct = min(100, int(100 * done / total))
        if pct != self._last:
            self._last = pct
            sys.stderr.write(f"\r{self.label}: {pct:3d}% ({done}/{total})")
            sys.stderr.flush()

    def done(self) -> None:
        """End the line."""
        if self.enabled and self._last >= 0:
            sys.stderr.write("\n")


def fmt(value: Any, digits: int = 2) -> str:
    """Numbers rounded for display only."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain-text table."""
    cells = [[str(h) for h in header], *[[fmt(c) for c in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# input helpers


def read_json(path: str) -> Any:
    """Parse a JSON file; malformed JSON is an input error naming the file."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise UsageError(f"{path}: malformed JSON: {e}") from None


def describe(e: pydantic.ValidationError, prefix: str = "") -> str:
    """Every offending field of a pydantic error, one per line."""
    lines = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        lines.append(f"{prefix}{loc}: {err['msg']}")
    return "\n".join(lines)


def load_bundle(path: str) -> RunBundle:
    """A run bundle from a file, validated."""
    data = read_json(path)
    if isinstance(data, dict) and data.get("format") != "evaledger.run-bundle/1":
        raise UsageError(
            f"{path}: format: expected 'evaledger.run-bundle/1', got {data.get('format')!r}"
        )
    try:
        return RunBundle.model_validate(data)
    except pydantic.ValidationError as e:
        raise UsageError(f"{path}: invalid run bundle:\n{describe(e, '  ')}") from None


def load_spec(services: Services, path: str, project: str = "default") -> ScoringSpec:
    """A scoring spec from a file holding a run config plus policy fields."""
    data = read_json(path)
    if isinstance(data, dict) and "config" in data and isinstance(data["config"], dict):
        data = data["config"]
    try:
        config = RunConfig.model_validate(data)
    except pydantic.ValidationError as e:
        raise UsageError(f"{path}: invalid spec:\n{describe(e, '  ')}") from None
    catalogue = {m.name: m for m in services.reads.available_metrics(project)}
    return resolve_spec(config, catalogue)


def resolve_run(services: Services, ref: str, project: str = "default") -> UUID:
    """A run id from an id or a run key."""
    try:
        return UUID(ref)
    except ValueError:
        pass
    run = services.ledger.find_run(project, ref)
    if run is None:
        raise NotFoundError(f"no run with id or key {ref!r} in project {project!r}")
    return run.id


def parse_uuid(ref: str, what: str) -> UUID:
    """A UUID argument."""
    try:
        return UUID(ref)
    except ValueError:
        raise UsageError(f"{what}: not a valid id: {ref!r}") from None


# ---------------------------------------------------------------------------------------------
# commands


def cmd_import(services: Services, args: argparse.Namespace) -> int:
    """Import run bundles (idempotent)."""
    bundles = [(path, load_bundle(path)) for path in args.files]
    results = []
    progress = Progress("importing")
    for i, (path, bundle) in enumerate(bundles):
        r = services.ledger.import_bundle(bundle, Context(actor=args.actor))
        results.append(
            {
                "file": path,
                "run_id": str(r.run_id),
                "run_key": r.run_key,
                "events": r.events,
                "cases": r.cases,
                "new_cases": r.new_cases,
            }
        )
        progress(i + 1, len(bundles))
    progress.done()
    if args.json:
        emit_json({"imported": results})
    else:
        for item in results:
            what = (
                f"{item['events']} events"
                if item["events"]
                else "already imported, nothing written"
            )
            print(f"{item['run_id']}  {item['run_key']}  {item['cases']} cases  ({what})")
    return EXIT_OK


def cmd_export(services: Services, args: argparse.Namespace) -> int:
    """Export a run as a bundle."""
    run_id = resolve_run(services, args.run, args.project)
    data = orjson.dumps(
        bundle_to_json(export_bundle(services.ledger, run_id)), option=orjson.OPT_INDENT_2
    )
    if args.output:
        Path(args.output).write_bytes(data + b"\n")
    else:
        sys.stdout.write(data.decode() + "\n")
    return EXIT_OK


def cmd_runs(services: Services, args: argparse.Namespace) -> int:
    """List runs."""
    from projections.queries import RunFilter

    services.sync()
    rows, total = services.reads.list_runs(
        RunFilter(
            project=args.project,
            suite=args.suite,
            agent=args.agent,
            status=args.status,
            label=args.label,
            limit=args.limit,
        )
    )
    if args.json:
        emit_json(
            {"data": [r.model_dump(mode="json") for r in rows], "count": len(rows), "total": total}
        )
        return EXIT_OK
    print(
        table(
            [
                (
                    str(r.run_id),
                    r.run_key,
                    r.suite["name"],
                    r.agent["name"],
                    r.status,
                    r.case_count,
                    r.created_at,
                )
                for r in rows
            ],
            ["run_id", "key", "suite", "agent", "status", "cases", "created_at"],
        )
    )
    return EXIT_OK


AGGREGATE_FIELDS = (
    "weighted_metrics_score_pct",
    "metrics_pass_threshold",
    "metrics_passed",
    "cases_pass_rate_pct",
    "cases_pass_threshold",
    "cases_passed",
    "pass_rate",
    "passed_count",
    "failed_count",
    "error_count",
    "canceled_count",
    "total_executions",
    "unique_test_case_count",
    "avg_overall_score",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_avg_ms",
    "total_tokens",
    "total_cost_usd",
)


def show_payload(services: Services, run_id: UUID) -> dict[str, Any]:
    """The run, its aggregate and its cases (the JSON of `show`)."""
    run = services.reads.get_run(run_id)
    summary = services.reads.summary(run_id)
    scores = services.reads.case_scores(run_id)
    return {
        "run": run.model_dump(mode="json"),
        "aggregate": summary.aggregate.model_dump(mode="json"),
        "cases": [
            {
                "case_id": str(s.case_id),
                "test_case_key": s.test_case_key,
                "repetition": s.repetition,
                "status": s.status.value,
                "overall_score": s.overall_score,
                "passed": s.passed,
                "errored": s.errored,
                "gate": s.gate.value,
                "metric_scores": {m.metric: m.score for m in s.metric_scores},
                "outcome_results": [o.model_dump(mode="json") for o in s.outcome_results],
            }
            for s in scores
        ],
    }


def print_aggregate(aggregate: dict[str, Any], title: str) -> None:
    """The seed's aggregate fields, one per line."""
    print(title)
    for name in AGGREGATE_FIELDS:
        print(f"  {name:<28} {fmt(aggregate.get(name))}")


def cmd_show(services: Services, args: argparse.Namespace) -> int:
    """Show a run with its aggregate and cases."""
    services.sync()
    run_id = resolve_run(services, args.run, args.project)
    payload = show_payload(services, run_id)
    if args.json:
        emit_json(payload)
        return EXIT_OK
    run = payload["run"]
    print(f"run {run['run_id']}  {run['run_key']}  [{run['status']}]")
    print(
        f"  suite {run['suite']['name']} v{run['suite'].get('version')}"
        f"  agent {run['agent']['name']} v{run['agent'].get('version')}  spec {run['spec_id']}"
    )
    print_aggregate(payload["aggregate"], "aggregate:")
    print(
        table(
            [
                (
                    c["test_case_key"],
                    c["repetition"],
                    c["status"],
                    c["overall_score"],
                    c["passed"],
                    c["gate"],
                )
                for c in payload["cases"]
            ],
            ["test_case_key", "rep", "status", "score", "passed", "gate"],
        )
    )
    return EXIT_OK


def cmd_rescore(services: Services, args: argparse.Namespace) -> int:
    """Replay a run under another spec."""
    services.sync()
    run_id = resolve_run(services, args.run, args.project)
    spec = load_spec(services, args.spec, services.reads.get_run(run_id).project)
    result = services.reads.rescore(run_id, spec)
    if args.json:
        emit_json(result)
        return EXIT_OK
    print_rescore(result)
    return EXIT_OK


def print_rescore(result: dict[str, Any]) -> None:
    """Before and after, side by side."""
    before, after = result["before"]["aggregate"], result["after"]["aggregate"]
    print(
        f"rescore of run {result['run_id']}: {result['before']['spec_id']} → "
        f"{result['after']['spec_id']} (0 judge calls, 0 events)"
    )
    print(
        table(
            [(n, before.get(n), after.get(n)) for n in AGGREGATE_FIELDS[:12]],
            ["field", "before", "after"],
        )
    )
    changed = result["changed_cases"]
    print(f"{len(changed)} case(s) changed")
    for c in changed[:20]:
        print(
            f"  {c['test_case_key']} rep {c['repetition']}: "
            f"{fmt(c['before']['overall_score'])} {c['before']['status']} → "
            f"{fmt(c['after']['overall_score'])} {c['after']['status']}"
        )


def cmd_history(services: Services, args: argparse.Namespace) -> int:
    """Every event of a case."""
    from api.audit import case_history

    payload = case_history(services, parse_uuid(args.case, "CASE"), args.version)
    if args.json:
        emit_json(payload)
        return EXIT_OK
    print(
        f"case {payload['case_id']} (run {payload['run_id']}), {payload['latest_version']} events"
    )
    for e in payload["events"]:
        print(
            f"  v{e['version']:<3} {e['timestamp']}  {e['type']:<24} "
            f"by {e['actor']}  {e['hash'][:12]}"
        )
    score = payload["state"]["score"]
    print(
        f"state as of v{payload['version']}: {score['status']}, "
        f"overall {fmt(score['overall_score'])}, passed {fmt(score['passed'])} "
        f"({score['gate_reason']})"
    )
    return EXIT_OK


def cmd_project(services: Services, args: argparse.Namespace) -> int:
    """Run the projections: catch up, follow, or rebuild one."""
    if args.rebuild:
        try:
            reached = services.runner.rebuild(args.rebuild)
        except KeyError as e:
            raise UsageError(str(e.args[0])) from None
        print(f"rebuilt {args.rebuild} to position {reached}")
        return EXIT_OK
    progress = Progress("projecting")
    reached = services.runner.catch_up(progress=progress)
    progress.done()
    print(f"projections at position {reached}")
    if args.follow:
        stop = threading.Event()
        try:
            services.runner.follow(
                stop, poll_interval=args.poll, safety_interval=args.safety_interval
            )
        except KeyboardInterrupt:
            stop.set()
    return EXIT_OK


def cmd_verify(services: Services, args: argparse.Namespace) -> int:
    """Recompute every hash chain and seal."""
    progress = Progress("verifying")
    report = verify(services.ledger, progress)
    progress.done()
    if args.json:
        emit_json(
            {
                "ok": report.ok,
                "events": report.events,
                "aggregates": report.aggregates,
                "runs_sealed": report.runs_sealed,
                "broken": report.broken,
            }
        )
    elif report.ok:
        print(
            f"ok: {report.events} events in {report.aggregates} aggregates, "
            f"{report.runs_sealed} sealed runs"
        )
    else:
        print(f"BROKEN: first broken link: {report.broken[0]}")
        for line in report.broken[1:10]:
            print(f"  also: {line}")
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_serve(services: Services, args: argparse.Namespace) -> int:
    """Serve the HTTP API."""
    import uvicorn

    from api.app import create_app

    uvicorn.run(create_app(services=services), host=args.host, port=args.port, log_level="info")
    return EXIT_OK


def cmd_demo(services: Services, args: argparse.Namespace) -> int:
    """Load the demo runs into the store and show what they say."""
    from api.demo import run_demo

    return run_demo(services, args)


# ---------------------------------------------------------------------------------------------
# parser


COMMANDS: dict[str, Callable[[Services, argparse.Namespace], int]] = {}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        help="sqlite:///path or postgresql://... (default: EVALEDGER_DB or sqlite:///.evaledger/)",
    )
    common.add_argument(
        "--project", default="default", help="project of run keys (default: default)"
    )
    common.add_argument("--actor", default="cli", help="who records (default: cli)")
    parser = argparse.ArgumentParser(
        prog="evaledger", description="Event-sourced evaluation ledger."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str,
        func: Callable[[Services, argparse.Namespace], int],
        help_: str,
        json: bool = True,
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_, description=help_)
        if json:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=func)
        COMMANDS[name] = func
        return p

    add("demo", cmd_demo, "load the demo runs and show scores, a what-if rescore and a comparison")
    p = add("serve", cmd_serve, "serve the HTTP API", json=False)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p = add("import", cmd_import, "import run bundles (idempotent)")
    p.add_argument("files", nargs="+", metavar="FILE")
    p = add("export", cmd_export, "export a run as a run bundle", json=False)
    p.add_argument("run", metavar="RUN")
    p.add_argument("-o", "--output", help="write to a file instead of stdout")
    p = add("runs", cmd_runs, "list runs, newest first")
    p.add_argument("--suite")
    p.add_argument("--agent")
    p.add_argument("--status")
    p.add_argument("--label", help="key=value")
    p.add_argument("--limit", type=int, default=50)
    p = add("show", cmd_show, "show a run with its aggregate and cases")
    p.add_argument("run", metavar="RUN")
    p = add("rescore", cmd_rescore, "replay a run under another scoring spec (no judge calls)")
    p.add_argument("run", metavar="RUN")
    p.add_argument("--spec", required=True, metavar="FILE")
    p = add("history", cmd_history, "every event of a case, and its state as of a version")
    p.add_argument("case", metavar="CASE")
    p.add_argument("--version", type=int)
    p = add(
        "project",
        cmd_project,
        "run the projections (catch up, --follow, --rebuild NAME)",
        json=False,
    )
    p.add_argument("--follow", action="store_true", help="keep following the log")
    p.add_argument("--rebuild", metavar="NAME", help="rebuild one projection from position 0")
    p.add_argument("--poll", type=float, default=0.2, help="poll interval in seconds")
    p.add_argument(
        "--safety-interval", type=float, default=30.0, help="full catch-up every N seconds"
    )
    add("verify", cmd_verify, "recompute every hash chain and run seal")
    return parser


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print an error and exit."""
    sys.stderr.write(f"evaledger: error: {message}\n")
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        services = build_ledger(Settings.from_env(db=args.db))
    except EvaledgerError as e:
        fail(e.detail)
    try:
        code = args.func(services, args)
    except UsageError as e:
        fail(str(e))
    except ValidationError as e:
        fail(e.detail)
    except EvaledgerError as e:
        fail(e.detail)
    except pydantic.ValidationError as e:
        fail("invalid input:\n" + describe(e, "  "))
    finally:
        services.close()
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
