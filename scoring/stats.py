"""Paired statistics for run-to-run comparison (DESIGN §5, "beyond the reference").

Pure functions (the standard library; numpy for a fast standard deviation):

- `mcnemar_exact(b, c)`: the exact two-sided McNemar test on the discordant pass flips of matched
  test cases (``b`` = pass→fail, ``c`` = fail→pass). Under H0 a discordant pair is equally likely
  to go either way, so ``min(b, c) ~ Binomial(b + c, 0.5)`` and
  ``p = min(1, 2 * P[X <= min(b, c)])``; ``p = 1.0`` when there are no discordant pairs. The sum
  is computed with exact integer arithmetic before the one final division.
- `paired_bootstrap_ci(deltas)`: the paired bootstrap percentile interval of the mean per-case
  score delta (candidate - baseline). Resampling uses ``random.Random(seed)``, so the same input
  and seed always give the same interval.
- `paired_statistics(pairs)`: both tests over matched test cases plus a verdict.

Minimum data (the ``insufficient_data`` choice):

- McNemar needs ``b + c >= 6`` discordant pairs (`MIN_DISCORDANT_PAIRS`): with 5 or fewer, even a
  unanimous split (0 vs 5) gives p = 0.0625, so the test *cannot* reach alpha = 0.05; calling that
  "no significant change" would be misleading.
- The bootstrap needs at least 5 paired scores (`MIN_PAIRED_SCORES`): below that the resampling
  distribution has so few distinct values that its percentiles are not a meaningful interval.

``insufficient_data`` is true when *either* test lacks its minimum; that test is then ignored.
The verdict is ``regression`` / ``improvement`` when a test that has enough data is significant
at alpha (McNemar p < alpha with the majority of flips in that direction, or a 95% CI wholly below
/ above 0); a regression signal wins over a conflicting improvement signal. Otherwise the verdict
is ``insufficient_data`` when a test lacked data, else ``no_significant_change``. The statistics
are reported beside the threshold verdict and never replace it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Literal

from pydantic import Field

from evaledger.domain.model import StrictModel

DEFAULT_RESAMPLES = 10_000
"""Bootstrap resamples by default."""
MAX_BOOTSTRAP_DRAWS = 500_000
"""Draw budget of one bootstrap (~60 ms here): resamples shrink to fit it, down to
MIN_RESAMPLES; beyond that the CI uses the normal approximation (see paired_bootstrap_ci)."""
MIN_RESAMPLES = 1_000
DEFAULT_SEED = 0
"""Seed of the bootstrap's `random.Random` by default."""
DEFAULT_ALPHA = 0.05
"""Significance level of the statistical verdict."""
MIN_DISCORDANT_PAIRS = 6
"""Smallest b + c for which the exact two-sided McNemar p can fall below 0.05."""
MIN_PAIRED_SCORES = 5
"""Smallest number of paired scores the bootstrap interval is computed on."""

StatVerdict = Literal["regression", "improvement", "no_significant_change", "insufficient_data"]


class McNemarResult(StrictModel):
    """Exact McNemar test on discordant pass flips."""

    b: int = Field(ge=0, description="Discordant pairs that went pass → fail.")
    c: int = Field(ge=0, description="Discordant pairs that went fail → pass.")
    p_value: float = Field(ge=0, le=1, description="Exact two-sided p-value.")
    sufficient_data: bool = Field(
        default=True, description=f"b + c >= {MIN_DISCORDANT_PAIRS}; otherwise not used."
    )


class BootstrapCI(StrictModel):
    """Paired bootstrap percentile interval of the mean score delta."""

    mean: float | None = Field(description="Observed mean delta (candidate - baseline), points.")
    low: float | None = Field(description="Lower bound of the interval; None when n = 0.")
    high: float | None = Field(description="Upper bound of the interval; None when n = 0.")
    n: int = Field(ge=0, description="Paired scores.")
    resamples: int = Field(ge=0, description="Bootstrap resamples drawn (0 for 'normal').")
    method: str = Field(
        default="bootstrap",
        description="bootstrap (percentile), or normal (CLT) when n × resamples exceeds the "
        "draw budget: at that n the two intervals agree to well under a point.",
    )
    seed: int = Field(description="Seed of random.Random.")
    confidence: float = Field(default=0.95, description="Coverage of the interval.")
    sufficient_data: bool = Field(
        default=True, description=f"n >= {MIN_PAIRED_SCORES}; otherwise not used."
    )


class PairedStatistics(StrictModel):
    """Paired statistics of a comparison, reported beside the threshold verdict."""

    mcnemar: McNemarResult
    score_delta_ci95: BootstrapCI
    insufficient_data: bool = Field(description="At least one test lacked its minimum data.")
    alpha: float = DEFAULT_ALPHA
    verdict: StatVerdict


class PairedCase(StrictModel):
    """One matched test case, repetitions already reduced, as the statistics see it."""

    baseline_passed: bool | None = None
    candidate_passed: bool | None = None
    baseline_score: float | None = None
    candidate_score: float | None = None


def binom_cdf_half(k: int, n: int) -> Fraction:
    """Exact P[X <= k] for X ~ Binomial(n, 0.5), as a fraction."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if k < 0:
        return Fraction(0)
    if k >= n:
        return Fraction(1)
    # C(n, i+1) = C(n, i) · (n − i) / (i + 1): one multiplication per term, not one comb() each.
    total, term = 0, 1
    for i in range(k + 1):
        total += term
        term = term * (n - i) // (i + 1)
    return Fraction(total, 2**n)


def mcnemar_exact(b: int, c: int) -> McNemarResult:
    """Exact two-sided McNemar test: ``p = min(1, 2 * binom_cdf(min(b, c); b + c, 0.5))``.

    ``b`` counts pass→fail flips and ``c`` fail→pass flips among matched cases; ``p = 1.0`` when
    ``b + c = 0``.
    """
    if b < 0 or c < 0:
        raise ValueError(f"b and c must be >= 0, got b={b}, c={c}")
    n = b + c
    p = Fraction(1) if n == 0 else min(Fraction(1), 2 * binom_cdf_half(min(b, c), n))
    return McNemarResult(b=b, c=c, p_value=float(p), sufficient_data=n >= MIN_DISCORDANT_PAIRS)


def percentile(values: Iterable[float], q: float) -> float:
    """Return the q-th percentile (0-100) of values: the one definition used everywhere.

    Linear interpolation between closest ranks (Hyndman & Fan type 7; numpy's default
    ``method="linear"``, Python's ``statistics.quantiles(method="inclusive")``): for sorted
    values ``x[0..n-1]``, ``h = (n - 1)·q/100`` and ``P = x[⌊h⌋] + (h - ⌊h⌋)·(x[⌊h⌋+1] - x[⌊h⌋])``.
    It never leaves the range of the values, and p50 is the median. Run summaries (per-case and
    run latency percentiles), rollups (per-message percentiles) and the bootstrap interval of a
    comparison all call this function.

    Raises:
        ValueError: ``values`` is empty or ``q`` is outside [0, 100].
    """
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q: must be within [0, 100], got {q}")
    h = (len(xs) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def paired_bootstrap_ci(
    deltas: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> BootstrapCI:
    """Paired bootstrap percentile CI of the mean of per-case deltas.

    Each resample draws ``len(deltas)`` deltas with replacement from ``random.Random(seed)``; the
    interval is the (1 - confidence)/2 and (1 + confidence)/2 percentiles (`percentile`) of
    the resample means. Reproducible: the same deltas, resamples and seed give the same interval.
    Values are rounded to 4 dp. With no deltas, mean/low/high are None.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    values = [float(d) for d in deltas]
    n = len(values)
    sufficient = n >= MIN_PAIRED_SCORES
    if n == 0:
        return BootstrapCI(
            mean=None,
            low=None,
            high=None,
            n=0,
            resamples=resamples,
            seed=seed,
            confidence=confidence,
            sufficient_data=False,
        )
    tail = (1 - confidence) / 2
    if n * resamples > MAX_BOOTSTRAP_DRAWS:
        resamples = max(MAX_BOOTSTRAP_DRAWS // n, min(resamples, MIN_RESAMPLES))
    if n * resamples > MAX_BOOTSTRAP_DRAWS:
        # Pure-Python resampling of 10,000 cases x 10,000 resamples takes ~20 s; at such n
        # the mean's sampling distribution is normal (CLT), so use its interval instead.
        mean = math.fsum(values) / n
        low, high = _normal_interval(values, mean, statistics.NormalDist().inv_cdf(1 - tail))
        return BootstrapCI(
            mean=round(mean, 4),
            low=low,
            high=high,
            n=n,
            resamples=0,
            seed=seed,
            confidence=confidence,
            sufficient_data=sufficient,
            method="normal",
        )
    means = _resample_means(values, resamples, seed)
    if means is None:
        rng = random.Random(seed)  # noqa: S311 - statistics, not cryptography
        means = [math.fsum(rng.choices(values, k=n)) / n for _ in range(resamples)]
    means.sort()
    return BootstrapCI(
        mean=round(math.fsum(values) / n, 4),
        low=round(percentile(means, 100 * tail), 4),
        high=round(percentile(means, 100 * (1 - tail)), 4),
        n=n,
        resamples=resamples,
        seed=seed,
        confidence=confidence,
        sufficient_data=sufficient,
    )


def _resample_means(values: list[float], resamples: int, seed: int) -> list[float] | None:
    """``[fsum(Random(seed).choices(values, k=n)) / n for each resample]``, vectorised, exactly.

    numpy's legacy `RandomState` is the same Mersenne Twister as `random.Random` and its
    `random_sample` the same 53-bit doubles, so from the same state it draws the same stream;
    `choices` picks ``values[floor(random() * n)]``. `fsum` is the correctly rounded sum: here
    the values are scaled by one power of two to exact integers V = H·2**s + L (H, L in int64,
    L the low bits of V with its sign),
    each resample's H and L are summed in int64 and the exact total is rounded once, as a Python
    int, to a float. None (the caller draws in Python) when the values don't fit that: exponents
    too far apart, a -0.0, or a total below the normal floats.
    """
    # Imported here, not at the top: `scoring.case` needs `percentile` on every CLI command's
    # path, and numpy (~0.1 s) is wanted only by the comparisons that resample (issue 19).
    # lazy: numpy (~0.1 s), only for a comparison's resampling
    import numpy as np

    n = len(values)
    data = np.asarray(values, dtype=np.float64)
    if np.signbit(data[data == 0]).any():
        return None  # fsum keeps -0.0 when every pick is -0.0; an integer sum would not
    nonzero = data[data != 0]
    if nonzero.size == 0:
        return [0.0] * resamples
    # v = M · 2**(e - 53) with M an integer: scaled by 2**k, k = max(53 - e), all are integers.
    _, exponents = np.frexp(nonzero)
    k = int(53 - exponents.min())
    top = int(exponents.max()) + k  # every |V| < 2**top
    split = max(0, top - 40)  # |H| < 2**40: its sums stay in int64 below 2**22 values
    if k > 1000 or top > 1000 or exponents.max() + n.bit_length() > 1000:
        return None
    if split + n.bit_length() > 62 or n.bit_length() > 22:
        return None
    scaled = np.ldexp(data, k)
    high = np.trunc(np.ldexp(scaled, -split))
    low = scaled - np.ldexp(high, split)  # exact: V's own low `split` bits, with V's sign
    state = random.Random(seed).getstate()[1]  # noqa: S311 - statistics, not cryptography
    rng = np.random.RandomState()
    rng.set_state(("MT19937", np.array(state[:-1], dtype=np.uint32), int(state[-1]), 0, 0.0))
    picks = np.floor(rng.random_sample(n * resamples) * float(n)).astype(np.intp)
    high_sums = high.astype(np.int64)[picks].reshape(resamples, n).sum(axis=1).tolist()
    low_sums = low.astype(np.int64)[picks].reshape(resamples, n).sum(axis=1).tolist()
    return [
        math.ldexp(float((h << split) + lo), -k) / n
        for h, lo in zip(high_sums, low_sums, strict=True)
    ]


def _clear_of_a_tie(value: float) -> bool:
    """Whether ``value`` is more than 1e-9 away from every half of the 4th decimal."""
    scaled = value * 1e4
    return abs(scaled - math.floor(scaled) - 0.5) > 1e-5 and abs(scaled) < 2.0**40


def _normal_interval(values: list[float], mean: float, z: float) -> tuple[float, float]:
    """``mean ± z·stdev/√n`` rounded to 4 dp, with `statistics.stdev` (exact) where it matters.

    `statistics.stdev` computes the sum of squares in exact fractions (~3 ms per 5,000 values);
    numpy's float one is within ~1e-12 of it. Where both bounds are over 1e-9 from a rounding
    tie of the 4th decimal they round the same either way; otherwise the exact one is used.
    """
    n = len(values)
    if n < 2:
        return round(mean, 4), round(mean, 4)
    import numpy as np  # lazy: numpy (~0.1 s), only for a comparison's interval

    half = z * float(np.std(np.asarray(values, dtype=np.float64), ddof=1)) / math.sqrt(n)
    if not (_clear_of_a_tie(mean - half) and _clear_of_a_tie(mean + half)):
        half = z * statistics.stdev(values) / math.sqrt(n)
    return round(mean - half, 4), round(mean + half, 4)


def paired_statistics(
    pairs: Sequence[PairedCase],
    *,
    alpha: float = DEFAULT_ALPHA,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> PairedStatistics:
    """McNemar on pass flips and a bootstrap CI of score deltas over matched cases, with a verdict.

    Pass flips count only cases decided on both sides; score deltas only cases scored on both
    sides. See the module docstring for the minimum-data rules and how the verdict is chosen.
    """
    b = sum(1 for p in pairs if p.baseline_passed is True and p.candidate_passed is False)
    c = sum(1 for p in pairs if p.baseline_passed is False and p.candidate_passed is True)
    deltas = [
        p.candidate_score - p.baseline_score
        for p in pairs
        if p.baseline_score is not None and p.candidate_score is not None
    ]
    return paired_statistics_of(b, c, deltas, alpha=alpha, resamples=resamples, seed=seed)


def paired_statistics_of(
    b: int,
    c: int,
    deltas: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> PairedStatistics:
    """`paired_statistics` from its inputs, already counted.

    ``b`` pass→fail and ``c`` fail→pass flips; ``deltas`` the per-case score deltas (candidate -
    baseline) in case order.
    """
    mcnemar = mcnemar_exact(b, c)
    ci = paired_bootstrap_ci(deltas, resamples=resamples, seed=seed, confidence=1 - alpha)

    regression = improvement = False
    if mcnemar.sufficient_data and mcnemar.p_value < alpha:
        regression |= b > c
        improvement |= c > b
    if ci.sufficient_data and ci.low is not None and ci.high is not None:
        regression |= ci.high < 0
        improvement |= ci.low > 0
    insufficient = not (mcnemar.sufficient_data and ci.sufficient_data)
    verdict: StatVerdict
    if regression:
        verdict = "regression"
    elif improvement:
        verdict = "improvement"
    elif insufficient:
        verdict = "insufficient_data"
    else:
        verdict = "no_significant_change"
    return PairedStatistics(
        mcnemar=mcnemar,
        score_delta_ci95=ci,
        insufficient_data=insufficient,
        alpha=alpha,
        verdict=verdict,
    )
