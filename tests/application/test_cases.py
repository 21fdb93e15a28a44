"""The case use cases (`application/cases.py`), called directly on SQLite and PostgreSQL.

Each records one fact through the ledger's named command: the write scope, an idempotent
re-send, a validation error that stores nothing, and a case of a closed run.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from evaledger.api.bootstrap import Services
from evaledger.application import cases
from evaledger.domain.aggregates import case_id_for
from evaledger.domain.bundle import (
    BundleCase,
    BundleCheck,
    BundleOutcomes,
    BundleRun,
    BundleVerdict,
)
from evaledger.domain.errors import (
    ClosedRunError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from evaledger.domain.events import (
    CheckStatus,
    Claim,
    ClaimSupport,
    JudgeIdentity,
    MetricScore,
    OutcomeResult,
    ScoreLabel,
    TokenScope,
    Turn,
    VerdictOverridden,
    request_digest,
)
from evaledger.domain.ledger import Context, jsonable
from tests.helpers import bundle, case, event_count

ADMIN = Context(actor="ada")
WRITER = Context(actor="wes", scope=TokenScope.WRITE)
READER = Context(actor="rea", scope=TokenScope.READ)


def _run(services: Services) -> UUID:
    run = BundleRun.model_validate({**bundle()["run"], "status": "running"})
    return services.ledger.create_run(run, ADMIN).id


def _pending(services: Services, run_id: UUID, key: str) -> UUID:
    opened = BundleCase.model_validate({"test_case": {"key": key}, "status": "pending"})
    return services.ledger.open_case(run_id, opened, ADMIN).id


def _judged(services: Services, run_id: UUID, key: str) -> UUID:
    """A case with a 4-turn transcript, one verdict and a `match` named score."""
    data = case(key, 3)
    data["named_scores"] = [
        {"scorer": "match", "scores": [{"name": "match", "value": 0.0, "scale": "fraction"}]}
    ]
    return services.ledger.open_case(run_id, BundleCase.model_validate(data), ADMIN).id


def _verdict_id(services: Services, case_id: UUID) -> UUID:
    return next(iter(services.ledger.get_case(case_id).verdict_ids))


def _types(services: Services, case_id: UUID) -> list[str]:
    return [type(e).__name__ for e in services.ledger.events_of(case_id)]


TURNS = [Turn(role="user", content="Where is my parcel?"), Turn(role="assistant", content="Late.")]


def test_every_execution_fact_is_recorded_on_an_open_run(store_services: Services) -> None:
    s = store_services
    run_id = _run(s)
    case_id = _pending(s, run_id, "a")
    cases.record_transcript(s, case_id, WRITER, turns=TURNS, cost_usd=0.01)
    verdict = BundleVerdict(metric_scores=[MetricScore(metric="tool_routing", score=4)])
    written = cases.record_verdict(s, case_id, verdict, WRITER)
    cases.record_outcomes(
        s, case_id, BundleOutcomes(results=[OutcomeResult(statement="refund", passed=True)]), WRITER
    )
    claims = [Claim(claim="the parcel is late", support=ClaimSupport.SUPPORTED)]
    cases.record_claims(s, case_id, WRITER, claims=claims, judge=JudgeIdentity(model="m"))
    cases.record_check(s, case_id, BundleCheck(check="refund", status=CheckStatus.PASSED), WRITER)
    last = cases.record_execution_error(s, case_id, WRITER, message="agent crashed", kind="agent")
    assert written.id == case_id and written.events == 1 and last.position > written.position
    assert _types(s, case_id) == [
        "CaseOpened",
        "TranscriptRecorded",
        "JudgeVerdictRecorded",
        "OutcomeEvaluated",
        "ClaimsVerified",
        "StructuralCheckRecorded",
        "ExecutionErrored",
    ]
    other = _pending(s, run_id, "b")
    assert cases.cancel_execution(s, other, WRITER, reason="stopped").events == 1
    s.sync()
    shown = cases.show_case(s, case_id)
    assert shown.facts.case_id == case_id and shown.score.status == "errored"


def test_corrections_labels_and_flags(store_services: Services) -> None:
    s = store_services
    run_id = _run(s)
    case_id = _judged(s, run_id, "a")
    vid = _verdict_id(s, case_id)
    cases.override_verdict(s, case_id, ADMIN, verdict_id=vid, passed=True, reason="misread")
    s.sync()
    cases.override_verdict_metric(
        s,
        case_id,
        ADMIN,
        verdict_id=vid,
        reason="routing was right",
        metric_score=MetricScore(metric="tool_routing", score=5),
    )
    cases.override_score(s, case_id, ADMIN, score="match", value=1.0, reason="same answer")
    cases.invalidate_verdict(s, case_id, ADMIN, verdict_id=vid, reason="wrong rubric")
    cases.label_case(
        s,
        case_id,
        WRITER,
        passed=True,
        metric_scores=[MetricScore(metric="tool_routing", score=5)],
        named_scores=[ScoreLabel(score="match", value=1.0)],
        comment="fine",
    )
    cases.flag_case(s, case_id, WRITER, reason="look again")
    cases.unflag_case(s, case_id, WRITER)
    assert _types(s, case_id)[-7:] == [
        "VerdictOverridden",
        "VerdictOverridden",
        "ScoreOverridden",
        "VerdictInvalidated",
        "HumanLabelRecorded",
        "CaseFlagged",
        "CaseUnflagged",
    ]
    # The metric override kept the verdict's other metrics (metric and value only).
    override = s.ledger.events_of(case_id)[-6]
    assert isinstance(override, VerdictOverridden)
    scores = {m.metric: m.score for m in override.metric_scores or []}
    assert len(scores) == 8 and scores["tool_routing"] == 5


def test_a_same_body_resent_without_a_key_writes_nothing(store_services: Services) -> None:
    s = store_services
    run_id = _run(s)
    case_id = _judged(s, run_id, "a")
    check = BundleCheck(check="refund", status=CheckStatus.FAILED, evidence="no refund")
    first = cases.record_check(s, case_id, check, WRITER)
    again = cases.record_check(s, case_id, check, WRITER)
    assert (first.events, again.events) == (1, 0)
    stored = s.ledger.events_of(case_id)[-1]
    body = {"check": "refund", "status": "failed", "evidence": "no refund"}
    # The derived key's text is part of the stored log: it must never change.
    assert (
        stored.idempotency_key
        == f"auto:evaledger.case.structural_check_recorded:{request_digest(jsonable(body))}"
    )
    verdict = BundleVerdict(metric_scores=[MetricScore(metric="tool_routing", score=2)])
    assert cases.record_verdict(s, case_id, verdict, WRITER).events == 1
    assert cases.record_verdict(s, case_id, verdict, WRITER).events == 0
    vid = _verdict_id(s, case_id)
    for _ in range(2):
        cases.label_case(s, case_id, WRITER, passed=False, comment="no")
        cases.invalidate_verdict(s, case_id, ADMIN, verdict_id=vid, reason="duplicate")
    assert _types(s, case_id)[-2:] == ["HumanLabelRecorded", "VerdictInvalidated"]
    assert _types(s, case_id).count("VerdictInvalidated") == 1
    # A client's own key wins over the derived one: another body under it is a conflict.
    keyed = Context(actor="wes", scope=TokenScope.WRITE, idempotency_key="k1")
    assert cases.record_check(s, case_id, check, keyed).events == 1
    assert s.ledger.events_of(case_id)[-1].idempotency_key == "k1"


def test_a_flag_toggles_a_resent_flag_is_a_conflict(store_services: Services) -> None:
    s = store_services
    case_id = _judged(s, _run(s), "a")
    cases.flag_case(s, case_id, WRITER, reason="look again")
    with pytest.raises(ConflictError, match="already flagged"):
        cases.flag_case(s, case_id, WRITER, reason="look again")
    cases.unflag_case(s, case_id, WRITER, reason="seen")
    # The same flag after the unflag is a new act, not a replay of the first.
    assert cases.flag_case(s, case_id, WRITER, reason="look again").events == 1
    with pytest.raises(ConflictError, match="not flagged"):
        cases.unflag_case(s, _judged(s, _run(s), "b"), WRITER)


def test_a_refused_fact_stores_nothing(store_services: Services) -> None:
    s = store_services
    case_id = _judged(s, _run(s), "a")
    before = event_count(s)
    unknown = BundleVerdict(metric_scores=[MetricScore(metric="no_such_metric", score=3)])
    with pytest.raises(ValidationError, match="unknown metric"):
        cases.record_verdict(s, case_id, unknown, WRITER)
    with pytest.raises(ValidationError, match="needs a reason"):
        cases.override_score(s, case_id, ADMIN, score="match", value=1.0, reason="  ")
    with pytest.raises(ValidationError, match="no named score"):
        cases.override_score(s, case_id, ADMIN, score="accuracy", value=1.0, reason="why")
    with pytest.raises(ValidationError, match="needs a reason"):
        cases.flag_case(s, case_id, WRITER, reason="")
    with pytest.raises(ValidationError, match="no verdict"):
        cases.invalidate_verdict(s, case_id, ADMIN, verdict_id=UUID(int=1), reason="r")
    with pytest.raises(ValidationError, match="choose pass or fail"):
        cases.override_verdict_metric(
            s, case_id, ADMIN, verdict_id=_verdict_id(s, case_id), reason="r"
        )
    with pytest.raises(ConflictError, match="already has a transcript"):
        cases.record_transcript(s, case_id, WRITER, turns=TURNS)
    with pytest.raises(NotFoundError):
        cases.record_transcript(s, UUID(int=2), WRITER, turns=TURNS)
    assert event_count(s) == before


def test_scopes_corrections_need_admin_labels_need_write(store_services: Services) -> None:
    s = store_services
    case_id = _judged(s, _run(s), "a")
    vid = _verdict_id(s, case_id)
    before = event_count(s)
    with pytest.raises(PermissionDeniedError):
        cases.override_verdict(s, case_id, WRITER, verdict_id=vid, passed=True, reason="r")
    with pytest.raises(PermissionDeniedError):
        cases.override_score(s, case_id, WRITER, score="match", value=1.0, reason="r")
    with pytest.raises(PermissionDeniedError):
        cases.invalidate_verdict(s, case_id, WRITER, verdict_id=vid, reason="r")
    with pytest.raises(PermissionDeniedError):
        cases.label_case(s, case_id, READER, passed=True)
    with pytest.raises(PermissionDeniedError):
        cases.flag_case(s, case_id, READER, reason="r")
    other_project = Context(actor="x", project="elsewhere")
    with pytest.raises(NotFoundError):
        cases.record_check(
            s, case_id, BundleCheck(check="c", status=CheckStatus.PASSED), other_project
        )
    assert event_count(s) == before


def test_a_closed_run_takes_corrections_not_executions(store_services: Services) -> None:
    s = store_services
    run_id = _run(s)
    case_id = _judged(s, run_id, "a")
    pending = _pending(s, run_id, "b")
    s.ledger.complete_run(run_id, ADMIN)
    before = event_count(s)
    with pytest.raises(ClosedRunError):
        cases.record_transcript(s, pending, WRITER, turns=TURNS)
    with pytest.raises(ClosedRunError):
        cases.record_verdict(s, case_id, BundleVerdict(), WRITER)
    with pytest.raises(ClosedRunError):
        cases.record_check(s, case_id, BundleCheck(check="c", status=CheckStatus.PASSED), WRITER)
    with pytest.raises(ClosedRunError):
        cases.cancel_execution(s, pending, WRITER)
    assert event_count(s) == before
    vid = _verdict_id(s, case_id)
    assert (
        cases.override_verdict(s, case_id, ADMIN, verdict_id=vid, passed=True, reason="r").events
        == 1
    )
    assert cases.label_case(s, case_id, WRITER, passed=False).events == 1
    assert cases.flag_case(s, case_id, WRITER, reason="after the run").events == 1


def test_the_judge_runner_records_through_the_named_commands_on_a_closed_run(
    services: Services,
) -> None:
    """A judgement (the ledger's own judge) lands on a closed run; without it, refused."""
    run_id = _run(services)
    case_id = _judged(services, run_id, "a")
    services.ledger.complete_run(run_id, ADMIN)
    judge = JudgeIdentity(model="j")
    with pytest.raises(ClosedRunError):
        services.ledger.record_verdict(case_id, ADMIN, verdict_id=UUID(int=9), judge=judge)
    written = services.ledger.record_verdict(
        case_id, ADMIN, judgement=True, verdict_id=UUID(int=9), judge=judge, panel_id=None
    )
    assert written.events == 1 and services.ledger.events_of(case_id)[-1].idempotency_key is None
    assert case_id == case_id_for(run_id, "a", 0, "")
