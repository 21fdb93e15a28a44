"""How a run's judge agreement reads (`evaledger agreement`, the web report): its notes.

The figures are the use case `application.grades.run_agreement`, still importable here as
`agreement_of` for the entry points that call it by that name.
"""

from __future__ import annotations

from evaledger.application.grades import run_agreement as agreement_of
from evaledger.scoring.agreement import (
    FEW_ITEMS,
    MIN_ITEMS,
    HumanAgreement,
    MeasureAgreement,
    Reliability,
)

__all__ = ["agreement_notes", "agreement_of", "human_notes"]


def agreement_notes(measures: list[MeasureAgreement]) -> list[str]:
    """The warnings under an agreement table (CLI and web): figures missing or on few items."""
    notes = []
    missing = [m.measure for m in measures if m.reliability is Reliability.INSUFFICIENT_DATA]
    few = [m.measure for m in measures if m.reliability is Reliability.FEW_ITEMS]
    if missing:
        notes.append(
            f"insufficient data (fewer than {MIN_ITEMS} items rated by two judges): "
            + ", ".join(missing)
        )
    if few:
        notes.append(
            f"warning: fewer than {FEW_ITEMS} items, read the 95% interval: " + ", ".join(few)
        )
    undefined = [
        m.measure
        for m in measures
        if m.reliability is not Reliability.INSUFFICIENT_DATA and m.krippendorff_alpha is None
    ]
    if undefined:
        notes.append(
            "undefined: the judges gave one and the same value to every item (100% agreement, "
            "no variation), so agreement beyond chance cannot be measured: " + ", ".join(undefined)
        )
    return notes


def human_notes(rows: list[HumanAgreement]) -> list[str]:
    """The warnings under the judge-vs-human table (CLI and web), as for judges."""
    notes = []
    missing = [
        f"{h.judge} {h.measure}" for h in rows if h.reliability is Reliability.INSUFFICIENT_DATA
    ]
    few = [f"{h.judge} {h.measure}" for h in rows if h.reliability is Reliability.FEW_ITEMS]
    if missing:
        notes.append(
            f"insufficient data (fewer than {MIN_ITEMS} values a human judged too): "
            + ", ".join(missing)
        )
    if few:
        notes.append(
            f"warning: fewer than {FEW_ITEMS} values, read the 95% interval: " + ", ".join(few)
        )
    return notes
