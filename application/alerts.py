"""Online alerts (issue 33, DESIGN §16): a measure over a trailing window against a threshold.

- `add_alert`, `disable_alert`, `list_alerts` (`evaledger online alert add|disable|list`,
  /projects/{project}/online/alerts): the rule is recorded configuration, events with their
  author (`AlertDefined`, `AlertDisabled`).
- `check_alerts` (the worker every 5 minutes, `evaledger online alert check`, POST
  .../online/alerts/check): each enabled alert's measure over its window ending now (the trend's
  definition, `scoring.series`); a breach records `AlertFired` once and a return within the
  threshold `AlertRecovered` once (the aggregate's version makes two checkers record it once),
  and the checker that recorded the transition posts it to the webhook: retried with exponential
  backoff (tenacity) on a network error, a 429 or a 5xx, each attempt an `AlertDeliveryAttempted`.
  A window without an execution (or an undefined figure) changes nothing.

Webhooks are SSRF-aware: only http and https; loopback, private, link-local and reserved
addresses (literal, or what the host name resolves to at delivery) only when the deployment
allows them (`Settings.alert_private_webhooks`); redirects are not followed.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlsplit
from uuid import UUID

import httpx
from pydantic import Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from evaledger.application.ports import Services
from evaledger.domain.alerts import Alert, Transition
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context
from evaledger.domain.model import StrictModel
from evaledger.domain.spec import ScorerInfo, ScoringSpec
from evaledger.projections.series import series_cases
from evaledger.scoring.series import BucketFigure, bucket_figure, check_measure

ATTEMPTS = 5
"""Webhook attempts per transition (the first and four retries)."""
BACKOFF_S = 1.0
"""The first retry's wait; each next one doubles, up to `BACKOFF_MAX_S`."""
BACKOFF_MAX_S = 60.0
TIMEOUT_S = 10.0
MAX_WINDOW_S = 31 * 86_400
_WINDOW = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def parse_window(text: str) -> int:
    """`90s`, `30m`, `1h`, `7d` as seconds; a ValidationError naming `window` otherwise."""
    found = _WINDOW.fullmatch(text.strip())
    seconds = int(found.group(1)) * _UNIT_S[found.group(2)] if found else 0
    if not 60 <= seconds <= MAX_WINDOW_S:
        raise ValidationError(
            f"window: a duration from 1m to 31d such as 30m, 1h or 1d, got {text!r}",
            field="window",
        )
    return seconds


def check_webhook(url: str, *, allow_private: bool) -> str:
    """The webhook URL if it may be posted to; a ValidationError naming `webhook` otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(
            f"webhook: an http:// or https:// URL with a host, got {url[:200]!r}", field="webhook"
        )
    if not allow_private:
        try:
            literal = ipaddress.ip_address(parts.hostname)
        except ValueError:
            literal = None
        if parts.hostname.lower() == "localhost" or (literal and not _public(literal)):
            raise ValidationError(
                f"webhook: {parts.hostname} is not a public address (allowed only with "
                "EVALEDGER_ALERT_PRIVATE_WEBHOOKS=1)",
                field="webhook",
            )
    return url


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return address.is_global and not address.is_multicast


class AlertInput(StrictModel):
    """A new alert: its name, measure, threshold(s), window, webhook and filters."""

    project: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    measure: str = Field(default="pass_rate", min_length=1, max_length=300)
    below: float | None = None
    above: float | None = None
    window_s: int = Field(default=3600, ge=60, le=MAX_WINDOW_S)
    webhook: str = Field(min_length=1, max_length=2000)
    agent: str | None = Field(default=None, min_length=1, max_length=200)
    version: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("measure")
    @classmethod
    def _measure(cls, value: str) -> str:
        return check_measure(value)

    @model_validator(mode="after")
    def _threshold(self) -> AlertInput:
        if self.below is None and self.above is None:
            raise ValidationError("below: give --below, --above or both", field="below")
        if self.below is not None and self.above is not None and self.above < self.below:
            raise ValidationError("above: must not be below `below`", field="above")
        return self


class AlertView(StrictModel):
    """An alert as listed: its rule, author, state and last deliveries."""

    project: str
    name: str
    measure: str
    below: float | None
    above: float | None
    window_s: int
    webhook: str
    agent: str | None
    version: str | None
    enabled: bool
    firing: bool
    defined_by: str
    defined_at: datetime
    transitions: int = Field(description="Times it fired or recovered.")
    last_delivery: str | None = Field(description="delivered, failed, or null before any.")


def alert_view(alert: Alert) -> AlertView:
    """What a listing shows of an alert."""
    d = alert.defined
    last = alert.deliveries[-1] if alert.deliveries else None
    return AlertView(
        project=d.project,
        name=d.name,
        measure=d.measure,
        below=d.below,
        above=d.above,
        window_s=d.window_s,
        webhook=d.webhook,
        agent=d.agent,
        version=d.version,
        enabled=alert.enabled,
        firing=alert.firing,
        defined_by=d.actor,
        defined_at=d.timestamp,
        transitions=len(alert.transitions),
        last_delivery=None if last is None else ("delivered" if last.delivered else "failed"),
    )


def parse_alert(**given: Any) -> AlertInput:
    """An `AlertInput` from entry-point values; a bad one is a ValidationError naming its field."""
    try:
        return AlertInput.model_validate(given)
    except PydanticValidationError as e:
        first = e.errors()[0]
        name = ".".join(str(p) for p in first["loc"]) or "alert"
        raise ValidationError(f"{name}: {first['msg']}", field=name) from None


def add_alert(
    services: Services, given: AlertInput, ctx: Context, *, allow_private: bool
) -> AlertView:
    """Record a new alert (or define a disabled one again); nothing is stored if it is bad."""
    check_webhook(given.webhook, allow_private=allow_private)
    rule = given.model_dump(exclude={"project"})
    services.ledger.define_alert(given.project, ctx, **rule)
    return alert_view(services.ledger.alert(given.project, given.name))


def disable_alert(
    services: Services, project: str, name: str, ctx: Context, reason: str | None = None
) -> AlertView:
    """Turn an alert off."""
    services.ledger.disable_alert(project, name, ctx, reason)
    return alert_view(services.ledger.alert(project, name))


def list_alerts(services: Services, project: str, ctx: Context) -> list[AlertView]:
    """The project's alerts (another project's token: not found)."""
    ctx.check_project(project, f"project {project!r}")
    return [alert_view(a) for a in services.ledger.alerts(project)]


# -- check ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlertReading:
    """What one alert read in its window, and what that did."""

    project: str
    name: str
    value: float | None
    n: int
    breached: bool | None
    """None: no figure in the window (nothing changes)."""
    transition: Literal["fired", "recovered"] | None
    delivered: bool | None
    """Whether the transition reached the webhook (None: no transition)."""


def check_alerts(
    services: Services,
    ctx: Context,
    *,
    project: str | None = None,
    now: datetime | None = None,
    allow_private: bool = False,
    backoff_s: float = BACKOFF_S,
    transport: httpx.BaseTransport | None = None,
) -> list[AlertReading]:
    """Evaluate the enabled alerts of `project` (None: every project the context may see)."""
    now = now or datetime.now(UTC)
    scope = project or ctx.project
    if scope is not None:
        ctx.check_project(scope, f"project {scope!r}")
    services.sync()
    readings = []
    for alert in services.ledger.alerts(scope):
        if alert.enabled:
            readings.append(
                _check_one(services, alert, ctx, now, allow_private, backoff_s, transport)
            )
    return readings


def _check_one(
    services: Services,
    alert: Alert,
    ctx: Context,
    now: datetime,
    allow_private: bool,
    backoff_s: float,
    transport: httpx.BaseTransport | None,
) -> AlertReading:
    d = alert.defined
    start = now - timedelta(seconds=d.window_s)
    figure = window_figure(services, alert, start, now)
    value = None if figure is None else figure.value
    n = 0 if figure is None else figure.n
    if value is None:
        return AlertReading(d.project, d.name, None, n, None, None, None)
    breached = (d.below is not None and value < d.below) or (
        d.above is not None and value > d.above
    )
    done = services.ledger.transition_alert(
        alert.id, breached, ctx, value=value, n=n, window_start=start, window_end=now
    )
    if done is None:
        return AlertReading(d.project, d.name, value, n, breached, None, None)
    delivered = deliver(
        services, done, ctx, allow_private=allow_private, backoff_s=backoff_s, transport=transport
    )
    return AlertReading(d.project, d.name, value, n, breached, done.kind, delivered)


def window_figure(
    services: Services, alert: Alert, start: datetime, end: datetime
) -> BucketFigure | None:
    """The alert's measure over its cases from `start` to `end` (the trend's definition)."""
    d = alert.defined
    cases = series_cases(
        services.reads.engine, d.project, agent=d.agent, version=d.version, since=start, until=end
    )
    if not cases:
        return None
    run_ids = list(dict.fromkeys(c.run_id for c in cases))
    specs: list[ScoringSpec] = [services.reads.run_spec(UUID(r)) for r in run_ids]
    scorers: dict[str, ScorerInfo] = {}
    for spec in specs:
        for s in spec.scorers:
            scorers.setdefault(s.name, s)
    return bucket_figure(d.measure, [c.score for c in cases], specs[0], list(scorers.values()))


# -- delivery ---------------------------------------------------------------------------------


class _Retry(Exception):
    """An attempt worth repeating: a network error, a 429 or a 5xx."""


def payload(transition: Transition) -> dict[str, Any]:
    """The JSON body posted for a transition."""
    alert = transition.alert
    d = alert.defined
    event = alert.transitions[-1]
    return {
        "alert": d.name,
        "project": d.project,
        "state": transition.kind,
        "measure": d.measure,
        "value": event.value,
        "n": event.n,
        "below": d.below,
        "above": d.above,
        "agent": d.agent,
        "version": d.version,
        "window_start": event.window_start.isoformat(),
        "window_end": event.window_end.isoformat(),
        "at": event.timestamp.isoformat(),
        "delivery_id": f"{alert.id}:{transition.version}",
    }


def deliver(
    services: Services,
    transition: Transition,
    ctx: Context,
    *,
    allow_private: bool,
    backoff_s: float = BACKOFF_S,
    transport: httpx.BaseTransport | None = None,
) -> bool:
    """POST the transition to the webhook, retried with backoff; each attempt recorded."""
    alert = transition.alert
    url = alert.defined.webhook
    body = payload(transition)
    attempt = 0

    def record(status: int | None, error: str | None, delivered: bool) -> None:
        services.ledger.record_alert_delivery(
            alert.id,
            ctx,
            transition=transition.kind,
            transition_version=transition.version,
            attempt=attempt,
            status_code=status,
            error=error,
            delivered=delivered,
        )

    def once(client: httpx.Client) -> bool:
        nonlocal attempt
        attempt += 1
        try:
            _resolve_allowed(url, allow_private)
        except ValidationError as e:
            record(None, e.detail, False)
            return False
        try:
            response = client.post(url, json=body, headers={"Idempotency-Key": body["delivery_id"]})
        except httpx.HTTPError as e:
            record(None, f"{type(e).__name__}: {e}"[:500], False)
            raise _Retry from e
        ok = 200 <= response.status_code < 300
        record(response.status_code, None if ok else f"HTTP {response.status_code}", ok)
        if response.status_code == 429 or response.status_code >= 500:
            raise _Retry
        return ok

    retrying = Retrying(
        stop=stop_after_attempt(ATTEMPTS),
        wait=wait_exponential(multiplier=backoff_s, max=BACKOFF_MAX_S),
        retry=retry_if_exception_type(_Retry),
    )
    with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False, transport=transport) as client:
        try:
            return bool(retrying(once, client))
        except RetryError:
            return False


def _resolve_allowed(
    url: str,
    allow_private: bool,
    resolve: Callable[..., Any] = socket.getaddrinfo,
) -> None:
    """Refuse a webhook whose host resolves to a non-public address (unless allowed)."""
    check_webhook(url, allow_private=allow_private)
    if allow_private:
        return
    host = urlsplit(url).hostname or ""
    try:
        infos = resolve(host, None)
    except OSError as e:
        raise ValidationError(f"webhook: {host} does not resolve ({e})", field="webhook") from e
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        if not _public(address):
            raise ValidationError(
                f"webhook: {host} resolves to {address}, not a public address", field="webhook"
            )
