"""The exact mean at a figure's stated precision (issue 22): crafted runs, and Fraction as oracle."""

from __future__ import annotations

import statistics
from decimal import Decimal
from fractions import Fraction
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evaledger.domain.spec import RunConfig, resolve_spec
from evaledger.scoring.case import summarize_run
from evaledger.scoring.exact import at_least, exact_mean, mean_at_precision, meets_threshold
from evaledger.scoring.models import CaseScore, CaseStatus, GateRule

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
    assert mean_at_precision(values, 2) == threshold
    assert meets_threshold(values, threshold) is True
    assert meets_threshold(values, threshold + 0.01) is False


def test_four_of_the_six_crafted_runs_flip_in_floating_point() -> None:
    assert sum(flips for _, _, flips in CRAFTED) == 4


def test_no_values_no_figure_and_halves_round_to_even() -> None:
    assert exact_mean([]) is None and mean_at_precision([], 2) is None
    assert meets_threshold([], 80.0) is None
    assert mean_at_precision([0.125], 2) == 0.12  # 0.125 is a half: to even
    assert mean_at_precision([0.135], 2) == 0.14
    assert mean_at_precision([10.0, 10.01], 2) == 10.0  # 10.005 → 10.00 (even)
    assert at_least(Fraction(7999, 100), 80, 0) is True  # 79.99 shown as 80 meets 80
    assert at_least(79.99, 80, 2) is False


two_dp = st.integers(min_value=0, max_value=10_000).map(lambda c: c / 100)


@given(st.lists(two_dp, min_size=1, max_size=40), st.integers(min_value=0, max_value=10_000))
def test_the_mean_and_the_threshold_agree_with_fractions(values: list[float], cents: int) -> None:
    exact = sum((Fraction(Decimal(repr(v))) for v in values), Fraction(0)) / len(values)
    assert exact_mean(values) == exact
    rounded = Fraction(round(exact * 100), 100)
    assert mean_at_precision(values, 2) == float(rounded)
    threshold = cents / 100
    assert meets_threshold(values, threshold) is (rounded >= Fraction(cents, 100))


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


def test_a_run_of_three_46_67_cases_passes_a_46_67_metrics_threshold() -> None:
    spec = resolve_spec(RunConfig(metrics_pass_threshold=46.67))
    aggregate = summarize_run([_case(i, 46.67) for i in range(3)], spec)
    assert aggregate.metrics_passed is True
