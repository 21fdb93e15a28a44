"""GET /config/available-metrics, POST /config/metrics, GET /health."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from evaledger.api.deps import AUTH, ContextDep, ProjectDep, ServicesDep, SyncedDep
from evaledger.api.schemas import Written
from evaledger.domain.metrics import MetricDefinition

router = APIRouter(tags=["config"])


@router.get("/health")
def health(services: ServicesDep) -> dict[str, Any]:
    """Liveness plus where the log and the projections are."""
    return {
        "status": "ok",
        "store": services.location.kind,
        "log_position": services.ledger.position(),
        "projections": services.runner.positions(),
    }


@router.get("/config/available-metrics", dependencies=AUTH)
def available_metrics(services: SyncedDep, project: ProjectDep) -> dict[str, Any]:
    """Every registered metric (built-in and custom), for UI discovery."""
    data = services.reads.available_metrics(project or "default")
    return {"data": [m.model_dump(mode="json") for m in data], "count": len(data)}


@router.post("/config/metrics", status_code=201, dependencies=AUTH)
def register_metric(
    definition: MetricDefinition,
    services: ServicesDep,
    ctx: ContextDep,
    project: ProjectDep,
) -> Written:
    """Register a custom metric in a project's catalogue (as an event; admin scope)."""
    return Written.of(services.ledger.register_metric(definition, ctx, project or "default"))
