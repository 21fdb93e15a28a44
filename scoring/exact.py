"""A run's metric mean, exactly rounded, and its threshold check (DESIGN §3.2; issues 22, 29).

A run's `weighted_metrics_score_pct` is the mean of case `overall_score`s, each already rounded
to 2 decimals (§3.1). Dividing their float sum by n in binary floating point can land just below
the decimal mean (3 × 46.67 / 3 = 46.669999999999995) and fail a 46.67 threshold the run meets.
Here every value is read as the decimal it states (its shortest repr), the sum is exact, it is
divided once, and the one rounding is to the nearest float: `run_mean`. The threshold is then
held against that figure as the seed states it — `weighted_metrics_score_pct >=
metrics_pass_threshold` — never against a mean rounded to 2 dp first (which passed a mean of
50.8889 against 50.89, and failed an exact 54.1111 against 54.1111: issue 29).
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Sequence
from fractions import Fraction

__all__ = ["exact_mean", "run_mean"]

_CENTS_EXACT_BELOW = 2.0**40
"""Below this magnitude floats are spaced < 0.005 apart, so a float equal to c / 100 states
exactly the decimal c / 100 (no other decimal of 2 places or fewer is nearer to it)."""


def _decimal_sum(values: Sequence[float]) -> Fraction:
    """The exact sum of the decimals the values state (each read as its shortest repr)."""
    cents = [round(v * 100) if abs(v) < _CENTS_EXACT_BELOW else None for v in values]
    if all(c is not None and c / 100 == v for c, v in zip(cents, values, strict=True)):
        # The common case (2 dp case scores): an integer sum, no decimal arithmetic.
        return Fraction(sum(c for c in cents if c is not None), 100)
    with decimal.localcontext() as ctx:
        # Addition is exact at any precision it needs (libmpdec keeps only the digits used);
        # Inexact is trapped so that an inexact sum can never pass silently.
        ctx.prec = decimal.MAX_PREC
        ctx.traps[decimal.Inexact] = True
        total = sum((decimal.Decimal(repr(v)) for v in values), decimal.Decimal(0))
    return Fraction(total)


def exact_mean(values: Sequence[float]) -> Fraction | None:
    """The exact mean of the finite values as the decimals they state; None when there are none."""
    if not values:
        return None
    return _decimal_sum(values) / len(values)


def run_mean(values: Sequence[float]) -> float | None:
    """The one definition of a run's metric mean: the float nearest the exact decimal mean.

    None when there are no values. A non-finite value (never a case score, which is 0-100)
    makes the float mean's non-finite result, as `statistics.fmean` would.
    """
    if not values:
        return None
    if not all(math.isfinite(v) for v in values):
        return math.fsum(values) / len(values)
    mean = exact_mean(values)
    assert mean is not None
    return float(mean)  # int / int in Python is correctly rounded: one rounding
