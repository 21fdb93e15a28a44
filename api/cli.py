"""The `evaledger` command line.

Exit codes: 0 ok, 1 regression / failed gate / grade below --min-score / tampering found by
`verify`, 2 usage or input error, 3 infrastructure error (store missing, unreachable, locked,
corrupt or not append-only).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any, NoReturn, TextIO
from uuid import UUID

import orjson
import pydantic
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from evaledger.api.bootstrap import (
    Services,
    Settings,
    build_services,
    infrastructure_error,
    migrate_store,
)
from evaledger.domain.aggregates import RunStatus
from evaledger.domain.errors import (
    EvaledgerError,
    InfrastructureError,
    NotFoundError,
    ValidationError,
)
from evaledger.domain.export import bundle_to_json, export_bundle
from evaledger.domain.ledger import Context
from evaledger.domain.spec import RunConfig, ScoringSpec, resolve_spec
from evaledger.domain.verify import Checkpoint, verify
from evaledger.importers.bundle import describe
from evaledger.projections.queries import LABEL_PATTERN, RunFilter

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3

EPILOG = """\
exit codes:
  0  ok
  1  a regression, a failed gate or threshold, a grade below --min-score, a broken hash chain
  2  usage or input error (the offending argument or field is named)
  3  infrastructure error: the store does not exist, is unreachable, locked or corrupt

storage (--db or EVALEDGER_DB):
  sqlite:///relative/dir/     three slashes: a path relative to the working directory
  sqlite:////absolute/dir/    four slashes: an absolute path (/absolute/dir/)
  postgresql://user:password@host:5432/dbname
  default: sqlite:///.evaledger/ (events.sqlite + views.sqlite in ./.evaledger/)
  Read commands never create a store: a missing one is exit 3.

shell completion:
  eval "$(evaledger completion bash)"    # or: evaledger completion zsh > ~/.zfunc/_evaledger
"""


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
    """A rich progress bar on stderr counting items (cases, events), only when it is a TTY."""

    def __init__(self, label: str, enabled: bool | None = None) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar: RichProgress | None = None

    def __call__(self, done: int, total: int) -> None:
        """Report `done` of `total`."""
        if not self.enabled:
            return
        if self._bar is None:
            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr),
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=total or None)
        # A total of 0 is not known yet (an import's validating pass): count without a bar end.
        self._bar.update(self._task, completed=done, total=total or None)

    def done(self) -> None:
        """Stop the bar (it stays on screen at its final count)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def fmt(value: Any, digits: int = 2) -> str:
    """Numbers rounded for display only."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


STATUS_STYLE = {
    "passed": "green",
    "improvement": "green",
    "completed": "green",
    "failed": "red",
    "regression": "red",
    "errored": "yellow",
    "error": "yellow",
    "canceled": "dim",
}
"""Colours of status cells (on a terminal only)."""

PLAIN_WIDTH = 10_000
"""Piped output is never wrapped: a script reads whole rows."""


def print_table(
    rows: Sequence[Sequence[Any]], header: Sequence[str], *, fold: Sequence[str] = ()
) -> None:
    """A table on stdout: fitted to the terminal and coloured on a TTY, plain when piped.

    Columns named in `fold` wrap on a narrow terminal; the others (ids) are never cut.
    """
    out = sys.stdout
    tty = out.isatty()
    cells = [[fmt(c) for c in r] for r in rows]
    t = Table(
        box=box.SIMPLE_HEAD if tty else None,
        show_edge=False,
        pad_edge=False,
        header_style="bold" if tty else "",
    )
    for i, name in enumerate(header):
        numeric = bool(rows) and all(
            (isinstance(r[i], int | float) and not isinstance(r[i], bool)) or r[i] is None
            for r in rows
        )
        t.add_column(
            name,
            justify="right" if numeric else "left",
            no_wrap=name not in fold,
            overflow="fold",
        )
    for row in cells:
        t.add_row(*(Text(c, style=STATUS_STYLE.get(c, "")) if tty else Text(c) for c in row))
    if tty:
        Console(file=out, highlight=False).print(t)
        return
    buffer = io.StringIO()
    Console(file=buffer, width=PLAIN_WIDTH, no_color=True, highlight=False).print(t)
    out.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))


# ---------------------------------------------------------------------------------------------
# input helpers


def read_json(path: str) -> Any:
    """Parse a JSON file; malformed JSON, or a value no store can keep, is an input error."""
    from evaledger.domain.types import UnstorableJSONError, parse_input_json

    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    try:
        return parse_input_json(data)
    except UnstorableJSONError as e:
        raise UsageError(f"{path}: {e}") from None


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


def resolve_case(services: Services, args: argparse.Namespace) -> UUID:
    """A case id from `CASE_ID`, or from `RUN TEST_CASE_KEY [--rep N]`."""
    refs: list[str] = args.case
    if len(refs) == 1:
        if args.rep is not None:
            raise UsageError("--rep: give RUN TEST_CASE_KEY --rep N, or a CASE id alone")
        return parse_uuid(refs[0], "CASE")
    if len(refs) != 2:
        raise UsageError("give a CASE id, or RUN TEST_CASE_KEY [--rep N]")
    run_id = resolve_run(services, refs[0], args.project)
    key, rep = refs[1], args.rep or 0
    services.sync()
    found = [
        s.case_id
        for s in services.reads.case_scores(run_id)
        if s.test_case_key == key and s.repetition == rep
    ]
    if not found:
        raise NotFoundError(f"no case {key!r} repetition {rep} in run {refs[0]!r}")
    if len(found) > 1:
        ids = ", ".join(str(i) for i in found)
        raise UsageError(
            f"{key!r} repetition {rep} names {len(found)} cases ({ids}): give a CASE id"
        )
    return found[0]


# ---------------------------------------------------------------------------------------------
# commands


def cmd_import(services: Services, args: argparse.Namespace) -> int:
    """Import run bundles and peer result files (idempotent, streamed)."""
    from evaledger.importers.load import import_all, open_imports

    imports = open_imports(
        args.files,
        args.from_format,
        run_key=args.run_key,
        project=None if args.project == "default" else args.project,
    )
    # Counts cases: first the validating pass (total unknown), then the writes.
    progress = Progress("importing cases")
    try:
        done = import_all(services.ledger, imports, Context(actor=args.actor), progress)
    finally:
        progress.done()
    results = [
        {
            "file": d.source.sources[0],
            "format": d.source.format.value,
            "run_id": str(d.result.run_id),
            "run_key": d.result.run_key,
            "events": d.result.events,
            "cases": d.result.cases,
            "new_cases": d.result.new_cases,
        }
        for d in done
    ]
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
    services.sync()
    rows, total = services.reads.list_runs(
        RunFilter(
            project=args.project,
            key=args.key,
            suite=args.suite,
            agent=args.agent,
            status=args.status,
            label=args.label,
            limit=args.limit,
        )
    )
    aggregates = [services.reads.summary(r.run_id).aggregate for r in rows]
    if args.json:
        emit_json(
            {
                "data": [
                    {
                        **r.model_dump(mode="json"),
                        "pass_rate": a.pass_rate,
                        "weighted_metrics_score_pct": a.weighted_metrics_score_pct,
                    }
                    for r, a in zip(rows, aggregates, strict=True)
                ],
                "count": len(rows),
                "total": total,
            }
        )
        return EXIT_OK
    print_table(
        [
            (
                str(r.run_id),
                r.run_key,
                r.suite["name"],
                r.agent["name"],
                r.status,
                r.case_count,
                percent(a.pass_rate),
                a.weighted_metrics_score_pct,
                r.created_at,
            )
            for r, a in zip(rows, aggregates, strict=True)
        ],
        ["run_id", "key", "suite", "agent", "status", "cases", "pass", "score", "created_at"],
        fold=("key", "suite", "agent"),
    )
    if total > len(rows):
        print(f"{len(rows)} of {total} runs (--limit {args.limit})")
    return EXIT_OK


def percent(fraction: float | None) -> str | None:
    """A fraction as a percentage for display."""
    return None if fraction is None else f"{100 * fraction:.1f}%"


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


def show_payload(
    services: Services, run_id: UUID, status: str | None = None, limit: int | None = None
) -> dict[str, Any]:
    """The run, its aggregate and its cases (the JSON of `show`), cases filtered by status."""
    run = services.reads.get_run(run_id)
    summary = services.reads.summary(run_id)
    scores, matching = services.reads.case_page(run_id, status, limit)
    return {
        "cases_matching": matching,
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
                **({"named_scores": s.named_scores} if s.named_scores else {}),
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
    status = "failed" if args.failed else "errored" if args.errored else None
    payload = show_payload(services, run_id, status, args.limit)
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
    for name, mean in payload["aggregate"].get("named_score_means", {}).items():
        print(f"  {'named score ' + name:<28} {fmt(mean, 4)}")
    print_table(
        [
            (
                c["case_id"],
                c["test_case_key"],
                c["repetition"],
                c["status"],
                c["overall_score"],
                c["gate"],
            )
            for c in payload["cases"]
        ],
        ["case_id", "test_case_key", "rep", "status", "score", "gate"],
        fold=("test_case_key", "gate"),
    )
    shown, matching = len(payload["cases"]), payload["cases_matching"]
    if shown < matching:
        what = f"{status} cases" if status else "cases"
        print(f"{shown} of {matching} {what} shown (--limit {args.limit})")
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
    print_table(
        [(n, before.get(n), after.get(n)) for n in AGGREGATE_FIELDS[:12]],
        ["field", "before", "after"],
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
    from evaledger.api.audit import case_history

    payload = case_history(services, resolve_case(services, args), args.version)
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
    progress = Progress("projecting events")
    reached = services.runner.catch_up(progress=progress)
    progress.done()
    print(f"projections at position {reached}")
    if args.follow:
        stop = threading.Event()
        # SIGTERM (a supervisor stopping us) ends the loop between pages, never inside one.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            services.runner.follow(
                stop, poll_interval=args.poll, safety_interval=args.safety_interval
            )
        except KeyboardInterrupt:
            stop.set()
    return EXIT_OK


def cmd_verify(services: Services, args: argparse.Namespace) -> int:
    """Recompute every hash chain and seal."""
    progress = Progress("verifying events")
    expect = Checkpoint.parse(args.expect) if args.expect else None
    report = verify(services.ledger, progress, expect=expect)
    progress.done()
    if args.json:
        emit_json(report.as_json())
    elif report.ok:
        print(
            f"ok: {report.events} events in {report.aggregates} aggregates, "
            f"{report.runs_sealed} sealed runs, {report.commits} commits chained"
            + (", signatures checked" if report.keyed else " (unsigned: no checkpoint key)")
        )
        if report.checkpoint is not None:
            print(f"checkpoint: {report.checkpoint}")
    else:
        print(f"BROKEN at position {report.first_broken_position}: {report.broken[0]}")
        for line in report.broken[1:10]:
            print(f"  also: {line}")
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_migrate(services: Services, args: argparse.Namespace) -> int:
    """Report the migrated store (the migration itself runs in `main`, before opening it)."""
    granted = f", granted to {args.app_role}" if args.app_role else ""
    print(
        f"migrated: {services.location.kind} store at position {services.ledger.position()}, "
        f"append-only{granted}"
    )
    return EXIT_OK


def cmd_compare(services: Services, args: argparse.Namespace) -> int:
    """Compare two runs; exit 1 on a regression or a failed candidate threshold."""
    from evaledger.scoring.comparison import CompareThresholds, render_markdown

    services.sync()
    if args.against_baseline:
        if len(args.runs) != 1:
            raise UsageError("with --against-baseline give only the CANDIDATE run")
        candidate = resolve_run(services, args.runs[0], args.project)
        row = services.reads.get_run(candidate)
        baseline = services.reads.baseline(row.agent["name"], row.suite["name"], row.project).run_id
    else:
        if len(args.runs) != 2:
            raise UsageError("give BASELINE and CANDIDATE runs (or --against-baseline CANDIDATE)")
        baseline = resolve_run(services, args.runs[0], args.project)
        candidate = resolve_run(services, args.runs[1], args.project)
    thresholds = CompareThresholds(
        max_pass_rate_drop=args.max_pass_rate_drop,
        max_avg_score_drop=args.max_avg_score_drop,
        max_latency_increase_pct=args.max_latency_increase_pct,
        case_score_delta=args.case_score_delta,
    )
    spec = load_spec(services, args.spec, args.project) if args.spec else None
    result = services.reports.compare(baseline, candidate, thresholds, spec)
    candidate_agg = result.aggregate.candidate_metrics
    failed_thresholds = [
        name for name in ("metrics_passed", "cases_passed") if getattr(candidate_agg, name) is False
    ]
    gate_failures = [] if args.no_fail_on_thresholds else failed_thresholds
    if args.json:
        emit_json(result.model_dump(mode="json"))
    elif args.markdown:
        sys.stdout.write(render_markdown(result, gate_failures=gate_failures) + "\n")
    else:
        print_comparison(result)
        if gate_failures:
            print(f"candidate fails its own thresholds: {', '.join(gate_failures)}")
    return EXIT_FAIL if result.verdict.regression_detected or gate_failures else EXIT_OK


def print_comparison(result: Any) -> None:
    """A readable comparison summary."""
    agg = result.aggregate
    verdict = "REGRESSION" if result.verdict.regression_detected else "no regression"
    print(f"baseline {result.baseline_run_id} → candidate {result.candidate_run_id}: {verdict}")
    for reason in result.verdict.reasons:
        print(f"  - {reason}")
    b, c = agg.baseline_metrics, agg.candidate_metrics
    print_table(
        [
            ("pass_rate", b.pass_rate, c.pass_rate, agg.pass_rate_delta),
            (
                "avg_score",
                b.weighted_metrics_score_pct,
                c.weighted_metrics_score_pct,
                agg.avg_score_delta,
            ),
            ("latency_avg_ms", b.latency_avg_ms, c.latency_avg_ms, agg.latency_avg_delta_ms),
            ("cost_usd", b.total_cost_usd, c.total_cost_usd, agg.cost_delta_usd),
        ],
        ["", "baseline", "candidate", "delta"],
    )
    print(
        f"cases: {agg.total_regressions} regression, {agg.total_improvements} improvement, "
        f"{agg.total_unchanged} unchanged, {agg.total_errors} error"
    )
    changed = [
        tc
        for tc in result.test_case_comparisons
        if tc.status in ("regression", "improvement", "error")
    ]
    if changed:
        # The flip behind each status: pass → fail, or the score move past case_score_delta.
        print_table(
            [
                (
                    tc.status,
                    tc.test_case_key,
                    f"{outcome(tc.baseline_passed)} → {outcome(tc.candidate_passed)}",
                    f"{fmt(tc.baseline_score)} → {fmt(tc.candidate_score)}",
                    tc.score_delta,
                )
                for tc in changed
            ],
            ["", "test_case_key", "baseline → candidate", "score", "Δ score"],
            fold=("test_case_key",),
        )
    stats = result.statistics
    print(
        f"statistics: McNemar p={fmt(stats.mcnemar.p_value, 4)} (b={stats.mcnemar.b}, "
        f"c={stats.mcnemar.c}); mean Δ score {fmt(stats.score_delta_ci95.mean)} "
        f"[{fmt(stats.score_delta_ci95.low)}, {fmt(stats.score_delta_ci95.high)}] → "
        f"{stats.verdict}"
    )
    for n in result.named_scores:
        ci = n.paired
        print(
            f"named score {n.name}: {fmt(n.baseline_mean, 4)} → {fmt(n.candidate_mean, 4)} "
            f"(Δ {fmt(n.mean_delta, 4)}; paired Δ [{fmt(ci.low, 4)}, {fmt(ci.high, 4)}], "
            f"n={ci.n}) → {n.verdict}"
        )
    for w in result.warnings:
        print(f"warning: {w}")


def outcome(passed: bool | None) -> str:
    """`pass`, `fail`, or `—` (errored or missing) for display."""
    return "—" if passed is None else "pass" if passed else "fail"


def cmd_gate(services: Services, args: argparse.Namespace) -> int:
    """Exit 1 when the run fails its metrics or cases threshold."""
    services.sync()
    run_id = resolve_run(services, args.run, args.project)
    agg = services.reads.summary(run_id).aggregate
    failed = [n for n in ("metrics_passed", "cases_passed") if getattr(agg, n) is False]
    if args.json:
        emit_json(
            {
                "run_id": str(run_id),
                "passed": not failed,
                "failed": failed,
                "aggregate": agg.model_dump(mode="json"),
            }
        )
    else:
        print(
            f"metrics: {fmt(agg.weighted_metrics_score_pct)} vs "
            f"{fmt(agg.metrics_pass_threshold)} → "
            f"{fmt(agg.metrics_passed)}; cases: {fmt(agg.cases_pass_rate_pct)} vs "
            f"{fmt(agg.cases_pass_threshold)} → {fmt(agg.cases_passed)}"
        )
        print("gate: FAILED (" + ", ".join(failed) + ")" if failed else "gate: passed")
    return EXIT_FAIL if failed else EXIT_OK


def cmd_baseline(services: Services, args: argparse.Namespace) -> int:
    """Approve, revoke or show a baseline."""
    ctx = Context(actor=args.actor)
    if args.action == "show":
        if not (args.agent and args.suite):
            raise UsageError("baseline show needs --agent and --suite")
        services.sync()
        row = services.reads.baseline(args.agent, args.suite, args.project)
        if args.json:
            emit_json(row.model_dump(mode="json"))
        else:
            print(f"{row.run_id}  {row.run_key}  (agent {args.agent}, suite {args.suite})")
        return EXIT_OK
    if not args.run:
        raise UsageError(f"baseline {args.action} needs a RUN")
    run_id = resolve_run(services, args.run, args.project)
    if args.action == "approve":
        w = services.ledger.approve_baseline(run_id, ctx, args.reason)
    else:
        w = services.ledger.revoke_baseline(run_id, ctx, args.reason)
    if args.json:
        emit_json({"run_id": str(run_id), "position": w.position, "events": w.events})
    else:
        print(f"baseline {args.action}d: {run_id} by {args.actor}")
    return EXIT_OK


def cmd_grade(services: Services, args: argparse.Namespace) -> int:
    """Grade a run; exit 1 when the overall score is below --min-score or null."""
    from evaledger.scoring.grading import grading_spec

    services.sync()
    run_id = resolve_run(services, args.run, args.project)
    if args.spec:
        data = read_json(args.spec)
        section = data.get("grading") if isinstance(data, dict) else None
        if not isinstance(section, dict):
            raise UsageError(f"{args.spec}: grading: the spec has no grading section")
        try:
            grading = grading_spec(section)
        except (ValueError, pydantic.ValidationError) as e:
            raise UsageError(f"{args.spec}: grading: {e}") from None
        if args.min_score is not None:
            grading = grading.model_copy(update={"min_score": args.min_score})
    else:
        grading = services.reports.grading_for(run_id, args.preset, args.min_score)
    result = services.reports.grade(run_id, grading, strategic_only=args.strategic)
    overall = result.overall
    if args.json:
        emit_json(result.model_dump(mode="json"))
    else:
        print_grade(result)
    return EXIT_OK if overall.score is not None and overall.passed else EXIT_FAIL


def print_grade(result: Any) -> None:
    """A scorecard."""
    o = result.overall
    cap = f" (capped from {fmt(o.score_before_cap, 4)})" if o.cap_applied else ""
    print(
        f"grade {o.grade}: overall {fmt(o.score, 4)}{cap}, min_score {fmt(o.min_score)} → "
        + ("passed" if o.passed else "FAILED")
    )
    print(f"strategic score {fmt(o.strategic_score, 4)}")
    for name, value in result.category_scores.items():
        print(f"  {name:<18} {fmt(value, 4)}")
    for m in result.mandatory_minimums:
        data = m.model_dump()
        print(
            f"  mandatory {data.get('test_id')} ≥ {data.get('minimum')}: "
            f"{data.get('status')} ({fmt(data.get('score'), 4)})"
        )
    for w in result.warnings[:10]:
        print(f"warning: {w}")


def cmd_rollup(services: Services, args: argparse.Namespace) -> int:
    """A Voxli pivot of one or several runs."""
    from evaledger.scoring.rollups import render_table

    services.sync()
    run_ids = [resolve_run(services, r, args.project) for r in args.runs]
    result = services.reports.rollup(run_ids, _csv(args.rows), _csv(args.columns), args.metric)
    if args.json:
        emit_json(result.model_dump(mode="json"))
    else:
        print(render_table(result))
        s = result.summary
        print(
            f"summary: score {fmt(s.score)}, {s.results} results, {s.hallucinations} hallucinations"
        )
    return EXIT_OK


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def cmd_explain(services: Services, args: argparse.Namespace) -> int:
    """How a case's verdict became its pass/fail and entered its run's aggregate."""
    from evaledger.api.audit import explain

    case_id = resolve_case(services, args)
    spec = None
    if args.spec:
        services.sync()
        facts, _ = services.reads.case_score(case_id)
        spec = load_spec(services, args.spec, services.reads.get_run(facts.run_id).project)
    payload = explain(services, case_id, spec)
    if args.json:
        emit_json(payload)
        return EXIT_OK
    print(
        f"case {payload['case_id']} ({payload['test_case_key']} rep {payload['repetition']}) "
        f"under {payload['spec_id']} ({payload['spec_source']} spec)"
    )
    for v in payload["verdicts"]:
        judge = v["judge"]
        print(
            f"verdict {v['verdict_id']} by {judge.get('provider')}/{judge.get('model')} "
            f"[{v['parse_status']}] {'counted' if v['counted'] else 'not counted'}"
        )
        print(f"  prompt: {(v['prompt'] or '')[:160]!r}")
        print(f"  raw reply: {(v['raw_output'] or '')[:160]!r}")
        if v["error"]:
            print(f"  error: {v['error']}")
        for c in v["corrections"]:
            print(f"  {c['type']} by {c['actor']} at {c['timestamp']}: {c['reason']}")
    print_table(
        [
            (w["metric"], w["score"], w["label"], w["normalised_weight"], w["contribution"])
            for w in payload["weights"]
        ],
        ["metric", "score", "label", "weight", "contribution"],
    )
    o, g, r = payload["overall_score"], payload["gate"], payload["run_aggregate"]
    print(f"overall_score {fmt(o['value'])} = {o['formula']}")
    print(f"gate ({g['policy']}): {g['rule']} → {g['status']}: {g['reason']}")
    print(
        f"run aggregate: counts in metric mean: {fmt(r['counts_in_metric_mean'])}; "
        f"counts as {r['counts_as']}; run weighted_metrics_score_pct "
        f"{fmt(r['weighted_metrics_score_pct'])}, cases_pass_rate_pct "
        f"{fmt(r['cases_pass_rate_pct'])}"
    )
    return EXIT_OK


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: only this machine can connect."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def cmd_serve(services: Services, args: argparse.Namespace) -> int:
    """Serve the HTTP API; open (token-less) serving only on loopback."""
    import uvicorn

    from evaledger.api.app import create_app

    if not services.tokens_required():
        if not is_loopback(args.host):
            raise UsageError(
                f"refusing to serve on {args.host} without API tokens: anyone who can reach it "
                "could read and write every project. Create a token first (evaledger token "
                "create --project P --scope admin) or bind 127.0.0.1."
            )
        sys.stderr.write(
            "evaledger: serving without tokens (loopback only): every local client can read "
            "and write every project\n"
        )
    if args.open:
        from evaledger.api.web.launch import open_when_up

        open_when_up(f"http://{args.host}:{args.port}")
    uvicorn.run(create_app(services=services), host=args.host, port=args.port, log_level="info")
    return EXIT_OK


def cmd_token(services: Services, args: argparse.Namespace) -> int:
    """Create, list or revoke API tokens."""
    from evaledger.domain.events import TokenScope
    from evaledger.domain.types import Key

    ctx = Context(actor=args.actor)
    if args.action == "create":
        try:
            project = pydantic.TypeAdapter(Key).validate_python(args.project)
            name = (
                None if args.name is None else pydantic.TypeAdapter(Key).validate_python(args.name)
            )
        except pydantic.ValidationError as e:
            raise UsageError(f"--project/--name: {e.errors()[0]['msg']}") from None
        new = services.ledger.issue_token(project, TokenScope(args.scope), name, ctx)
        if args.json:
            emit_json(
                {
                    "token_id": new.token_id,
                    "token": new.token,
                    "project": project,
                    "scope": args.scope,
                }
            )
        else:
            print(new.token)
            sys.stderr.write(
                f"token {new.token_id} for project {project!r}, scope {args.scope}: "
                "shown once, keep it secret (only its hash is stored)\n"
            )
        return EXIT_OK
    if args.action == "revoke":
        services.ledger.revoke_token(args.token_id, ctx, args.reason)
        print(f"revoked token {args.token_id}")
        return EXIT_OK
    tokens = services.ledger.tokens()
    if args.project is not None:
        tokens = [t for t in tokens if t.project == args.project]
    if args.json:
        emit_json(
            {
                "data": [
                    {
                        "token_id": t.token_id,
                        "project": t.project,
                        "scope": t.scope.value,
                        "name": t.name,
                        "actor": t.actor,
                        "active": t.active,
                        "issued_at": t.issued_at.isoformat(),
                        "issued_by": t.issued_by,
                        "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None,
                        "revoked_by": t.revoked_by,
                        "revoke_reason": t.revoke_reason,
                    }
                    for t in tokens
                ],
                "count": len(tokens),
            }
        )
        return EXIT_OK
    print_table(
        [
            (
                t.token_id,
                t.project,
                t.scope.value,
                t.name,
                "active" if t.active else "revoked",
                t.issued_at.isoformat(timespec="seconds"),
            )
            for t in tokens
        ],
        ["token_id", "project", "scope", "name", "status", "issued_at"],
    )
    return EXIT_OK


def cmd_demo(services: Services, args: argparse.Namespace) -> int:
    """Load the demo runs into the store and show what they say."""
    from evaledger.api.demo import run_demo

    return run_demo(services, args)


# ---------------------------------------------------------------------------------------------
# parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        help="sqlite:///relative/dir/, sqlite:////absolute/dir/ or postgresql://user@host/db "
        "(default: EVALEDGER_DB or sqlite:///.evaledger/)",
    )
    common.add_argument(
        "--project", default="default", help="project of run keys (default: default)"
    )
    common.add_argument("--actor", default="cli", help="who records (default: cli)")
    parser = argparse.ArgumentParser(
        prog="evaledger",
        description="Event-sourced evaluation ledger.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"evaledger {__version__()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str,
        func: Callable[[Services, argparse.Namespace], int],
        help_: str,
        json: bool = True,
        reads: bool = False,
    ) -> argparse.ArgumentParser:
        """A sub-command; `reads=True` ones never create a store (a missing one is exit 3)."""
        p = sub.add_parser(
            name,
            parents=[common],
            help=help_,
            description=help_,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if json:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=func, reads=reads)
        return p

    def add_case_ref(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "case", nargs="+", metavar="CASE | RUN TEST_CASE_KEY", help="a case id, or run + key"
        )
        p.add_argument("--rep", type=int, metavar="N", help="repetition (default 0) with a key")

    add("demo", cmd_demo, "load the demo runs and show scores, a what-if rescore and a comparison")
    p = add("serve", cmd_serve, "serve the HTTP API", json=False)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--open", action="store_true", help="open the web report (/ui) in a browser")
    p = add("import", cmd_import, "import run bundles and peer result files (idempotent)")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument(
        "--from",
        dest="from_format",
        default="auto",
        help="auto (detect from content), bundle, inspect, promptfoo, tau-bench or connexity",
    )
    p.add_argument("--run-key", help="the run's key (default: derived from the file)")
    p = add("export", cmd_export, "export a run as a run bundle", json=False, reads=True)
    p.add_argument("run", metavar="RUN")
    p.add_argument("-o", "--output", help="write to a file instead of stdout")
    p = add("runs", cmd_runs, "list runs, newest first", reads=True)
    p.add_argument("--suite")
    p.add_argument("--agent")
    p.add_argument("--key", help="the run key")
    p.add_argument("--status", choices=[s.value for s in RunStatus])
    p.add_argument("--label", type=label_filter, help="key=value")
    p.add_argument("--limit", type=positive_int, default=50, metavar="N")
    p = add("show", cmd_show, "show a run with its aggregate and cases", reads=True)
    p.add_argument("run", metavar="RUN")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--failed", action="store_true", help="only failed cases")
    only.add_argument("--errored", action="store_true", help="only errored cases")
    p.add_argument("--limit", type=positive_int, metavar="N", help="show at most N cases")
    p = add(
        "rescore",
        cmd_rescore,
        "replay a run under another scoring spec (no judge calls)",
        reads=True,
    )
    p.add_argument("run", metavar="RUN")
    p.add_argument("--spec", required=True, metavar="FILE")
    p = add(
        "history", cmd_history, "every event of a case, and its state as of a version", reads=True
    )
    add_case_ref(p)
    p.add_argument("--version", type=int, help="the state as of this event version")
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
    p = add(
        "verify",
        cmd_verify,
        "recompute every hash chain, run seal and chain signature",
        reads=True,
    )
    p.add_argument(
        "--expect",
        metavar="POSITION:LINK",
        help="a checkpoint printed by an earlier verify; fail if the log no longer contains it",
    )
    p = add(
        "migrate",
        cmd_migrate,
        "create or repair tables, append-only triggers and grants (run as the migration role)",
        json=False,
    )
    p.add_argument("--app-role", help="PostgreSQL role to grant SELECT/INSERT on the events")
    p = add("compare", cmd_compare, "compare two runs; exit 1 on a regression", reads=True)
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="BASELINE CANDIDATE (or CANDIDATE with --against-baseline)",
    )
    p.add_argument("--markdown", action="store_true", help="a compact PR comment")
    p.add_argument(
        "--against-baseline", action="store_true", help="compare with the approved baseline"
    )
    p.add_argument("--max-pass-rate-drop", type=float, help="fraction (default 0.0)")
    p.add_argument("--max-avg-score-drop", type=float, help="points (default 5.0)")
    p.add_argument("--max-latency-increase-pct", type=float, help="fraction (default 0.2)")
    p.add_argument("--case-score-delta", type=float, help="points (default 5.0)")
    p.add_argument("--spec", metavar="FILE", help="compare under another scoring spec")
    p.add_argument(
        "--no-fail-on-thresholds",
        action="store_true",
        help="don't exit 1 on the candidate's own failed thresholds",
    )
    p = add(
        "gate", cmd_gate, "exit 1 when the run fails its metrics or cases threshold", reads=True
    )
    p.add_argument("run", metavar="RUN")
    p = add(
        "baseline",
        cmd_baseline,
        "approve, revoke or show the baseline of an (agent, suite)",
        reads=True,
    )
    p.add_argument("action", choices=["approve", "revoke", "show"])
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--reason")
    p.add_argument("--agent")
    p.add_argument("--suite")
    p = add("grade", cmd_grade, "grade a run (iFixAi rules); exit 1 below --min-score", reads=True)
    p.add_argument("run", metavar="RUN")
    p.add_argument("--spec", metavar="FILE", help="a spec file with a grading section")
    p.add_argument("--preset", help="a shipped grading preset, e.g. ifixai-v1")
    p.add_argument("--min-score", type=float)
    p.add_argument("--strategic", action="store_true", help="grade the strategic subset only")
    p = add("rollup", cmd_rollup, "pivot one or several runs (Voxli rules)", reads=True)
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.add_argument("--rows", default="configuration", help="configuration, personality, agent, run")
    p.add_argument("--columns", default="test", help="test, tag, scenario")
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        help="custom per-message metric name[:unit[:avg,max,p95…]] (repeatable)",
    )
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--db", help="sqlite:///path or postgresql://... (default: EVALEDGER_DB)")
    store.add_argument("--actor", default="cli", help="who issues or revokes (default: cli)")
    store.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("token", help="create, list or revoke API tokens")
    tokens = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = tokens.add_parser("create", parents=[store], help="issue a token; prints its secret once")
    p.add_argument("--project", required=True, help="the only project the token can touch")
    p.add_argument("--scope", required=True, choices=["read", "write", "admin"])
    p.add_argument("--name", help="whom it stands for (the actor of what it writes)")
    p.set_defaults(func=cmd_token)
    p = tokens.add_parser("list", parents=[store], help="every token, never its secret")
    p.add_argument("--project", help="only this project's tokens")
    p.set_defaults(func=cmd_token)
    p = tokens.add_parser("revoke", parents=[store], help="revoke a token by its id")
    p.add_argument("token_id", metavar="ID")
    p.add_argument("--reason")
    p.set_defaults(func=cmd_token)
    p = add(
        "explain",
        cmd_explain,
        "how a case's verdict became its pass/fail and run aggregate",
        reads=True,
    )
    add_case_ref(p)
    p.add_argument("--spec", metavar="FILE", help="explain under another scoring spec")
    from evaledger.api import cli_judging

    cli_judging.register(sub, common)
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description='bash: eval "$(evaledger completion bash)"; zsh: write it to a file named '
        "_evaledger on your $fpath",
    )
    p.add_argument("shell", choices=["bash", "zsh", "tcsh"])
    p.set_defaults(func=None)
    return parser


def label_filter(value: str) -> str:
    """An argparse type: `key=value`, the rule of the API's `label` filter."""
    if not re.fullmatch(LABEL_PATTERN, value):
        raise argparse.ArgumentTypeError(f"expected key=value, got {value!r}")
    return value


def positive_int(value: str) -> int:
    """An argparse type: an integer ≥ 1."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def __version__() -> str:
    """The installed package's version."""
    try:
        return package_version("evaledger")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout without install
        return "unknown"


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """A completion script for `shell`, generated from the parser itself (shtab)."""
    import shtab

    script: str = shtab.complete(parser, shell=shell)
    return script


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print an error and exit."""
    sys.stderr.write(f"evaledger: error: {message}\n")
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the command's exit code (0/1/2/3), never a traceback for expected failures."""
    parser = build_parser()
    args = parser.parse_args(argv)
    with closed_pipe_is_not_an_error():
        if args.command == "completion":
            sys.stdout.write(completion_script(parser, args.shell))
            return EXIT_OK
        return run(args)


def run(args: argparse.Namespace) -> int:
    """Open the store, run the command, map every failure to its exit code."""
    services: Services | None = None
    db = args.db or os.environ.get("EVALEDGER_DB") or Settings().db
    try:
        try:
            # Commands registered elsewhere without `reads` may create the store.
            reads = getattr(args, "reads", False)
            settings = Settings.from_env(db=args.db)
            if args.command == "migrate":
                # Before opening the store: a migration repairs what opening would refuse.
                migrate_store(settings, args.app_role)
            services = build_services(settings, create=not reads)
            return int(args.func(services, args))
        finally:
            if services is not None:
                services.close()
    except UsageError as e:
        fail(str(e))
    except InfrastructureError as e:
        fail(e.detail, EXIT_INFRA)
    except (ValidationError, EvaledgerError) as e:
        fail(e.detail)
    except pydantic.ValidationError as e:
        fail("invalid input:\n" + describe(e, "  "))
    except Exception as e:
        # A driver error about the store (locked, down, corrupt) is exit 3 with one line.
        infra = infrastructure_error(e, db)
        if infra is None:
            raise
        fail(infra.detail, EXIT_INFRA)


class _PipeSafeStdout(io.TextIOBase):
    """stdout that goes quiet once its reader has gone (`evaledger show RUN | head`)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        """Write, or drop the text once the pipe is closed."""
        if not self.reader_gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._silence()
        return len(text)

    def flush(self) -> None:
        """Flush, unless the pipe is closed."""
        if not self.reader_gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._silence()

    def isatty(self) -> bool:
        """Whether the real stdout is a terminal."""
        return self.stream.isatty()

    def fileno(self) -> int:
        """The real stdout's descriptor."""
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The real stdout's encoding (rich asks)."""
        return self.stream.encoding

    def _silence(self) -> None:
        self.reader_gone = True
        # Python's own flush of stdout at exit would fail again: point the descriptor at devnull.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass


@contextmanager
def closed_pipe_is_not_an_error() -> Iterator[None]:
    """A reader that stops early (`| head`) ends the output, not the command or its exit code."""
    real = sys.stdout
    safe = _PipeSafeStdout(real)
    sys.stdout = safe
    try:
        yield
    finally:
        sys.stdout = real
        safe.flush()


if __name__ == "__main__":
    raise SystemExit(main())
