"""Clustered standard errors: means and paired differences over executions (issue 37).

Pure functions (numpy and the standard library). With repetitions (pass^k, several epochs),
the executions of one test case are not independent: they share the case's difficulty. A
standard error that treats every execution as independent is then too small (Miller 2024,
"Adding Error Bars to Evals", §2.2). Every execution here carries a *cluster*: its test case,
or the dataset item (`test_id`) several test cases share, so that repetitions and variants of
one item form one cluster.

- `clustered_mean(values, clusters)`: the mean of all executions and its cluster-robust
  standard error, ``sqrt(G/(G-1) · Σ_c (Σ_{i∈c} (x_i - x̄))²) / N`` (the sandwich estimator of
  an intercept-only regression with the usual CR1 small-sample factor ``G/(G-1)``; what Stata
  and statsmodels' ``cov_type="cluster"`` report). The naive SE (``s/√N``) is given beside it.
- `clustered_difference(...)`: candidate - baseline paired by cluster. Each side's executions
  of a cluster are averaged, ``d_c = ȳ_c(candidate) - ȳ_c(baseline)`` over the clusters both
  sides have, and the difference is their mean with ``SE = sd(d_c)/√G`` (a paired t-test on
  cluster means, G - 1 degrees of freedom). Pairing removes the clusters' shared difficulty;
  averaging within a cluster first makes the SE cluster-robust.

`t_two_sided_p` and `t_quantile` are Student's t distribution for integer degrees of freedom
(Abramowitz & Stegun 26.7.3-4, an exact finite series), so no scipy is needed.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from statistics import NormalDist

import numpy as np
from pydantic import Field

from evaledger.domain.model import StrictModel

CLUSTER_METHOD = "cluster-robust (CR1) by test case"
"""How a mean's standard error is computed, as the output names it."""
PAIRED_METHOD = "paired by test case; t-test on per-case means (repetitions averaged first)"
"""How a difference's standard error is computed, as the output names it."""
LARGE_DF = 2_000
"""Above this many degrees of freedom the t tail is a transformed normal tail (error < 1e-8)."""


class ClusteredMean(StrictModel):
    """A mean over executions with its cluster-robust standard error."""

    mean: float | None = Field(description="Mean over every execution with a value.")
    se: float | None = Field(description="Cluster-robust (CR1) standard error; None below 2.")
    naive_se: float | None = Field(description="s/√N, every execution taken as independent.")
    n: int = Field(ge=0, description="Executions with a value.")
    clusters: int = Field(ge=0, description="Distinct clusters (test cases / dataset items).")
    method: str = CLUSTER_METHOD


class ClusteredDifference(StrictModel):
    """Candidate - baseline, paired by cluster, with its standard error and test."""

    delta: float | None = Field(description="Mean over paired clusters of d_c.")
    se: float | None = Field(description="sd(d_c)/√G; None below 2 paired clusters.")
    naive_se: float | None = Field(
        description="√(s_b²/N_b + s_c²/N_c): every execution independent, nothing paired."
    )
    low: float | None = Field(description="Lower bound of the (1 - alpha) t interval.")
    high: float | None = None
    t: float | None = Field(default=None, description="delta / se.")
    df: int = Field(ge=0, description="Degrees of freedom: paired clusters - 1.")
    p_value: float | None = Field(description="Two-sided p of delta = 0 (t, df); None if no SE.")
    clusters: int = Field(ge=0, description="Clusters both sides have.")
    confidence: float = 0.95
    method: str = PAIRED_METHOD


def t_two_sided_p(t: float, df: int) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` degrees of freedom (exact series)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if math.isinf(t):
        return 0.0
    if math.isnan(t):
        return 1.0
    if df > LARGE_DF:
        # A&S 26.7.8-type normalising transform: error O(1/df²), < 1e-8 here.
        u = abs(t) * (1 - 1 / (4 * df)) / math.sqrt(1 + t * t / (2 * df))
        return min(1.0, 2 * NormalDist().cdf(-u))
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = s * total
    else:
        inside = theta
        if df > 1:
            term, total = 1.0, 1.0
            for k in range(1, (df - 1) // 2):
                term *= c2 * (2 * k) / (2 * k + 1)
                total += term
            inside += s * math.cos(theta) * total
        inside *= 2 / math.pi
    return min(1.0, max(0.0, 1.0 - inside))


def t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile (0.5 < q < 1) of Student's t with ``df`` degrees of freedom."""
    if not 0.5 < q < 1:
        raise ValueError(f"q must be in (0.5, 1), got {q}")
    target = 2 * (1 - q)  # two-sided tail mass at the quantile
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if t_two_sided_p(mid, df) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _integer_codes(*sides: Sequence[Hashable] | np.ndarray) -> list[np.ndarray]:
    """Each side's clusters as integer codes, one code per distinct cluster across the sides."""
    if all(isinstance(c, np.ndarray) and c.dtype.kind in "iu" for c in sides):
        return [np.asarray(c, dtype=np.int64) for c in sides]
    index: dict[Hashable, int] = {}
    return [
        np.fromiter(
            (index.setdefault(c, len(index)) for c in side), dtype=np.int64, count=len(side)
        )
        for side in sides
    ]


def _group_means(
    values: Sequence[float] | np.ndarray, codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct codes (sorted) and each one's mean value."""
    x = np.asarray(values, dtype=np.float64)
    keys, inverse = np.unique(codes, return_inverse=True)
    sums = np.bincount(inverse, weights=x, minlength=len(keys))
    counts = np.bincount(inverse, minlength=len(keys))
    return keys, sums / counts


def clustered_mean(
    values: Sequence[float] | np.ndarray, clusters: Sequence[Hashable] | np.ndarray
) -> ClusteredMean:
    """The mean of ``values`` and its CR1 cluster-robust standard error (see the module doc)."""
    if len(values) != len(clusters):
        raise ValueError("values and clusters must have the same length")
    n = len(values)
    if n == 0:
        return ClusteredMean(mean=None, se=None, naive_se=None, n=0, clusters=0)
    x = np.asarray(values, dtype=np.float64)
    (codes,) = _integer_codes(clusters)
    _, inverse = np.unique(codes, return_inverse=True)
    g = int(inverse.max()) + 1
    mean = float(x.mean())
    naive = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else None
    se = None
    if g > 1:
        sums = np.bincount(inverse, weights=x - mean, minlength=g)
        se = math.sqrt(g / (g - 1) * float(np.sum(sums**2))) / n
    return ClusteredMean(mean=mean, se=se, naive_se=naive, n=n, clusters=g)


def clustered_difference(
    baseline: tuple[Sequence[float] | np.ndarray, Sequence[Hashable] | np.ndarray],
    candidate: tuple[Sequence[float] | np.ndarray, Sequence[Hashable] | np.ndarray],
    *,
    confidence: float = 0.95,
) -> ClusteredDifference:
    """Candidate - baseline paired by cluster: each side's ``(values, clusters)``."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    b_codes, c_codes = _integer_codes(baseline[1], candidate[1])
    b_keys, b_means = _group_means(baseline[0], b_codes)
    c_keys, c_means = _group_means(candidate[0], c_codes)
    _, at_b, at_c = np.intersect1d(b_keys, c_keys, assume_unique=True, return_indices=True)
    d = c_means[at_c] - b_means[at_b]
    g = len(d)
    naive = _naive_difference_se(baseline[0], candidate[0])
    if g == 0:
        return ClusteredDifference(
            delta=None, se=None, naive_se=naive, low=None, high=None, df=0, p_value=None,
            clusters=0, confidence=confidence,
        )  # fmt: skip
    delta = float(d.mean())
    if g < 2:
        return ClusteredDifference(
            delta=delta, se=None, naive_se=naive, low=None, high=None, df=0, p_value=None,
            clusters=g, confidence=confidence,
        )  # fmt: skip
    se = float(d.std(ddof=1) / math.sqrt(g))
    df = g - 1
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    infinite = 0.0 if delta == 0 else math.copysign(math.inf, delta)
    t = infinite if se == 0 else delta / se
    return ClusteredDifference(
        delta=delta,
        se=se,
        naive_se=naive,
        low=delta - half,
        high=delta + half,
        t=None if math.isinf(t) else t,
        df=df,
        p_value=t_two_sided_p(t, df),
        clusters=g,
        confidence=confidence,
    )


def _naive_difference_se(
    base: Sequence[float] | np.ndarray, cand: Sequence[float] | np.ndarray
) -> float | None:
    if len(base) < 2 or len(cand) < 2:
        return None
    b = np.asarray(base, dtype=np.float64)
    c = np.asarray(cand, dtype=np.float64)
    return math.sqrt(float(b.var(ddof=1)) / len(b) + float(c.var(ddof=1)) / len(c))
