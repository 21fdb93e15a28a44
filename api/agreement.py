"""A run's judge agreement from the read models (`evaledger agreement`, HTTP and the demo)."""

from __future__ import annotations

from uuid import UUID

from evaledger.api.bootstrap import Services
from evaledger.projections.votes import agreement_report
from evaledger.scoring.agreement import (
    FEW_ITEMS,
    MIN_ITEMS,
    AgreementReport,
    HumanAgreement,
    MeasureAgreement,
    Reliability,
)

_INSUFFICIENT = Reliability.INSUFFICIENT_DATA


def agreement_of(services: Services, run_id: UUID) -> AgreementReport:
    """The run's agreement figures, once the projections have caught up."""
    services.sync()
    spec = services.reads.run_spec(run_id)
    return agreement_report(services.engine, run_id, spec, services.reads.facts(run_id))


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
