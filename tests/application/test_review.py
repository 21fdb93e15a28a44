"""Review queues (`application/review.py`), called directly, on SQLite and PostgreSQL.

A queue over a rule, round-robin assignment, blind items, labels once per reviewer, items not
given to a reviewer and other projects' queues refused, agreement against a plain-Python
reference, adjudication, and the gold export in the dataset item format.
"""

from __future__ import annotations

import random
from collections import Counter
from itertools import combinations
from uuid import UUID

import pytest

from evaledger.api.bootstrap import Services
from evaledger.application import review
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import (
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from evaledger.domain.events import (
    ReviewItemAdjudicated,
    ReviewItemLabelled,
    ReviewItemsAssigned,
    ReviewItemSkipped,
    ReviewQueueCreated,
    TokenScope,
)
from evaledger.domain.ledger import Context
from evaledger.domain.review import round_robin
from evaledger.scoring.review_rule import ReviewFacts, RuleError, parse_rule
from tests.helpers import bundle, case, event_count

ADMIN = Context(actor="ada")


def who(
    name: str, project: str | None = "default", scope: TokenScope = TokenScope.WRITE
) -> Context:
    """A token's context: its actor as `actor_of` writes it."""
    return Context(actor=f"{name} (token t-{name})", project=project, scope=scope)


def _run(services: Services, n: int = 12, project: str = "default", key: str = "r1") -> UUID:
    data = bundle(status="completed", project=project, key=key)
    data["cases"] = [case(f"c{i:02d}", i % 6, outcomes=[]) for i in range(n)]
    data["cases"][0]["test_case"]["expected_outcomes"] = ["greets the user"]
    data["cases"][0]["test_case"]["tags"] = ["smoke"]
    result = services.ledger.ingest(RunBundle.model_validate(data), ADMIN)
    services.sync()
    return result.run_id


def _types(services: Services, queue: UUID) -> list[str]:
    return [type(e).__name__ for e in services.ledger.events_of(queue)]


# -- the rule ---------------------------------------------------------------------------------


def facts(**kw: object) -> ReviewFacts:
    base: dict[str, object] = {"key": "k", "status": "failed", "passed": False, "score": 40.0}
    return ReviewFacts(**{**base, **kw})  # type: ignore[arg-type]


def test_a_rule_takes_failed_cases_a_judge_scored_high() -> None:
    rule = parse_rule("status = failed and judge_score >= 4")
    assert rule.matches(facts(metric_scores={"a": 4.0, "b": 5.0}))
    assert not rule.matches(facts(metric_scores={"a": 3.0, "b": 4.0}))
    assert not rule.matches(facts(status="passed", metric_scores={"a": 5.0}))
    assert not rule.matches(facts(metric_scores={}))  # no score: the comparison is false
    assert parse_rule("status in (failed, errored) and not flagged").matches(facts())
    assert not parse_rule("flagged").matches(facts())
    assert parse_rule("metric.a ≤ 2 and key ~ k and passed = false").matches(
        facts(metric_scores={"a": 2.0})
    )
    assert parse_rule("").matches(facts())


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("status = broken", "unknown status"),
        ("score >= high", "is not a number"),
        ("colour = red", "unknown fact"),
        ("score", "needs an operator"),
        ("status >= failed", "status takes"),
        ("score >= nan", "finite"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_clause(text: str, named: str) -> None:
    with pytest.raises(RuleError, match=named):
        parse_rule(text)


def test_round_robin_gives_each_case_distinct_reviewers_evenly() -> None:
    ids = [UUID(int=i) for i in range(6)]
    given = round_robin(ids, ["a", "b", "c"], 2)
    assert [g.reviewers for g in given] == [
        ["a", "b"], ["c", "a"], ["b", "c"], ["a", "b"], ["c", "a"], ["b", "c"],
    ]  # fmt: skip
    assert Counter(r for g in given for r in g.reviewers) == {"a": 4, "b": 4, "c": 4}
    with pytest.raises(ValidationError, match="per_item"):
        round_robin(ids, ["a"], 2)


# -- queues on both stores --------------------------------------------------------------------


def test_a_queue_takes_the_rules_cases_and_records_every_act_with_its_author(
    store_services: Services,
) -> None:
    run_id = _run(store_services)
    made = review.create_review_queue(
        store_services, "failed-high", [run_id], who("lead"),
        where="status = failed and judge_score >= 2", reviewers=["alice", "bob"], per_item=2,
        blind=True,
    )  # fmt: skip
    view = review.queue_view(store_services, "failed-high", ADMIN)
    # scores i % 6: failed below 4; judge_score >= 2 → c02, c03, c08, c09
    assert [i.key for i in view.items] == ["c02", "c03", "c08", "c09"]
    assert made.cases == 4
    assert all(i.reviewers == ["alice", "bob"] for i in view.items)
    queue_id = made.written.id
    assert _types(store_services, queue_id) == ["ReviewQueueCreated", "ReviewItemsAssigned"]

    alice, bob = who("alice"), who("bob")
    first = review.next_item(store_services, "failed-high", alice)
    assert first == view.items[0].case_id
    review.label_item(store_services, "failed-high", first, alice, passed=True, score=4)
    review.skip_item(store_services, "failed-high", view.items[1].case_id, alice, reason="unsure")
    assert review.next_item(store_services, "failed-high", alice) == view.items[2].case_id
    with pytest.raises(ConflictError, match="already labelled"):
        review.label_item(store_services, "failed-high", first, alice, passed=False)
    review.label_item(store_services, "failed-high", first, bob, passed=True, score=4)
    events = store_services.ledger.events_of(queue_id)
    acts = [(type(e).__name__, e.actor) for e in events[2:]]
    assert acts == [
        ("ReviewItemLabelled", "alice (token t-alice)"),
        ("ReviewItemSkipped", "alice (token t-alice)"),
        ("ReviewItemLabelled", "bob (token t-bob)"),
    ]
    assert isinstance(events[0], ReviewQueueCreated) and events[0].actor == "lead (token t-lead)"
    assert isinstance(events[1], ReviewItemsAssigned) and events[1].mode == "round-robin"
    assert isinstance(events[2], ReviewItemLabelled) and events[2].reviewer == "alice"
    assert isinstance(events[3], ReviewItemSkipped)


def test_blind_hides_the_verdict_and_other_labels_until_the_reader_labelled(
    store_services: Services,
) -> None:
    run_id = _run(store_services)
    review.create_review_queue(
        store_services, "blind", [run_id], ADMIN, where="status = failed",
        reviewers=["alice", "bob"], per_item=2, blind=True,
    )  # fmt: skip
    alice, bob = who("alice"), who("bob")
    item = review.next_item(store_services, "blind", alice)
    assert item is not None
    review.label_item(store_services, "blind", item, bob, passed=False, score=1, comment="bad")
    before = review.review_item(store_services, "blind", item, alice)
    assert before.hidden and before.verdict is None and before.labels == [] and before.gold is None
    assert before.turns and before.key == "c00"  # the case itself is shown
    shown = review.queue_view(store_services, "blind", alice).items[0]
    assert not shown.visible and shown.labels == [] and shown.gold is None
    review.label_item(store_services, "blind", item, alice, passed=False, score=1)
    after = review.review_item(store_services, "blind", item, alice)
    assert not after.hidden
    assert after.verdict is not None and after.verdict.status == "failed"
    assert {lab.reviewer for lab in after.labels} == {"alice", "bob"}
    assert after.gold is not None and after.gold.how == "unanimous"
    # an admin who reviews nothing sees everything; a queue not blind hides nothing
    assert not review.review_item(store_services, "blind", item, ADMIN).hidden


def test_an_item_not_given_to_a_reviewer_is_not_found_and_cannot_be_labelled(
    store_services: Services,
) -> None:
    run_id = _run(store_services)
    review.create_review_queue(
        store_services, "q", [run_id], ADMIN, where="status = failed",
        reviewers=["alice", "bob"], per_item=1,
    )  # fmt: skip
    view = review.queue_view(store_services, "q", ADMIN)
    bobs = next(i.case_id for i in view.items if i.reviewers == ["bob"])
    before = event_count(store_services)
    with pytest.raises(NotFoundError, match=r"not assigned|no case"):
        review.review_item(store_services, "q", bobs, who("alice"))
    with pytest.raises(NotFoundError):
        review.label_item(store_services, "q", bobs, who("alice"), passed=True)
    with pytest.raises(NotFoundError):
        review.label_item(store_services, "q", bobs, who("mallory"), passed=True)
    with pytest.raises(PermissionDeniedError, match="assigning"):
        review.assign_items(store_services, "q", {bobs: ["alice"]}, who("bob"))
    with pytest.raises(PermissionDeniedError):
        review.label_item(store_services, "q", bobs, who("bob", scope=TokenScope.READ), passed=True)
    assert event_count(store_services) == before


def test_another_projects_token_meets_no_queue(store_services: Services) -> None:
    run_id = _run(store_services)
    other_run = _run(store_services, n=2, project="rival", key="r2")
    review.create_review_queue(
        store_services, "q", [run_id], ADMIN, reviewers=["alice"], where="status = failed"
    )
    intruder = who("alice", project="rival", scope=TokenScope.ADMIN)
    item = review.next_item(store_services, "q", who("alice"))
    assert item is not None
    before = event_count(store_services)
    for act in (
        lambda: review.queue_view(store_services, "q", intruder, project="default"),
        lambda: review.review_item(store_services, "q", item, intruder, project="default"),
        lambda: review.label_item(store_services, "q", item, intruder, passed=True),
        lambda: review.adjudicate_item(
            store_services, "q", item, intruder, passed=True, reason="mine", project="default"
        ),
        lambda: review.gold_items(store_services, "q", intruder, project="default"),
        # a queue over another project's run
        lambda: review.create_review_queue(
            store_services, "steal", [run_id], intruder, reviewers=["alice"]
        ),
    ):
        with pytest.raises(NotFoundError):
            act()
    assert review.list_review_queues(store_services, intruder) == []
    with pytest.raises(ValidationError, match="one project"):
        review.create_review_queue(
            store_services, "mix", [run_id, other_run], ADMIN, reviewers=["a"]
        )
    assert event_count(store_services) == before


def test_bad_input_is_refused_naming_the_field_and_stores_nothing(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _run(services)
    before = event_count(services)
    monkeypatch.setattr(review, "MAX_QUEUE_CASES", 11)
    with pytest.raises(ValidationError, match="took 12 cases; a queue holds at most 11"):
        review.create_review_queue(services, "q", [run_id], ADMIN, reviewers=["a"])
    monkeypatch.undo()
    for kwargs, field in (
        ({"where": "status = nope", "reviewers": ["a"]}, "where"),
        ({"reviewers": []}, "reviewers"),
        ({"reviewers": ["a"], "per_item": 2}, "per_item"),
    ):
        with pytest.raises(ValidationError) as caught:
            review.create_review_queue(services, "q", [run_id], ADMIN, **kwargs)
        assert caught.value.field == field
    assert event_count(services) == before
    review.create_review_queue(services, "q", [run_id], ADMIN, reviewers=["a"])
    with pytest.raises(ConflictError, match="already exists"):
        review.create_review_queue(services, "q", [run_id], ADMIN, reviewers=["a"])


# -- agreement --------------------------------------------------------------------------------


def kappa_reference(pairs: list[tuple[int, int]]) -> float:
    """Cohen's κ by hand."""
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    expected = sum(
        (sum(a == c for a, _ in pairs) / n) * (sum(b == c for _, b in pairs) / n) for c in (0, 1)
    )
    return (observed - expected) / (1 - expected)


def alpha_reference(units: list[list[int]]) -> float:
    """Krippendorff's α of binary values by hand: 1 − (n − 1)·o₀₁ / (n₀·n₁)."""
    units = [u for u in units if len(u) >= 2]
    o01 = sum(u.count(0) * u.count(1) / (len(u) - 1) for u in units)
    n0 = sum(u.count(0) for u in units)
    n1 = sum(u.count(1) for u in units)
    return 1 - (n0 + n1 - 1) * o01 / (n0 * n1)


@pytest.mark.parametrize("per_item", [2, 3])
def test_agreement_equals_a_plain_python_reference(store_services: Services, per_item: int) -> None:
    run_id = _run(store_services, n=14)
    names = ["alice", "bob", "carol"][:per_item]
    review.create_review_queue(
        store_services, "agree", [run_id], ADMIN, reviewers=names, per_item=per_item
    )
    view = review.queue_view(store_services, "agree", ADMIN)
    rng = random.Random(35)
    given: dict[UUID, dict[str, int]] = {}
    for item in view.items:
        truth = rng.random() < 0.5
        for reviewer in item.reviewers:
            value = truth if rng.random() < 0.8 else not truth
            given.setdefault(item.case_id, {})[reviewer] = int(value)
            review.label_item(store_services, "agree", item.case_id, who(reviewer), passed=value)
    measure = review.queue_view(store_services, "agree", ADMIN).agreement[0]
    assert measure.measure == "passed" and measure.items == 14
    assert measure.krippendorff_alpha is not None and measure.alpha_interval is not None
    units = [list(v.values()) for v in given.values()]
    assert measure.krippendorff_alpha == pytest.approx(alpha_reference(units))
    if per_item == 2:
        pairs = [(v["alice"], v["bob"]) for v in given.values()]
        assert measure.cohen_kappa == pytest.approx(kappa_reference(pairs))
        assert measure.kappa_interval is not None
    else:
        assert measure.cohen_kappa is None
        for pair in measure.pairs:
            a, b = pair.raters
            both = [(v[a], v[b]) for v in given.values()]
            assert pair.cohen_kappa == pytest.approx(kappa_reference(both))
    assert "bootstrap" in view.agreement_method
    assert len(list(combinations(names, 2))) == len(measure.pairs)


# -- adjudication and the gold export ---------------------------------------------------------


def test_adjudication_fixes_the_label_and_the_export_is_the_dataset_item_format(
    store_services: Services,
) -> None:
    run_id = _run(store_services)
    review.create_review_queue(
        store_services, "gold", [run_id], ADMIN, where="key ~ c0", reviewers=["alice", "bob"],
        per_item=2, blind=True, adjudicators=["judy"],
    )  # fmt: skip
    items = review.queue_view(store_services, "gold", ADMIN).items
    agree, split, open_ = items[0].case_id, items[1].case_id, items[2].case_id
    for reviewer in ("alice", "bob"):
        review.label_item(store_services, "gold", agree, who(reviewer), passed=True, score=5)
    review.label_item(store_services, "gold", split, who("alice"), passed=True)
    review.label_item(store_services, "gold", split, who("bob"), passed=False)
    review.label_item(store_services, "gold", open_, who("alice"), passed=True)
    with pytest.raises(PermissionDeniedError, match="adjudicat"):
        review.adjudicate_item(store_services, "gold", split, who("alice"), passed=True, reason="x")
    with pytest.raises(ValidationError, match="reason"):
        review.adjudicate_item(store_services, "gold", split, who("judy"), passed=False, reason="")
    review.adjudicate_item(
        store_services, "gold", split, who("judy"), passed=False, score=1.5, reason="policy 4"
    )
    adjudicated = store_services.ledger.events_of(items[1].case_id)  # the case is untouched
    assert not any(isinstance(e, ReviewItemAdjudicated) for e in adjudicated)
    lines = review.gold_items(store_services, "gold", ADMIN)
    assert [line["key"] for line in lines] == ["c00", "c01"]
    first = lines[0]
    assert set(first) == {"key", "input", "expected_outcomes", "tags", "metadata", "label"}
    assert first == {
        "key": "c00",
        "input": "hi",
        "expected_outcomes": ["greets the user"],
        "tags": ["smoke"],
        "metadata": {
            "run_id": str(run_id),
            "case_id": str(agree),
            "queue": "gold",
            "label_how": "unanimous",
        },
        "label": {"passed": True, "score": 5.0, "by": ["alice", "bob"]},
    }
    assert lines[1]["label"] == {"passed": False, "score": 1.5, "by": ["judy"]}
    # blind: the export shows bob nothing of an item he has not labelled
    assert review.gold_items(store_services, "gold", who("bob")) == lines
    review.skip_item(store_services, "gold", items[3].case_id, who("bob"))
    assert [line["key"] for line in review.gold_items(store_services, "gold", who("bob"))] == [
        "c00",
        "c01",
    ]


def test_an_explicit_assignment_gives_the_case_and_blinds_the_new_reviewer(
    store_services: Services,
) -> None:
    run_id = _run(store_services)
    review.create_review_queue(
        store_services, "q", [run_id], ADMIN, where="status = failed", reviewers=["alice"],
        blind=True,
    )  # fmt: skip
    item = review.next_item(store_services, "q", who("alice"))
    assert item is not None
    carol = who("carol")
    assert review.blind_hold(store_services, item, carol.actor, "default") is None
    written = review.assign_items(store_services, "q", {item: ["carol", "alice"]}, ADMIN)
    assert written.events == 1  # alice had it already: only carol is new
    events = store_services.ledger.events_of(written.id)
    assert isinstance(events[-1], ReviewItemsAssigned) and events[-1].mode == "explicit"
    assert [a.reviewers for a in events[-1].assignments] == [["carol"]]
    assert review.next_item(store_services, "q", carol) == item
    assert review.blind_hold(store_services, item, carol.actor, "default") == "q"
    assert review.blind_hold(store_services, run_id, carol.actor, "default") == "q"
    with pytest.raises(PermissionDeniedError, match="blind review"):
        review.check_not_blind(store_services, run_id, carol.actor, "default")
    review.label_item(store_services, "q", item, carol, passed=True)
    assert review.blind_hold(store_services, item, carol.actor, "default") is None
    assert review.blind_hold(store_services, run_id, carol.actor, "default") is None
    progress = {
        p.reviewer: p.labelled for p in review.queue_view(store_services, "q", ADMIN).progress
    }
    assert progress["carol"] == 1
