"""Inter-judge agreement (DESIGN §10): Cohen's κ, Krippendorff's α (ordinal), judge vs human.

Pure functions over ratings. A rating table maps each item (a case) to the value each rater
(a judge) gave it; a rater that gave no value to an item is simply absent (missing value).
Agreement coefficients are None when they are undefined (fewer than two pairable values, or no
variation at all, where chance agreement is total and the ratio is 0/0). Each figure comes with
its number of items and a bootstrap 95 % interval over items; below `FEW_ITEMS` items it is
flagged, below `MIN_ITEMS` it is not reported at all (`insufficient_data`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from itertools import combinations
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from evaledger.scoring.stats import percentile

if TYPE_CHECKING:
    from typing import TypeAlias

    import numpy as np
    import numpy.typing as npt

    Counts: TypeAlias = npt.NDArray[np.int64]

Ratings = Mapping[str, Mapping[str, float]]
"""item → rater → value (ordinal: larger is better; booleans as 0/1)."""


def cohen_kappa(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Cohen's κ of two raters over the items both rated: (p_o − p_e) / (1 − p_e)."""
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(a == b for a, b in pairs) / n
    first = Counter(a for a, _ in pairs)
    second = Counter(b for _, b in pairs)
    expected: float = sum(first[c] * second[c] for c in first) / (n * n)
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def krippendorff_alpha_ordinal(ratings: Ratings) -> float | None:
    """Krippendorff's α with the ordinal difference function, missing values allowed.

    α = 1 − (n − 1) · Σ o_ck δ²_ck / Σ n_c n_k δ²_ck, with the coincidence matrix o over pairable
    values (units with at least two values, each pair weighted 1 / (m_u − 1)) and
    δ²_ck = (Σ_{g=c..k} n_g − (n_c + n_k) / 2)² (Krippendorff 2011, "Computing Krippendorff's
    Alpha-Reliability").
    """
    coincidence: defaultdict[tuple[float, float], float] = defaultdict(float)
    for values in (list(r.values()) for r in ratings.values()):
        m = len(values)
        if m < 2:
            continue
        for i, j in ((i, j) for i in range(m) for j in range(m) if i != j):
            coincidence[(values[i], values[j])] += 1 / (m - 1)
    if not coincidence:
        return None
    totals: defaultdict[float, float] = defaultdict(float)
    for (c, _), weight in coincidence.items():
        totals[c] += weight
    categories = sorted(totals)
    n = sum(totals.values())
    index = {c: i for i, c in enumerate(categories)}

    def delta2(c: float, k: float) -> float:
        lo, hi = sorted((index[c], index[k]))
        between = sum(totals[categories[g]] for g in range(lo, hi + 1))
        return (between - (totals[c] + totals[k]) / 2) ** 2

    observed = sum(w * delta2(c, k) for (c, k), w in coincidence.items())
    expected = sum(totals[c] * totals[k] * delta2(c, k) for c in categories for k in categories)
    if expected == 0:
        return None
    return 1 - (n - 1) * observed / expected


def percent_agreement(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Share of items on which two raters gave the same value."""
    return sum(a == b for a, b in pairs) / len(pairs) if pairs else None


# ---------------------------------------------------------------------------------------------
# Bootstrap intervals over items

MIN_ITEMS = 10
"""Below this many items no agreement figure is reported (`insufficient_data`)."""
FEW_ITEMS = 30
"""Below this many items a figure is reported with a warning (`few_items`)."""
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 22
"""Fixed, so the same ratings always give the same interval."""
_CHUNK = 250
"""Resamples per matrix product: bounds memory at `_CHUNK × items` counts."""


class Reliability(StrEnum):
    """How far an agreement figure can be read."""

    OK = "ok"
    FEW_ITEMS = "few_items"
    """Fewer than 30 items: the figure is shown with a warning; read its interval."""
    INSUFFICIENT_DATA = "insufficient_data"
    """Fewer than 10 items: no figure is reported."""


def reliability(items: int) -> Reliability:
    """The reliability of a figure over `items` items."""
    if items < MIN_ITEMS:
        return Reliability.INSUFFICIENT_DATA
    return Reliability.FEW_ITEMS if items < FEW_ITEMS else Reliability.OK


class Interval(BaseModel):
    """A bootstrap 95 % percentile interval (items resampled with replacement)."""

    low: float = Field(description="2.5th percentile of the resampled coefficient.")
    high: float = Field(description="97.5th percentile of the resampled coefficient.")
    resamples: int = Field(description="Resamples where the coefficient was defined.")


def bootstrap_counts(items: int, resamples: int = BOOTSTRAP_RESAMPLES) -> Counts:
    """How often each item is drawn in each resample (resamples × items), from the fixed seed."""
    import numpy as np  # lazy: numpy; the projections import this module on every command

    rng = np.random.default_rng(BOOTSTRAP_SEED)
    return rng.multinomial(items, np.full(items, 1 / items), size=resamples).astype(np.int64)


def _codes(values: Sequence[float]) -> tuple[list[float], dict[float, int]]:
    categories = sorted(set(values))
    return categories, {c: i for i, c in enumerate(categories)}


def resampled_kappas(pairs: Sequence[tuple[float, float]], counts: Counts) -> list[float]:
    """Cohen's κ of each resample (rows of `counts`); resamples where κ is undefined are left out.

    Each item is a one-hot cell of a k × k confusion matrix, so a resample's matrix is the
    count-weighted sum: one matrix product per chunk of resamples.
    """
    import numpy as np  # lazy: numpy; the projections import this module on every command

    _, index = _codes([v for pair in pairs for v in pair])
    k = len(index)
    cells = np.zeros((len(pairs), k * k))
    for i, (a, b) in enumerate(pairs):
        cells[i, index[a] * k + index[b]] = 1.0
    out: list[float] = []
    for start in range(0, len(counts), _CHUNK):
        weights = counts[start : start + _CHUNK].astype(np.float64)
        confusion = (weights @ cells).reshape(-1, k, k)
        n = weights.sum(axis=1)
        observed = np.trace(confusion, axis1=1, axis2=2) / n
        expected = (confusion.sum(axis=2) * confusion.sum(axis=1)).sum(axis=1) / (n * n)
        defined = expected < 1
        out.extend(((observed - expected)[defined] / (1 - expected[defined])).tolist())
    return out


def resampled_alphas(units: Sequence[Mapping[str, float]], counts: Counts) -> list[float]:
    """Krippendorff's ordinal α of each resample of pairable units; undefined ones left out.

    A unit's coincidences (pairs weighted 1 / (m_u − 1)) add up over the units drawn, so a
    resample's coincidence matrix is a count-weighted sum, as for κ.
    """
    import numpy as np  # lazy: numpy; the projections import this module on every command

    categories, index = _codes([v for unit in units for v in unit.values()])
    k = len(categories)
    cells = np.zeros((len(units), k * k))
    for u, unit in enumerate(units):
        values = list(unit.values())
        m = len(values)
        for i in range(m):
            for j in range(m):
                if i != j:
                    cells[u, index[values[i]] * k + index[values[j]]] += 1 / (m - 1)
    out: list[float] = []
    for start in range(0, len(counts), _CHUNK):
        coincidence = (counts[start : start + _CHUNK].astype(np.float64) @ cells).reshape(-1, k, k)
        out.extend(_alpha_of_coincidences(coincidence))
    return out


def _alpha_of_coincidences(coincidence: npt.NDArray[np.float64]) -> list[float]:
    """α of each coincidence matrix (ordinal δ² over the categories present in each)."""
    import numpy as np  # lazy: numpy; the projections import this module on every command

    totals = coincidence.sum(axis=2)
    n = totals.sum(axis=1)
    cumulative = np.cumsum(totals, axis=1)
    k = totals.shape[1]
    observed = np.zeros(len(totals))
    expected = np.zeros(len(totals))
    for c in range(k):
        for d in range(k):
            lo, hi = min(c, d), max(c, d)
            between = cumulative[:, hi] - (cumulative[:, lo - 1] if lo > 0 else 0.0)
            # A category absent from a resample has n_g = 0: it adds nothing between others.
            delta2 = (between - (totals[:, c] + totals[:, d]) / 2) ** 2
            observed += coincidence[:, c, d] * delta2
            expected += totals[:, c] * totals[:, d] * delta2
    defined = expected > 0
    alphas = 1 - (n[defined] - 1) * observed[defined] / expected[defined]
    return [float(a) for a in alphas]


def interval_of(resampled: Sequence[float]) -> Interval | None:
    """The 95 % percentile interval of resampled coefficients (None when none was defined)."""
    if not resampled:
        return None
    return Interval(
        low=round(percentile(resampled, 2.5), 4),
        high=round(percentile(resampled, 97.5), 4),
        resamples=len(resampled),
    )


class PairAgreement(BaseModel):
    """Agreement of two raters on one measure."""

    raters: tuple[str, str] = Field(description="The two judges (provider:model).")
    items: int = Field(description="Items both rated.")
    percent_agreement: float | None = Field(description="Share of identical values.")
    cohen_kappa: float | None = Field(
        description="Cohen's κ (nominal); null when undefined or under 10 items."
    )


class MeasureAgreement(BaseModel):
    """Agreement of every judge on one metric, or on case pass/fail."""

    measure: str = Field(description="A metric id, or `case_passed`.")
    raters: list[str] = Field(description="Judges that rated at least one item.")
    items: int = Field(description="Items rated by at least two judges (pairable).")
    krippendorff_alpha: float | None = Field(
        description="Krippendorff's α, ordinal, missing votes allowed; null when undefined."
    )
    cohen_kappa: float | None = Field(
        description="Cohen's κ when exactly two judges rated; null otherwise."
    )
    pairs: list[PairAgreement] = Field(description="Every pair of judges.")
    reliability: Reliability = Field(
        default=Reliability.INSUFFICIENT_DATA,
        description="ok (30+ items), few_items (10-29: read the interval), insufficient_data "
        "(under 10: α and κ are null, not reported, as is a pair's κ under 10 items).",
    )
    alpha_interval: Interval | None = Field(
        default=None, description="Bootstrap 95 % interval of α; null under 10 items."
    )
    kappa_interval: Interval | None = Field(
        default=None, description="Bootstrap 95 % interval of the headline κ; null under 10 items."
    )


def measure_agreement(measure: str, ratings: Ratings) -> MeasureAgreement:
    """α over all judges, and κ for every pair (the headline κ when there are exactly two).

    With 10 items or more, both come with a bootstrap 95 % interval over items.
    """
    raters = sorted({r for item in ratings.values() for r in item})
    pairable = {k: v for k, v in ratings.items() if len(v) >= 2}
    level = reliability(len(pairable))
    alpha_interval = kappa_interval = None
    if level is not Reliability.INSUFFICIENT_DATA:
        units = list(pairable.values())
        counts = bootstrap_counts(len(units))
        alpha_interval = interval_of(resampled_alphas(units, counts))
        if len(raters) == 2:
            a, b = raters
            both = [(v[a], v[b]) for v in units]
            kappa_interval = interval_of(resampled_kappas(both, counts))
    pairs = []
    for a, b in combinations(raters, 2):
        both = [(v[a], v[b]) for v in ratings.values() if a in v and b in v]
        pairs.append(
            PairAgreement(
                raters=(a, b),
                items=len(both),
                percent_agreement=percent_agreement(both),
                cohen_kappa=cohen_kappa(both) if len(both) >= MIN_ITEMS else None,
            )
        )
    # Under MIN_ITEMS items no figure is given (issue 22): a κ of −0.5 over two items reads as a
    # finding. The per-pair rows keep their item counts and percent agreement.
    reported = level is not Reliability.INSUFFICIENT_DATA
    return MeasureAgreement(
        measure=measure,
        raters=raters,
        items=len(pairable),
        krippendorff_alpha=krippendorff_alpha_ordinal(pairable) if reported else None,
        cohen_kappa=pairs[0].cohen_kappa if reported and len(raters) == 2 else None,
        pairs=pairs,
        reliability=level,
        alpha_interval=alpha_interval,
        kappa_interval=kappa_interval,
    )


def shown(value: float | None, level: Reliability, interval: Interval | None) -> str:
    """An agreement figure as printed: insufficient data, or the value with its interval."""
    if level is Reliability.INSUFFICIENT_DATA:
        return "insufficient data"
    if value is None:
        return "undefined"
    text = f"{value:.3f}"
    if interval is not None:
        text += f" [{interval.low:.3f}, {interval.high:.3f}]"
    return text + (" (few items)" if level is Reliability.FEW_ITEMS else "")


class HumanAgreement(BaseModel):
    """A judge's original values against a human's: overrides of its verdicts, reviewers' labels."""

    judge: str = Field(description="provider:model of the judge compared with a human.")
    measure: str = Field(description="A metric id, or `case_passed`.")
    items: int = Field(description="Values compared (overridden verdicts and labelled cases).")
    percent_agreement: float | None = Field(description="Share where the human agreed.")
    cohen_kappa: float | None = Field(
        description="Cohen's κ judge vs human; null if undefined or under 10 items."
    )
    reliability: Reliability = Field(
        default=Reliability.INSUFFICIENT_DATA,
        description="ok (30+ items), few_items (10-29: read the interval), insufficient_data "
        "(under 10: κ is null, not reported).",
    )
    kappa_interval: Interval | None = Field(
        default=None, description="Bootstrap 95 % interval of κ; null under 10 items."
    )


def human_agreement(
    judge: str, measure: str, pairs: Sequence[tuple[float, float]]
) -> HumanAgreement:
    """Judge vs human on one measure: κ with its interval from 10 items, as between judges."""
    level = reliability(len(pairs))
    reported = level is not Reliability.INSUFFICIENT_DATA
    return HumanAgreement(
        judge=judge,
        measure=measure,
        items=len(pairs),
        percent_agreement=percent_agreement(pairs),
        cohen_kappa=cohen_kappa(pairs) if reported else None,
        reliability=level,
        kappa_interval=(
            interval_of(resampled_kappas(pairs, bootstrap_counts(len(pairs)))) if reported else None
        ),
    )


HumanValue = tuple[str, str, str, float, float]
"""(case id, judge, measure, the judge's value, the human's value)."""


def judge_vs_human_pairs(
    corrections: Iterable[HumanValue], labels: Iterable[HumanValue]
) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(judge, measure) → (judge value, human value) pairs, from overrides and labels.

    A reviewer's label says what the case deserved, so where a case has one it replaces the
    override pairs of that case for the same judge and measure: one human value per case.
    """
    labelled: dict[tuple[str, str, str], tuple[float, float]] = {
        (case, judge, measure): (judged, human) for case, judge, measure, judged, human in labels
    }
    pairs: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for case, judge, measure, judged, human in corrections:
        if (case, judge, measure) not in labelled:
            pairs[(judge, measure)].append((judged, human))
    for (_, judge, measure), pair in labelled.items():
        pairs[(judge, measure)].append(pair)
    return dict(pairs)


class AgreementReport(BaseModel):
    """Agreement figures of one run."""

    run_id: str
    judges: list[str] = Field(description="Every judge with a valid verdict in the run.")
    self_judged: list[str] = Field(
        description="Judges of the agent's own vendor (asked for explicitly): their votes count "
        "here like any other, flagged."
    )
    metrics: list[MeasureAgreement] = Field(description="One entry per metric of the run's spec.")
    case_passed: MeasureAgreement = Field(
        description="Case pass/fail as each judge's verdict alone decides it under the run's spec."
    )
    human: list[HumanAgreement] = Field(
        description="Judge vs human, where verdicts were overridden or reviewers labelled cases."
    )
