"""Online alerts (issue 33): a real loopback webhook gets one POST per breach and per recovery.

The cases are the trend tests' (tests/application/test_trends.py); the webhook is an HTTP server
on loopback in a thread. SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import alerts
from evaledger.domain.alerts import alert_id_for
from evaledger.domain.errors import ConflictError, NotFoundError, ValidationError
from evaledger.domain.events import (
    AlertDefined,
    AlertDeliveryAttempted,
    AlertDisabled,
    AlertFired,
    AlertRecovered,
)
from evaledger.domain.ledger import Context
from tests.application.test_trends import DAY1, load
from tests.helpers import event_count
from tests.webhook import Hook, webhook

CTX = Context(actor="ops-alice")
BREACHED = DAY1 + timedelta(hours=10)  # 1.0's 09:00-10:00: one pass, one fail: 0.5
QUIET = DAY1 + timedelta(hours=12)  # 11:00-12:00: no case
RECOVERED = DAY1 + timedelta(hours=14, minutes=10)  # 13:10-14:10: one pass: 1.0


@pytest.fixture
def hook() -> Iterator[Hook]:
    with webhook() as served:
        yield served


def _add(services: Services, url: str, **given: Any) -> alerts.AlertView:
    rule = {
        "project": "shop",
        "name": "pass-rate-1.0",
        "measure": "pass_rate",
        "below": 0.9,
        "window_s": 3600,
        "webhook": url,
        "agent": "support-bot",
        "version": "1.0",
        **given,
    }
    return alerts.add_alert(services, alerts.parse_alert(**rule), CTX, allow_private=True)


def _check(services: Services, now: Any, **options: Any) -> list[alerts.AlertReading]:
    options = {"allow_private": True, "backoff_s": 0.01, **options}
    return alerts.check_alerts(services, CTX, project="shop", now=now, **options)


def _events(services: Services, name: str = "pass-rate-1.0") -> list[Any]:
    return services.ledger.events_of(alert_id_for("shop", name))


def test_one_post_per_breach_and_one_per_recovery(store_services: Services, hook: Hook) -> None:
    load(store_services)
    view = _add(store_services, hook.url)
    assert (view.enabled, view.firing, view.defined_by) == (True, False, "ops-alice")

    (fired,) = _check(store_services, BREACHED)
    assert (fired.value, fired.n, fired.breached, fired.transition, fired.delivered) == (
        0.5,
        2,
        True,
        "fired",
        True,
    )
    assert len(hook.posts) == 1
    body = hook.posts[0]["body"]
    assert body["state"] == "fired" and body["alert"] == "pass-rate-1.0"
    assert (body["value"], body["n"], body["below"], body["project"]) == (0.5, 2, 0.9, "shop")
    assert hook.posts[0]["headers"]["Idempotency-Key"] == body["delivery_id"]

    # Still breached, then no data: nothing new is posted or recorded.
    before = len(_events(store_services))
    assert _check(store_services, BREACHED)[0].transition is None
    quiet = _check(store_services, QUIET)[0]
    assert (quiet.breached, quiet.transition, quiet.value) == (None, None, None)
    assert len(hook.posts) == 1 and len(_events(store_services)) == before

    (recovered,) = _check(store_services, RECOVERED)
    assert (recovered.value, recovered.transition, recovered.delivered) == (1.0, "recovered", True)
    assert [p["body"]["state"] for p in hook.posts] == ["fired", "recovered"]
    assert _check(store_services, RECOVERED)[0].transition is None
    assert len(hook.posts) == 2

    kinds = [type(e) for e in _events(store_services)]
    assert kinds == [
        AlertDefined,
        AlertFired,
        AlertDeliveryAttempted,
        AlertRecovered,
        AlertDeliveryAttempted,
    ]
    assert {e.actor for e in _events(store_services)} == {"ops-alice"}
    listed = alerts.list_alerts(store_services, "shop", CTX)
    assert [(v.name, v.firing, v.transitions, v.last_delivery) for v in listed] == [
        ("pass-rate-1.0", False, 2, "delivered")
    ]


def test_a_500_is_retried_and_each_attempt_recorded(store_services: Services, hook: Hook) -> None:
    load(store_services)
    _add(store_services, hook.url)
    hook.statuses = [500, 503]
    (fired,) = _check(store_services, BREACHED)
    assert fired.delivered is True
    assert len(hook.posts) == 3
    assert len({p["body"]["delivery_id"] for p in hook.posts}) == 1  # the same delivery
    attempts = [e for e in _events(store_services) if isinstance(e, AlertDeliveryAttempted)]
    assert [(a.attempt, a.status_code, a.delivered) for a in attempts] == [
        (1, 500, False),
        (2, 503, False),
        (3, 200, True),
    ]
    assert {a.transition_version for a in attempts} == {2}


def test_a_webhook_that_keeps_failing_is_given_up_and_not_fired_again(
    store_services: Services, hook: Hook
) -> None:
    load(store_services)
    _add(store_services, hook.url)
    hook.statuses = [500] * alerts.ATTEMPTS
    assert _check(store_services, BREACHED)[0].delivered is False
    assert len(hook.posts) == alerts.ATTEMPTS
    assert _check(store_services, BREACHED)[0].transition is None  # fired once
    assert alerts.list_alerts(store_services, "shop", CTX)[0].last_delivery == "failed"


def test_a_4xx_is_not_retried(store_services: Services, hook: Hook) -> None:
    load(store_services)
    _add(store_services, hook.url)
    hook.statuses = [404]
    assert _check(store_services, BREACHED)[0].delivered is False
    assert len(hook.posts) == 1


@pytest.mark.parametrize(
    ("webhook", "allow_private"),
    [
        ("file:///etc/passwd", True),
        ("gopher://example.com/", True),
        ("ftp://example.com/hook", True),
        ("http:///no-host", True),
        ("http://127.0.0.1:9/hook", False),
        ("http://localhost/hook", False),
        ("http://[::1]/hook", False),
        ("http://169.254.169.254/latest/meta-data", False),
        ("http://10.0.0.8/hook", False),
    ],
)
def test_a_webhook_outside_the_policy_is_refused_and_nothing_stored(
    store_services: Services, webhook: str, allow_private: bool
) -> None:
    given = alerts.parse_alert(project="shop", name="a", below=0.5, webhook=webhook)
    before = event_count(store_services)
    with pytest.raises(ValidationError) as e:
        alerts.add_alert(store_services, given, CTX, allow_private=allow_private)
    assert e.value.field == "webhook"
    assert event_count(store_services) == before


def test_a_loopback_webhook_is_not_posted_to_when_the_checker_does_not_allow_it(
    store_services: Services, hook: Hook
) -> None:
    load(store_services)
    _add(store_services, hook.url)  # added where loopback was allowed
    assert _check(store_services, BREACHED, allow_private=False)[0].delivered is False
    assert hook.posts == []
    (attempt,) = [e for e in _events(store_services) if isinstance(e, AlertDeliveryAttempted)]
    assert attempt.error is not None and "public" in attempt.error


@pytest.mark.parametrize(
    ("given", "field_name"),
    [
        ({"measure": "p99"}, "measure"),
        ({"below": None}, "below"),
        ({"below": 0.9, "above": 0.5}, "above"),
        ({"below": float("nan")}, "below"),
        ({"name": "bad name!"}, "name"),
        ({"window_s": 10}, "window_s"),
    ],
)
def test_a_bad_alert_names_its_field(given: dict[str, Any], field_name: str) -> None:
    rule = {"project": "shop", "name": "a", "below": 0.9, "webhook": "https://example.com/h"}
    with pytest.raises(ValidationError) as e:
        alerts.parse_alert(**{**rule, **given})
    assert e.value.field == field_name


@pytest.mark.parametrize("text", ["", "1", "59s", "1w", "32d", "-1h", "1.5h"])
def test_a_bad_window_is_refused(text: str) -> None:
    with pytest.raises(ValidationError) as e:
        alerts.parse_window(text)
    assert e.value.field == "window"


def test_windows_read_as_durations() -> None:
    assert [alerts.parse_window(t) for t in ("90s", "30m", "1h", "7d")] == [90, 1800, 3600, 604800]


def test_disable_stops_checks_and_a_name_is_unique_while_enabled(
    store_services: Services, hook: Hook
) -> None:
    load(store_services)
    _add(store_services, hook.url)
    with pytest.raises(ConflictError):
        _add(store_services, hook.url)
    view = alerts.disable_alert(store_services, "shop", "pass-rate-1.0", CTX, "noisy")
    assert view.enabled is False
    assert _check(store_services, BREACHED) == [] and hook.posts == []
    disabled = [e for e in _events(store_services) if isinstance(e, AlertDisabled)]
    assert [(e.reason, e.actor) for e in disabled] == [("noisy", "ops-alice")]
    assert _add(store_services, hook.url, below=0.4).enabled  # defined again
    assert _check(store_services, BREACHED)[0].breached is False


def test_another_projects_token_reaches_no_alert(store_services: Services, hook: Hook) -> None:
    load(store_services)
    _add(store_services, hook.url)
    theirs = Context(actor="token:x", project="elsewhere")
    with pytest.raises(NotFoundError):
        alerts.list_alerts(store_services, "shop", theirs)
    with pytest.raises(NotFoundError):
        alerts.disable_alert(store_services, "shop", "pass-rate-1.0", theirs)
    with pytest.raises(NotFoundError):
        alerts.check_alerts(store_services, theirs, project="shop", now=BREACHED)
    given = alerts.parse_alert(project="shop", name="x", below=1, webhook=hook.url)
    with pytest.raises(NotFoundError):
        alerts.add_alert(store_services, given, theirs, allow_private=True)
    # Their own check sees none of shop's alerts.
    assert alerts.check_alerts(store_services, theirs, now=BREACHED) == []
    assert alerts.list_alerts(store_services, "elsewhere", theirs) == []
    assert hook.posts == []


def test_checkers_racing_on_one_breach_post_it_once(store_url: str, hook: Hook) -> None:
    """Four checkers (each its own services, as four worker processes) at the same moment."""
    checkers = [build_services(Settings(db=store_url)) for _ in range(4)]
    try:
        load(checkers[0])
        _add(checkers[0], hook.url)
        start = threading.Barrier(len(checkers))
        results: list[list[alerts.AlertReading]] = []

        def run(services: Services) -> None:
            start.wait()
            results.append(_check(services, BREACHED))

        threads = [threading.Thread(target=run, args=(s,)) for s in checkers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == len(checkers)
        transitions = [r.transition for done in results for r in done]
        assert transitions.count("fired") == 1
        assert len(hook.posts) == 1
        fired = [e for e in _events(checkers[0]) if isinstance(e, AlertFired)]
        assert len(fired) == 1
    finally:
        for s in checkers:
            s.close()
