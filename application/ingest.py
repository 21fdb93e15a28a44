"""Ingest: many cases of one run in one request and one transaction (`POST /ingest`, issue 32).

The run is created when it is new, or found when it exists with the same body; its cases are
appended, each opened with whatever facts it holds, all in one transaction: a refused case
stores nothing of the batch. The HTTP route (`api/routes/ingest.py`) and the Python client
(`client/backends.py`, through it the pytest plugin and the Inspect hook, which send their cases
in batches) call `ingest_cases`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from evaledger.application.ports import Services
from evaledger.domain.bundle import BUNDLE_FORMAT, BundleCase, BundleRun, RunBundle
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context

MAX_INGEST_CASES = 5000
"""Cases in one ingest request: a batch, not an import (`POST /imports` streams a whole run)."""


@dataclass(frozen=True)
class Ingested:
    """What one ingest wrote."""

    run_id: UUID
    run_key: str
    case_ids: tuple[UUID, ...]
    """The batch's cases, in the order sent."""
    position: int
    """Log position; wait for it to read your writes."""
    events: int
    """Events written (0 for an idempotent re-send)."""
    new_cases: int
    """Cases that were not in the ledger before."""


def ingest_cases(
    services: Services, run: BundleRun, cases: Sequence[BundleCase], ctx: Context
) -> Ingested:
    """Create (or find) the run and open its cases, all in one transaction.

    The run header's status applies as a bundle's: `running` leaves the run open, `completed`
    (the bundle format's default) seals it over its cases once they are written.
    """
    if len(cases) > MAX_INGEST_CASES:
        raise ValidationError(
            f"cases: at most {MAX_INGEST_CASES} cases in one ingest, got {len(cases)} "
            "(send them in batches, or import the run: `evaledger import`, POST /imports)",
            field="cases",
        )
    bundle = RunBundle(format=BUNDLE_FORMAT, run=run, cases=list(cases))
    r = services.ledger.ingest(bundle, ctx)
    return Ingested(
        run_id=r.run_id,
        run_key=r.run_key,
        case_ids=tuple(r.case_ids),
        position=r.position,
        events=r.events,
        new_cases=r.new_cases,
    )
