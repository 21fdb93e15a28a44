"""`evaledger import`, `export`, `runs`, `show` and `rescore`: runs in and out, listed and read."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson

from evaledger.api.cli.inputs import (
    RUN_HELP,
    Commands,
    load_config,
    positive_int,
    resolve_run,
)
from evaledger.api.cli.run_list import (
    add_runs_arguments,
    print_runs,
    run_filter,
)
from evaledger.api.console import (
    EXIT_OK,
    Col,
    Progress,
    UsageError,
    emit_json,
    fits,
    fmt,
    print_aggregate,
    print_rescore,
    print_table,
)
from evaledger.application import reports
from evaledger.application.export_formats import EXPORT_FORMATS
from evaledger.application.runs import import_files, rescore_run
from evaledger.domain.spec import ScorerInfo
from evaledger.domain.types import variant_label
from evaledger.scoring.headline import run_headline
from evaledger.scoring.judge_errors import judge_error_policy_json
from evaledger.scoring.scorer_metrics import (
    RANDOM_METRICS,
    figure_text,
    not_recomputed,
)

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services

# Start-up (issue 19): the ledger, the export and the bundle models are imported by the commands
# that use them, so that parsing a command line (and `runs`) loads none of them.


SHOW_PAGE = 50
"""Cases `show` lays out by default (`--all`: every case, `--limit N`: the first N)."""


CASE_COLUMNS: tuple[tuple[Col, Callable[[dict[str, Any]], Any]], ...] = (
    (Col("case_id"), lambda c: c["case_id"]),
    (Col("test_case_key", fold=True), lambda c: c["test_case_key"]),
    (Col("rep"), lambda c: c["repetition"]),
    (Col("status", drop=1), lambda c: c["status"]),
    (Col("score", drop=2), lambda c: c["overall_score"]),
    (Col("gate", drop=3), lambda c: c["gate"]),
)
VARIANT_COLUMN: tuple[Col, Callable[[dict[str, Any]], Any]] = (
    Col("variant", drop=4, fold=True),
    lambda c: c.get("variant", ""),
)


def scorer_column(name: str) -> tuple[Col, Callable[[dict[str, Any]], Any]]:
    """An imported run's scorer as a case column (its value, not the empty rubric score)."""
    return Col(name, drop=2), lambda c: fmt(c.get("named_scores", {}).get(name), 4)


def scores_column(names: list[str]) -> tuple[Col, Callable[[dict[str, Any]], Any]]:
    """Every scorer's value in one column that wraps (a scorer is listed, never dropped).

    What a terminal too narrow for a column per scorer shows.
    """

    def scores(c: dict[str, Any]) -> str:
        named = c.get("named_scores", {})
        return "  ".join(f"{n}={fmt(named.get(n), 4)}" for n in names)

    return Col("scores", fold=True), scores


def case_columns(
    scorers: list[dict[str, Any]], variants: bool, *, listed: bool = False
) -> list[tuple[Col, Callable[[dict[str, Any]], Any]]]:
    """The columns of `show`'s case table for this run.

    A column per scorer (every one), or with `listed` one wrapping column listing them all.
    """
    names = list(dict.fromkeys(s["score"] for s in scorers))
    if not scorers:
        values = [CASE_COLUMNS[4]]
    elif listed:
        values = [scores_column(names)]
    else:
        values = [scorer_column(n) for n in names]
    return [
        *CASE_COLUMNS[:4],
        *([VARIANT_COLUMN] if variants else []),
        *values,
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
        help="auto (detect from content), bundle, inspect, promptfoo, tau-bench, connexity, "
        "lm-eval or openai-evals",
    )
    p.add_argument("--run-key", help="the run's key (default: derived from the file)")
    p = commands.add(
        "export",
        cmd_export,
        "export a run: a run bundle, or its cases as CSV, Parquet, JUnit XML or JSON lines",
        reads=True,
    )
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument(
        "--format",
        dest="export_format",
        choices=EXPORT_FORMATS,
        default="bundle",
        help="bundle (the run, re-importable), csv, parquet, junit or jsonl (the cases with "
        "status, gate, scores, named scores and judge summary); default: bundle",
    )
    p.add_argument("-o", "--output", help="write to a file instead of stdout")
    p = commands.add("runs", cmd_runs, "list runs, newest first", reads=True)
    add_runs_arguments(p)
    p = commands.add("show", cmd_show, "show a run with its aggregate and cases", reads=True)
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    only = p.add_mutually_exclusive_group()
    only.add_argument("--failed", action="store_true", help="only failed cases")
    only.add_argument("--errored", action="store_true", help="only errored cases")
    page = p.add_mutually_exclusive_group()
    page.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help=f"show at most N cases (default {SHOW_PAGE}; --json lists every case unless given)",
    )
    page.add_argument("--all", action="store_true", help="show every case")
    add_case_filters(p)
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
    # Parsing a command line and the read commands never load the ledger (issue 19).
    # lazy: the ledger (eventsourcing) that defines a command's Context, only for a write
    from evaledger.domain.ledger import Context

    # Counts cases: first the validating pass (total unknown), then the writes.
    progress = Progress("importing cases")
    try:
        done = import_files(
            services,
            args.files,
            Context(actor=args.actor),
            from_format=args.from_format,
            run_key=args.run_key,
            project=None if args.project == "default" else args.project,
            progress=progress,
        )
    finally:
        progress.done()
    results = [
        {
            "file": d.file,
            "format": d.format.value,
            "run_id": str(d.run.run_id),
            "run_key": d.run.run_key,
            "events": d.run.events,
            "cases": d.run.cases,
            "new_cases": d.run.new_cases,
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
    """Export a run: to stdout, or to -o FILE with what was written on stderr."""
    run_id = resolve_run(services, args.run, args.project)
    if args.export_format != "bundle":
        return export_table(services, run_id, args)
    # lazy: the export (the ledger and the event classes), only for export
    from evaledger.application.transcripts import export_run
    from evaledger.domain.export import bundle_to_json

    bundle = export_run(services, run_id)
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


def export_table(services: Services, run_id: UUID, args: argparse.Namespace) -> int:
    """A run's cases as CSV, Parquet, JUnit XML or JSON lines (`export --format`)."""
    if args.export_format == "parquet" and not args.output:
        # Parquet is binary and read by seeking from its end: a file, never a terminal or pipe.
        raise UsageError("output: a Parquet export needs -o FILE", field="output")
    services.sync()
    # lazy: the export (the ledger and the event classes), only for export
    from evaledger.application.exports import export_run_file

    exported = export_run_file(services, run_id, args.export_format)
    if not args.output:
        # The text formats (CSV, JSON lines, JUnit XML) are UTF-8: --json changes nothing.
        sys.stdout.write(exported.content.decode())
        return EXIT_OK
    Path(args.output).write_bytes(exported.content)
    written = {
        "path": args.output,
        "run_id": str(run_id),
        "run_key": exported.run_key,
        "format": exported.format,
        "cases": exported.cases,
        "bytes": len(exported.content),
    }
    if args.json:
        emit_json({"exported": written})
    else:
        sys.stderr.write(
            f"exported run {exported.run_key} to {args.output} as {exported.format}: "
            f"{exported.cases} cases, {written['bytes']} bytes\n"
        )
    return EXIT_OK


def cmd_runs(services: Services, args: argparse.Namespace) -> int:
    """List runs."""
    services.sync()
    listed = reports.list_runs(services, run_filter(args))
    rows, total = listed.rows, listed.total
    summaries = [reports.run_summary(services, r.run_id) for r in rows]
    aggregates = [summary.aggregate for summary in summaries]
    heads = [run_headline(summary.spec, summary.aggregate) for summary in summaries]
    return print_runs(rows, total, aggregates, heads, args)


def show_payload(
    services: Services,
    run_id: UUID,
    status: str | None = None,
    limit: int | None = None,
    filters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run, its aggregate and its cases (the JSON of `show`), cases filtered.

    `filters`: the `CaseFilter` fields given (`show --min-score` …), besides the status.
    """
    run = reports.get_run(services, run_id)
    summary = reports.run_summary(services, run_id)
    given = {k: v for k, v in (filters or {}).items() if v is not None}
    if given:
        # lazy: the case filters read the reviewers' model, only for `show` with a filter
        from evaledger.application.case_filters import CaseFilter, filter_cases

        page = filter_cases(services, run_id, CaseFilter(status=status, **given), limit)
    else:
        page = reports.list_cases(services, run_id, status, limit)
    scores, matching = page.rows, page.total
    return {
        "cases_matching": matching,
        "run": run.model_dump(mode="json"),
        "aggregate": summary.aggregate.model_dump(mode="json"),
        "headline": run_headline(summary.spec, summary.aggregate).model_dump(mode="json"),
        "judge_error_policy": judge_error_policy_json(
            reports.judge_errors(services, run_id).count, summary.spec.judge_errors
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


FILTER_OPTIONS = {
    "min_score": "--min-score",
    "max_score": "--max-score",
    "min_latency_ms": "--min-latency",
    "max_latency_ms": "--max-latency",
    "metric": "--metric",
    "metric_min": "--metric-min",
    "metric_max": "--metric-max",
    "label": "--label",
    "flag": "--flag",
}
"""`show`'s case filters (issue 36): the option of each `CaseFilter` field."""


def add_case_filters(p: argparse.ArgumentParser) -> None:
    """The cases table's filters: inclusive ranges, a metric, a reviewer's label, a flag."""
    g = p.add_argument_group("case filters (ranges are inclusive)")
    for dest in ("min_score", "max_score", "min_latency_ms", "max_latency_ms"):
        what = "overall score" if "score" in dest else "p50 latency in ms"
        g.add_argument(
            FILTER_OPTIONS[dest], dest=dest, type=finite, metavar="X", help=f"{dest[:3]}imum {what}"
        )
    g.add_argument("--metric", help="only cases scored on this metric")
    g.add_argument("--metric-min", type=finite, metavar="X", help="minimum score on --metric")
    g.add_argument("--metric-max", type=finite, metavar="X", help="maximum score on --metric")
    g.add_argument(
        "--label", choices=("labelled", "unlabelled"), help="labelled by a reviewer, or not"
    )
    g.add_argument("--flag", choices=("flagged", "unflagged"), help="flagged for review, or not")


def finite(value: str) -> float:
    """A finite number (argparse type)."""
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(value)
    return number


def cmd_show(services: Services, args: argparse.Namespace) -> int:
    """Show a run with its aggregate and cases."""
    services.sync()
    run_id = resolve_run(services, args.run, args.project)
    status = "failed" if args.failed else "errored" if args.errored else None
    # The table lays out a page; a JSON consumer gets every case unless it asked for a page.
    limit = args.limit if args.limit or args.json or args.all else SHOW_PAGE
    given = {dest: getattr(args, dest) for dest in FILTER_OPTIONS}
    payload = show_payload(services, run_id, status, limit, given)
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
    print(f"  headline: {payload['headline']['summary']}")
    scorers = run["spec"].get("scorers") or []
    if scorers:
        print_source_metrics(payload["aggregate"], run["spec"], payload["headline"])
    else:
        print_aggregate(
            payload["aggregate"], "aggregate:", unknown_costs(services, run_id, payload)
        )
        for name, mean in payload["aggregate"].get("named_score_means", {}).items():
            print(f"  {'named score ' + name:<28} {fmt(mean, 4)}")
    if payload["judge_error_policy"]:
        print(f"  {payload['judge_error_policy']['note']}")
    variants = any("variant" in c for c in payload["cases"])
    columns = case_columns(scorers, variants)
    if scorers and not fits(
        [[get(c) for _, get in columns] for c in payload["cases"]], [col for col, _ in columns]
    ):
        # Too many scorers for a column each: listed in one column that wraps, none dropped.
        columns = case_columns(scorers, variants, listed=True)
    print_table(
        [[get(c) for _, get in columns] for c in payload["cases"]],
        [col for col, _ in columns],
    )
    shown, matching = len(payload["cases"]), payload["cases_matching"]
    if shown < matching:
        what = f"{status} cases" if status else "cases"
        if args.limit:
            print(f"{shown} of {matching} {what} shown (--limit {args.limit})")
        else:
            print(f"{shown} of {matching:,} {what} shown: {matching - shown:,} more (--all)")
    return EXIT_OK


def print_source_metrics(
    aggregate: dict[str, Any], spec: dict[str, Any], headline: dict[str, Any]
) -> None:
    """An imported run's figures in its source's terms: its metrics, then the pass rate's parts."""
    print("source metrics:")
    for name, value in aggregate.get("scorer_metrics", {}).items():
        print(f"  {name:<32} {figure_text(value)}")
    scorers = {s["name"]: ScorerInfo.model_validate(s) for s in spec.get("scorers") or ()}
    shown = dict(aggregate.get("scorer_metrics_mismatched", {}))
    for scorer in scorers.values():  # random metrics are never mismatches: listed here
        for metric, value in scorer.reported.items():
            if metric in RANDOM_METRICS:
                shown[f"{scorer.name}/{metric}"] = value
    for name, value in sorted(shown.items()):
        scorer_name, _, metric = name.rpartition("/")
        found = scorers.get(scorer_name)
        why = not_recomputed(metric, found) if found else "NOT reproduced from the cases"
        print(f"  {name:<32} source reported {figure_text(value)}: {why}")
    for k, value in aggregate.get("pass_hat_k", {}).items():
        print(f"  {'pass^' + k:<32} {fmt(value, 4)}")
    coverage = aggregate["coverage"]
    # Derived from the counts (the headline's), not from a null pass_rate.
    undecided = headline["pass_rate"] is None
    rate = "— (no case decided)" if undecided else fmt(headline["pass_rate"], 4)
    print(
        f"  {'pass rate':<32} {rate}"
        f" ({aggregate['passed_count']} of {aggregate['total_executions']} cases; "
        f"{aggregate['failed_count']} failed, {coverage['errored']} errored, "
        f"{coverage['pending']} pending)"
    )
    detail = f" [{headline['rule_detail']}]" if headline["rule_detail"] else ""
    print(f"  {'a case passes when':<32} {headline['rule']}{detail}")


def unknown_costs(services: Services, run_id: UUID, payload: dict[str, Any]) -> set[str]:
    """`{"total_cost_usd"}` when no case of the run reported a cost: unknown, not $0."""
    if payload["aggregate"].get("total_cost_usd"):
        return set()
    return set() if reports.cost_reported(services, run_id) else {"total_cost_usd"}


def versioned(ref: dict[str, Any]) -> str:
    """`name v1`, or the name alone when it has no version (never "vNone")."""
    version = ref.get("version")
    return ref["name"] if version is None else f"{ref['name']} v{version}"


def cmd_rescore(services: Services, args: argparse.Namespace) -> int:
    """Replay a run under another spec."""
    services.sync()
    run_id = resolve_run(services, args.run, args.project)
    result = rescore_run(services, run_id, load_config(args.spec)).to_json()
    if args.json:
        emit_json(result)
        return EXIT_OK
    print_rescore(result)
    return EXIT_OK
