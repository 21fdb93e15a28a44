"""POST /ingest: many cases of a run in one request, stored in one transaction."""

from __future__ import annotations

from uuid import UUID

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from evaledger.api.deps import ContextDep, ServicesDep
from evaledger.api.responses import created, replayed
from evaledger.application.ingest import MAX_INGEST_CASES, ingest_cases
from evaledger.domain.bundle import BundleCase, BundleRun
from evaledger.domain.model import StrictModel

router = APIRouter(tags=["runs"])


class IngestBody(StrictModel):
    """A run (created when new, found when it exists with the same body) and a batch of cases."""

    run: BundleRun = Field(
        description="The run's header, as in a run bundle; its status applies after the cases: "
        "`running` leaves the run open, `completed` (the default) seals it."
    )
    cases: list[BundleCase] = Field(
        default_factory=list,
        max_length=MAX_INGEST_CASES,
        description="The cases to open, each with whatever facts it holds.",
    )


class IngestWritten(BaseModel):
    """What an ingest wrote (201 Created; 200 when a re-send wrote nothing)."""

    run_id: UUID
    run_key: str
    case_ids: list[UUID] = Field(description="The cases, in the order sent.")
    position: int = Field(description="Log position; wait for it to read your writes.")
    events: int = Field(description="Events written (0 for an idempotent re-send).")
    new_cases: int = Field(description="Cases that were not in the ledger before.")


@router.post("/ingest", status_code=201, responses=replayed(IngestWritten))
def ingest(
    body: IngestBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> IngestWritten:
    """Create or append to a run with many cases in one transaction (idempotent)."""
    r = ingest_cases(services, body.run, body.cases, ctx)
    created(response, f"/runs/{r.run_id}", r.events)
    return IngestWritten(
        run_id=r.run_id,
        run_key=r.run_key,
        case_ids=list(r.case_ids),
        position=r.position,
        events=r.events,
        new_cases=r.new_cases,
    )
