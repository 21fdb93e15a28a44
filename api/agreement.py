"""A run's judge agreement from the read models (`evaledger agreement`, HTTP and the demo)."""

from __future__ import annotations

from uuid import UUID

from evaledger.api.bootstrap import Services
from evaledger.projections.votes import agreement_report
from evaledger.scoring.agreement import AgreementReport


def agreement_of(services: Services, run_id: UUID) -> AgreementReport:
    """The run's agreement figures, once the projections have caught up."""
    services.sync()
    spec = services.reads.run_spec(run_id)
    return agreement_report(services.engine, run_id, spec, services.reads.facts(run_id))
