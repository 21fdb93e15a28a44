"""A run's judge agreement from the read models (`evaledger agreement`, HTTP and the demo)."""

from __future__ import annotations

from uuid import UUID

from evaledger.api.bootstrap import Services
from evaledger.projections.votes import agreement_report
from evaledger.scoring.agreement import (
    FEW_ITEMS,
    MIN_ITEMS,
    AgreementReport,
    MeasureAgreement,
    Reliability,
)


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
    return notes
