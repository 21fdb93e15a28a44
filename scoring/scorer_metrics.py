"""A source's own metrics recomputed from per-case values, with the source's semantics (issue 18).

Inspect: each sample's epochs are reduced first (its reducer, mean by default), then `accuracy`
and `mean` are the mean of `value_to_float` readings and `stderr` the sample standard deviation
over sqrt(n); samples that errored have no score and are left out, as Inspect leaves them out.
tau-bench: pass^k is the mean over tasks of C(c, k) / C(n, k). promptfoo: a named metric's
figure is its average over the rows that report it, the pass rate the share of passing rows.
Pure functions over `CaseScore`s: the summary and the queries call them.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from pydantic import Field

from evaledger.domain.errors import ValidationError
from evaledger.domain.model import StrictModel
from evaledger.domain.spec import ScorerInfo, ScoringSpec
from evaledger.scoring.models import CaseScore, RunAggregate

REPORTED_TOLERANCE = 1e-9
"""How far a recomputed figure may sit from the source's own before it is flagged."""


def _stderr(values: Sequence[float]) -> float:
    # Inspect returns 0 below two values (its ddof=1 would divide by zero).
    if len(values) < 2:
        return 0.0
    return statistics.stdev(values) / math.sqrt(len(values))


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


_METRICS: dict[str, Callable[[Sequence[float]], float]] = {
    "accuracy": _mean,
    "pass_rate": _mean,
    "mean": _mean,
    "stderr": _stderr,
    "std": lambda v: statistics.stdev(v) if len(v) > 1 else 0.0,
    "var": lambda v: statistics.variance(v) if len(v) > 1 else 0.0,
}
"""Metrics recomputed by name; a metric not listed keeps only its reported figure."""

_REDUCERS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": _mean,
    "median": lambda v: float(statistics.median(v)),
    "max": max,
    "min": min,
    "mode": lambda v: float(statistics.mode(v)),
}


def _per_sample(scores: Sequence[CaseScore], scorer: ScorerInfo) -> list[float]:
    """One value per test case (sample): its epochs reduced, unscored ones left out.

    An Inspect sample that errored has no score, so it is left out as Inspect leaves it out;
    a promptfoo row that errored has its `success` false and counts, as promptfoo counts it.
    """
    by_key: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in scores:
        if scorer.variant is not None and s.variant != scorer.variant:
            continue
        number = s.named_scores.get(scorer.score)
        if number is not None:
            by_key[s.test_case_key, s.variant].append(number)
    reduce = _REDUCERS.get(scorer.reducer or "mean", _mean)
    return [reduce(values) for _, values in sorted(by_key.items())]


def scorer_metrics(scores: Sequence[CaseScore], scorers: Sequence[ScorerInfo]) -> dict[str, float]:
    """`"SCORER/METRIC"` → figure for every recomputable metric of the run's scorers."""
    out: dict[str, float] = {}
    for scorer in scorers:
        values = _per_sample(scores, scorer)
        if not values:
            continue
        for metric in scorer.metrics:
            compute = _METRICS.get(metric)
            if compute is not None:
                out[f"{scorer.name}/{metric}"] = compute(values)
    return dict(sorted(out.items()))


def reported_mismatches(
    computed: Mapping[str, float], scorers: Sequence[ScorerInfo]
) -> dict[str, float]:
    """The source's own figures that differ from the recomputed ones (or were not recomputed)."""
    out: dict[str, float] = {}
    for scorer in scorers:
        for metric, figure in scorer.reported.items():
            key = f"{scorer.name}/{metric}"
            mine = computed.get(key)
            if mine is None or not math.isclose(mine, figure, abs_tol=REPORTED_TOLERANCE):
                out[key] = figure
    return dict(sorted(out.items()))


def pass_hat_k(scores: Sequence[CaseScore]) -> dict[str, float]:
    """pass^k for k = 1 … the fewest decided repetitions of a test case; {} without repetitions.

    tau-bench's definition: the mean over test cases of C(c, k) / C(n, k), n decided
    repetitions of which c passed. Pending cases are not decided; an errored one counts failed.
    """
    # A variant (a promptfoo provider or prompt) is another test, not a repetition.
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for s in scores:
        if s.passed is not None:
            counts[s.test_case_key, s.variant][0] += 1
            counts[s.test_case_key, s.variant][1] += s.passed
    if not counts:
        return {}
    fewest = min(n for n, _ in counts.values())
    if fewest < 2:  # one repetition per test case: pass^1 is the pass rate
        return {}
    return {
        str(k): _mean([math.comb(c, k) / math.comb(n, k) for n, c in counts.values()])
        for k in range(1, fewest + 1)
    }


class GateCheck(StrictModel):
    """One command-line gate (`gate --min SCORER/METRIC=VALUE`, `--min-pass-rate X`)."""

    name: str = Field(description='"SCORER/METRIC", or "pass_rate".')
    value: float = Field(description="The run's figure.")
    minimum: float = Field(description="The least value that passes.")
    passed: bool


class UnknownMetricError(ValidationError):
    """A `--min` names a metric the run does not have (a usage error, not a failed gate)."""

    code = "unknown_metric"


def gate_checks(
    aggregate: RunAggregate, minimums: Mapping[str, float], min_pass_rate: float | None
) -> list[GateCheck]:
    """Each minimum against the run's figure; the pass rate counts every case (errored too)."""
    checks: list[GateCheck] = []
    for name, minimum in minimums.items():
        value = aggregate.scorer_metrics.get(name)
        if value is None:
            known = ", ".join(aggregate.scorer_metrics) or "none"
            raise UnknownMetricError(
                f"--min: the run has no metric {name!r} (it has: {known})", field="--min"
            )
        checks.append(GateCheck(name=name, value=value, minimum=minimum, passed=value >= minimum))
    if min_pass_rate is not None:
        checks.append(
            GateCheck(
                name="pass_rate",
                value=aggregate.pass_rate,
                minimum=min_pass_rate,
                passed=aggregate.pass_rate >= min_pass_rate,
            )
        )
    return checks


def headline_metric(spec: ScoringSpec) -> str | None:
    """The `SCORER/METRIC` a source leads with: its first scorer's first metric.

    Inspect's viewer and promptfoo's both show that one first; None without source scorers.
    """
    for scorer in spec.scorers:
        if scorer.metrics:
            return f"{scorer.name}/{scorer.metrics[0]}"
    return None
