"""`evaledger import`, `export`, `runs`, `show` and `rescore`: runs in and out, listed and read."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

import orjson

from evaledger.api.cli.inputs import (
    RUN_HELP,
    Commands,
    LazyChoices,
    label_filter,
    load_spec,
    positive_int,
    resolve_run,
)
from evaledger.api.console import (
    EXIT_OK,
    Col,
    Progress,
    emit_json,
    fmt,
    no_case_decided,
    percent,
    print_aggregate,
    print_rescore,
    print_table,
)
from evaledger.domain.types import variant_label
from evaledger.projections.queries import RunFilter, RunRow, Summary
from evaledger.scoring.judge_errors import judge_error_policy_json
from evaledger.scoring.models import RunAggregate
from evaledger.scoring.scorer_metrics import headline_metric

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services

# Start-up (issue 19): the ledger, the export and the bundle models are imported by the commands
# that use them, so that parsing a command line (and `runs`) loads none of them.


def run_statuses() -> list[str]:
    """The statuses a run can be in (the aggregate's, imported when first asked)."""
    from evaledger.domain.aggregates import RunStatus

    return [s.value for s in RunStatus]


class RunLine(NamedTuple):
    """One run as `evaledger runs` lists it."""

    run: RunRow
    aggregate: RunAggregate
    headline: str | None = None
    """An imported run's source headline metric (issue 18), else None."""


# The columns of `runs` and `show` in display order, each one line: its header, its drop order
# on a narrow terminal (0: never dropped; the highest goes first) and its value. Ids, keys,
# status, pass rate and score stay longest; counts, names and times give way first.
RUN_COLUMNS: tuple[tuple[Col, Callable[[RunLine], Any]], ...] = (
    (Col("run_id"), lambda x: str(x.run.run_id)),
    (Col("key", fold=True), lambda x: x.run.run_key),
    (Col("suite", drop=5), lambda x: x.run.suite["name"]),
    (Col("agent", drop=6), lambda x: x.run.agent["name"]),
    (Col("status", drop=1), lambda x: x.run.status),
    (Col("cases", drop=4), lambda x: x.run.case_count),
    (
        Col("pass", drop=2),
        lambda x: percent(x.aggregate.pass_rate if x.aggregate.decided else None),
    ),
    (Col("score", drop=3), lambda x: x.aggregate.weighted_metrics_score_pct),
    (Col("created_at", drop=7), lambda x: listed_at(x.run)),
)
UNDATED_MARK = "*"
UNDATED_NOTE = f"{UNDATED_MARK} imported at this time; the source has no date"


def listed_at(run: RunRow) -> str:
    """The time a run is listed by: its creation at the source, else its import (marked)."""
    return f"{run.recorded_at} {UNDATED_MARK}" if run.recorded_at else run.created_at


CASE_COLUMNS: tuple[tuple[Col, Callable[[dict[str, Any]], Any]], ...] = (
    (Col("case_id"), lambda c: c["case_id"]),
    (Col("test_case_key", fold=True), lambda c: c["test_case_key"]),
    (Col("rep"), lambda c: c["repetition"]),
    (Col("status", drop=1), lambda c: c["status"]),
    (Col("score", drop=2), lambda c: c["overall_score"]),
    (Col("gate", drop=3), lambda c: c["gate"]),
)
SOURCE_METRIC_COLUMN: tuple[Col, Callable[[RunLine], Any]] = (
    Col("source metric", drop=3, fold=True),
    lambda x: x.headline,
)
"""Listed only when a listed run has one (an import): before `created_at`."""
VARIANT_COLUMN: tuple[Col, Callable[[dict[str, Any]], Any]] = (
    Col("variant", drop=4, fold=True),
    lambda c: c.get("variant", ""),
)


def scorer_column(name: str) -> tuple[Col, Callable[[dict[str, Any]], Any]]:
    """An imported run's scorer as a case column (its value, not the empty rubric score)."""
    return Col(name, drop=2), lambda c: fmt(c.get("named_scores", {}).get(name), 4)


def case_columns(
    scorers: list[dict[str, Any]], variants: bool
) -> list[tuple[Col, Callable[[dict[str, Any]], Any]]]:
    """The columns of `show`'s case table for this run."""
    score_names = list(dict.fromkeys(s["score"] for s in scorers))[:4]
    return [
        *CASE_COLUMNS[:4],
        *([VARIANT_COLUMN] if variants else []),
        *([scorer_column(n) for n in score_names] if scorers else [CASE_COLUMNS[4]]),
        CASE_COLUMNS[5],
    ]


def register(commands: Commands) -> None:
    """Add import, export, runs, show and rescore."""
    p = commands.add("import", cmd_import, "import run bundles and peer result files (idempotent)")
    p.add_argument("files", nargs="+", metavar="FILE", help="bundle or peer result files")
    p.add_argument(
        "--from",
        dest="from_format",
        default="auto",
        help="auto (detect from content), bundle, inspect, promptfoo, tau-bench or connexity",
    )
    p.add_argument("--run-key", help="the run's key (default: derived from the file)")
    p = commands.add("export", cmd_export, "export a run as a run bundle", reads=True)
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("-o", "--output", help="write to a file instead of stdout")
    p = commands.add("runs", cmd_runs, "list runs, newest first", reads=True)
    p.add_argument("--suite", help="only runs of this suite name")
    p.add_argument("--agent", help="only runs of this agent name")
    p.add_argument("--key", help="the run key")
    p.add_argument(
        "--status",
        choices=LazyChoices(run_statuses),
        # A metavar: argparse lists choices without one while building the parser.
        metavar="STATUS",
        help="only runs in this status: %(choices)s",
    )
    p.add_argument("--label", type=label_filter, help="key=value")
    p.add_argument(
        "--limit", type=positive_int, default=50, metavar="N", help="list at most N runs"
    )
    p = commands.add("show", cmd_show, "show a run with its aggregate and cases", reads=True)
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    only = p.add_mutually_exclusive_group()
    only.add_argument("--failed", action="store_true", help="only failed cases")
    only.add_argument("--errored", action="store_true", help="only errored cases")
    p.add_argument("--limit", type=positive_int, metavar="N", help="show at most N cases")
    p = commands.add(
        "rescore",
        cmd_rescore,
        "replay a run under another scoring spec (no judge calls)",
        reads=True,
    )
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--spec", required=True, metavar="FILE", help="the scoring spec to replay under")


def cmd_import(services: Services, args: argparse.Namespace) -> int:
    """Import run bundles and peer result files (idempotent, streamed)."""
    # Deferred for start-up: only `import` needs the peer formats' readers.
    from evaledger.domain.ledger import Context
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
    """Export a run as a bundle: to stdout, or to -o FILE with what was written on stderr."""
    run_id = resolve_run(services, args.run, args.project)
    from evaledger.domain.export import bundle_to_json, export_bundle

    bundle = export_bundle(services.ledger, run_id)
    data = orjson.dumps(bundle_to_json(bundle), option=orjson.OPT_INDENT_2) + b"\n"
    if not args.output:
        # The bundle is the result: --json changes nothing (it is JSON already).
        sys.stdout.write(data.decode())
        return EXIT_OK
    Path(args.output).write_bytes(data)
    written = {
        "path": args.output,
        "run_id": str(run_id),
        "run_key": bundle.run.key,
        "cases": len(bundle.cases),
        "bytes": len(data),
    }
    if args.json:
        emit_json({"exported": written})
    else:
        sys.stderr.write(
            f"exported run {bundle.run.key} to {args.output}: "
            f"{written['cases']} cases, {written['bytes']} bytes\n"
        )
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
    summaries = [services.reads.summary(r.run_id) for r in rows]
    aggregates = [summary.aggregate for summary in summaries]
    if args.json:
        emit_json(
            {
                "data": [
                    {
                        **r.model_dump(mode="json"),
                        "pass_rate": a.pass_rate,
                        "passed": a.passed_count,
                        "failed": a.failed_count,
                        "errored": a.coverage.errored,
                        "pending": a.coverage.pending,
                        "weighted_metrics_score_pct": a.weighted_metrics_score_pct,
                        **({"scorer_metrics": a.scorer_metrics} if a.scorer_metrics else {}),
                    }
                    for r, a in zip(rows, aggregates, strict=True)
                ],
                "count": len(rows),
                "total": total,
            }
        )
        return EXIT_OK
    # The source's headline column only where a listed run has one (an import).
    heads = [headline(summary) for summary in summaries]
    columns = [*RUN_COLUMNS]
    if any(heads):
        columns.insert(len(columns) - 1, SOURCE_METRIC_COLUMN)
    shown = print_table(
        [
            [get(RunLine(r, a, head)) for _, get in columns]
            for r, a, head in zip(rows, aggregates, heads, strict=True)
        ],
        [col for col, _ in columns],
    )
    if "created_at" in shown and any(r.undated for r in rows):
        print(UNDATED_NOTE)
    if total > len(rows):
        print(f"{len(rows)} of {total} runs (--limit {args.limit})")
    return EXIT_OK


def headline(summary: Summary) -> str:
    """A run's source headline (`scoring.scorer_metrics.headline_metric`) with its figure."""
    name = headline_metric(summary.spec)
    value = None if name is None else summary.aggregate.scorer_metrics.get(name)
    return "" if name is None else f"{name} {fmt(value, 4)}"


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
        "judge_error_policy": judge_error_policy_json(
            services.reads.judge_error_count(run_id), summary.spec.judge_errors
        ),
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
                **({"variant": variant_label(s.variant)} if s.variant else {}),
            }
            for s in scores
        ],
    }


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
        f"  suite {versioned(run['suite'])}  agent {versioned(run['agent'])}  spec {run['spec_id']}"
    )
    if run.get("reason"):
        # Why a run failed or was canceled (an exception's text, Ctrl-C), as the web report says.
        print(f"  reason: {run['reason']}")
    if run["undated"]:
        print(f"  imported {run['recorded_at']}; the source has no date (listed by import time)")
    scorers = run["spec"].get("scorers") or []
    if scorers:
        print_source_metrics(payload["aggregate"], run["spec"])
    else:
        print_aggregate(
            payload["aggregate"], "aggregate:", unknown_costs(services, run_id, payload)
        )
        for name, mean in payload["aggregate"].get("named_score_means", {}).items():
            print(f"  {'named score ' + name:<28} {fmt(mean, 4)}")
    if payload["judge_error_policy"]:
        print(f"  {payload['judge_error_policy']['note']}")
    columns = case_columns(scorers, any("variant" in c for c in payload["cases"]))
    print_table(
        [[get(c) for _, get in columns] for c in payload["cases"]],
        [col for col, _ in columns],
    )
    shown, matching = len(payload["cases"]), payload["cases_matching"]
    if shown < matching:
        what = f"{status} cases" if status else "cases"
        print(f"{shown} of {matching} {what} shown (--limit {args.limit})")
    return EXIT_OK


def print_source_metrics(aggregate: dict[str, Any], spec: dict[str, Any]) -> None:
    """An imported run's figures in its source's terms: its metrics, then the pass rate's parts."""
    print("source metrics:")
    for name, value in aggregate.get("scorer_metrics", {}).items():
        print(f"  {name:<32} {fmt(value, 4)}")
    for name, value in aggregate.get("scorer_metrics_mismatched", {}).items():
        print(f"  {name:<32} source reported {fmt(value, 4)}: NOT reproduced from the cases")
    for k, value in aggregate.get("pass_hat_k", {}).items():
        print(f"  {'pass^' + k:<32} {fmt(value, 4)}")
    coverage = aggregate["coverage"]
    rate = aggregate["pass_rate"]
    shown = "— (no case decided)" if no_case_decided(aggregate) else fmt(rate, 4)
    print(
        f"  {'pass rate':<32} {shown} "
        f"({aggregate['passed_count']} of {aggregate['total_executions']} cases; "
        f"{aggregate['failed_count']} failed, {coverage['errored']} errored, "
        f"{coverage['pending']} pending)"
    )
    print(f"  {'a case passes when':<32} {passes_when(spec)}")


def passes_when(spec: dict[str, Any]) -> str:
    """The stated pass rule of an imported run: its score gates and what its scorer reads."""
    rules = {s["score"]: s.get("passes_when") for s in spec.get("scorers") or []}
    gates = [
        f"{g['score']} {g['op']} {g['value']:g}"
        + (f" [{rules[g['score']]}]" if rules.get(g["score"]) else "")
        for g in spec.get("score_gates") or []
    ]
    if gates:
        return " and ".join(gates)
    return "; ".join(sorted({r for r in rules.values() if r})) or "its outcomes are met"


def unknown_costs(services: Services, run_id: UUID, payload: dict[str, Any]) -> set[str]:
    """`{"total_cost_usd"}` when no case of the run reported a cost: unknown, not $0."""
    if payload["aggregate"].get("total_cost_usd"):
        return set()
    reported = any(s.cost_usd is not None for s in services.reads.case_scores(run_id))
    return set() if reported else {"total_cost_usd"}


def versioned(ref: dict[str, Any]) -> str:
    """`name v1`, or the name alone when it has no version (never "vNone")."""
    version = ref.get("version")
    return ref["name"] if version is None else f"{ref['name']} v{version}"


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
