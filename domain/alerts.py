"""The Alert aggregate (issue 33): one named alert of one project, its rule and its state.

Its state is its events: defined (or defined again after being disabled), disabled, firing
after `AlertFired` until `AlertRecovered`, and the delivery attempts of each transition.
`AlertCommands` are the ledger's commands on it (mixed into `Ledger`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid5

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.errors import ConflictError, NotFoundError
from evaledger.domain.events import (
    AlertDefined,
    AlertDeliveryAttempted,
    AlertDisabled,
    AlertFired,
    AlertRecovered,
    DomainEvent,
)
from evaledger.domain.writes import Context, LedgerStore, Written

ALERT_DEFINED_TOPIC = AlertDefined.topic()


def alert_id_for(project: str, name: str) -> UUID:
    """Id of the Alert aggregate named `name` in `project` (projects never share one)."""
    return uuid5(NAMESPACE, f"alert\x1f{project}\x1f{name}")


class Alert(Aggregate):
    """An alert rule, whether it is enabled and firing, and its transitions' deliveries."""

    defined: AlertDefined
    enabled: bool
    firing: bool
    transitions: list[AlertFired | AlertRecovered]
    deliveries: list[AlertDeliveryAttempted]

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.enabled = False
        self.firing = False
        self.transitions = []
        self.deliveries = []

    def define(self, meta: Meta, **rule: Any) -> None:
        """Add the rule (again, after it was disabled: its state starts afresh)."""
        if self.enabled:
            raise ConflictError(f"alert {rule['name']!r} exists; disable it first")
        self._trigger(AlertDefined, meta, **rule)

    def disable(self, meta: Meta, reason: str | None) -> None:
        """Turn the alert off."""
        if not self.enabled:
            raise ConflictError(f"alert {self.defined.name!r} is disabled already")
        self._trigger(AlertDisabled, meta, reason=reason)

    def transition(
        self, fired: bool, meta: Meta, **reading: Any
    ) -> AlertFired | AlertRecovered | None:
        """Record a breach (fired) or a recovery; None when the alert is in that state already."""
        if not self.enabled or fired == self.firing:
            return None
        if fired:
            return self._trigger(AlertFired, meta, **reading)
        return self._trigger(AlertRecovered, meta, **reading)

    def attempted(self, meta: Meta, **outcome: Any) -> None:
        """Record one delivery attempt of a transition."""
        self._trigger(AlertDeliveryAttempted, meta, **outcome)

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, AlertDefined):
            self.defined, self.enabled, self.firing = event, True, False
        elif isinstance(event, AlertDisabled):
            self.enabled = False
        elif isinstance(event, AlertFired | AlertRecovered):
            self.firing = isinstance(event, AlertFired)
            self.transitions.append(event)
        elif isinstance(event, AlertDeliveryAttempted):
            self.deliveries.append(event)


@dataclass(frozen=True)
class Transition:
    """A transition just recorded: what to post, and the alert as it then was."""

    kind: Literal["fired", "recovered"]
    version: int
    alert: Alert


class AlertCommands(LedgerStore):
    """Define, disable and list alerts; record their transitions and deliveries."""

    def define_alert(self, project: str, ctx: Context, **rule: Any) -> Written:
        """Add an alert to `project` (`rule`: the `AlertDefined` fields but the project)."""
        ctx.check_project(project, f"project {project!r}")
        agg_id = alert_id_for(project, rule["name"])

        def command() -> Written:
            alert = self._find(Alert, agg_id) or Alert(agg_id)
            alert.define(Meta(timestamp=self.clock(), actor=ctx.actor), project=project, **rule)
            position, n = self._save(alert, project=project)
            return Written((alert.id,), position, n)

        return self._retrying(command)

    def disable_alert(self, project: str, name: str, ctx: Context, reason: str | None) -> Written:
        """Turn an alert off (it keeps its history)."""
        ctx.check_project(project, f"project {project!r}")

        def command() -> Written:
            alert = self.alert(project, name)
            alert.disable(Meta(timestamp=self.clock(), actor=ctx.actor), reason)
            position, n = self._save(alert, project=project)
            return Written((alert.id,), position, n)

        return self._retrying(command)

    def alert(self, project: str, name: str) -> Alert:
        """The alert named `name` in `project` (NotFoundError if none was ever defined)."""
        found = self._find(Alert, alert_id_for(project, name))
        if found is None:
            raise NotFoundError(f"no alert {name!r} in project {project!r}")
        return found

    def alerts(self, project: str | None) -> list[Alert]:
        """Every alert ever defined in `project` (None: every project), by name."""
        ids: dict[UUID, None] = {}
        start = 1
        while True:
            page = self.app.recorder.select_notifications(start, 1000, topics=[ALERT_DEFINED_TOPIC])
            if not page:
                break
            for n in page:
                ids[UUID(str(n.originator_id))] = None
            start = page[-1].id + 1
        found = [a for a in (self._find(Alert, i) for i in ids) if a is not None]
        mine = [a for a in found if project is None or a.defined.project == project]
        return sorted(mine, key=lambda a: (a.defined.project, a.defined.name))

    def transition_alert(
        self,
        alert_id: UUID,
        fired: bool,
        ctx: Context,
        *,
        value: float,
        n: int,
        window_start: datetime,
        window_end: datetime,
    ) -> Transition | None:
        """Record a breach or a recovery once: None when another writer recorded it first."""

        def command() -> Transition | None:
            alert = self._get(Alert, alert_id)
            event = alert.transition(
                fired,
                Meta(timestamp=self.clock(), actor=ctx.actor),
                value=value,
                n=n,
                window_start=window_start,
                window_end=window_end,
            )
            if event is None:
                return None
            self._save(alert, project=alert.defined.project)
            kind: Literal["fired", "recovered"] = "fired" if fired else "recovered"
            return Transition(kind, event.originator_version, alert)

        return self._retrying(command)

    def record_alert_delivery(self, alert_id: UUID, ctx: Context, **outcome: Any) -> Written:
        """Record one webhook attempt of a transition (`outcome`: the event's fields)."""

        def command() -> Written:
            alert = self._get(Alert, alert_id)
            alert.attempted(Meta(timestamp=self.clock(), actor=ctx.actor), **outcome)
            position, n = self._save(alert, project=alert.defined.project)
            return Written((alert.id,), position, n)

        return self._retrying(command)
