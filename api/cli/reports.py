"""`evaledger compare`, `gate`, `baseline`, `grade` and `rollup`: verdicts over whole runs.

Exit 1 is the verdict of a failed check (a regression, a failed gate, a grade below
--min-score), so a CI step can run these commands as they are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import pydantic

from evaledger.api.cli.compare_views import add_case_options, cmd_case_diff, cmd_compare_many
from evaledger.api.cli.inputs import (
    RUN_HELP,
    Commands,
    comma_list,
    fraction,
    load_spec,
    read_json,
    resolve_run,
)
from evaledger.api.cli.statistics import (
    NOISE_FLOOR_HELP,
    add_compare_options,
    noise_floor_of,
    print_significance,
)
from evaledger.api.console import (
    EXIT_FAIL,
    EXIT_OK,
    UsageError,
    emit_json,
    fmt,
    print_comparison,
    print_grade,
    undecided,
)
from evaledger.application.reports import baseline_run
from evaledger.domain import collector
from evaledger.scoring.calibration import DEFAULT_MIN_KAPPA
from evaledger.scoring.headline import Headline
from evaledger.scoring.judge_errors import judge_error_policy_json

# Start-up (issue 19): the comparison, grade and rollup use cases (the reports, the event
# classes, numpy) are imported by the commands that use them, so that parsing a command line
# loads none of them.

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services
    from evaledger.application.compare import ComparisonReport
    from evaledger.domain.spec import ScoringSpec
    from evaledger.scoring.comparison import (
        CompareThresholds,
        Comparison,
        RegressionVerdict,
        RunComparison,
    )
    from evaledger.scoring.comparison.models import Comparability
    from evaledger.scoring.comparison.significance import ComparisonSignificance
    from evaledger.scoring.grading import GradingSpec

THRESHOLD_FIELDS = ("metrics_passed", "cases_passed")
"""The aggregate's own pass/fail fields: a `False` in either fails the run's thresholds."""


def register(commands: Commands) -> None:
    """Add compare, gate, baseline, grade and rollup."""
    _register_compare(commands)
    p = commands.add(
        "gate", cmd_gate, "exit 1 when the run fails its metrics or cases threshold", reads=True
    )
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument(
        "--min",
        action="append",
        default=[],
        metavar="SCORER/METRIC=VALUE",
        help="exit 1 when a source metric (as in show's scorer_metrics) is below VALUE "
        "(repeatable)",
    )
    p.add_argument(
        "--min-pass-rate",
        type=fraction,
        metavar="X",
        help="exit 1 when the run's pass rate (a fraction from 0 to 1, every case counted) is "
        "below X",
    )
    p.add_argument("--noise-floor", metavar="FILE|RUNS", help=NOISE_FLOOR_HELP)
    p.add_argument(
        "--require-calibrated",
        action="store_true",
        help="exit 1 when a judge of the run's verdicts has no calibration at their template "
        "hash and model, or one with kappa below --min-kappa",
    )
    p.add_argument(
        "--min-kappa",
        type=float,
        default=DEFAULT_MIN_KAPPA,
        metavar="K",
        help="the least kappa of a calibration under --require-calibrated (default: "
        f"{DEFAULT_MIN_KAPPA})",
    )
    _add_gate_baseline(p)
    p = commands.add(
        "baseline",
        cmd_baseline,
        "approve, revoke or show the baseline of an (agent, suite)",
        reads=True,
    )
    p.add_argument("action", choices=["approve", "revoke", "show"], help="what to do")
    p.add_argument("run", nargs="?", metavar="RUN", help="the run to approve (" + RUN_HELP + ")")
    p.add_argument("--reason", help="why, kept in the log")
    p.add_argument("--agent", help="the agent name (baseline show)")
    p.add_argument("--suite", help="the suite name (baseline show)")
    p = commands.add(
        "grade", cmd_grade, "grade a run (iFixAi rules); exit 1 below --min-score", reads=True
    )
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--spec", metavar="FILE", help="a spec file with a grading section")
    p.add_argument("--preset", help="a shipped grading preset, e.g. ifixai-v1")
    p.add_argument("--min-score", type=float, help="exit 1 below this overall score")
    p.add_argument("--strategic", action="store_true", help="grade the strategic subset only")
    p = commands.add("rollup", cmd_rollup, "pivot one or several runs (Voxli rules)", reads=True)
    p.add_argument("runs", nargs="+", metavar="RUN", help="runs to pivot (ids or keys)")
    p.add_argument("--rows", default="configuration", help="configuration, personality, agent, run")
    p.add_argument("--columns", default="test", help="test, tag, scenario")
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        help="custom per-message metric name[:unit[:avg,max,p95…]] (repeatable)",
    )


APPROVED = "approved"
"""`gate --baseline approved`: the approved baseline of the run's (agent, suite)."""


def _add_gate_baseline(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--baseline",
        metavar="RUN|approved",
        help="also compare the run with this baseline run (or the approved baseline of its "
        "agent and suite) as `compare` does; exit 1 on a regression",
    )
    p.add_argument(
        "--allow-different-suites",
        action="store_true",
        help="with --baseline: compare with a run of another suite (refused by default: exit 2)",
    )
    p.add_argument(
        "--allow-different-datasets",
        action="store_true",
        help="with --baseline: compare every case of runs of two dataset versions (default: "
        "only the items common to both runs)",
    )
    p.add_argument(
        "--exclude-cached",
        action="store_true",
        help="with --baseline: leave out of both runs the test cases served from a cache",
    )


def _register_compare(commands: Commands) -> None:
    p = commands.add(
        "compare", cmd_compare, "compare two or more runs; exit 1 on a regression", reads=True
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="BASELINE CANDIDATE (or CANDIDATE with --against-baseline); BASE CAND1 CAND2 ... "
        "compares each candidate with the base; two result files (bundle, Inspect, promptfoo, "
        "tau-bench, Connexity) are compared with no store",
    )
    p.set_defaults(without_store=compare_given_files)
    p.add_argument("--markdown", action="store_true", help="a compact PR comment")
    p.add_argument(
        "--against-baseline", action="store_true", help="compare with the approved baseline"
    )
    p.add_argument("--max-pass-rate-drop", type=fraction, help="fraction (default 0.0)")
    p.add_argument("--max-avg-score-drop", type=float, help="points (default 5.0)")
    p.add_argument("--max-latency-increase-pct", type=float, help="fraction (default 0.2)")
    p.add_argument("--case-score-delta", type=float, help="points (default 5.0)")
    p.add_argument("--spec", metavar="FILE", help="compare under another scoring spec")
    p.add_argument(
        "--allow-different-suites",
        action="store_true",
        help="compare runs of two different suites (refused by default: exit 2)",
    )
    p.add_argument(
        "--allow-different-datasets",
        action="store_true",
        help="compare every case of runs of two dataset versions, with a warning naming the "
        "items that differ (default: only the items common to both runs are compared)",
    )
    p.add_argument(
        "--exclude-cached",
        action="store_true",
        help="leave out of both runs the test cases whose transcript was served from a cache "
        "(default: compared, and counted in a warning)",
    )
    p.add_argument(
        "--no-fail-on-thresholds",
        action="store_true",
        help="don't exit 1 on the candidate's own failed thresholds",
    )
    add_compare_options(p)
    add_case_options(p)


def compared_runs(services: Services, args: argparse.Namespace) -> tuple[UUID | None, UUID]:
    """The baseline and candidate ids: both given, or the candidate (None: its baseline)."""
    if args.against_baseline:
        if len(args.runs) != 1:
            raise UsageError("with --against-baseline give only the CANDIDATE run")
        return None, resolve_run(services, args.runs[0], args.project)
    if len(args.runs) != 2:
        raise UsageError("give BASELINE and CANDIDATE runs (or --against-baseline CANDIDATE)")
    baseline = resolve_run(services, args.runs[0], args.project)
    return baseline, resolve_run(services, args.runs[1], args.project)


def judge_error_notes(report: ComparisonReport) -> dict[str, dict[str, Any] | None]:
    """Per side, how many judge errors its own figures count as 0 (issue 22), or None."""
    return {
        side: judge_error_policy_json(errors.count, errors.policy)
        for side, errors in report.judge_errors.items()
    }


def cmd_compare(services: Services, args: argparse.Namespace) -> int:
    """Compare two runs; exit 1 on a regression or a failed candidate threshold."""
    # lazy: the comparison engine loads numpy, which `runs`/`show` never need
    from evaledger.application.compare import compare_report

    # lazy: the statistics use cases (numpy), with the comparison
    from evaledger.application.statistics import compare_significance, reasons_within_noise

    services.sync()
    if len(args.runs) > 2:
        return cmd_compare_many(services, args, thresholds_of(args))
    baseline, candidate = compared_runs(services, args)
    if args.case is not None:
        return cmd_case_diff(services, args, baseline, candidate)
    specs: list[ScoringSpec] = []

    def spec() -> ScoringSpec:  # loaded once the runs are checked, and kept
        if not specs:
            specs.append(load_spec(services, args.spec, args.project))
        return specs[0]

    report = compare_report(
        services,
        baseline,
        candidate,
        thresholds_of(args),
        spec=spec if args.spec else None,
        allow_different_suites=args.allow_different_suites,
        allow_different_datasets=args.allow_different_datasets,
        exclude_cached=args.exclude_cached,
    )
    guard_warnings(report.comparison.comparability)
    noise = noise_floor_of(services, args.noise_floor, args.project) if args.noise_floor else None
    report = compare_significance(
        services, report, correction=args.correction, noise=noise, spec=specs[0] if specs else None
    )
    forgiven = None if noise is None else reasons_within_noise(report.comparison, noise)
    notes = judge_error_notes(report)
    return report_comparison(
        report.comparison, args, notes, report.headlines, forgiven, report.significance
    )


def thresholds_of(args: argparse.Namespace) -> CompareThresholds:
    """The comparison thresholds given on the command line (unset ones keep their defaults)."""
    # lazy: the comparison engine loads numpy, which `runs`/`show` never need
    from evaledger.scoring.comparison import CompareThresholds

    return CompareThresholds(
        max_pass_rate_drop=args.max_pass_rate_drop,
        max_avg_score_drop=args.max_avg_score_drop,
        max_latency_increase_pct=args.max_latency_increase_pct,
        case_score_delta=args.case_score_delta,
    )


def report_comparison(
    found: RunComparison | Comparison,
    args: argparse.Namespace,
    notes: dict[str, dict[str, Any] | None],
    heads: dict[str, Headline] | None = None,
    within_noise: list[str] | None = None,
    significance: ComparisonSignificance | None = None,
) -> int:
    """Print a comparison as asked (JSON, Markdown or text); its exit code.

    ``within_noise``: the threshold verdict's reasons a noise floor forgives (`--noise-floor`):
    when they are all of them, the regression is "within noise" and the exit is 0.
    ``significance``: a `Comparison`'s per-metric significance (issue 37), shown with it.
    """
    # lazy: numpy, see `thresholds_of`
    from evaledger.scoring.comparison import Comparison, render_markdown

    candidate_agg = found.aggregate.candidate_metrics
    failed_thresholds = [name for name in THRESHOLD_FIELDS if getattr(candidate_agg, name) is False]
    gate_failures = [] if args.no_fail_on_thresholds else failed_thresholds
    if args.json:
        extra: dict[str, Any] = (
            {"headlines": {k: h.model_dump(mode="json") for k, h in heads.items()}} if heads else {}
        )
        if within_noise is not None:
            extra["within_noise_reasons"] = within_noise
        # One dict per test case, freed by refcount: no collector pass over the heap.
        with collector.paused():
            if isinstance(found, Comparison):
                # From the columns: the same JSON as the model's dump, without a model per case.
                body = found.body()
                if significance is not None:
                    body["significance"] = significance.model_dump(mode="json")
            else:
                body = found.model_dump(mode="json")
            emit_json({**body, "judge_error_policy": notes, **extra})
        return comparison_exit(found.verdict, within_noise, gate_failures)
    result = found.model if isinstance(found, Comparison) else found
    if isinstance(found, Comparison) and significance is not None:
        result = result.model_copy(update={"significance": significance})
    if args.markdown:
        summaries = {k: h.summary for k, h in (heads or {}).items()}
        text = render_markdown(result, gate_failures=gate_failures, headlines=summaries)
        sys.stdout.write(text + "\n")
        for side, note in notes.items():
            if note:
                sys.stdout.write(f"\n_{side}: {note['note']}_\n")
    else:
        print_comparison(result, {k: h.summary for k, h in (heads or {}).items()})
        print_significance(result, within_noise)
        for side, note in notes.items():
            if note:
                print(f"{side}: {note['note']}")
        if gate_failures:
            print(f"candidate fails its own thresholds: {', '.join(gate_failures)}")
    return comparison_exit(result.verdict, within_noise, gate_failures)


def comparison_exit(
    verdict: RegressionVerdict, within_noise: list[str] | None, gate_failures: list[str]
) -> int:
    """1 on a regression a noise floor does not forgive, or on failed candidate thresholds."""
    reasons = verdict.reasons if verdict.regression_detected else []
    regression = [r for r in reasons if r not in (within_noise or [])]
    return EXIT_FAIL if regression or gate_failures else EXIT_OK


RESULT_FILE_SUFFIXES = frozenset({".json", ".jsonl", ".eval", ".yaml", ".yml"})
"""What `compare A B` takes for a result file's name, not a run key, when it is missing."""


def compare_given_files(args: argparse.Namespace) -> int | None:
    """`compare A.json B.json`: two result files compared with no store; None for two runs."""
    if args.against_baseline or len(args.runs) != 2:
        return None
    paths = [Path(r) for r in args.runs]
    if not all(p.is_file() for p in paths):
        # A file beside a name that is none, or a file name (`run.json`) that is not there: a
        # missing file, not a run key to look up in a store.
        if any(p.is_file() or p.suffix.lower() in RESULT_FILE_SUFFIXES for p in paths):
            missing = next(p for p in paths if not p.is_file())
            raise UsageError(f"{missing}: no such file (compare two result files, or two runs)")
        return None
    if args.case is not None:
        raise UsageError("--case: with two runs of a store, not two files (import them first)")
    if args.spec:
        raise UsageError("--spec: not with two files (each is compared under its own spec)")
    # lazy: the scratch import loads the importers and the comparison engine
    from evaledger.api.file_compare import compare_files

    noise = None
    if args.noise_floor:
        if not Path(args.noise_floor).is_file():
            raise UsageError("--noise-floor: with two files, a saved `noise --json` FILE")
        # lazy: the statistics use cases (numpy), with the comparison
        from evaledger.application.statistics import noise_floor_of_file, reasons_within_noise

        noise = noise_floor_of_file(args.noise_floor)
    result = compare_files(
        paths[0],
        paths[1],
        thresholds_of(args),
        allow_different_suites=args.allow_different_suites,
        allow_different_datasets=args.allow_different_datasets,
        exclude_cached=args.exclude_cached,
        correction=args.correction,
        noise=noise,
    )
    guard_warnings(result.comparability)
    forgiven = None if noise is None else reasons_within_noise(result, noise)
    return report_comparison(result, args, {}, None, forgiven)


def guard_warnings(guard: Comparability | None) -> None:
    """The comparability guard's warnings on stderr (issue 35), one line each."""
    for warning in guard.warnings if guard is not None else ():
        sys.stderr.write(f"warning: {warning}\n")


def _minimums(given: list[str]) -> dict[str, float]:
    """`--min SCORER/METRIC=VALUE` options as a mapping (exit 2 naming the bad one)."""
    out: dict[str, float] = {}
    for item in given:
        name, sep, value = item.rpartition("=")
        try:
            if not (sep and name):
                raise ValueError(item)
            out[name] = float(value)
        except ValueError:
            raise UsageError(f"--min: expected SCORER/METRIC=VALUE, got {item!r}") from None
    return out


def cmd_gate(services: Services, args: argparse.Namespace) -> int:
    """Exit 1 when the run fails its thresholds or a --min / --min-pass-rate given here."""
    services.sync()
    run_id = resolve_run(services, args.run, args.project)
    # lazy: the reports and the event classes under them, for the commands that judge a run
    from evaledger.application.grades import gate_run

    gate = gate_run(services, run_id, _minimums(args.min), args.min_pass_rate)
    agg, checks, failed = gate.aggregate, gate.checks, gate.failed
    within: list[str] = []
    noise = noise_floor_of(services, args.noise_floor, args.project) if args.noise_floor else None
    if noise is not None:
        # lazy: the statistics use cases (numpy), for --noise-floor only
        from evaledger.application.statistics import gate_within_noise

        within = gate_within_noise(gate, noise)
        failed = [name for name in failed if name not in within]
    against = _gate_baseline(services, args, run_id, noise)
    if against is not None and against["regression"]:
        failed = [*failed, "baseline"]
    refusals: list[str] = []
    if args.require_calibrated:
        # lazy: the calibration use cases, for --require-calibrated only
        from evaledger.application.calibration import calibration_refusals_of

        refusals = calibration_refusals_of(services, run_id, args.min_kappa)
        failed = [*failed, *(["calibration"] if refusals else [])]
    configured = gate.thresholds_configured
    if args.json:
        emit_json(
            {
                "run_id": str(run_id),
                "passed": not failed,
                "failed": failed,
                "configured": gate.configured,
                "checks": [c.model_dump(mode="json") for c in checks],
                "aggregate": agg.model_dump(mode="json"),
                **({"within_noise": within} if args.noise_floor else {}),
                **({"calibration": refusals} if args.require_calibrated else {}),
                **({"baseline": against} if against is not None else {}),
            }
        )
        return EXIT_FAIL if failed else EXIT_OK
    if configured:
        print(
            f"metrics: {fmt(agg.weighted_metrics_score_pct)} vs "
            f"{fmt(agg.metrics_pass_threshold)} → "
            f"{fmt(agg.metrics_passed)}; cases: "
            f"{fmt(agg.cases_pass_rate_pct if agg.decided else None)} vs "
            f"{fmt(agg.cases_pass_threshold)} → {fmt(agg.cases_passed)}"
            + (
                f" ({undecided(agg.model_dump(mode='json'))})"
                if not agg.decided and agg.total_executions
                else ""
            )
        )
    for c in checks:
        verdict = "ok" if c.passed else "FAILED"
        # A run no case decided shows "—" for its pass rate (the JSON keeps the seed's 0.0).
        shown = None if c.name == "pass_rate" and not agg.decided else c.value
        print(f"{c.name}: {fmt(shown, 4)} vs min {fmt(c.minimum, 4)} → {verdict}")
    for refusal in refusals:
        print(f"calibration: {refusal}")
    _print_baseline(against)
    if refusals or (against is not None and against["regression"]):
        print("gate: FAILED (" + ", ".join(failed) + ")")
        return EXIT_FAIL
    if not gate.configured and against is None:
        print(
            "gate: passed (no thresholds configured for this run; "
            "give --min SCORER/METRIC=VALUE or --min-pass-rate X)"
        )
        return EXIT_OK
    if within:
        print("within the noise floor, not failed: " + ", ".join(within))
    print("gate: FAILED (" + ", ".join(failed) + ")" if failed else "gate: passed")
    return EXIT_FAIL if failed else EXIT_OK


def _print_baseline(against: dict[str, Any] | None) -> None:
    """`gate --baseline`'s line of text: the baseline and its regression reasons, if any."""
    if against is not None:
        reasons = against["regression"]
        said = "regression (" + "; ".join(reasons) + ")" if reasons else "no regression"
        print(f"baseline {against['baseline_run_id']}: {said}")


def _gate_baseline(
    services: Services, args: argparse.Namespace, run_id: UUID, noise: Any
) -> dict[str, Any] | None:
    """`gate --baseline`: the run compared with its baseline as `compare` compares it.

    None when not asked. The comparability guard's warnings go to stderr; `regression` lists
    the verdict's reasons a noise floor does not forgive (`comparison_exit`'s rule: any fails).
    """
    if not args.baseline:
        if args.allow_different_suites or args.allow_different_datasets or args.exclude_cached:
            raise UsageError(
                "--allow-different-suites/--allow-different-datasets/--exclude-cached: "
                "only with --baseline"
            )
        return None
    # lazy: the comparison engine loads numpy, which `runs`/`show` never need
    from evaledger.application.compare import compare_report

    baseline = (
        None if args.baseline == APPROVED else resolve_run(services, args.baseline, args.project)
    )
    report = compare_report(
        services,
        baseline,
        run_id,
        allow_different_suites=args.allow_different_suites,
        allow_different_datasets=args.allow_different_datasets,
        exclude_cached=args.exclude_cached,
    )
    found = report.comparison
    guard_warnings(found.comparability)
    forgiven: list[str] | None = None
    if noise is not None:
        # lazy: the statistics use cases (numpy), for --noise-floor only
        from evaledger.application.statistics import reasons_within_noise

        forgiven = reasons_within_noise(found, noise)
    verdict = found.verdict
    regression = (
        []
        if comparison_exit(verdict, forgiven, []) == EXIT_OK
        else [r for r in verdict.reasons if r not in (forgiven or [])]
    )
    guard = found.comparability
    return {
        "baseline_run_id": str(report.baseline_id),
        "verdict": verdict.model_dump(mode="json"),
        "regression": regression,
        "comparability": None if guard is None else guard.model_dump(mode="json"),
        **({"within_noise_reasons": forgiven} if forgiven is not None else {}),
    }


def cmd_baseline(services: Services, args: argparse.Namespace) -> int:
    """Approve, revoke or show a baseline."""
    if args.action == "show":
        if not (args.agent and args.suite):
            raise UsageError("baseline show needs --agent and --suite")
        services.sync()
        row = baseline_run(services, args.agent, args.suite, args.project)
        if args.json:
            emit_json(row.model_dump(mode="json"))
        else:
            print(f"{row.run_id}  {row.run_key}  (agent {args.agent}, suite {args.suite})")
        return EXIT_OK
    if not args.run:
        raise UsageError(f"baseline {args.action} needs a RUN")
    run_id = resolve_run(services, args.run, args.project)
    # lazy: the ledger's context (and its event classes), for the commands that write
    from evaledger.application.runs import approve_baseline, revoke_baseline
    from evaledger.domain.ledger import Context

    change = approve_baseline if args.action == "approve" else revoke_baseline
    w = change(services, run_id, Context(actor=args.actor), args.reason)
    if args.json:
        emit_json({"run_id": str(run_id), "position": w.position, "events": w.events})
    else:
        print(f"baseline {args.action}d: {run_id} by {args.actor}")
    return EXIT_OK


def grading_from_file(path: str, min_score: float | None) -> GradingSpec:
    """The grading section of a spec file, its min_score overridden when given."""
    from evaledger.scoring.grading import grading_spec  # lazy: the grading rules, for grade only

    data = read_json(path)
    section = data.get("grading") if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise UsageError(f"{path}: grading: the spec has no grading section")
    try:
        grading = grading_spec(section)
    except (ValueError, pydantic.ValidationError) as e:
        raise UsageError(f"{path}: grading: {e}") from None
    if min_score is not None:
        grading = grading.model_copy(update={"min_score": min_score})
    return grading


def cmd_grade(services: Services, args: argparse.Namespace) -> int:
    """Grade a run; exit 1 when the overall score is below --min-score or null."""
    # lazy: the reports and the grading rules, for grade only
    from evaledger.application.grades import grade_run

    services.sync()
    run_id = resolve_run(services, args.run, args.project)
    grading = grading_from_file(args.spec, args.min_score) if args.spec else None
    result = grade_run(
        services,
        run_id,
        grading,
        preset=args.preset,
        min_score=args.min_score,
        strategic_only=args.strategic,
    )
    overall = result.overall
    if args.json:
        emit_json(result.model_dump(mode="json"))
    else:
        print_grade(result)
    return EXIT_OK if overall.score is not None and overall.passed else EXIT_FAIL


def cmd_rollup(services: Services, args: argparse.Namespace) -> int:
    """A Voxli pivot of one or several runs."""
    # lazy: the reports and the rollup rules, for rollup only
    from evaledger.application.grades import rollup_runs

    services.sync()
    run_ids = [resolve_run(services, r, args.project) for r in args.runs]
    result = rollup_runs(
        services, run_ids, comma_list(args.rows), comma_list(args.columns), args.metric
    )
    if args.json:
        emit_json(result.model_dump(mode="json"))
    else:
        from evaledger.scoring.rollups import render_table  # lazy: rollup rules, rollup only

        print(render_table(result))
        s = result.summary
        print(
            f"summary: score {fmt(s.score)}, {s.results} results, {s.hallucinations} hallucinations"
        )
    return EXIT_OK
