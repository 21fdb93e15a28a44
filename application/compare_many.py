"""Compare a base run with several candidates at once (issue 36, many-run compare).

Each candidate is compared with the base exactly as `compare BASE CANDIDATE` compares them
(`compare.compare_report`, the reports' cached columnar comparison, and
`statistics.compare_significance`); `scoring.comparison.many` lays the comparisons side by
side and corrects every candidate's p-values as one family. Nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from uuid import UUID

from evaledger.application.compare import compare_report
from evaledger.application.statistics import compare_significance
from evaledger.domain.errors import ValidationError
from evaledger.scoring.comparison import CompareThresholds
from evaledger.scoring.comparison.adjust import CORRECTIONS, DEFAULT_CORRECTION, Correction
from evaledger.scoring.comparison.many import (
    MAX_COMPARED_RUNS,
    ComparedRunColumn,
    ManyRunComparison,
    combine,
)
from evaledger.scoring.comparison.significance import as_one_family

if TYPE_CHECKING:
    from evaledger.application.ports import Services


def check_many(base: UUID, candidates: Sequence[UUID], field: str = "runs") -> None:
    """A base and 1 to `MAX_COMPARED_RUNS - 1` candidates, each run once (else 4xx/exit 2)."""
    if not candidates:
        raise ValidationError(f"{field}: give a base run and at least one candidate", field=field)
    if len(candidates) + 1 > MAX_COMPARED_RUNS:
        raise ValidationError(
            f"{field}: at most {MAX_COMPARED_RUNS} runs at once, got {len(candidates) + 1}",
            field=field,
        )
    runs = [base, *candidates]
    if len(set(runs)) != len(runs):
        twice = next(r for r in runs if runs.count(r) > 1)
        raise ValidationError(f"{field}: run {twice} is named twice", field=field)


def compare_many(
    services: Services,
    base: UUID,
    candidates: Sequence[UUID],
    thresholds: CompareThresholds | None = None,
    *,
    correction: Correction = DEFAULT_CORRECTION,
    allow_different_suites: bool = True,
    progress: Callable[[int, int], None] | None = None,
    field: str = "runs",
) -> ManyRunComparison:
    """The base against every candidate: a row per test case, a column per run (see module).

    `progress(done, total)` is told after each candidate's comparison; `field` names the runs
    in a refusal (a bad list of runs).
    """
    check_many(base, candidates, field)
    if correction not in CORRECTIONS:
        raise ValidationError(
            f"correction: must be one of {', '.join(CORRECTIONS)}", field="correction"
        )
    reports = []
    for done, candidate in enumerate(candidates, start=1):
        report = compare_report(
            services,
            base,
            candidate,
            thresholds,
            allow_different_suites=allow_different_suites,
        )
        reports.append(compare_significance(services, report, correction=correction))
        if progress is not None:
            progress(done, len(candidates))
    found = [r.significance for r in reports if r.significance is not None]
    sigs = as_one_family(found, correction)
    first = reports[0]
    columns = [
        ComparedRunColumn(
            run_id=str(base),
            run_key=first.baseline_run.run_key,
            name=first.baseline_run.name,
            role="base",
            aggregate=first.comparison.aggregate.baseline_metrics,
            headline=first.headlines["baseline"].summary,
        )
    ]
    columns += [
        ComparedRunColumn(
            run_id=str(r.candidate_id),
            run_key=r.candidate_run.run_key,
            name=r.candidate_run.name,
            role="candidate",
            aggregate=r.comparison.aggregate.candidate_metrics,
            headline=r.headlines["candidate"].summary,
        )
        for r in reports
    ]
    return combine(columns, [r.comparison.model for r in reports], sigs, correction)
