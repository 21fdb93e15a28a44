"""The compare page reads no more than a page needs: the judge-error note of each run is counted
by the database (no score decoded) and follows every change of the run's cases; on SQLite and
PostgreSQL.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi.testclient import TestClient

from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import VerdictOverridden
from evaledger.domain.ledger import Context
from tests.api.test_web import client as client  # the fixture
from tests.api.test_web import field, html, imported
from tests.helpers import bundle, case, scores


def judge_error(key: str) -> dict[str, Any]:
    c = case(key, 4)
    c["verdicts"][0].update(metric_scores=[], raw_output="?", error="no JSON")
    return c


def test_the_judge_error_count_is_the_scores_own_and_follows_an_override(
    store_services: Services,
) -> None:
    data = bundle(key="errors")
    data["cases"] = [case("fine", 5), judge_error("bad-1"), judge_error("bad-2")]
    ops = Context(actor="ops")
    run_id = store_services.ledger.import_bundle(RunBundle.model_validate(data), ops).run_id
    store_services.sync()
    reads = store_services.reads

    def reference() -> int:
        return sum(1 for s in reads.case_score_objects(run_id) if s["judge_error"])

    assert reads.judge_error_count(run_id) == reference() == 2
    bad = next(s for s in reads.case_score_objects(run_id) if s["test_case_key"] == "bad-1")
    case_id = UUID(bad["case_id"])
    facts, _ = reads.case_score(case_id)
    body = {
        "verdict_id": facts.verdicts[0].verdict_id,
        "metric_scores": scores(3),
        "reason": "scored by hand",
    }
    store_services.ledger.record(case_id, VerdictOverridden, ops, body)
    store_services.sync()
    assert reads.judge_error_count(run_id) == reference() == 1


def test_the_compare_page_says_each_runs_judge_errors(client: TestClient) -> None:
    baseline = imported(client, [case("a", 4), judge_error("b")], key="base")
    candidate = imported(client, [case("a", 4), case("b", 4)], key="cand")
    page = html(client.get(f"/ui/compare?baseline={baseline}&candidate={candidate}"))
    assert field(page, "judge_error_policy.baseline") == (
        "baseline: 1 judge error counted as 0 (judge_errors: score_zero)"
    )
    assert 'data-field="judge_error_policy.candidate"' not in page
