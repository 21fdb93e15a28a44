"""`evaledger compare A B --case KEY` and `compare BASE CAND1 CAND2 ...` (issue 36).

`--case KEY`: the case's final answers and each turn as a word diff (``[-removed-]``,
``{+added+}``, as `git diff --word-diff` marks them), then the judges' reasoning side by side.
More than two runs: the first is the base, each other a candidate compared with it; a row per
test case, a column per run, each candidate's verdict and significance (one corrected family).
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from itertools import zip_longest
from typing import TYPE_CHECKING
from uuid import UUID

from evaledger.api.cli.inputs import resolve_run
from evaledger.api.console import (
    EXIT_FAIL,
    EXIT_OK,
    Col,
    Progress,
    UsageError,
    emit_json,
    fmt,
    outcome,
    percent,
    print_table,
)

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services
    from evaledger.application.case_diff import CaseOutputDiff
    from evaledger.scoring.comparison import CompareThresholds
    from evaledger.scoring.comparison.many import ManyRunComparison, RunCell


def add_case_options(p: argparse.ArgumentParser) -> None:
    """`compare`'s --case and --variant."""
    p.add_argument(
        "--case",
        metavar="KEY",
        help="show what changed in this test case: its answers and turns as a word diff and "
        "the judges' reasoning side by side (instead of the comparison; exit 0)",
    )
    p.add_argument(
        "--variant",
        default="",
        help="with --case: the variant (provider | prompt) of the test case (default: none)",
    )


def cmd_case_diff(
    services: Services, args: argparse.Namespace, baseline: UUID | None, candidate: UUID
) -> int:
    """Print the output diff of `--case KEY` between the two runs."""
    # lazy: the log's reads and difflib's models, only for --case
    from evaledger.application.case_diff import case_output_diff
    from evaledger.application.compare import approved_baseline_of

    if not args.case.strip():
        raise UsageError("--case: give a test case key")
    if baseline is None:
        baseline = approved_baseline_of(services, candidate)
    diff = case_output_diff(services, baseline, candidate, args.case, args.variant)
    if args.json:
        emit_json(diff.model_dump(mode="json"))
    else:
        print_case_diff(diff)
    return EXIT_OK


def print_case_diff(diff: CaseOutputDiff) -> None:
    """The case's diff as text: answer, turns, then the reasoning in two columns."""
    # lazy: the diff's renderer (its package loads the comparison engine, numpy)
    from evaledger.scoring.comparison.output_diff import render_word_diff

    variant = f" [{diff.variant}]" if diff.variant else ""
    print(f"test case {diff.test_case_key}{variant}")
    for side, case_id in (
        ("baseline", diff.baseline_case_id),
        ("candidate", diff.candidate_case_id),
    ):
        print(f"  {side}: {case_id or '(not in this run)'}")
    print(f"answer (change {diff.answer.change:.4f}):")
    print(textwrap.indent(render_word_diff(diff.answer) or "—", "  "))
    print("turns:")
    for t in diff.turns:
        roles = f"{t.baseline_role or '—'} → {t.candidate_role or '—'}"
        print(f"  #{t.index} {roles} (change {t.diff.change:.4f}): {render_word_diff(t.diff)}")
    if not diff.reasoning:
        print("judge reasoning: none")
        return
    width = max(60, min(shutil.get_terminal_size((120, 20)).columns, 160))
    col = (width - 3) // 2
    print("judge reasoning (baseline | candidate):")
    for r in diff.reasoning:
        print(f"  {r.item}: {r.baseline_value or '—'} → {r.candidate_value or '—'}")
        left = textwrap.wrap(r.baseline or "—", col - 4) or [""]
        right = textwrap.wrap(r.candidate or "—", col - 4) or [""]
        for a, b in zip_longest(left, right, fillvalue=""):
            print(f"    {a:<{col - 4}} | {b}")


# ---------------------------------------------------------------------------------------------
# compare BASE CAND1 CAND2 ...: many runs

MANY_REFUSED = ("markdown", "spec", "noise_floor", "case")
"""Options of the two-run compare that a many-run compare does not take (exit 2 naming them)."""


def cmd_compare_many(
    services: Services, args: argparse.Namespace, thresholds: CompareThresholds
) -> int:
    """`compare BASE CAND1 CAND2 ...`: exit 1 when any candidate regresses against the base."""
    # lazy: the comparison engine and the statistics use cases (numpy), for this command only
    from evaledger.application.compare_many import compare_many

    for name in MANY_REFUSED:
        if getattr(args, name, None):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag}: not with more than two runs (compare two runs for it)")
    if args.against_baseline:
        raise UsageError("--against-baseline: give only the CANDIDATE run")
    runs = [resolve_run(services, r, args.project) for r in args.runs]
    bar = Progress("comparing with the base")
    try:
        found = compare_many(
            services,
            runs[0],
            runs[1:],
            thresholds,
            correction=args.correction,
            allow_different_suites=args.allow_different_suites,
            progress=bar,
        )
    finally:
        bar.done()
    if args.json:
        emit_json(found.model_dump(mode="json"))
    else:
        print_many(found)
    # As each pairwise compare: a regression, or a candidate failing its own thresholds.
    for c in found.candidates:
        own = c.aggregate.candidate_metrics
        failed = False in (own.metrics_passed, own.cases_passed)
        if c.verdict.regression_detected or (failed and not args.no_fail_on_thresholds):
            return EXIT_FAIL
    return EXIT_OK


def _cell(cell: RunCell | None) -> str:
    if cell is None:
        return "—"
    text = f"{outcome(cell.passed)} {fmt(cell.score)}"
    return text if cell.status in (None, "unchanged") else f"{text} {cell.status}"


def print_many(found: ManyRunComparison) -> None:
    """The many-run comparison as text: runs, candidates against the base, then every case."""
    names = [r.run_key or r.run_id for r in found.runs]  # unique in a project; names may clash
    print("runs:")
    print_table(
        [
            [n, r.role, percent(r.aggregate.pass_rate), r.aggregate.avg_overall_score,
             r.aggregate.latency_avg_ms, r.aggregate.total_cost_usd, r.headline or "—"]
            for n, r in zip(names, found.runs, strict=True)
        ],
        ["run", "role", "pass rate", "avg score", "latency ms", "cost usd", "headline"],
        fold=("headline",),
    )  # fmt: skip
    correction = found.correction or "none"
    print(f"\ncandidates against the base ({correction}, a family of {found.family_size}):")
    rows = []
    for name, c in zip(names[1:], found.candidates, strict=True):
        sig = c.significance
        a = c.aggregate
        rows.append(
            [
                name,
                "regression" if c.verdict.regression_detected else "no regression",
                a.pass_rate_delta,
                a.avg_score_delta,
                f"{a.total_regressions}/{a.total_improvements}",
                "—" if sig is None else sig.verdict.replace("_", " "),
                "—" if sig is None else sig.reading,
            ]
        )
    print_table(
        rows,
        ["candidate", "verdict", "Δ pass rate", "Δ avg score", "regr/impr", "statistics",
         "reading"],
        fold=("reading",),
    )  # fmt: skip
    print(f"\ncases ({len(found.cases)}):")
    print_table(
        [
            [c.test_case_key + (f" [{c.variant}]" if c.variant else ""), *map(_cell, c.cells)]
            for c in found.cases
        ],
        [Col("test case"), *(Col(n, drop=i + 1) for i, n in enumerate(names))],
    )
