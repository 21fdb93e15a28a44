"""Means and threshold checks at a figure's stated precision, exactly (DESIGN §3.2).

A run's `weighted_metrics_score_pct` is the mean of case `overall_score`s, each already rounded
to 2 decimals (§3.1). Dividing their float sum by n in binary floating point can land just below
the decimal mean (3 × 46.67 / 3 = 46.669999999999995) and fail a 46.67 threshold the run meets.
Here every value is read as the decimal it was rounded to (its shortest repr), the mean is exact
(a `Fraction`), rounded once half-even to the stated places, and only then compared: the same
way the comparison holds its ±5.00 deltas and +20 % latency against the 4 dp figures it reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction

__all__ = [
    "OVERALL_SCORE_PLACES",
    "at_least",
    "exact_mean",
    "mean_at_precision",
    "meets_threshold",
]

OVERALL_SCORE_PLACES = 2
"""Decimals of a case's overall_score (DESIGN §3.1: round(100 × Σ …, 2))."""


def _decimal(value: float | int | Fraction | Decimal) -> Fraction:
    """The number a figure states: a float is read as its shortest repr (46.67, not its binary)."""
    if isinstance(value, float):
        return Fraction(Decimal(repr(value)))
    return Fraction(value)


def exact_mean(values: Iterable[float | int]) -> Fraction | None:
    """The exact mean of the values as the decimals they state; None when there are none."""
    read = [_decimal(v) for v in values]
    if not read:
        return None
    return sum(read, Fraction(0)) / len(read)


def _round(value: Fraction, places: int) -> Fraction:
    """Round half-even at `places` decimals, exactly."""
    # Python's round() of a Fraction is exact and rounds halves to even.
    return Fraction(round(value * 10**places), 10**places)


def mean_at_precision(values: Iterable[float | int], places: int) -> float | None:
    """The mean rounded half-even to `places` decimals, from the exact mean; None when empty.

    The result is the float nearest that decimal (46.67 for three 46.67s).
    """
    mean = exact_mean(values)
    if mean is None:
        return None
    return float(_round(mean, places))


def at_least(value: float | Fraction, threshold: float | int, places: int) -> bool:
    """`value >= threshold` with the value rounded to `places` decimals first, exactly."""
    figure = value if isinstance(value, Fraction) else _decimal(value)
    return _round(figure, places) >= _decimal(threshold)


def meets_threshold(
    values: Iterable[float | int], threshold: float | int, places: int = OVERALL_SCORE_PLACES
) -> bool | None:
    """Whether the mean of `values`, at `places` decimals, is at least `threshold`.

    None when there are no values (no figure, no flag: DESIGN §3.2).
    """
    values = list(values)
    if not values:
        return None
    # Only a mean within one unit of the last place can round across the threshold: everywhere
    # else the float mean decides, so a 10k-case rescore pays no Fraction arithmetic.
    approx = math.fsum(values) / len(values)
    unit = 10.0**-places
    if approx >= threshold + unit:
        return True
    if approx < threshold - unit:
        return False
    mean = exact_mean(values)
    assert mean is not None
    return at_least(mean, threshold, places)
