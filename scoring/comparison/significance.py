"""A comparison's significance over every metric at once (issue 37): clustered, corrected.

Pure functions. `compare` already reports McNemar and a paired bootstrap for the pass flips and
the score of the reduced test cases (`statistics`, unchanged). This adds, as new fields:

- Per metric (the pass rate, the average score, each spec metric, each peer scorer's named
  score), each side's mean over its *executions* with a standard error clustered by test case,
  and the candidate - baseline difference paired by test case (`scoring.clustered`). A test
  case's cluster is its dataset item (`test_id`, which defaults to the key): repetitions and
  variants of a case, and cases sharing an item, are one cluster.
- The family of their p-values corrected for multiple comparisons (`adjust.adjust_p_values`,
  Holm by default), and a verdict over the *adjusted* p-values: ``regression`` when a metric
  dropped with an adjusted p below alpha (and not within the noise floor, when one is given).
- With a noise floor (`evaledger noise`), each metric's difference held against it: a
  difference smaller than the floor is "within noise" rather than a regression.
- A one-line reading for people ("pass_rate −2.1 points, within the noise floor of 2.8").

Every metric is read as "higher is better" (scores, pass rates, peer scorers' scores).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from evaledger.domain.model import StrictModel
from evaledger.scoring.clustered import (
    ClusteredDifference,
    ClusteredMean,
    clustered_difference,
    clustered_mean,
)
from evaledger.scoring.comparison.adjust import (
    CORRECTION_NAMES,
    DEFAULT_CORRECTION,
    Correction,
    adjust_p_values,
)
from evaledger.scoring.models import CaseScore
from evaledger.scoring.stats import DEFAULT_ALPHA, StatVerdict

Direction = Literal["regression", "improvement", "none"]
PASS_RATE = "pass_rate"  # noqa: S105 - a metric name
AVG_SCORE = "avg_score"
SCORER_PREFIX = "scorer:"
CLUSTERED_BY = "test case (dataset item: test_id, which defaults to the test case key)"


class MetricSignificance(StrictModel):
    """One metric of a comparison: clustered means, the paired difference, corrected p."""

    metric: str = Field(description="pass_rate, avg_score, a spec metric or scorer:<name>.")
    kind: Literal["run", "metric", "scorer"]
    unit: str = Field(description="fraction, points (0-100) or score (0-5), …")
    scale: float = Field(description="Multiplier to points: 100 for fractions, else 1.")
    baseline: ClusteredMean
    candidate: ClusteredMean
    difference: ClusteredDifference
    p_value: float | None = Field(description="Raw two-sided p of the paired difference.")
    adjusted_p_value: float | None = Field(description="p after the family's correction.")
    significant: bool = Field(description="adjusted_p_value < alpha.")
    direction: Direction = Field(description="Of a significant difference; none otherwise.")
    noise_floor: float | None = Field(default=None, description="From the noise floor given.")
    within_noise: bool | None = Field(
        default=None, description="|difference| below the noise floor; None without one."
    )
    reading: str


class ComparisonSignificance(StrictModel):
    """Every metric's clustered difference, the family corrected, and a verdict over it."""

    correction: Correction
    correction_name: str
    alpha: float
    clustered_by: str = CLUSTERED_BY
    metrics: list[MetricSignificance]
    family_size: int = Field(description="p-values in the corrected family.")
    verdict: StatVerdict = Field(description="Over the adjusted p-values (and the noise floor).")
    regressions: list[str] = Field(description="Metrics significantly worse, beyond noise.")
    within_noise: list[str] = Field(
        default_factory=list, description="Metrics that moved less than their noise floor."
    )
    noise_floor_source: str | None = None
    reading: str = Field(description="One line for people: the headline metric's reading.")


Samples = dict[str, tuple[np.ndarray, np.ndarray]]
"""Per metric, the executions' values and their clusters' integer codes."""


SAMPLE_FIELDS = frozenset(
    {
        "canceled",
        "test_id",
        "test_case_key",
        "passed",
        "errored",
        "overall_score",
        "metric_scores",
        "named_scores",
    }
)
"""What `execution_samples` reads of a case score (its stored JSON's names)."""


def sample_rows(cases: Iterable[CaseScore]) -> list[dict[str, Any]]:
    """Case score models as the plain rows `execution_samples` reads (their JSON's shape)."""
    return [case.model_dump(include=set(SAMPLE_FIELDS)) for case in cases]


def execution_samples(
    cases: Iterable[Mapping[str, Any]], index: dict[str, int] | None = None
) -> tuple[Samples, dict[str, str]]:
    """Per metric, the executions' values and cluster codes; and each metric's kind.

    ``cases`` are case scores as plain rows (`CaseScore`'s JSON, decoded: the read model's
    stored scores, or `sample_rows` of models). ``index`` maps a cluster (dataset item) to its
    code; pass the same one for both sides of a comparison so that their codes agree.
    """
    index = {} if index is None else index
    values: dict[str, list[float]] = {}
    codes: dict[str, list[int]] = {}
    kinds: dict[str, str] = {PASS_RATE: "run", AVG_SCORE: "run"}
    for case in cases:
        if case["canceled"]:
            continue
        cluster = index.setdefault(case["test_id"] or case["test_case_key"], len(index))
        found: list[tuple[str, float]] = []
        passed = case["passed"]
        if passed is not None or case["errored"]:
            found.append((PASS_RATE, 1.0 if passed else 0.0))
        if case["overall_score"] is not None:
            found.append((AVG_SCORE, case["overall_score"]))
        for m in case["metric_scores"]:
            metric = m["metric"]
            if m["passed"] is not None:
                found.append((metric, 1.0 if m["passed"] else 0.0))
                kinds.setdefault(metric, "binary")
            elif m["score"] is not None:
                found.append((metric, m["score"]))
                kinds.setdefault(metric, "metric")
        for name, value in case.get("named_scores", {}).items():  # left out when empty
            found.append((SCORER_PREFIX + name, value))
            kinds.setdefault(SCORER_PREFIX + name, "scorer")
        for name, value in found:
            if name not in values:
                values[name], codes[name] = [], []
            values[name].append(value)
            codes[name].append(cluster)
    samples = {
        name: (np.asarray(values[name], dtype=np.float64), np.asarray(codes[name], dtype=np.int64))
        for name in values
    }
    return samples, kinds


def _unit(name: str, kind: str) -> tuple[str, float]:
    if name == PASS_RATE or kind == "binary":
        return "fraction", 100.0
    if name == AVG_SCORE:
        return "points (0-100)", 1.0
    if kind == "metric":
        return "score (0-5)", 1.0
    return "score", 1.0


def _direction(diff: ClusteredDifference, significant: bool) -> Direction:
    if not significant or diff.delta is None or diff.delta == 0:
        return "none"
    return "improvement" if diff.delta > 0 else "regression"


def reading_of(
    name: str,
    delta: float | None,
    scale: float,
    adjusted: float | None,
    correction: Correction,
    alpha: float,
    noise_floor: float | None,
) -> str:
    """One line: the change, its corrected p and what it amounts to."""
    if delta is None:
        return f"{name}: not measured on both sides"
    unit = " points" if scale == 100.0 or name == AVG_SCORE else ""
    shown = f"{name} {delta * scale:+.1f}{unit}".replace("-", "−")
    if noise_floor is not None and abs(delta) < noise_floor:
        return f"{shown}, within the noise floor of {noise_floor * scale:.1f}"
    label = {"none": "p", "holm": "Holm-adjusted p", "bh": "BH-adjusted p"}[correction]
    if adjusted is None:
        return f"{shown} (too few test cases to test)"
    verdict = "no significant change"
    if adjusted < alpha:
        verdict = "a significant regression" if delta < 0 else "a significant improvement"
    floor = "" if noise_floor is None else f", beyond the noise floor of {noise_floor * scale:.1f}"
    return f"{shown} ({label} = {adjusted:.3g}): {verdict}{floor}"


def significance(
    baseline: Sequence[Mapping[str, Any]],
    candidate: Sequence[Mapping[str, Any]],
    *,
    correction: Correction = DEFAULT_CORRECTION,
    alpha: float = DEFAULT_ALPHA,
    noise_floors: Mapping[str, float] | None = None,
    noise_floor_source: str | None = None,
) -> ComparisonSignificance:
    """Both runs' executions compared metric by metric, corrected, against the noise floor.

    The runs' case scores are plain rows (see `execution_samples`).
    """
    index: dict[str, int] = {}
    b_samples, b_kinds = execution_samples(baseline, index)
    c_samples, c_kinds = execution_samples(candidate, index)
    kinds = {**c_kinds, **b_kinds}
    names = [n for n in (PASS_RATE, AVG_SCORE) if n in b_samples or n in c_samples]
    names += sorted(n for n in kinds if n not in (PASS_RATE, AVG_SCORE) and n in b_samples)
    names = [n for n in names if n in b_samples and n in c_samples]
    empty: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0, dtype=np.int64))
    diffs = [
        clustered_difference(b_samples.get(n, empty), c_samples.get(n, empty), confidence=1 - alpha)
        for n in names
    ]
    adjusted = adjust_p_values([d.p_value for d in diffs], correction)
    floors = dict(noise_floors or {})
    rows: list[MetricSignificance] = []
    for name, diff, adj in zip(names, diffs, adjusted, strict=True):
        kind = kinds.get(name, "metric")
        unit, scale = _unit(name, kind)
        significant = adj is not None and adj < alpha
        floor = floors.get(name)
        within = None if floor is None or diff.delta is None else abs(diff.delta) < floor
        rows.append(
            MetricSignificance(
                metric=name,
                kind="run" if kind == "run" else "scorer" if kind == "scorer" else "metric",
                unit=unit,
                scale=scale,
                baseline=clustered_mean(*b_samples.get(name, empty)),
                candidate=clustered_mean(*c_samples.get(name, empty)),
                difference=diff,
                p_value=diff.p_value,
                adjusted_p_value=adj,
                significant=significant,
                direction=_direction(diff, significant),
                noise_floor=floor,
                within_noise=within,
                reading=reading_of(name, diff.delta, scale, adj, correction, alpha, floor),
            )
        )
    return _summarise(rows, correction, alpha, noise_floor_source)


def _summarise(
    rows: list[MetricSignificance],
    correction: Correction,
    alpha: float,
    source: str | None,
) -> ComparisonSignificance:
    regressions = [r.metric for r in rows if r.direction == "regression" and not r.within_noise]
    improvements = [r.metric for r in rows if r.direction == "improvement" and not r.within_noise]
    tested = [r for r in rows if r.adjusted_p_value is not None]
    verdict: StatVerdict
    if regressions:
        verdict = "regression"
    elif improvements:
        verdict = "improvement"
    elif not tested:
        verdict = "insufficient_data"
    else:
        verdict = "no_significant_change"
    headline = next((r for r in rows if r.metric in regressions), None)
    headline = headline or next((r for r in rows if r.metric == PASS_RATE), None)
    headline = headline or (rows[0] if rows else None)
    return ComparisonSignificance(
        correction=correction,
        correction_name=CORRECTION_NAMES[correction],
        alpha=alpha,
        metrics=rows,
        family_size=len(tested),
        verdict=verdict,
        regressions=regressions,
        within_noise=[r.metric for r in rows if r.within_noise],
        noise_floor_source=source,
        reading=headline.reading if headline is not None else "no metric on both sides",
    )


def significance_markdown(sig: ComparisonSignificance) -> list[str]:
    """The Markdown rows of a comparison's significance: the reading, then one row per metric."""
    source = f"; noise floor from {sig.noise_floor_source}" if sig.noise_floor_source else ""
    lines = [
        "",
        f"**{sig.reading}**",
        "",
        f"Per metric ({sig.correction_name} over {sig.family_size}; SEs clustered by test "
        f"case{source}): **{sig.verdict}**",
        "",
        "| Metric | Δ | 95% CI | p | adjusted p | noise floor |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for m in sig.metrics:
        d = m.difference
        ci = "n/a" if d.low is None or d.high is None else f"[{d.low:+.4f}, {d.high:+.4f}]"
        name = m.metric.replace("|", "\\|")
        lines.append(
            f"| {name} | {_num(d.delta, '+.4f')} | {ci} "
            f"| {_num(m.p_value, '.4g')} | {_num(m.adjusted_p_value, '.4g')} "
            f"| {_num(m.noise_floor, '.4f')}{' (within)' if m.within_noise else ''} |"
        )
    return lines


def _num(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def as_one_family(
    found: Sequence[ComparisonSignificance], correction: Correction
) -> list[ComparisonSignificance]:
    """Several comparisons' significance corrected as one family (issue 36, many-run compare).

    A base against k candidates tests k × m metrics at once: every comparison's raw p-values
    are adjusted together by `correction` (`adjust.adjust_p_values`), and each comparison's
    significance, directions, readings and verdict are derived again from its adjusted ones.
    Each comparison keeps its own alpha and noise floors; `family_size` counts the whole family.
    """
    raw = [m.p_value for s in found for m in s.metrics]
    adjusted = iter(adjust_p_values(raw, correction))
    size = sum(1 for p in raw if p is not None)
    out = []
    for s in found:
        rows = []
        for m in s.metrics:
            adj = next(adjusted)
            significant = adj is not None and adj < s.alpha
            rows.append(
                m.model_copy(
                    update={
                        "adjusted_p_value": adj,
                        "significant": significant,
                        "direction": _direction(m.difference, significant),
                        "reading": reading_of(
                            m.metric,
                            m.difference.delta,
                            m.scale,
                            adj,
                            correction,
                            s.alpha,
                            m.noise_floor,
                        ),
                    }
                )
            )
        again = _summarise(rows, correction, s.alpha, s.noise_floor_source)
        out.append(again.model_copy(update={"family_size": size}))
    return out
