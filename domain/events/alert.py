"""The events of an online alert (issue 33, DESIGN §16): its rule, its transitions, its deliveries.

An alert is recorded configuration (`AlertDefined`, `AlertDisabled`: who changed it and when)
and a state kept as events: `AlertFired` when its measure crosses the threshold, `AlertRecovered`
when it is back, and one `AlertDeliveryAttempted` per webhook attempt with its outcome.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import AwareDatetime, Field

from evaledger.domain.events.base import DomainEvent


class AlertEvent(DomainEvent):
    """An event of an Alert aggregate (one named alert of one project)."""


class AlertDefined(AlertEvent):
    """An alert rule was added: a measure over a trailing window against a threshold."""

    topic_name: ClassVar[str] = "evaledger.alert.defined"

    project: str = Field(min_length=1, description="The project whose cases the alert reads.")
    name: str = Field(min_length=1, max_length=200, description="Unique in the project.")
    measure: str = Field(
        min_length=1, description="pass_rate, score, latency_p95, cost or SCORER/METRIC."
    )
    below: float | None = Field(default=None, description="Breached when the value is below.")
    above: float | None = Field(default=None, description="Breached when the value is above.")
    window_s: int = Field(gt=0, description="The trailing window the measure is taken over.")
    webhook: str = Field(min_length=1, description="The http(s) URL the transitions are posted to.")
    agent: str | None = Field(default=None, description="Only this agent's cases.")
    version: str | None = Field(default=None, description="Only this agent version's cases.")


class AlertDisabled(AlertEvent):
    """The alert was turned off: it is evaluated no more."""

    topic_name: ClassVar[str] = "evaledger.alert.disabled"

    reason: str | None = None


class AlertTransition(AlertEvent):
    """The measure crossed the threshold (either way) over the window ending at `window_end`."""

    value: float = Field(description="The measure over the window.")
    n: int = Field(ge=0, description="Executions in the window.")
    window_start: AwareDatetime
    window_end: AwareDatetime


class AlertFired(AlertTransition):
    """The measure breached the threshold."""

    topic_name: ClassVar[str] = "evaledger.alert.fired"


class AlertRecovered(AlertTransition):
    """The measure is back within the threshold."""

    topic_name: ClassVar[str] = "evaledger.alert.recovered"


class AlertDeliveryAttempted(AlertEvent):
    """One POST of a transition to the webhook, and its outcome."""

    topic_name: ClassVar[str] = "evaledger.alert.delivery_attempted"

    transition: Literal["fired", "recovered"]
    transition_version: int = Field(ge=1, description="The alert version of the transition.")
    attempt: int = Field(ge=1)
    status_code: int | None = Field(default=None, description="The webhook's HTTP status.")
    error: str | None = Field(default=None, description="Why the attempt failed, if it did.")
    delivered: bool
