"""A base run against several candidates at once (issue 36, many-run compare).

Pure: `combine` lays k pairwise comparisons (base vs each candidate, each the columnar engine's,
`engine.compare_columns`) side by side: one row per test case (and variant) matched in any of
them, one cell per run (the base first), each run's aggregate, and each candidate's verdict,
deltas and significance against the base. Nothing is computed twice: every cell, delta and
verdict is the pairwise comparison's own, so the many-run compare equals the pairwise ones.

The significance of k candidates is one family of k × m tests (`significance.as_one_family`):
with three candidates and eight metrics, 24 p-values are corrected together, else one
"significant" difference in 24 is what chance alone gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from evaledger.domain.model import StrictModel
from evaledger.scoring.comparison.adjust import Correction
from evaledger.scoring.comparison.models import (
    AggregateComparison,
    CaseStatus,
    RegressionVerdict,
    RunComparison,
)
from evaledger.scoring.comparison.significance import ComparisonSignificance
from evaledger.scoring.models import RunAggregate

MAX_COMPARED_RUNS = 10
"""Runs one many-run compare takes at most (the base and nine candidates)."""


class ComparedRunColumn(StrictModel):
    """One run of a many-run compare: a column of the case table, with its aggregate."""

    run_id: str
    run_key: str | None = None
    name: str | None = None
    role: Literal["base", "candidate"]
    aggregate: RunAggregate
    headline: str | None = Field(default=None, description="The run's headline summary.")


class CandidateResult(StrictModel):
    """One candidate against the base: the pairwise comparison's verdict, deltas, significance."""

    run_id: str
    verdict: RegressionVerdict
    aggregate: AggregateComparison
    significance: ComparisonSignificance | None = Field(
        default=None, description="Corrected over every candidate's metrics (one family)."
    )
    baseline_only_test_cases: list[str] = Field(default_factory=list)
    candidate_only_test_cases: list[str] = Field(default_factory=list)


class RunCell(StrictModel):
    """One test case in one run: reduced pass/fail and score, and (candidates) its class."""

    passed: bool | None = None
    score: float | None = None
    status: CaseStatus | None = Field(default=None, description="Against the base; None: base.")


class ManyRunCase(StrictModel):
    """One test case (× variant): a cell per run, in the runs' order (None: not matched)."""

    test_case_key: str
    variant: str = ""
    cells: list[RunCell | None]


class ManyRunComparison(StrictModel):
    """A base run and several candidates: one row per test case, one column per run."""

    base_run_id: str
    runs: list[ComparedRunColumn] = Field(description="The base first, then the candidates.")
    candidates: list[CandidateResult]
    correction: Correction | None = None
    family_size: int = Field(default=0, description="p-values corrected together (all runs).")
    cases: list[ManyRunCase]


def combine(
    runs: Sequence[ComparedRunColumn],
    pairwise: Sequence[RunComparison],
    significances: Sequence[ComparisonSignificance] | None = None,
    correction: Correction | None = None,
) -> ManyRunComparison:
    """The pairwise comparisons (base vs `runs[i + 1]`) as one many-run comparison."""
    if len(runs) != len(pairwise) + 1:
        raise ValueError("runs: the base and one run per pairwise comparison")
    sigs = list(significances) if significances is not None else [None] * len(pairwise)
    rows: dict[tuple[str, str], list[RunCell | None]] = {}
    for i, found in enumerate(pairwise, start=1):
        for t in found.test_case_comparisons:
            cells = rows.setdefault((t.test_case_key, t.variant), [None] * len(runs))
            cells[0] = RunCell(passed=t.baseline_passed, score=t.baseline_score)
            cells[i] = RunCell(passed=t.candidate_passed, score=t.candidate_score, status=t.status)
    candidates = [
        CandidateResult(
            run_id=found.candidate_run_id,
            verdict=found.verdict,
            aggregate=found.aggregate,
            significance=sig,
            baseline_only_test_cases=found.baseline_only_test_cases,
            candidate_only_test_cases=found.candidate_only_test_cases,
        )
        for found, sig in zip(pairwise, sigs, strict=True)
    ]
    return ManyRunComparison(
        base_run_id=runs[0].run_id,
        runs=list(runs),
        candidates=candidates,
        correction=correction,
        family_size=next((s.family_size for s in sigs if s is not None), 0),
        cases=[
            ManyRunCase(test_case_key=key, variant=variant, cells=cells)
            for (key, variant), cells in sorted(rows.items())
        ],
    )
