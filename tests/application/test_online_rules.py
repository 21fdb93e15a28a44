"""Online evaluators: rules as events, judged traces, the daily budget, tenancy (SQLite and PG).

Traces are made by the real OpenTelemetry SDK and received as OTLP exports; the judge is the
loopback fake provider (`tests/fake_judges.py`). On SQLite the completion pass judges at once;
on PostgreSQL it queues one job per judgment, run here as `evaledger worker` runs it (the real
worker process is `tests/api/test_online_rules_serve.py`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from evaledger.api.bootstrap import Services
from evaledger.api.jobs import ONLINE_TASK
from evaledger.application import audit, verification
from evaledger.application.online_rules import (
    OnlineJudgment,
    OnlineRuleInput,
    add_online_rule,
    disable_online_rule,
    judge_online_case,
    list_online_rules,
)
from evaledger.application.traces import complete_traces, receive_traces
from evaledger.domain.errors import ConflictError, NotFoundError, PermissionDeniedError
from evaledger.domain.errors import ValidationError as InputError
from evaledger.domain.events import (
    JudgeVerdictRecorded,
    OnlineCaseJudged,
    OnlineCaseSkipped,
    OnlineRuleAdded,
    OnlineRuleDisabled,
    TokenScope,
)
from evaledger.domain.ledger import Context
from evaledger.domain.online_rules import rule_day_id_for, rules_id_for
from evaledger.importers.otlp import PROTOBUF
from evaledger.projections.queries import RunFilter
from tests.fake_judges import FakeJudges, serve
from tests.otlp_helpers import chat_trace, export_body, recorder

CTX = Context(actor="alice")
JUDGE = "anthropic:claude-sonnet-4-6"
PER_JUDGMENT_USD = (1000 * 3.0 + 250 * 15.0) / 1e6  # the fake's usage at the default price


@pytest.fixture
def judges(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeJudges]:
    for fake in serve():
        for k, v in fake.env().items():
            monkeypatch.setenv(k, v)
        yield fake


def expected_sample(rule: str, trace_ids: list[str], rate: float) -> set[str]:
    """The traces a rule samples, from the documented definition (not the product's code)."""
    return {
        t
        for t in trace_ids
        if int.from_bytes(hashlib.sha256(f"{rule}\x1f{t}".encode()).digest()[:8]) / 2**64 < rate
    }


def send_traces(services: Services, n: int, service: str = "support-bot") -> list[str]:
    """`n` one-question traces through the SDK, received and recorded as cases; their ids."""
    tracer, memory = recorder(service=service)
    for i in range(n):
        chat_trace(tracer, question=f"Where is order {i}?")
    spans = memory.get_finished_spans()
    receive_traces(services, export_body(spans), PROTOBUF, None, CTX, max_bytes=1 << 22)
    complete_traces(services, CTX, quiet_s=30, now=datetime.now(UTC) + timedelta(seconds=60))
    run_queued(services)
    return sorted({format(s.context.trace_id, "032x") for s in spans})


def run_queued(services: Services) -> None:
    """On PostgreSQL, run the queued online judgments in order, as a worker does."""
    queue = services.job_queue
    if queue is None:
        return
    queue.open()
    jobs = queue.app.job_manager.list_jobs(task=ONLINE_TASK, status="todo")
    for job in sorted(jobs, key=lambda j: j.id or 0):
        judge_online_case(services, OnlineJudgment.from_payload(job.task_kwargs))
        assert job.id is not None
        queue.app.job_manager.cancel_job_by_id(job.id, delete_job=True)  # done: off the queue


def judged_traces(services: Services, rule: str) -> tuple[set[str], set[str]]:
    """(trace ids the rule judged, trace ids it skipped) today, from the rule's day events."""
    day = services.ledger.clock().date()
    events = services.ledger.events_of(rule_day_id_for("default", rule, day))
    judged = {e.trace_id for e in events if isinstance(e, OnlineCaseJudged)}
    skipped = {e.trace_id for e in events if isinstance(e, OnlineCaseSkipped)}
    return judged, skipped


def verdict_keys(services: Services) -> list[str]:
    """The test case keys (trace ids) of every judge verdict of the online runs."""
    services.sync()
    runs, _ = services.reads.list_runs(RunFilter(suite="online"))
    return sorted(
        services.ledger.get_case(cid).opened.test_case.key
        for r in runs
        for cid in services.ledger.get_run(r.run_id).case_ids
        for e in services.ledger.events_of(cid)
        if isinstance(e, JudgeVerdictRecorded)
    )


def test_rules_are_events_with_their_author(store_services: Services) -> None:
    body = OnlineRuleInput(
        name="helpful",
        sample=0.5,
        where="agent=support-bot  and attribute.app.customer_tier=gold",
        judge=JUDGE,
        outcomes=["The agent answers the question asked"],
        max_cost_per_day_usd=2.5,
    )
    first = add_online_rule(store_services, "default", body, CTX)
    added = first.rule
    assert first.created
    again = add_online_rule(store_services, "default", body, Context(actor="retry"))
    assert (again.created, again.rule.added_by) == (False, "alice")  # a retry adds nothing
    assert added.where == "agent=support-bot and attribute.app.customer_tier=gold"
    assert (added.enabled, added.added_by, added.max_cost_per_day_usd) == (True, "alice", 2.5)
    with pytest.raises(ConflictError, match="exists already"):
        add_online_rule(store_services, "default", body.model_copy(update={"sample": 0.2}), CTX)

    off = disable_online_rule(
        store_services, "default", "helpful", "too noisy", Context(actor="bob")
    )
    assert (off.enabled, off.disabled_by, off.disabled_reason) == (False, "bob", "too noisy")
    listed = list_online_rules(store_services, "default", CTX)
    assert [(r.name, r.enabled) for r in listed.data] == [("helpful", False)]
    events = store_services.ledger.events_of(rules_id_for("default"))
    assert [type(e) for e in events] == [OnlineRuleAdded, OnlineRuleDisabled]
    assert [e.actor for e in events] == ["alice", "bob"]
    with pytest.raises(ConflictError, match="disabled"):  # a name is one rule's for good
        add_online_rule(store_services, "default", body, CTX)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "Bad Name"}, "name"),
        ({"sample": 1.5}, "sample"),
        ({"where": "colour=red"}, "where"),
        ({"judge": "gemini:pro"}, "judge"),
        ({"judge": "openai:"}, "judge"),
        ({"max_cost_per_day_usd": 0.0}, "max_cost_per_day"),
        ({"outcomes": ["  "]}, "outcome"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_field_and_nothing_is_stored(
    store_services: Services, change: dict[str, object], field: str
) -> None:
    body = {"name": "ok", "sample": 0.1, "judge": JUDGE, **change}
    before = store_services.ledger.position()
    with pytest.raises(InputError) as e:
        add_online_rule(store_services, "default", OnlineRuleInput.model_validate(body), CTX)
    assert e.value.field == field
    assert store_services.ledger.position() == before


def test_another_projects_token_neither_sees_nor_adds_nor_disables(
    store_services: Services,
) -> None:
    body = OnlineRuleInput(name="helpful", sample=1.0, judge=JUDGE)
    add_online_rule(store_services, "shop", body, CTX)
    other = Context(actor="token:other", project="other", scope=TokenScope.ADMIN)
    with pytest.raises(NotFoundError):
        list_online_rules(store_services, "shop", other)
    with pytest.raises(NotFoundError):
        add_online_rule(store_services, "shop", body.model_copy(update={"name": "x"}), other)
    with pytest.raises(NotFoundError):
        disable_online_rule(store_services, "shop", "helpful", None, other)
    writer = Context(actor="token:w", project="shop", scope=TokenScope.WRITE)
    with pytest.raises(PermissionDeniedError):
        add_online_rule(store_services, "shop", body.model_copy(update={"name": "y"}), writer)
    assert list_online_rules(store_services, "other", other).count == 0
    shop = list_online_rules(store_services, "shop", Context(project="shop"))
    assert [r.name for r in shop.data] == ["helpful"]


def test_a_sampled_rule_judges_exactly_the_traces_its_draw_takes(
    store_services: Services, judges: FakeJudges
) -> None:
    add_online_rule(
        store_services,
        "default",
        OnlineRuleInput(name="helpful", sample=0.5, where="agent=support-bot", judge=JUDGE),
        CTX,
    )
    add_online_rule(  # matches no trace: judges nothing
        store_services,
        "default",
        OnlineRuleInput(name="other-bot", sample=1.0, where="service=other-bot", judge=JUDGE),
        CTX,
    )
    traces = send_traces(store_services, 12)
    expected = expected_sample("helpful", traces, 0.5)
    assert 0 < len(expected) < 12
    judged, skipped = judged_traces(store_services, "helpful")
    assert (judged, skipped) == (expected, set())
    assert judged_traces(store_services, "other-bot") == (set(), set())
    # The verdicts are the cases' own, as for offline runs: one per judged trace.
    assert verdict_keys(store_services) == sorted(expected)
    assert judges.calls("anthropic") == len(expected)
    # Completing again records nothing and judges nothing again.
    complete_traces(store_services, CTX, now=datetime.now(UTC) + timedelta(seconds=60))
    run_queued(store_services)
    assert judges.calls("anthropic") == len(expected)
    # The rules and what they did are in the hash-chained log: it verifies, and every judged
    # case explains its verdict.
    assert verification.verify_log(store_services).ok
    runs, _ = store_services.reads.list_runs(RunFilter(suite="online"))
    judged_case = next(
        cid
        for r in runs
        for cid in store_services.ledger.get_run(r.run_id).case_ids
        if store_services.ledger.get_case(cid).opened.test_case.key in expected
    )
    assert audit.explain(store_services, judged_case) is not None


def test_the_daily_budget_stops_judging_and_records_the_skips(
    store_services: Services, judges: FakeJudges
) -> None:
    cap = 1.5 * PER_JUDGMENT_USD  # the second judgment starts under it, the third over it
    add_online_rule(
        store_services,
        "default",
        OnlineRuleInput(name="all", sample=1.0, judge=JUDGE, max_cost_per_day_usd=cap),
        CTX,
    )
    traces = send_traces(store_services, 5)
    judged, skipped = judged_traces(store_services, "all")
    assert (len(judged), len(skipped)) == (2, 3)
    assert judged | skipped == set(traces)
    assert judges.calls("anthropic") == 2
    day = store_services.ledger.clock().date()
    events = store_services.ledger.events_of(rule_day_id_for("default", "all", day))
    costs = [e.cost_usd for e in events if isinstance(e, OnlineCaseJudged)]
    assert costs == [pytest.approx(PER_JUDGMENT_USD)] * 2
    reasons = {e.reason for e in events if isinstance(e, OnlineCaseSkipped)}
    assert reasons == {
        f"budget: the day's cost {2 * PER_JUDGMENT_USD:.6f} USD reached max_cost_per_day "
        f"{cap:g} USD"
    }
    assert all(e.actor == "online-rule:all" for e in events)


def test_a_rule_filters_on_the_root_span_and_its_resource(
    store_services: Services, judges: FakeJudges
) -> None:
    # chat_trace's `app.customer_tier` is on the chat span (a child): not a root attribute.
    for name, where in (
        ("child-attribute", "attribute.app.customer_tier=gold"),
        ("resource-attribute", "attribute.service.version=1.2.0 and service=support-bot"),
        ("model", "model=gpt-4o-mini-2024-07-18 and version=1.2.0"),
    ):
        body = OnlineRuleInput(name=name, sample=1.0, where=where, judge=JUDGE)
        add_online_rule(store_services, "default", body, CTX)
    (trace,) = send_traces(store_services, 1)
    assert judged_traces(store_services, "child-attribute") == (set(), set())
    assert judged_traces(store_services, "resource-attribute") == ({trace}, set())
    assert judged_traces(store_services, "model") == ({trace}, set())


def test_a_disabled_rule_judges_no_more(store_services: Services, judges: FakeJudges) -> None:
    add_online_rule(
        store_services, "default", OnlineRuleInput(name="r", sample=1.0, judge=JUDGE), CTX
    )
    disable_online_rule(store_services, "default", "r", None, CTX)
    send_traces(store_services, 3)
    assert judged_traces(store_services, "r") == (set(), set())
    assert judges.calls() == 0
