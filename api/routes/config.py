"""GET /config/available-metrics, POST /config/metrics, GET /health."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Response

from evaledger.api.deps import ContextDep, ServicesDep, SyncedDep
from evaledger.api.responses import created, replayed
from evaledger.api.schemas import Health, MetricPage, Written
from evaledger.domain.metrics import MetricDefinition

router = APIRouter(tags=["config"])


@router.get("/health")
def get_health(services: ServicesDep) -> Health:
    """Liveness plus where the log and the projections are."""
    return Health(
        status="ok",
        store=services.location.kind,
        log_position=services.ledger.position(),
        projections=services.runner.positions(),
    )


@router.get("/config/available-metrics")
def list_available_metrics(
    services: SyncedDep,
    project: str = "default",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> MetricPage:
    """Every registered metric (built-in, then the project's custom ones), for UI discovery."""
    every = services.reads.available_metrics(project)
    page = every[offset : offset + limit]
    return MetricPage(data=page, count=len(page), total=len(every), limit=limit, offset=offset)


@router.post("/config/metrics", status_code=201, responses=replayed(Written))
def register_metric(
    definition: MetricDefinition,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    project: str = "default",
) -> Written:
    """Register a custom metric in a project's catalogue (as an event)."""
    written = Written.of(services.ledger.register_metric(definition, ctx, project))
    created(response, f"/config/available-metrics?project={quote(project)}", written.events)
    return written
