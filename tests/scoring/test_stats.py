import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaledger.scoring.stats import (
    MIN_DISCORDANT_PAIRS,
    MIN_PAIRED_SCORES,
    PairedCase,
    binom_cdf_half,
    mcnemar_exact,
    paired_bootstrap_ci,
    paired_statistics,
)

# ---------------------------------------------------------------------------------------------
# Exact binomial / McNemar


def test_binom_cdf_half_exact_fractions():
    assert binom_cdf_half(0, 6) == Fraction(1, 64)
    assert binom_cdf_half(1, 10) == Fraction(11, 1024)
    assert binom_cdf_half(2, 10) == Fraction(56, 1024)
    assert binom_cdf_half(-1, 4) == 0
    assert binom_cdf_half(4, 4) == 1
    assert binom_cdf_half(9, 4) == 1


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (0, 6, 0.03125),  # 2 * 1/64
        (6, 0, 0.03125),  # symmetric
        (1, 9, 0.021484375),  # 2 * 11/1024
        (9, 1, 0.021484375),
        (2, 8, 0.109375),  # 2 * 56/1024
        (0, 5, 0.0625),  # 2 * 1/32: 5 flips can never reach 0.05
        (3, 0, 0.25),  # 2 * 1/8
        (0, 1, 1.0),  # 2 * 1/2
        (5, 5, 1.0),  # capped at 1
        (0, 0, 1.0),  # no discordant pairs
        (0, 10, 0.001953125),  # 2 / 1024
    ],
)
def test_mcnemar_exact_p_values(b, c, expected):
    result = mcnemar_exact(b, c)
    assert result.p_value == expected
    assert (result.b, result.c) == (b, c)


def test_mcnemar_sufficiency_threshold():
    assert MIN_DISCORDANT_PAIRS == 6
    assert not mcnemar_exact(0, 5).sufficient_data
    assert mcnemar_exact(0, 6).sufficient_data
    assert mcnemar_exact(3, 3).sufficient_data


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError, match="must be >= 0"):
        mcnemar_exact(-1, 3)


# ---------------------------------------------------------------------------------------------
# Bootstrap


DELTAS = [-12.0, -3.5, 0.0, -8.25, 4.0, -6.0, -1.0, -9.5, 2.0, -4.75]


def test_bootstrap_reproducible_same_seed():
    first = paired_bootstrap_ci(DELTAS, seed=7)
    second = paired_bootstrap_ci(DELTAS, seed=7)
    assert first == second
    assert first.resamples == 10_000
    assert first.seed == 7
    assert first.n == 10
    assert first.mean == -3.9  # (sum = -39.0) / 10
    assert first.low is not None
    assert first.high is not None
    assert first.low < first.mean < first.high


def test_bootstrap_different_seed_changes_interval_slightly():
    a = paired_bootstrap_ci(DELTAS, seed=1, resamples=2000)
    b = paired_bootstrap_ci(DELTAS, seed=2, resamples=2000)
    assert a.mean == b.mean
    assert (a.low, a.high) != (b.low, b.high)
    assert a.low is not None
    assert b.low is not None
    assert abs(a.low - b.low) < 1.0


def test_bootstrap_constant_deltas_degenerate_interval():
    ci = paired_bootstrap_ci([-2.5] * 8, resamples=500)
    assert (ci.mean, ci.low, ci.high) == (-2.5, -2.5, -2.5)


def test_bootstrap_interval_bounds_are_resample_means():
    # Two values: every resample mean of n=2 is -1, 0 or 1, so the 2.5% / 97.5% percentiles of
    # 10 000 resamples are -1 and 1 exactly (each extreme has probability 1/4).
    ci = paired_bootstrap_ci([-1.0, 1.0], seed=3)
    assert (ci.mean, ci.low, ci.high) == (0.0, -1.0, 1.0)
    assert not ci.sufficient_data


def test_bootstrap_empty():
    ci = paired_bootstrap_ci([])
    assert (ci.mean, ci.low, ci.high, ci.n) == (None, None, None, 0)
    assert not ci.sufficient_data


def test_bootstrap_validates_arguments():
    with pytest.raises(ValueError, match="resamples"):
        paired_bootstrap_ci([1.0], resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap_ci([1.0], confidence=1.0)


def test_bootstrap_sufficiency_threshold():
    assert MIN_PAIRED_SCORES == 5
    assert not paired_bootstrap_ci([1.0] * 4, resamples=10).sufficient_data
    assert paired_bootstrap_ci([1.0] * 5, resamples=10).sufficient_data


# ---------------------------------------------------------------------------------------------
# Paired statistics verdict


def _flips(b: int, c: int, same: int = 0) -> list[PairedCase]:
    return (
        [PairedCase(baseline_passed=True, candidate_passed=False) for _ in range(b)]
        + [PairedCase(baseline_passed=False, candidate_passed=True) for _ in range(c)]
        + [PairedCase(baseline_passed=True, candidate_passed=True) for _ in range(same)]
    )


def _scores(deltas: list[float]) -> list[PairedCase]:
    return [
        PairedCase(
            baseline_passed=True,
            candidate_passed=True,
            baseline_score=80.0,
            candidate_score=80.0 + d,
        )
        for d in deltas
    ]


def test_verdict_insufficient_when_both_tests_lack_data():
    stats = paired_statistics(_flips(1, 2) + _scores([1.0, -1.0]))
    assert stats.insufficient_data
    assert stats.verdict == "insufficient_data"
    assert (stats.mcnemar.b, stats.mcnemar.c) == (1, 2)
    assert stats.score_delta_ci95.n == 2


def test_verdict_mcnemar_regression_with_too_few_scores_still_flags():
    stats = paired_statistics(_flips(9, 1))
    assert stats.mcnemar.p_value == 0.021484375
    assert stats.insufficient_data  # no paired scores
    assert stats.verdict == "regression"


def test_verdict_mcnemar_improvement():
    stats = paired_statistics(_flips(0, 6) + _scores([0.0] * 5))
    assert stats.mcnemar.p_value == 0.03125
    assert not stats.insufficient_data
    assert stats.verdict == "improvement"


def test_verdict_bootstrap_regression_without_flips():
    stats = paired_statistics(_scores([-10.0, -8.0, -12.0, -9.0, -11.0, -10.5]), resamples=2000)
    assert stats.mcnemar.p_value == 1.0
    assert stats.insufficient_data  # b + c = 0 < 6
    ci = stats.score_delta_ci95
    assert ci.high is not None
    assert ci.high < 0
    assert stats.verdict == "regression"


def test_verdict_no_significant_change():
    stats = paired_statistics(_flips(3, 3) + _scores([2.0, -2.0, 1.0, -1.0, 0.0]), resamples=2000)
    assert stats.mcnemar.p_value == 1.0
    assert not stats.insufficient_data
    assert stats.verdict == "no_significant_change"


def test_verdict_undecided_and_unscored_pairs_are_ignored():
    pairs = [
        PairedCase(
            baseline_passed=None, candidate_passed=False, baseline_score=None, candidate_score=50.0
        ),
        PairedCase(baseline_passed=True, candidate_passed=None),
    ]
    stats = paired_statistics(pairs)
    assert (stats.mcnemar.b, stats.mcnemar.c, stats.score_delta_ci95.n) == (0, 0, 0)
    assert stats.verdict == "insufficient_data"


def test_large_samples_use_the_normal_interval_of_the_mean() -> None:
    import math
    import statistics as st

    from evaledger.scoring.stats import MAX_BOOTSTRAP_DRAWS, paired_bootstrap_ci

    deltas = [float(i % 7) - 3.0 for i in range(600)]
    ci = paired_bootstrap_ci(deltas, resamples=10_000)
    assert MAX_BOOTSTRAP_DRAWS < 600 * 1_000
    assert ci.method == "normal" and ci.resamples == 0
    mean = sum(deltas) / 600
    half = 1.959963984540054 * st.stdev(deltas) / math.sqrt(600)
    assert (ci.mean, ci.low, ci.high) == (
        round(mean, 4),
        round(mean - half, 4),
        round(mean + half, 4),
    )
    # Under the budget's reach the bootstrap runs, with resamples shrunk to fit the budget.
    mid = paired_bootstrap_ci(deltas[:200], resamples=10_000)
    assert mid.method == "bootstrap" and mid.resamples == MAX_BOOTSTRAP_DRAWS // 200
    small = paired_bootstrap_ci(deltas[:50], resamples=10_000)
    assert small.method == "bootstrap" and small.resamples == 10_000


def _exact_normal_interval(deltas: list[float]) -> tuple[float, float, float]:
    """The normal interval with the standard library's exact stdev (the definition)."""
    import math
    import statistics

    n = len(deltas)
    mean = math.fsum(deltas) / n
    half = statistics.NormalDist().inv_cdf(0.975) * statistics.stdev(deltas) / math.sqrt(n)
    return round(mean, 4), round(mean - half, 4), round(mean + half, 4)


# Score deltas as comparisons pair them: differences of 2 dp overall scores, plus any floats.
SCORE = st.integers(0, 10_000).map(lambda n: n / 100)
DELTA = st.one_of(st.tuples(SCORE, SCORE).map(lambda p: p[1] - p[0]), st.floats(-100, 100))


@settings(max_examples=60, deadline=None)
@given(st.lists(DELTA, min_size=501, max_size=1500))
def test_normal_interval_equals_the_exact_stdev_one(deltas: list[float]) -> None:
    ci = paired_bootstrap_ci(deltas)
    assert ci.method == "normal"
    assert (ci.mean, ci.low, ci.high) == _exact_normal_interval(deltas)


def test_normal_interval_near_a_tie_uses_the_exact_stdev(monkeypatch: pytest.MonkeyPatch) -> None:
    from evaledger.scoring import stats

    deltas = [((i * 37) % 1001) / 100 - 5.0 for i in range(2000)]
    monkeypatch.setattr(stats, "_clear_of_a_tie", lambda value: False)
    ci = paired_bootstrap_ci(deltas)
    assert (ci.mean, ci.low, ci.high) == _exact_normal_interval(deltas)


def test_clear_of_a_tie() -> None:
    from evaledger.scoring.stats import _clear_of_a_tie

    assert _clear_of_a_tie(0.12341) and _clear_of_a_tie(-3.0)
    assert not _clear_of_a_tie(0.00005) and not _clear_of_a_tie(-1.23455)
    assert not _clear_of_a_tie(1e12)  # beyond the float margin: the exact path


def _python_resample_means(values: list[float], resamples: int, seed: int) -> list[float]:
    """The definition: each resample is `random.Random(seed).choices`, its mean via fsum."""
    import math
    import random

    rng = random.Random(seed)
    n = len(values)
    return [math.fsum(rng.choices(values, k=n)) / n for _ in range(resamples)]


BOOT_VALUES = st.one_of(
    DELTA,
    st.floats(-1e300, 1e300),  # beyond, fsum itself overflows
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, 5e-324, 1e300]),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(BOOT_VALUES, min_size=1, max_size=60),
    st.integers(1, 300),
    st.one_of(st.integers(0, 20), st.integers(-(2**70), 2**70)),
)
def test_vectorised_resampling_draws_what_random_choices_draws(
    values: list[float], resamples: int, seed: int
) -> None:
    from evaledger.scoring.stats import _resample_means

    got = _resample_means(values, resamples, seed)
    expected = _python_resample_means(values, resamples, seed)
    if got is not None:  # None: the caller draws in Python (values off the integer grid)
        assert got == expected
        assert [math.copysign(1, g) for g in got] == [math.copysign(1, e) for e in expected]


def test_vectorised_resampling_covers_score_deltas() -> None:
    from evaledger.scoring.stats import _resample_means

    deltas = [((i * 37) % 1001) / 100 - ((i * 11) % 997) / 100 for i in range(300)]
    got = _resample_means(deltas, 1000, 7)
    assert got is not None and got == _python_resample_means(deltas, 1000, 7)


@settings(max_examples=40, deadline=None)
@given(st.lists(DELTA, min_size=5, max_size=120), st.integers(0, 50))
def test_bootstrap_interval_is_the_same_either_way(deltas: list[float], seed: int) -> None:
    from unittest import mock

    from evaledger.scoring import stats

    fast = paired_bootstrap_ci(deltas, resamples=1_000, seed=seed)
    with mock.patch.object(stats, "_resample_means", return_value=None):
        slow = paired_bootstrap_ci(deltas, resamples=1_000, seed=seed)
    assert fast == slow


def test_vectorised_resampling_mixed_magnitudes_and_signs() -> None:
    """Found by the property test: small negative values beside a huge one (the low bits of a
    small negative V must keep V's sign, or the split is inexact)."""
    from evaledger.scoring.stats import _resample_means

    found = [-9.898912395271768e18, 33.721702452588175, -58.75635757932629]
    for seed in range(10):
        got = _resample_means(found, 50, seed)  # exponents 58 bits apart: drawn in Python now
        assert got is None or got == _python_resample_means(found, 50, seed)
    values = [1e12, -0.01, 33.72, -58.76]  # still on the grid, small negatives below 2**split
    for seed in range(10):
        got = _resample_means(values, 50, seed)
        assert got is not None and got == _python_resample_means(values, 50, seed)
