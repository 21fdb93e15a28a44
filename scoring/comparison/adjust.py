"""Multiple-comparison corrections of a comparison's per-metric p-values (issue 37).

Eight metrics compared at once at alpha = 0.05: one "significant" difference in eight is what
chance alone gives. `adjust_p_values` corrects a family of p-values:

- ``holm`` (the default): Holm's step-down method; controls the family-wise error rate (the
  chance of any false "significant") at alpha under any dependence between the tests. Sorted
  ascending, ``p'_(i) = max_{j<=i} min(1, (m - j + 1) · p_(j))``.
- ``bh``: Benjamini-Hochberg; controls the false discovery rate (the expected share of false
  ones among those called significant), for independent or positively dependent tests. Sorted
  ascending, ``p'_(i) = min_{j>=i} min(1, m · p_(j) / j)``.
- ``none``: the raw p-values.

A None p-value (a test without enough data) is not a member of the family: it stays None and
does not count in m.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Correction = Literal["none", "holm", "bh"]
CORRECTIONS: tuple[Correction, ...] = ("none", "holm", "bh")
DEFAULT_CORRECTION: Correction = "holm"
CORRECTION_NAMES = {
    "none": "none (raw p-values)",
    "holm": "Holm (family-wise error rate)",
    "bh": "Benjamini-Hochberg (false discovery rate)",
}


def adjust_p_values(p_values: Sequence[float | None], method: Correction) -> list[float | None]:
    """The p-values adjusted by ``method`` (see the module doc), in the order given."""
    if method not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {method!r}")
    present = [(i, p) for i, p in enumerate(p_values) if p is not None]
    for _, p in present:
        if not 0 <= p <= 1:
            raise ValueError(f"p-values must be within [0, 1], got {p}")
    out: list[float | None] = list(p_values)
    m = len(present)
    if method == "none" or m == 0:
        return out
    order = sorted(present, key=lambda ip: ip[1])
    if method == "holm":
        running = 0.0
        for rank, (i, p) in enumerate(order):
            running = max(running, min(1.0, (m - rank) * p))
            out[i] = running
    else:
        running = 1.0
        for rank in range(m - 1, -1, -1):
            i, p = order[rank]
            running = min(running, min(1.0, m * p / (rank + 1)))
            out[i] = running
    return out
