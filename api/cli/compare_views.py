"""`evaledger compare A B --case KEY`: what changed in one test case (issue 36).

The case's final answers and each turn as a word diff (``[-removed-]``, ``{+added+}``, as
`git diff --word-diff` marks them), then the judges' reasoning side by side.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from itertools import zip_longest
from typing import TYPE_CHECKING
from uuid import UUID

from evaledger.api.console import EXIT_OK, UsageError, emit_json

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services
    from evaledger.application.case_diff import CaseOutputDiff


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
