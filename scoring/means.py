"""The one float mean of the scoring (issue 31), apart so the light modules import only it.

`scoring/stats.py` (the bootstrap: `random`, `statistics`, `fractions`) is not loaded by the
commands that only list or show runs (start-up, issue 19).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import overload


@overload
def mean(values: Iterable[float]) -> float | None: ...
@overload
def mean(values: Iterable[float], *, empty: float) -> float: ...
def mean(values: Iterable[float], *, empty: float | None = None) -> float | None:
    """The float mean of values: the one definition of every float mean of the scoring.

    Their correctly rounded sum (`math.fsum`, so the order of the values does not matter) divided
    once by their count: `statistics.fmean`'s arithmetic, to the bit. With no values it is
    `empty`: None by default (a figure with nothing to average is absent, never 0.0), or what a
    caller's semantics ask (a source's metric over no sample is NaN, as the source's numpy mean).

    A run's metric mean (`weighted_metrics_score_pct`) is not this float mean but the exact
    decimal one, `scoring.exact.run_mean`.
    """
    items = values if isinstance(values, list | tuple) else list(values)
    if not items:
        return empty
    return math.fsum(items) / len(items)
