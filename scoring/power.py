"""Noise floor, planning and the variance split of a setup (issue 37).

Pure functions (numpy and the standard library). The comparison `compare` makes is paired by
test case (`scoring.clustered.clustered_difference`): each test case's mean over its
repetitions on one side, minus the other's, averaged over the cases. Everything here sizes and
measures *that* difference.

The model (one metric, one execution's value y): ``y = μ + case effect + execution noise``,
``σ² = σ²_case + σ²_within`` and ``ρ = σ²_case / σ²`` the intra-class correlation (ICC). A test
case's mean over K repetitions has within-case variance ``σ²_within / K``; the case effect is
shared by both runs of the same suite and cancels in the paired difference, so one case's
difference has variance ``V = (σ²_b + σ²_c)(1 - ρ) / K`` (σ²_b, σ²_c each side's execution
variance; for a pass rate p: ``p(1 - p)``). With n cases, the difference's SE is ``√(V/n)``
and a two-sided test at alpha has the stated power for a true difference δ when
``n = (t_{1-α/2} + t_{power})² · V / δ²`` (t with n - 1 degrees of freedom, solved by
iteration; `plan_sample_size`). Without an ICC (ρ = 0) the plan is the independent-cases one,
which is conservative whenever cases differ in difficulty.

- `icc_oneway(values, clusters)`: the one-way ANOVA estimate of ρ (Donner's k0 for unequal
  cluster sizes). Over several runs of one suite, a test case's executions in every run are
  one cluster, so A/A runs without repetitions estimate it too.
- `metric_noise(runs)`: from A/A runs (same agent version, same suite), the run-to-run spread
  of a metric: each run's mean, every pair's paired difference with its clustered SE, and the
  SD of an A/A difference, ``max(√(mean SE²), √2 · sd(run means))`` (the second from 3 runs
  on: run-level noise the within-run SEs cannot see, such as a provider's bad hour). The noise
  floor is ``z_{1-α/2}`` times it (95 % of A/A differences fall within it at α = 0.05); the
  minimum detectable difference at the stated power ``(z_{1-α/2} + z_{power})`` times it.
- `variance_split(rows)`: for runs with repetitions and a judge panel, the share of the
  variance from the test cases, the agent (between repetitions of a case) and the judge
  (between the panel's judges on one transcript), by the method of moments of the nested
  ANOVA (exact for balanced designs; components clipped at 0).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from itertools import combinations
from statistics import NormalDist

import numpy as np
from pydantic import Field

from evaledger.domain.model import StrictModel
from evaledger.scoring.clustered import (
    PAIRED_METHOD,
    clustered_difference,
    clustered_mean,
    t_quantile,
)

DEFAULT_POWER = 0.8
MAX_PLANNED_CASES = 10_000_000
"""A plan above this many cases is reported as such, not computed further."""
Sample = tuple[Sequence[float] | np.ndarray, Sequence[Hashable] | np.ndarray]
"""One run's values of a metric and each value's cluster (test case)."""


def z(q: float) -> float:
    """The standard normal's ``q`` quantile."""
    return NormalDist().inv_cdf(q)


# ---------------------------------------------------------------------------------------------
# Planning


class Plan(StrictModel):
    """Test cases (and repetitions) needed to detect a difference, and what a size detects."""

    metric: str
    baseline: float = Field(description="The metric's expected value on the baseline.")
    mde: float = Field(gt=0, description="The difference to detect (the metric's units).")
    alpha: float
    power: float
    repetitions: int = Field(ge=1, description="Repetitions per test case on each side.")
    icc: float = Field(ge=0, le=1, description="Intra-class correlation ρ (0: none given).")
    execution_variance: float = Field(description="(σ²_b + σ²_c) / 2, one execution's variance.")
    case_difference_variance: float = Field(description="V = (σ²_b + σ²_c)(1 - ρ)/K.")
    cases_needed: int | None = Field(description="Per run; None above the planning cap.")
    executions_needed: int | None = Field(description="cases_needed × repetitions, per run.")
    method: str = PAIRED_METHOD


class SizeMde(StrictModel):
    """The minimum detectable difference of a run of a given size."""

    cases: int
    repetitions: int
    mde: float | None = Field(description="Smallest true difference found with the power.")


def execution_variances(
    metric: str, baseline: float, mde: float, sd: float | None
) -> tuple[float, float]:
    """σ²_b and σ²_c of one execution: ``p(1-p)`` of a rate (the worse of p ± mde), else sd²."""
    if sd is not None:
        if not math.isfinite(sd * sd):
            raise ValueError(f"sd: {sd} is too large (its square is not a finite number)")
        return sd * sd, sd * sd
    if not 0 <= baseline <= 1:
        raise ValueError(f"baseline: a rate must be within [0, 1] (give --sd for {metric})")
    options = [q for q in (baseline - mde, baseline + mde) if 0 <= q <= 1]
    if not options:
        raise ValueError(f"mde: {mde} is larger than the rate's room from {baseline}")
    q = max(options, key=lambda v: v * (1 - v))
    return baseline * (1 - baseline), q * (1 - q)


def _n_for(variance: float, mde: float, alpha: float, power: float) -> float:
    """The (real) n solving ``n = (t_{1-α/2,n-1} + t_{power,n-1})² V / δ²``."""
    squared = mde * mde
    if squared == 0:  # an mde so small its square underflows: no size finds it
        return math.inf
    scale = variance / squared
    n = (z(1 - alpha / 2) + z(power)) ** 2 * scale
    for _ in range(50):
        if not n <= MAX_PLANNED_CASES:  # above the cap (or infinite): no t to refine with
            return n
        df = max(1, math.ceil(n) - 1)
        nxt = (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) ** 2 * scale
        if abs(nxt - n) < 1e-9 or not nxt <= MAX_PLANNED_CASES:
            return nxt
        n = nxt
    return n


def plan_sample_size(
    metric: str,
    baseline: float,
    mde: float,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    repetitions: int = 1,
    icc: float = 0.0,
    sd: float | None = None,
) -> Plan:
    """The cases (per run) a paired comparison needs to find ``mde`` with ``power`` at alpha."""
    _check_design(alpha, power, repetitions, icc)
    if mde <= 0:
        raise ValueError(f"mde: must be > 0, got {mde}")
    var_b, var_c = execution_variances(metric, baseline, mde, sd)
    variance = (var_b + var_c) * (1 - icc) / repetitions
    n = _n_for(variance, mde, alpha, power) if variance > 0 else 2.0
    cases = None if n > MAX_PLANNED_CASES else max(2, math.ceil(n - 1e-9))
    return Plan(
        metric=metric,
        baseline=baseline,
        mde=mde,
        alpha=alpha,
        power=power,
        repetitions=repetitions,
        icc=icc,
        execution_variance=(var_b + var_c) / 2,
        case_difference_variance=variance,
        cases_needed=cases,
        executions_needed=None if cases is None else cases * repetitions,
    )


def detectable_difference(
    metric: str,
    baseline: float,
    cases: int,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    repetitions: int = 1,
    icc: float = 0.0,
    sd: float | None = None,
) -> SizeMde:
    """The smallest difference ``cases`` cases × ``repetitions`` find with ``power``."""
    _check_design(alpha, power, repetitions, icc)
    if cases < 2:
        return SizeMde(cases=cases, repetitions=repetitions, mde=None)
    df = cases - 1
    factor = t_quantile(1 - alpha / 2, df) + t_quantile(power, df)
    if sd is not None:
        return SizeMde(
            cases=cases,
            repetitions=repetitions,
            mde=factor * math.sqrt(2 * sd * sd * (1 - icc) / repetitions / cases),
        )
    lo, hi = 0.0, max(baseline, 1 - baseline)
    for _ in range(80):  # the rate's variance depends on the difference: bisection
        mid = (lo + hi) / 2
        var_b, var_c = execution_variances(metric, baseline, mid, None)
        needed = factor * math.sqrt((var_b + var_c) * (1 - icc) / repetitions / cases)
        lo, hi = (mid, hi) if needed > mid else (lo, mid)
    return SizeMde(cases=cases, repetitions=repetitions, mde=hi)


def _check_design(alpha: float, power: float, repetitions: int, icc: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    if not 0.5 < power < 1:
        raise ValueError(f"power: must be in (0.5, 1), got {power}")
    if repetitions < 1:
        raise ValueError(f"repetitions: must be >= 1, got {repetitions}")
    if not 0 <= icc < 1:
        raise ValueError(f"icc: must be in [0, 1), got {icc}")


class IccEstimate(StrictModel):
    """One-way ANOVA estimate of the intra-class correlation."""

    icc: float | None = Field(description="σ²_case / (σ²_case + σ²_within), clipped to [0, 1).")
    between_variance: float | None = None
    within_variance: float | None = None
    clusters: int = 0
    n: int = 0


def icc_oneway(values: Sequence[float], clusters: Sequence[Hashable]) -> IccEstimate:
    """``ρ = σ²_b / (σ²_b + MSW)``, ``σ²_b = max(0, (MSB - MSW) / k0)`` (Donner's k0)."""
    groups: dict[Hashable, list[float]] = {}
    for v, c in zip(values, clusters, strict=True):
        groups.setdefault(c, []).append(float(v))
    g, n = len(groups), len(values)
    if g < 2 or n <= g:
        return IccEstimate(icc=None, clusters=g, n=n)
    x = np.asarray(values, dtype=np.float64)
    grand = float(x.mean())
    sizes = np.array([len(vs) for vs in groups.values()], dtype=np.float64)
    means = np.array([math.fsum(vs) / len(vs) for vs in groups.values()])
    ssb = float(np.sum(sizes * (means - grand) ** 2))
    ssw = math.fsum(
        (v - m) ** 2 for vs, m in zip(groups.values(), means.tolist(), strict=True) for v in vs
    )
    msb, msw = ssb / (g - 1), ssw / (n - g)
    k0 = (n - float(np.sum(sizes**2)) / n) / (g - 1)
    between = max(0.0, (msb - msw) / k0)
    total = between + msw
    icc = 0.0 if total == 0 else min(between / total, 0.999)
    return IccEstimate(icc=icc, between_variance=between, within_variance=msw, clusters=g, n=n)


# ---------------------------------------------------------------------------------------------
# Noise floor


class MetricNoise(StrictModel):
    """How much one metric moves between runs of the same agent version and suite."""

    metric: str
    run_means: list[float | None] = Field(description="Each run's mean, in the order given.")
    run_ses: list[float | None] = Field(description="Each run's clustered SE of its mean.")
    spread_sd: float | None = Field(description="sd of the run means (2+ runs).")
    pair_deltas: list[float] = Field(description="Every pair's paired difference (later - first).")
    pair_se: float | None = Field(description="√(mean SE²) over the pairs' clustered SEs.")
    sd_difference: float | None = Field(description="The SD of an A/A difference used.")
    noise_floor: float | None = Field(description="z_{1-α/2} × sd_difference.")
    mde: float | None = Field(description="(z_{1-α/2} + z_power) × sd_difference.")
    alpha: float
    power: float
    method: str = PAIRED_METHOD


def metric_noise(
    metric: str,
    runs: Sequence[Sample],
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
) -> MetricNoise:
    """The run-to-run spread of ``metric`` over A/A ``runs`` (see the module doc)."""
    means = [clustered_mean(*run) for run in runs]
    present = [m.mean for m in means if m.mean is not None]
    spread = float(np.std(present, ddof=1)) if len(present) > 1 else None
    deltas: list[float] = []
    ses: list[float] = []
    for first, later in combinations(runs, 2):
        diff = clustered_difference(first, later)
        if diff.delta is not None:
            deltas.append(diff.delta)
        if diff.se is not None:
            ses.append(diff.se)
    pair_se = math.sqrt(math.fsum(s * s for s in ses) / len(ses)) if ses else None
    candidates = [s for s in (pair_se,) if s is not None]
    if spread is not None and len(present) >= 3:
        candidates.append(math.sqrt(2) * spread)
    sd_diff = max(candidates) if candidates else None
    return MetricNoise(
        metric=metric,
        run_means=[m.mean for m in means],
        run_ses=[m.se for m in means],
        spread_sd=spread,
        pair_deltas=deltas,
        pair_se=pair_se,
        sd_difference=sd_diff,
        noise_floor=None if sd_diff is None else z(1 - alpha / 2) * sd_diff,
        mde=None if sd_diff is None else (z(1 - alpha / 2) + z(power)) * sd_diff,
        alpha=alpha,
        power=power,
    )


# ---------------------------------------------------------------------------------------------
# Variance split


class VarianceSplit(StrictModel):
    """Where one metric's variance comes from: test cases, the agent, the judge."""

    metric: str
    cases: float | None = Field(description="σ² between test cases.")
    agent: float | None = Field(description="σ² between repetitions of a case (None: no reps).")
    judge: float | None = Field(description="σ² between judges on a transcript (None: 1 judge).")
    shares: dict[str, float] = Field(description="Each component's share of their sum.")
    test_cases: int
    transcripts: int
    verdicts: int
    method: str = "method of moments, nested ANOVA (case > repetition > judge)"


Verdict = tuple[Hashable, Hashable, float]
"""One judge's value of a metric: (test case, transcript (case execution), value)."""


def variance_split(metric: str, rows: Sequence[Verdict]) -> VarianceSplit:
    """The nested components of ``rows``' variance (see the module doc)."""
    tree: dict[Hashable, dict[Hashable, list[float]]] = {}
    for case, transcript, value in rows:
        tree.setdefault(case, {}).setdefault(transcript, []).append(float(value))
    transcripts = [vs for reps in tree.values() for vs in reps.values()]
    judge = _pooled(transcripts)
    per_case_means = {
        case: [math.fsum(vs) / len(vs) for vs in reps.values()] for case, reps in tree.items()
    }
    rep_var = _pooled(list(per_case_means.values()))
    mean_judges = float(np.mean([len(vs) for vs in transcripts])) if transcripts else 1.0
    mean_reps = float(np.mean([len(ms) for ms in per_case_means.values()])) if tree else 1.0
    agent = None
    if rep_var is not None:
        agent = max(0.0, rep_var - (judge or 0.0) / mean_judges)
    case_means = [math.fsum(ms) / len(ms) for ms in per_case_means.values()]
    cases = None
    if len(case_means) > 1:
        within = rep_var if rep_var is not None else (judge or 0.0) / mean_judges
        cases = max(0.0, float(np.var(case_means, ddof=1)) - within / mean_reps)
    parts = {"cases": cases, "agent": agent, "judge": judge}
    total = math.fsum(v for v in parts.values() if v is not None)
    shares = {k: (v / total if total else 0.0) for k, v in parts.items() if v is not None}
    return VarianceSplit(
        metric=metric,
        cases=cases,
        agent=agent,
        judge=judge,
        shares=shares,
        test_cases=len(tree),
        transcripts=len(transcripts),
        verdicts=len(rows),
    )


def _pooled(groups: Sequence[Sequence[float]]) -> float | None:
    """The pooled within-group variance ``Σ Σ (x - x̄_g)² / Σ (n_g - 1)``; None without df."""
    df = sum(len(g) - 1 for g in groups if len(g) > 1)
    if df == 0:
        return None
    ss = math.fsum((x - math.fsum(g) / len(g)) ** 2 for g in groups if len(g) > 1 for x in g)
    return ss / df
