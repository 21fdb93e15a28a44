"""A judge against a gold set's human labels (DESIGN §18, issue 35): pure rules.

Each pair is (the judge's pass/fail of an item, the human label's pass/fail). κ is Cohen's κ
(`scoring/agreement.py`) with its bootstrap 95 % interval over pairs; TPR, TNR and accuracy are
proportions with Wilson score 95 % intervals. A run's verdicts may gate only when each of their
judges has a calibration at the same template hash with κ at or above the minimum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evaledger.scoring.agreement import (
    BOOTSTRAP_RESAMPLES,
    bootstrap_counts,
    cohen_kappa,
    interval_of,
    resampled_kappas,
)

Z_95 = 1.959963984540054
"""The standard normal quantile of 0.975."""
KAPPA_METHOD = f"bootstrap percentile over pairs ({BOOTSTRAP_RESAMPLES} resamples, fixed seed)"
RATE_METHOD = "Wilson score"
DEFAULT_MIN_KAPPA = 0.6


@dataclass(frozen=True)
class Figure:
    """A figure with its 95 % interval (None where undefined) and the interval's method."""

    value: float | None
    low: float | None
    high: float | None
    method: str


@dataclass(frozen=True)
class CalibrationFigures:
    """The confusion counts and the four figures of a judge on labelled pairs."""

    n: int
    true_positives: int
    false_negatives: int
    true_negatives: int
    false_positives: int
    kappa: Figure
    tpr: Figure
    tnr: Figure
    accuracy: Figure


def wilson(successes: int, trials: int) -> Figure:
    """Successes / trials with its Wilson score 95 % interval (None for no trials)."""
    if trials == 0:
        return Figure(None, None, None, RATE_METHOD)
    p = successes / trials
    z2 = Z_95 * Z_95
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z_95 * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return Figure(p, max(0.0, centre - half), min(1.0, centre + half), RATE_METHOD)


def calibration_figures(pairs: Sequence[tuple[bool, bool]]) -> CalibrationFigures:
    """κ, TPR, TNR and accuracy of (judge passed, label passed) pairs, each with its interval."""
    tp = sum(1 for judged, labelled in pairs if judged and labelled)
    fn = sum(1 for judged, labelled in pairs if not judged and labelled)
    tn = sum(1 for judged, labelled in pairs if not judged and not labelled)
    fp = sum(1 for judged, labelled in pairs if judged and not labelled)
    coded = [(1.0 if a else 0.0, 1.0 if b else 0.0) for a, b in pairs]
    kappa = cohen_kappa(coded)
    interval = interval_of(resampled_kappas(coded, bootstrap_counts(len(coded)))) if coded else None
    return CalibrationFigures(
        n=len(pairs),
        true_positives=tp,
        false_negatives=fn,
        true_negatives=tn,
        false_positives=fp,
        kappa=Figure(
            kappa,
            None if interval is None else interval.low,
            None if interval is None else interval.high,
            KAPPA_METHOD,
        ),
        tpr=wilson(tp, tp + fn),
        tnr=wilson(tn, tn + fp),
        accuracy=wilson(tp + tn, len(pairs)),
    )


@dataclass(frozen=True)
class CalibrationState:
    """What the gate needs of a judge's latest calibration."""

    template_hash: str
    kappa: float | None
    gold: str


def calibration_refusals(
    used: Mapping[str, set[str | None]],
    calibrations: Mapping[str, Sequence[CalibrationState]],
    min_kappa: float,
) -> list[str]:
    """Why each judge of a run may not gate (empty: all may), one sentence per judge.

    `used`: each judge (provider:model) → the template hashes its counted verdicts carry.
    `calibrations`: each judge → its calibrations, oldest first; at each template hash the
    latest one counts. A verdict with no template hash matches no calibration.
    """
    out: list[str] = []
    for judge in sorted(used):
        known = calibrations.get(judge, ())
        if not known:
            out.append(f"judge {judge} has no calibration")
            continue
        at = {c.template_hash: c for c in known}
        missing = sorted(h or "none" for h in used[judge] if h is None or h not in at)
        if missing:
            out.append(
                f"judge {judge} has no calibration at template "
                + ", ".join(h[:12] for h in missing)
                + f" (stale: calibrated at {', '.join(sorted(h[:12] for h in at))})"
            )
            continue
        for h in sorted(h for h in used[judge] if h is not None):
            found = at[h]
            if found.kappa is None or found.kappa < min_kappa:
                shown = "undefined" if found.kappa is None else f"{found.kappa:.3f}"
                out.append(
                    f"judge {judge}'s κ {shown} on {found.gold} is below the minimum {min_kappa}"
                )
    return out
