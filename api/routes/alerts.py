"""Online alerts (issue 33): `/projects/{project}/online/alerts`, the CLI's `online alert`.

Scoped by the path's project: another project's token is answered 404. Adding, disabling and
checking need the write scope (`AUTH`); each change is an event with the token's principal as
its author.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Path
from pydantic import BaseModel, Field

from evaledger.api.deps import ContextDep, SyncedDep
from evaledger.application import alerts

router = APIRouter(tags=["online"])

Name = Annotated[str, Path(min_length=1, max_length=200, description="The alert's name.")]


class NewAlert(BaseModel):
    """An alert to add."""

    name: str = Field(min_length=1, max_length=200, description="Unique in the project.")
    measure: str = Field(
        default="pass_rate", description="pass_rate, score, latency_p95, cost or SCORER/METRIC."
    )
    below: float | None = Field(default=None, description="Breached below this value.")
    above: float | None = Field(default=None, description="Breached above this value.")
    window: str = Field(default="1h", description="Trailing window: 30m, 1h, 1d.")
    webhook: str = Field(description="The http(s) URL the transitions are posted to.")
    agent: str | None = Field(default=None, description="Only this agent's cases.")
    version: str | None = Field(default=None, description="Only this agent version's cases.")


class Disable(BaseModel):
    """Why an alert is turned off."""

    reason: str | None = Field(default=None, max_length=2000)


class Reading(BaseModel):
    """What one alert read in its window and what that did."""

    project: str
    name: str
    value: float | None
    n: int
    breached: bool | None = Field(description="null: no figure in the window (no change).")
    transition: Literal["fired", "recovered"] | None
    delivered: bool | None


class AlertList(BaseModel):
    """A project's alerts, by name."""

    data: list[alerts.AlertView]


class Readings(BaseModel):
    """What a check read of each enabled alert, and what it did."""

    data: list[Reading]


@router.get("/projects/{project}/online/alerts", response_model=AlertList)
def list_alerts(project: str, services: SyncedDep, ctx: ContextDep) -> AlertList:
    """The project's alerts, their state and last delivery."""
    return AlertList(data=alerts.list_alerts(services, project, ctx))


@router.post("/projects/{project}/online/alerts", response_model=alerts.AlertView)
def add_alert(
    project: str, body: NewAlert, services: SyncedDep, ctx: ContextDep
) -> alerts.AlertView:
    """Add an alert (an `AlertDefined` event); a bad one is 422 naming the field."""
    given = alerts.parse_alert(
        project=project,
        **body.model_dump(exclude={"window"}),
        window_s=alerts.parse_window(body.window),
    )
    private = services.settings.alert_private_webhooks
    return alerts.add_alert(services, given, ctx, allow_private=private)


@router.post("/projects/{project}/online/alerts/{name}/disable", response_model=alerts.AlertView)
def disable_alert(
    project: str,
    name: Name,
    services: SyncedDep,
    ctx: ContextDep,
    body: Annotated[Disable | None, Body()] = None,
) -> alerts.AlertView:
    """Turn an alert off (an `AlertDisabled` event)."""
    return alerts.disable_alert(services, project, name, ctx, body.reason if body else None)


@router.post("/projects/{project}/online/alerts/check", response_model=Readings)
def check_alerts(project: str, services: SyncedDep, ctx: ContextDep) -> Readings:
    """Evaluate the project's enabled alerts now; post their transitions."""
    private = services.settings.alert_private_webhooks
    done = alerts.check_alerts(services, ctx, project=project, allow_private=private)
    return Readings(data=[Reading(**r.__dict__) for r in done])
