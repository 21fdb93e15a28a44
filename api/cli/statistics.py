"""`evaledger noise` and `plan`, and the statistics options of `compare` and `gate` (issue 37).

- `noise RUN_A RUN_B [...]`: A/A runs of one agent version and suite: per metric the
  run-to-run spread, the noise floor and the minimum detectable difference at 80 % power; with
  repetitions and a judge panel, where the variance comes from (cases, agent, judge).
- `plan --metric pass_rate --baseline 0.82 --mde 0.03 [--repetitions 3] [--icc FROM_RUNS]`:
  the test cases needed for the power and alpha, and the MDE of existing runs' sizes (--run).
- `compare --correction none|holm|bh --noise-floor FILE|RUNS` and `gate --noise-floor FILE|RUNS`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from evaledger.api.cli.inputs import Commands, comma_list, fraction, resolve_run
from evaledger.api.console import EXIT_OK, UsageError, emit_json, fmt

if TYPE_CHECKING:
    from uuid import UUID

    from evaledger.api.bootstrap import Services
    from evaledger.application.statistics import NoiseFloor, NoiseReport, PlanReport
    from evaledger.scoring.comparison import RunComparison

NOISE_FLOOR_HELP = (
    "a saved `evaledger noise --json` FILE, or A/A RUNS (comma-separated): a difference "
    "below a metric's noise floor is 'within noise', not a regression"
)


def register(commands: Commands) -> None:
    """Add noise and plan."""
    p = commands.add(
        "noise",
        cmd_noise,
        "how much A/A runs (same agent version and suite) differ: noise floor and MDE",
        reads=True,
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="two or more runs of one setup (or one run with repetitions)",
    )
    p.add_argument("--alpha", type=fraction, default=0.05, help="significance level (0.05)")
    p.add_argument("--power", type=fraction, default=0.8, help="power of the MDE (0.8)")
    p = commands.add(
        "plan", cmd_plan, "test cases and repetitions needed to detect a difference", reads=True
    )
    p.add_argument(
        "--metric", default="pass_rate", help="pass_rate or another metric (default: pass_rate)"
    )
    p.add_argument("--baseline", type=float, required=True, help="expected value (a rate: 0.82)")
    p.add_argument("--mde", type=float, required=True, help="the difference to detect (0.03)")
    p.add_argument("--repetitions", type=int, default=1, help="per test case and run (default: 1)")
    p.add_argument(
        "--icc",
        metavar="FROM_RUNS",
        help="the intra-class correlation: a number in [0, 1), or runs (comma-separated) "
        "to estimate it from",
    )
    p.add_argument("--sd", type=float, help="one execution's SD, for a metric that is no rate")
    p.add_argument(
        "--run", action="append", default=[], metavar="RUN", help="report this run's MDE"
    )
    p.add_argument("--alpha", type=fraction, default=0.05, help="significance level (0.05)")
    p.add_argument("--power", type=fraction, default=0.8, help="power (0.8)")
    p.set_defaults(without_store=plan_without_store)


def add_compare_options(p: argparse.ArgumentParser) -> None:
    """`compare`'s --correction and --noise-floor."""
    p.add_argument(
        "--correction",
        choices=["none", "holm", "bh"],
        default="holm",
        help="multiple-comparison correction of the per-metric p-values (default holm)",
    )
    p.add_argument("--noise-floor", metavar="FILE|RUNS", help=NOISE_FLOOR_HELP)


def noise_floor_of(services: Services, value: str, project: str) -> NoiseFloor:
    """A noise floor from a file, else from A/A runs named by key or id."""
    # lazy: the statistics use cases (numpy), for the commands that ask for them
    from evaledger.application.statistics import noise_floor_of_file, noise_floor_of_runs

    if Path(value).is_file():
        return noise_floor_of_file(value)
    if value.endswith(".json"):
        raise UsageError(f"--noise-floor: {value}: no such file")
    runs = [resolve_run(services, r, project) for r in comma_list(value)]
    return noise_floor_of_runs(services, runs)


def _runs(services: Services, given: list[str], project: str) -> list[UUID]:
    return [resolve_run(services, r, project) for r in given]


def cmd_noise(services: Services, args: argparse.Namespace) -> int:
    """Measure the noise of a setup from A/A runs."""
    # lazy: the statistics use cases (numpy), for noise only
    from evaledger.application.statistics import measure_noise

    services.sync()
    report = measure_noise(
        services, _runs(services, args.runs, args.project), alpha=args.alpha, power=args.power
    )
    if args.json:
        emit_json(report.model_dump(mode="json"))
    else:
        print_noise(report)
    return EXIT_OK


def print_noise(report: NoiseReport) -> None:
    """The noise report as text."""
    print(f"A/A runs: {len(report.run_ids)}; alpha {report.alpha:g}, power {report.power:g}")
    print(f"{'metric':<28} {'run means':<28} {'spread sd':>9} {'noise floor':>11} {'MDE':>9}")
    for m in report.metrics:
        means = ", ".join(fmt(v, 4) for v in m.run_means)
        print(
            f"{m.metric:<28} {means:<28} {fmt(m.spread_sd, 4):>9} "
            f"{fmt(m.noise_floor, 4):>11} {fmt(m.mde, 4):>9}"
        )
    if report.variance_split:
        print("variance split (share of the variance):")
        for s in report.variance_split:
            parts = ", ".join(f"{k} {100 * v:.0f} %" for k, v in s.shares.items())
            print(f"  {s.metric}: {parts} ({s.test_cases} cases, {s.verdicts} verdicts)")
    print(report.reading)


def _icc(args: argparse.Namespace) -> tuple[float | None, list[str]]:
    """`--icc`: a number, or the runs to estimate it from."""
    if args.icc is None:
        return None, []
    try:
        return float(args.icc), []
    except ValueError:
        return None, comma_list(args.icc)


def plan_without_store(args: argparse.Namespace) -> int | None:
    """`plan` without runs to read answers with no store (None: it needs one)."""
    if _icc(args)[1] or args.run:
        return None
    return cmd_plan(None, args)


def cmd_plan(services: Services | None, args: argparse.Namespace) -> int:
    """Plan a run's size."""
    # lazy: the statistics use cases (numpy), for plan only
    from evaledger.application.statistics import plan_runs

    icc, icc_runs = _icc(args)
    if services is not None:
        services.sync()
    report = plan_runs(
        services,
        args.metric,
        args.baseline,
        args.mde,
        repetitions=args.repetitions,
        icc_runs=_runs(services, icc_runs, args.project) if services else [],
        icc=icc,
        sd=args.sd,
        size_runs=_runs(services, args.run, args.project) if services else [],
        alpha=args.alpha,
        power=args.power,
    )
    if args.json:
        emit_json(report.model_dump(mode="json"))
    else:
        print_plan(report)
    return EXIT_OK


def print_plan(report: PlanReport) -> None:
    """The plan as text."""
    p = report.plan
    if report.icc is not None:
        print(
            f"icc {fmt(report.icc.icc, 3)} from {report.icc.n} executions of "
            f"{report.icc.clusters} test cases"
        )
    print(
        f"cases needed: {fmt(p.cases_needed)} (× {p.repetitions} repetition(s) = "
        f"{fmt(p.executions_needed)} executions per run)"
    )
    for s in report.sizes:
        print(f"a run of {s.cases} cases × {s.repetitions}: MDE {fmt(s.mde, 4)}")
    print(report.reading)


def print_significance(result: RunComparison, within_noise: list[str] | None) -> None:
    """The comparison's clustered, corrected statistics as text (none: nothing)."""
    sig = result.significance
    if sig is None:
        return
    print(
        f"per-metric statistics ({sig.correction_name}; SEs clustered by {sig.clustered_by}; "
        f"alpha {sig.alpha:g}):"
    )
    for m in sig.metrics:
        d = m.difference
        interval = (
            f"[{fmt(d.low, 4)}, {fmt(d.high, 4)}]" if d.low is not None else "(too few cases)"
        )
        floor = "" if m.noise_floor is None else f" floor {fmt(m.noise_floor, 4)}"
        print(
            f"  {m.metric:<24} Δ {fmt(d.delta, 4):>8} {interval:<22} p {fmt(m.p_value, 4):>7} "
            f"adj {fmt(m.adjusted_p_value, 4):>7}{floor}"
            + (" within noise" if m.within_noise else "")
        )
    print(f"statistical verdict (adjusted): {sig.verdict}: {sig.reading}")
    if within_noise:
        print("within the noise floor, not a regression: " + "; ".join(within_noise))
