"""Trends (issue 33, DESIGN §16): a measure over the cases of one time bucket.

A bucket's figure is the run aggregate's figure of the same name over the bucket's cases, by the
same definitions (`scoring.run`): `pass_rate` is the aggregate's `pass_rate` (passed / every
execution: errored, canceled and pending cases stay in the denominator), `score` its
`avg_overall_score` (the mean overall score 0-100 of the scored cases; None when none was scored),
`latency_p95` its `latency_p95_ms` (over the per-case p50s of executions that did not error; None
below `P95_MIN_SAMPLES` cases), `cost` its `total_cost_usd` (the agent's cost, every execution),
and `SCORER/METRIC` the source scorer's recomputed figure (`scorer_metrics`). Each case keeps the
decision its own run's spec made (its stored score). A bucket without an execution has no point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from evaledger.domain.errors import ValidationError
from evaledger.domain.spec import ScorerInfo, ScoringSpec
from evaledger.scoring.models import CaseScore, CaseStatus
from evaledger.scoring.run import CaseUsage, RunFigures, decided_figures
from evaledger.scoring.scorer_metrics import scorer_metrics

MEASURES = ("pass_rate", "score", "latency_p95", "cost")
"""The named measures; any other measure must read `SCORER/METRIC`."""
BUCKETS = {"day": timedelta(days=1), "hour": timedelta(hours=1)}
"""The bucket sizes a series is cut in (UTC)."""


def check_measure(measure: str) -> str:
    """The measure, or a ValidationError naming the field."""
    if measure in MEASURES:
        return measure
    scorer, _, metric = measure.partition("/")
    if scorer and metric and "/" not in metric:
        return measure
    raise ValidationError(
        f"measure: one of {', '.join(MEASURES)} or SCORER/METRIC, got {measure!r}",
        field="measure",
    )


def bucket_start(at: datetime, by: str) -> datetime:
    """The UTC start of the `by` bucket (day or hour) holding `at`."""
    utc = at.astimezone(UTC)
    if by == "hour":
        return utc.replace(minute=0, second=0, microsecond=0)
    return utc.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class BucketFigure:
    """A measure over one bucket's cases: its value (None: the figure is undefined there)."""

    value: float | None
    n: int
    """Executions in the bucket (cases that were not skipped)."""
    passed: int
    failed: int
    errored: int


def bucket_figure(
    measure: str, scores: Sequence[CaseScore], spec: ScoringSpec, scorers: Sequence[ScorerInfo]
) -> BucketFigure | None:
    """The measure over `scores` (None: no execution, no point).

    `spec`: one of the bucket's runs' specs (the aggregate's threshold flags, not read here);
    `scorers`: the source scorers of the bucket's runs, for `SCORER/METRIC`.
    """
    executions = [s for s in scores if s.status is not CaseStatus.SKIPPED]
    if not executions:
        return None
    figures = RunFigures.of([CaseUsage.of_score(s) for s in scores])
    decided = decided_figures(
        [(s.overall_score if s.scored else None, s.passed, s.status.value, 1) for s in executions],
        spec,
    )["fields"]
    value: float | None
    if measure == "pass_rate":
        value = decided["pass_rate"]
    elif measure == "score":
        value = decided["avg_overall_score"]
    elif measure == "latency_p95":
        value = figures.latency_p95_ms
    elif measure == "cost":
        value = figures.total_cost_usd
    else:
        scorer = measure.split("/", 1)[0]
        found = scorer_metrics(executions, [s for s in scorers if s.name == scorer]).get(measure)
        value = None if found is None or math.isnan(found) else found
    return BucketFigure(
        value=value,
        n=figures.total_executions,
        passed=decided["passed_count"],
        failed=decided["failed_count"],
        errored=figures.error_count,
    )
