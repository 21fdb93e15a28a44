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


DEFAULT_MIN_KAPPA = 0.6
"""The least κ of a calibration the gate accepts when none is given (CLI, API, run page)."""


@dataclass(frozen=True)
class CalibrationState:
    """What the gate needs of a judge's latest calibration (and what a run page shows of it)."""

    template_hash: str
    kappa: float | None
    gold: str
    kappa_low: float | None = None
    kappa_high: float | None = None
    n: int | None = None


@dataclass(frozen=True)
class JudgeGate:
    """One judge at one template hash its counted verdicts carry, and the gate's answer."""

    judge: str
    template_hash: str | None
    calibration: CalibrationState | None
    """The judge's latest calibration at this template hash (None: none there)."""
    calibrated_at: tuple[str, ...]
    """Every template hash the judge has a calibration at (what a stale one was made at)."""
    accepted: bool
    """A calibration at this hash with κ defined and at least the minimum."""


def judge_gates(
    used: Mapping[str, set[str | None]],
    calibrations: Mapping[str, Sequence[CalibrationState]],
    min_kappa: float,
) -> list[JudgeGate]:
    """The calibration gate's answer for each judge and template hash of a run (the one rule).

    `used`: each judge (provider:model) → the template hashes its counted verdicts carry.
    `calibrations`: each judge → its calibrations, oldest first; at each template hash the
    latest one counts. A verdict with no template hash matches no calibration. The run may
    gate (`gate --require-calibrated --min-kappa K`) when every row is accepted.
    """
    out: list[JudgeGate] = []
    for judge in sorted(used):
        at = {c.template_hash: c for c in calibrations.get(judge, ())}
        hashes = tuple(sorted(at))
        for h in sorted(used[judge], key=lambda x: x or ""):
            found = at.get(h) if h is not None else None
            ok = found is not None and found.kappa is not None and found.kappa >= min_kappa
            out.append(JudgeGate(judge, h, found, hashes, ok))
    return out


def calibration_refusals(
    used: Mapping[str, set[str | None]],
    calibrations: Mapping[str, Sequence[CalibrationState]],
    min_kappa: float,
) -> list[str]:
    """Why each judge of a run may not gate (empty: all may), one sentence per judge.

    The sentences of `judge_gates`' refused rows: a judge never calibrated, a judge whose
    verdicts carry a template hash it has no calibration at (stale), a κ below the minimum.
    """
    return gate_refusals(judge_gates(used, calibrations, min_kappa), min_kappa)


def gate_refusals(gates: Sequence[JudgeGate], min_kappa: float) -> list[str]:
    """`judge_gates`' refused rows as sentences, one per judge (a stale judge once)."""
    out: list[str] = []
    by_judge: dict[str, list[JudgeGate]] = {}
    for g in gates:
        by_judge.setdefault(g.judge, []).append(g)
    for judge, rows in by_judge.items():
        if not rows[0].calibrated_at:
            out.append(f"judge {judge} has no calibration")
            continue
        missing = sorted(g.template_hash or "none" for g in rows if g.calibration is None)
        if missing:
            out.append(
                f"judge {judge} has no calibration at template "
                + ", ".join(h[:12] for h in missing)
                + f" (stale: calibrated at {', '.join(h[:12] for h in rows[0].calibrated_at)})"
            )
            continue
        for g in rows:
            if not g.accepted and g.calibration is not None:
                kappa = g.calibration.kappa
                shown = "undefined" if kappa is None else f"{kappa:.3f}"
                out.append(
                    f"judge {judge}'s κ {shown} on {g.calibration.gold} is below the minimum "
                    f"{min_kappa}"
                )
    return out
