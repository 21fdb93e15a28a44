"""Inter-judge agreement (DESIGN §10): Cohen's κ, Krippendorff's α (ordinal), judge vs human.

Pure functions over ratings. A rating table maps each item (a case) to the value each rater
(a judge) gave it; a rater that gave no value to an item is simply absent (missing value).
Agreement coefficients are None when they are undefined (fewer than two pairable values, or no
variation at all, where chance agreement is total and the ratio is 0/0).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from itertools import combinations

from pydantic import BaseModel, Field

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


class PairAgreement(BaseModel):
    """Agreement of two raters on one measure."""

    raters: tuple[str, str] = Field(description="The two judges (provider:model).")
    items: int = Field(description="Items both rated.")
    percent_agreement: float | None = Field(description="Share of identical values.")
    cohen_kappa: float | None = Field(description="Cohen's κ (nominal); null when undefined.")


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


def measure_agreement(measure: str, ratings: Ratings) -> MeasureAgreement:
    """α over all judges, and κ for every pair (the headline κ when there are exactly two)."""
    raters = sorted({r for item in ratings.values() for r in item})
    pairable = {k: v for k, v in ratings.items() if len(v) >= 2}
    pairs = []
    for a, b in combinations(raters, 2):
        both = [(v[a], v[b]) for v in ratings.values() if a in v and b in v]
        pairs.append(
            PairAgreement(
                raters=(a, b),
                items=len(both),
                percent_agreement=percent_agreement(both),
                cohen_kappa=cohen_kappa(both),
            )
        )
    return MeasureAgreement(
        measure=measure,
        raters=raters,
        items=len(pairable),
        krippendorff_alpha=krippendorff_alpha_ordinal(pairable),
        cohen_kappa=pairs[0].cohen_kappa if len(raters) == 2 else None,
        pairs=pairs,
    )


class HumanAgreement(BaseModel):
    """A judge's original values against the human corrections of its verdicts."""

    judge: str = Field(description="provider:model of the judge that was overridden.")
    measure: str = Field(description="A metric id, or `case_passed`.")
    items: int = Field(description="Corrected values compared.")
    percent_agreement: float | None = Field(description="Share the human left unchanged.")
    cohen_kappa: float | None = Field(description="Cohen's κ judge vs human; null if undefined.")


def human_agreement(
    judge: str, measure: str, pairs: Sequence[tuple[float, float]]
) -> HumanAgreement:
    """Judge vs human on one measure."""
    return HumanAgreement(
        judge=judge,
        measure=measure,
        items=len(pairs),
        percent_agreement=percent_agreement(pairs),
        cohen_kappa=cohen_kappa(pairs),
    )


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
        description="Judge vs human, where verdicts were overridden."
    )
