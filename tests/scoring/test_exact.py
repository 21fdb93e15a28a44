"""The run's metric mean, exactly rounded, against its threshold (issues 22 and 29).

The mean is the float nearest the exact mean of the case scores as the decimals they state; the
threshold is held against that figure as the seed states it (`weighted_metrics_score_pct >=
metrics_pass_threshold`), never against a mean rounded to 2 dp first. Fractions are the oracle.
"""

from __future__ import annotations

import math
import statistics
from decimal import Decimal
from fractions import Fraction
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evaledger.domain.spec import RunConfig, resolve_spec
from evaledger.scoring.case import summarize_run
from evaledger.scoring.exact import exact_mean, run_mean
from evaledger.scoring.models import CaseScore, CaseStatus, GateRule, RunAggregate

# The crafted runs: three cases each, the threshold set to the run's own decimal mean. The float
# mean (fsum / n) falls just below it in four of the six.
CRAFTED: list[tuple[list[float], float, bool]] = [
    ([46.67, 46.67, 46.67], 46.67, True),
    ([0.35, 0.35, 0.35], 0.35, True),
    ([1.4, 1.4, 1.4], 1.4, True),
    ([2.71, 2.71, 2.71], 2.71, True),
    ([80.0, 80.0, 80.0], 80.0, False),
    ([40.0, 50.0, 60.0], 50.0, False),
]


@pytest.mark.parametrize(("values", "threshold", "float_flips"), CRAFTED)
def test_the_crafted_runs_meet_their_own_mean_as_threshold(
    values: list[float], threshold: float, float_flips: bool
) -> None:
    assert (statistics.fmean(values) < threshold) is float_flips
    assert run_mean(values) == threshold
    assert _aggregate(values, threshold).metrics_passed is True
    assert _aggregate(values, threshold + 0.01).metrics_passed is False


def test_four_of_the_six_crafted_runs_flip_in_floating_point() -> None:
    assert sum(flips for _, _, flips in CRAFTED) == 4


def test_no_values_no_figure() -> None:
    assert exact_mean([]) is None and run_mean([]) is None
    aggregate = summarize_run([], resolve_spec(RunConfig()))
    assert (aggregate.weighted_metrics_score_pct, aggregate.metrics_passed) == (None, None)


def test_a_value_that_is_not_two_decimals_is_read_as_the_decimal_it_states() -> None:
    # 0.1 + 0.2 is 0.30000000000000004 in binary; the decimals 0.1 and 0.2 mean 0.15.
    assert run_mean([0.1, 0.2]) == 0.15
    assert run_mean([54.1111, 54.1111, 54.1112]) == float(Fraction(1623334, 30000))
    assert run_mean([1e300, -1e300, 3.0]) == 1.0  # a sum fsum / n gets, but exactly here
    assert math.isinf(run_mean([math.inf, 1.0]) or 0.0)


def _stated(v: float) -> Fraction:
    return Fraction(Decimal(repr(v)))


two_dp = st.integers(min_value=0, max_value=10_000).map(lambda c: c / 100)
any_finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)


@given(st.lists(two_dp, min_size=1, max_size=40), st.integers(min_value=0, max_value=10_000))
def test_the_mean_and_the_threshold_agree_with_fractions(values: list[float], cents: int) -> None:
    exact = sum((_stated(v) for v in values), Fraction(0)) / len(values)
    assert exact_mean(values) == exact
    assert run_mean(values) == float(exact)
    threshold = cents / 100
    # A threshold at 2 dp: the float figure and the exact mean agree on the verdict.
    assert _aggregate(values, threshold).metrics_passed is (exact >= Fraction(cents, 100))


@given(st.lists(st.one_of(two_dp, any_finite), min_size=1, max_size=30))
def test_the_integer_fast_path_equals_the_decimal_reading(values: list[float]) -> None:
    exact = sum((_stated(v) for v in values), Fraction(0)) / len(values)
    assert exact_mean(values) == exact
    assert run_mean(values) == float(exact)


def _case(i: int, overall: float) -> CaseScore:
    return CaseScore(
        case_id=UUID(int=i + 1),
        run_id=UUID(int=999),
        test_case_key=f"case-{i}",
        test_id=f"case-{i}",
        repetition=0,
        status=CaseStatus.PASSED,
        overall_score=overall,
        passed=True,
        errored=False,
        scored=True,
        gate=GateRule.SCORE_THRESHOLD,
        gate_reason="crafted",
    )


def _aggregate(values: list[float], threshold: float) -> RunAggregate:
    spec = resolve_spec(RunConfig(metrics_pass_threshold=threshold))
    return summarize_run([_case(i, v) for i, v in enumerate(values)], spec)


def test_a_run_of_three_46_67_cases_passes_a_46_67_metrics_threshold() -> None:
    aggregate = _aggregate([46.67] * 3, 46.67)
    assert aggregate.weighted_metrics_score_pct == 46.67
    assert aggregate.metrics_passed is True


def test_a_mean_of_50_8889_fails_a_50_89_threshold() -> None:
    # 8 × 50.89 + 50.88 = 458.00 over 9 cases: 50.888…, which rounds to 50.89 at 2 dp (the
    # issue-22 rule passed it) but is below the threshold (Connexity fails it: issue 29).
    values = [50.89] * 8 + [50.88]
    aggregate = _aggregate(values, 50.89)
    assert aggregate.weighted_metrics_score_pct == pytest.approx(50.8889, abs=1e-4)
    assert aggregate.metrics_passed is False


def test_an_exact_mean_of_54_1111_passes_a_54_1111_threshold() -> None:
    # 89 × 54.11 + 11 × 54.12 = 5411.11 over 100 cases: exactly 54.1111 (the issue-22 rule
    # rounded it to 54.11 first, below a threshold of more than 2 dp, and failed it).
    values = [54.11] * 89 + [54.12] * 11
    aggregate = _aggregate(values, 54.1111)
    assert aggregate.weighted_metrics_score_pct == 54.1111
    assert aggregate.metrics_passed is True
    # and 8 × 54.11 + 54.12 over 9 cases, 54.1111…, meets it too
    assert _aggregate([54.11] * 8 + [54.12], 54.1111).metrics_passed is True
