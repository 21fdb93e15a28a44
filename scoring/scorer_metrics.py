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
from decimal import ROUND_HALF_UP, Decimal

from pydantic import Field

from evaledger.domain.errors import ValidationError
from evaledger.domain.model import StrictModel
from evaledger.domain.spec import GroupedMetric, ScorerInfo
from evaledger.scoring.means import mean
from evaledger.scoring.models import CaseScore, RunAggregate

REPORTED_TOLERANCE = 1e-9
"""How far a recomputed figure may sit from the source's own before it is flagged."""


def _stderr(values: Sequence[float]) -> float:
    # Inspect returns 0 below two values (its ddof=1 would divide by zero).
    if len(values) < 2:
        return 0.0
    return statistics.stdev(values) / math.sqrt(len(values))


def _accuracy(values: Sequence[float]) -> float:
    # Inspect's accuracy adds in order (not fsum): the same float to the last bit.
    total = 0.0
    for v in values:
        total += v
    return total / float(len(values))


_METRICS: dict[str, Callable[[Sequence[float]], float]] = {
    "accuracy": _accuracy,
    # Never over no value (a scorer without samples is skipped); NaN then, as numpy's mean.
    "pass_rate": lambda v: mean(v, empty=math.nan),
    "mean": lambda v: mean(v, empty=math.nan),
    "stderr": _stderr,
    "std": lambda v: statistics.stdev(v) if len(v) > 1 else 0.0,
    "var": lambda v: statistics.variance(v) if len(v) > 1 else 0.0,
}
"""Metrics recomputed by name; a metric not listed keeps only its reported figure."""


def _at_least(k: int) -> Callable[[Sequence[float]], float]:
    # Inspect's `at_least(k)`: 1 when at least k epochs read >= 1 (its default `value`).
    return lambda v: 1.0 if sum(1 for x in v if x >= 1.0) >= k else 0.0


def _pass_at(k: int) -> Callable[[Sequence[float]], float]:
    # Inspect's `pass_at(k)` (Chen et al. 2021's unbiased estimator); NaN below k epochs.
    def reduce(v: Sequence[float]) -> float:
        total, correct = len(v), sum(1 for x in v if x >= 1.0)
        if total < k:
            return math.nan
        if total - correct < k:
            return 1.0
        return 1.0 - math.prod(1.0 - k / i for i in range(total - correct + 1, total + 1))

    return reduce


def _pass_k(k: int) -> Callable[[Sequence[float]], float]:
    # Inspect's `pass_k(k)`: C(correct, k) / C(total, k); NaN below k epochs.
    def reduce(v: Sequence[float]) -> float:
        if len(v) < k:
            return math.nan
        return math.comb(sum(1 for x in v if x >= 1.0), k) / math.comb(len(v), k)

    return reduce


_REDUCERS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": lambda v: float(statistics.mean(v)),
    "median": lambda v: float(statistics.median(v)),
    "max": max,
    "min": min,
    # Inspect counts raw values and keeps the first most common (epoch order); C/P/I read
    # 1/0.5/0, so only I and N (both 0) are told apart by Inspect and not here.
    "mode": lambda v: float(statistics.mode(v)),
}
_REDUCERS_WITH_K: dict[str, Callable[[int], Callable[[Sequence[float]], float]]] = {
    "at_least": _at_least,
    "pass_at": _pass_at,
    "pass_k": _pass_k,
}


def reducer(name: str | None) -> Callable[[Sequence[float]], float] | None:
    """Inspect's epoch reducer by its log name (`mode`, `at_least_3`, `pass_at_2`); None: unknown.

    As inspect_ai 0.3.285 implements them (`inspect_ai/scorer/_reducer/reducer.py`); a reducer
    with `k` is logged as `NAME_K`. None (no reducer) is Inspect's default, the mean.
    """
    found = _REDUCERS.get(name or "mean")
    if found is not None:
        return found
    base, _, k = (name or "").rpartition("_")
    with_k = _REDUCERS_WITH_K.get(base)
    return with_k(int(k)) if with_k is not None and k.isdigit() and int(k) > 0 else None


RANDOM_METRICS = frozenset({"bootstrap_stderr", "boostrap_std"})
"""Metrics that draw random samples: the source's figure is shown, never recomputed (Inspect's
`bootstrap_stderr`; OpenAI evals' `boostrap_std`, spelled as evals spells it)."""


def _per_sample(
    scores: Sequence[CaseScore], scorer: ScorerInfo
) -> list[tuple[CaseScore, float]] | None:
    """One value per test case (sample): its epochs reduced, unscored ones left out.

    An Inspect sample that errored has no score, so it is left out as Inspect leaves it out;
    a promptfoo row that errored has its `success` false and counts, as promptfoo counts it.
    A reduction Inspect leaves unscored (NaN: pass_at_k over fewer than k epochs) is left out
    too. Each value comes with the sample's first case (its groups). None when the scorer's
    reducer is not one the ledger knows.
    """
    reduce = reducer(scorer.reducer)
    if reduce is None:
        return None
    by_key: dict[tuple[str, str], tuple[CaseScore, list[float]]] = {}
    for s in scores:
        if scorer.variant is not None and s.variant != scorer.variant:
            continue
        number = s.named_scores.get(scorer.score)
        if number is not None:
            by_key.setdefault((s.test_case_key, s.variant), (s, []))[1].append(number)
    reduced = [(case, reduce(values)) for _, (case, values) in sorted(by_key.items())]
    return [(case, v) for case, v in reduced if not math.isnan(v)]


def case_groups(tags: Sequence[str], scorers: Sequence[ScorerInfo]) -> dict[str, str]:
    """A case's group under each grouped metric of the scorers, from its `KEY=VALUE` tags."""
    out: dict[str, str] = {}
    for grouped in (g for s in scorers for g in s.grouped):
        group = grouped.group_of(tags)
        if group is not None:
            out[grouped.group_key] = group
    return out


def _grouped(grouped: GroupedMetric, values: Sequence[tuple[CaseScore, float]]) -> dict[str, float]:
    """Inspect's `grouped()`: the metric over each group's samples, then over all of them.

    Nothing when a sample has no group (Inspect refuses to compute it) or the metric is not one
    the ledger computes: the source's figures are then shown as not recomputed.
    """
    compute = _METRICS.get(grouped.metric)
    if compute is None:
        return {}
    by_group: dict[str, list[float]] = {}
    for case, value in values:
        group = case.groups.get(grouped.group_key)
        if group is None:
            return {}
        by_group.setdefault(group, []).append(value)
    out = {grouped.name(group): compute(group_values) for group, group_values in by_group.items()}
    if grouped.all == "samples":
        out[grouped.all_label] = compute([v for _, v in values])
    elif grouped.all == "groups":
        out[grouped.all_label] = mean(out.values(), empty=math.nan)
    return out


def scorer_metrics(scores: Sequence[CaseScore], scorers: Sequence[ScorerInfo]) -> dict[str, float]:
    """`"SCORER/METRIC"` → figure for every recomputable metric of the run's scorers.

    A grouped metric's figures are keyed as Inspect keys them: by group name, and `all`.
    """
    out: dict[str, float] = {}
    for scorer in scorers:
        values = _per_sample(scores, scorer)
        if not values:
            continue
        for metric in scorer.metrics:
            compute = _METRICS.get(metric)
            if compute is not None:
                out[f"{scorer.name}/{metric}"] = compute([v for _, v in values])
        for grouped in scorer.grouped:
            for name, figure in _grouped(grouped, values).items():
                out.setdefault(f"{scorer.name}/{name}", figure)
    return dict(sorted(out.items()))


def reported_mismatches(
    computed: Mapping[str, float], scorers: Sequence[ScorerInfo]
) -> dict[str, float]:
    """The source's own figures that differ from the recomputed ones (or were not recomputed).

    A random metric (`RANDOM_METRICS`) is neither: its figure is shown as the source's.
    """
    out: dict[str, float] = {}
    for scorer in scorers:
        for metric, figure in scorer.reported.items():
            if metric in RANDOM_METRICS:
                continue
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
        str(k): mean(
            [math.comb(c, k) / math.comb(n, k) for n, c in counts.values()], empty=math.nan
        )
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


def figure_text(value: float, places: int = 4, *, grouping: bool = False) -> str:
    """A figure as written, rounded half up: 0.60625 → `0.6063`, a mean of 66.365 → `66.37`.

    The float nearest 0.60625 lies just below it, so binary rounding (`f"{v:.4f}"`) prints
    0.6062; rounding the shortest decimal that reads back as the value (what the source's log
    and JSON show, what a reader computes by hand) gives the figure a reader expects. The one
    display rounding of every figure (CLI `fmt`, the web's numbers); `grouping` adds thousands
    separators.
    """
    if not math.isfinite(value):
        return str(value)
    exact = Decimal(repr(value)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return f"{exact:,.{places}f}" if grouping else f"{exact:.{places}f}"


def not_recomputed(metric: str, scorer: ScorerInfo) -> str:
    """Why a source's figure is shown as it reported it, not recomputed from the cases."""
    if metric in RANDOM_METRICS:
        return "not recomputed: random"
    if reducer(scorer.reducer) is None:
        return f"not recomputed: reducer {scorer.reducer!r} unknown"
    if metric not in _METRICS and scorer.grouped:
        # a group of Inspect's `grouped()` whose cases do not all name their group
        keys = ", ".join(dict.fromkeys(g.group_key for g in scorer.grouped))
        return f"not recomputed: a case has no group ({keys}) or the grouped metric is unknown"
    if metric not in _METRICS:
        # e.g. the groups of Inspect's `grouped()` in a run stored before groups were kept
        return "not recomputed: a metric the ledger does not compute"
    return "NOT reproduced from the cases"
