"""Pending cases stay pending everywhere; "no transcript" means no turns (issue 12, rules 1-2).

One bundle holds a case of every status, imported into SQLite and PostgreSQL: its scores, run
summary, rollup, grade and export are checked with exact values, and import → export → import
keeps every status.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import BundleCase, BundleCaseStatus, RunBundle
from evaledger.domain.export import bundle_to_json, export_bundle
from evaledger.domain.ledger import Context
from evaledger.scoring.grading import GradingSpec, GradingTest
from evaledger.scoring.models import CaseStatus, GateRule
from tests.helpers import bundle, case, event_count, scores

CTX = Context(actor="pending-tests")
KEYS = ["done", "empty", "crash", "stop", "queued", "later"]


def mixed_bundle() -> dict[str, Any]:
    """A completed run with a case of every status (`later` gives none: inferred pending)."""
    data = bundle()
    empty = case("empty", 5)  # a passing verdict, usage and cost, but no turns
    empty.update(transcript=[], usage={"prompt_tokens": 40, "completion_tokens": 2}, cost_usd=0.01)
    for v in empty["verdicts"]:
        v["metric_scores"] = scores(5)
    stop = case("stop")
    stop.update(status="canceled", verdicts=[])
    data["cases"] = [
        case("done", 5),
        empty,
        case("crash", status="errored"),
        stop,
        {"test_case": {"key": "queued", "name": "queued"}, "status": "pending"},
        {"test_case": {"key": "later", "name": "later"}},
    ]
    return data


def imported(s: Services) -> Any:
    result = s.ledger.import_bundle(RunBundle.model_validate(mixed_bundle()), CTX)
    s.sync(result.position)
    return result


def test_every_status_is_scored_summarised_and_exported_as_given(store_services: Services) -> None:
    s = store_services
    run_id = imported(s).run_id

    by_key = {c.test_case_key: c for c in s.reads.case_scores(run_id)}
    assert [by_key[k].status for k in KEYS] == [
        CaseStatus.PASSED,
        CaseStatus.FAILED,
        CaseStatus.ERRORED,
        CaseStatus.CANCELED,
        CaseStatus.PENDING,
        CaseStatus.PENDING,
    ]
    assert [by_key[k].passed for k in KEYS] == [True, False, False, None, None, None]
    empty = by_key["empty"]
    assert (empty.gate, empty.gate_reason, empty.errored) == (
        GateRule.NO_TRANSCRIPT,
        "the recorded transcript has no turns",
        False,
    )
    assert by_key["queued"].gate_reason == (
        "not run yet: no transcript, verdict, outcome, claim or check recorded"
    )

    agg = s.reads.summary(run_id).aggregate
    assert (agg.total_executions, agg.passed_count, agg.failed_count) == (6, 1, 1)
    assert (agg.error_count, agg.canceled_count) == (1, 1)
    assert (agg.coverage.pending, agg.coverage.canceled, agg.coverage.errored) == (2, 1, 1)
    assert agg.pass_rate == pytest.approx(1 / 6)
    assert agg.total_cost_usd == pytest.approx(0.01)

    exported = export_bundle(s.ledger, run_id)
    assert [c.status for c in exported.cases] == [
        BundleCaseStatus.COMPLETED,
        BundleCaseStatus.COMPLETED,
        BundleCaseStatus.ERRORED,
        BundleCaseStatus.CANCELED,
        BundleCaseStatus.PENDING,
        BundleCaseStatus.PENDING,
    ]
    assert [c["status"] for c in bundle_to_json(exported)["cases"]] == [
        "completed",
        "completed",
        "errored",
        "canceled",
        "pending",
        "pending",
    ]


def test_import_export_round_trip_keeps_every_status(services: Services, tmp_path: Path) -> None:
    run_id = imported(services).run_id
    before = event_count(services)
    first = bundle_to_json(export_bundle(services.ledger, run_id))
    # importing the export again changes nothing
    again = services.ledger.import_bundle(RunBundle.model_validate(first), CTX)
    assert (again.events, event_count(services)) == (0, before)

    other = build_services(Settings(db=f"sqlite:///{tmp_path / 'other.db'}"))
    try:
        moved = other.ledger.import_bundle(RunBundle.model_validate(copy.deepcopy(first)), CTX)
        other.sync(moved.position)
        second = bundle_to_json(export_bundle(other.ledger, moved.run_id))
        assert second == first
        statuses = {c.test_case_key: c.status for c in other.reads.case_scores(moved.run_id)}
        assert statuses == {
            "done": CaseStatus.PASSED,
            "empty": CaseStatus.FAILED,
            "crash": CaseStatus.ERRORED,
            "stop": CaseStatus.CANCELED,
            "queued": CaseStatus.PENDING,
            "later": CaseStatus.PENDING,
        }
    finally:
        other.close()


def test_pending_cases_are_left_out_of_rollups_and_grading_evidence(services: Services) -> None:
    run_id = imported(services).run_id
    summary = services.reports.rollup([run_id], [], []).summary
    # done 100 (its verdict), empty 100 (completed: keeps its score though failed), crash 0
    assert (summary.results, summary.pending, summary.canceled) == (3, 2, 1)
    assert (summary.passed, summary.failed, summary.errored) == (1, 1, 1)
    assert summary.score == pytest.approx(200 / 3)

    grading = GradingSpec(
        categories={"ALL": 1.0},
        tests={k: GradingTest(category="ALL") for k in KEYS},
        min_evidence=1,
    )
    graded = {t.test_id: t for t in services.reports.grade(run_id, grading).test_results}
    assert [(graded[k].evidence, graded[k].pending) for k in KEYS] == [
        (1, 0),
        (1, 0),
        (0, 0),
        (0, 0),
        (0, 1),
        (0, 1),
    ]
    assert (graded["queued"].status.value, graded["queued"].score) == ("insufficient", None)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"transcript": [{"role": "user", "content": "hi"}]}, "transcript"),
        ({"usage": {"prompt_tokens": 1, "completion_tokens": 1}}, "usage"),
        ({"cost_usd": 0.5}, "cost_usd"),
        ({"verdicts": [{"metric_scores": []}]}, "verdicts"),
        ({"checks": [{"check": "hook", "status": "passed"}]}, "checks"),
    ],
)
def test_a_pending_case_carries_no_execution_facts(extra: dict[str, Any], field: str) -> None:
    body = {"test_case": {"key": "k"}, "status": "pending", **extra}
    with pytest.raises(ValidationError, match=f"{field}: a pending case"):
        BundleCase.model_validate(body)


def test_running_is_not_a_case_status() -> None:
    with pytest.raises(ValidationError, match="status"):
        BundleCase.model_validate({"test_case": {"key": "k"}, "status": "running"})


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({}, BundleCaseStatus.PENDING),
        ({"cost_usd": 0.1}, BundleCaseStatus.COMPLETED),
        ({"claims": [{"claim": "x", "support": "supported"}]}, BundleCaseStatus.COMPLETED),
        ({"error": {"message": "boom"}}, BundleCaseStatus.ERRORED),
        ({"status": "completed"}, BundleCaseStatus.COMPLETED),
    ],
)
def test_an_absent_status_is_inferred_from_the_content(
    body: dict[str, Any], status: BundleCaseStatus
) -> None:
    assert BundleCase.model_validate({"test_case": {"key": "k"}, **body}).status is status


# ---------------------------------------------------------------------------------------------
# Over HTTP


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


def test_a_case_opened_over_http_stays_pending_until_it_has_run(
    client: TestClient, services: Services
) -> None:
    run = {**bundle()["run"], "key": "http-pending", "status": "running"}
    run_id = client.post("/runs", json=run).json()["id"]
    opened = client.post(f"/runs/{run_id}/cases", json={"test_case": {"key": "k"}})
    assert opened.status_code == 201, opened.text
    case_id = opened.json()["id"]

    def score() -> tuple[str, bool | None]:
        body = client.get(f"/cases/{case_id}").json()["score"]
        return body["status"], body["passed"]

    assert score() == ("pending", None)
    assert client.get(f"/runs/{run_id}").json()["aggregate"]["failed_count"] == 0
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert client.post(f"/cases/{case_id}/transcript", json={"turns": turns}).status_code == 201
    assert score() == ("pending", None)  # run, not judged yet
    verdict = {"metric_scores": scores(5)}
    assert client.post(f"/cases/{case_id}/verdicts", json=verdict).status_code == 201
    assert score() == ("passed", True)

    bad = client.post(
        f"/runs/{run_id}/cases",
        json={"test_case": {"key": "j"}, "status": "pending", "cost_usd": 0.2},
    )
    assert bad.status_code == 422
    assert "cost_usd: a pending case" in bad.json()["detail"]
