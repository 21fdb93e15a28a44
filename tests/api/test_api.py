"""HTTP flows through FastAPI's TestClient on `create_app(services=...)`.

Given / when / then through the API only: a run is created, cases are opened and fed facts one
endpoint at a time and in a batch, the run completes, and the reads, the rescore, the human
corrections, the audit history and idempotent re-sends behave as DESIGN §3, §6 and §8 say.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from tests.helpers import bundle, case, event_count, scores

ALICE = {"X-Actor": "alice"}
AUDITOR = {"X-Actor": "auditor"}
BUILTIN_METRICS = [
    "tool_routing",
    "parameter_extraction",
    "result_interpretation",
    "grounding_fidelity",
    "instruction_compliance",
    "information_gathering",
    "conversation_management",
    "response_delivery",
    "task_completion",
]
TURNS = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello", "latency_ms": 400},
    {"role": "user", "content": "bye"},
    {"role": "assistant", "content": "bye", "latency_ms": 600},
]


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


def ok(response: Any, status: int = 201) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def run_body(key: str, **fields: Any) -> dict[str, Any]:
    return {**bundle()["run"], "key": key, "status": "running", **fields}


def verdict_id_of(client: TestClient, case_id: str, index: int = 0) -> str:
    events = ok(client.get(f"/cases/{case_id}/history"), 200)["events"]
    verdicts = [e for e in events if e["type"] == "JudgeVerdictRecorded"]
    return str(verdicts[index]["payload"]["verdict_id"])


class Flow:
    """A run fed through every write endpoint (ids of what was written)."""

    def __init__(self, client: TestClient, services: Services) -> None:
        self.client = client
        self.services = services
        self.run_id = ""
        self.cases: dict[str, str] = {}

    def build(self) -> Flow:
        c = self.client
        created = ok(c.post("/runs", json=run_body("api-flow"), headers=ALICE))
        assert (created["position"], created["events"]) == (1, 1)
        self.run_id = created["id"]
        assert ok(c.post(f"/runs/{self.run_id}/start", headers=ALICE), 200)["events"] == 1

        # Case "a": opened bare, then every kind of fact one endpoint at a time.
        opened = ok(
            c.post(
                f"/runs/{self.run_id}/cases",
                json={"test_case": {"key": "a", "expected_outcomes": ["greets"]}},
                headers=ALICE,
            )
        )
        assert opened["events"] == 2  # CaseOpened + the run's CasesAttached
        a = self.cases["a"] = opened["id"]
        facts = [
            ("transcript", {"turns": TURNS, "usage": {"prompt_tokens": 100, "completion_tokens": 20}, "cost_usd": 0.002}),
            ("verdicts", {"judge": {"provider": "anthropic", "model": "claude"}, "metric_scores": scores(4), "prompt": "p", "raw_output": "{}"}),
            ("outcomes", {"results": [{"statement": "greets", "passed": True}]}),
            ("claims", {"claims": [{"claim": "x", "support": "supported"}, {"claim": "y", "support": "contradicted"}]}),
            ("checks", {"check": "refund_hook", "status": "passed", "evidence": "ok"}),
        ]  # fmt: skip
        for endpoint, body in facts:
            written = ok(c.post(f"/cases/{a}/{endpoint}", json=body, headers=ALICE))
            assert (written["id"], written["events"]) == (a, 1), endpoint
            # Read-your-writes: the position returned is already reflected by the next GET.
            assert ok(c.get("/health"), 200)["log_position"] == written["position"]

        # Case "b" errors, case "c" is canceled.
        b = self.cases["b"] = ok(
            c.post(f"/runs/{self.run_id}/cases", json={"test_case": {"key": "b"}})
        )["id"]
        assert (
            ok(c.post(f"/cases/{b}/error", json={"message": "timeout", "kind": "timeout"}))[
                "events"
            ]
            == 1
        )
        cc = self.cases["c"] = ok(
            c.post(f"/runs/{self.run_id}/cases", json={"test_case": {"key": "c"}})
        )["id"]
        assert ok(c.post(f"/cases/{cc}/cancel"))["events"] == 1  # fmt: skip

        # Four more cases in one call (one transaction).
        batch = [
            case("b1", 5),
            case("b2", 2),
            case("b3", 3, outcomes=[{"statement": "s", "passed": True}]),
            case("b4", 4),
        ]
        before = event_count(self.services)
        written = ok(c.post(f"/runs/{self.run_id}/cases/batch", json=batch, headers=ALICE))
        assert len(written["case_ids"]) == 4
        # 4 x (opened, transcript, verdict) + one CasesAttached.
        assert written["events"] == event_count(self.services) - before == 13
        self.cases.update(zip(["b1", "b2", "b3", "b4"], written["case_ids"], strict=True))
        # A replay writes nothing: 200, not 201.
        again = ok(c.post(f"/runs/{self.run_id}/cases/batch", json=batch, headers=ALICE), 200)
        assert (again["case_ids"], again["events"]) == (written["case_ids"], 0)

        assert ok(c.post(f"/runs/{self.run_id}/complete", headers=ALICE), 200)["events"] == 1
        return self


@pytest.fixture
def flow(client: TestClient, services: Services) -> Flow:
    return Flow(client, services).build()


AGGREGATE = {
    "unique_test_case_count": 7,
    "total_executions": 7,
    "passed_count": 4,  # a (outcomes), b1 (100), b3 (outcomes, 60), b4 (80)
    "failed_count": 1,  # b2 (40)
    "error_count": 1,  # b
    "canceled_count": 1,  # c
    "pass_rate": 4 / 7,  # errored and canceled stay in the denominator
    "avg_overall_score": 72.0,  # (80 + 100 + 40 + 60 + 80) / 5 cases with a verdict
    "weighted_metrics_score_pct": 72.0,
    "metrics_pass_threshold": 80.0,
    "metrics_passed": False,
    "cases_pass_rate_pct": 400 / 7,
    "cases_pass_threshold": 100.0,
    "cases_passed": False,
    "latency_p50_ms": 600.0,  # per-case p50s: a 500, four batch cases 600
    "latency_p95_ms": None,  # fewer than 20 cases
    "latency_max_ms": 600.0,
    "latency_avg_ms": 580.0,
    "total_prompt_tokens": 100,
    "total_completion_tokens": 20,
    "total_tokens": 120,
    "total_cost_usd": 0.002,
    "per_metric_means": dict.fromkeys(BUILTIN_METRICS[:8], 3.6),  # (4+5+2+3+4)/5
    "coverage": {"scored": 5, "unscored": 0, "errored": 1, "pending": 0, "canceled": 1},
}


def test_the_run_reads_back_with_its_aggregate(client: TestClient, flow: Flow) -> None:
    run = ok(client.get(f"/runs/{flow.run_id}"), 200)
    assert (run["run_key"], run["status"], run["case_count"]) == ("api-flow", "completed", 7)
    assert run["spec_id"].startswith("spec-")
    assert {k: run["aggregate"][k] for k in AGGREGATE} == AGGREGATE


def test_the_cases_of_the_run(client: TestClient, flow: Flow) -> None:
    listed = ok(client.get(f"/runs/{flow.run_id}/cases"), 200)
    assert listed["count"] == 7
    rows = [
        (
            r["test_case_key"],
            r["status"],
            r["overall_score"],
            r["passed"],
            r["errored"],
            r["canceled"],
            r["gate"],
        )
        for r in listed["data"]
    ]
    assert rows == [
        ("a", "passed", 80.0, True, False, False, "expected_outcomes"),
        ("b", "errored", None, False, True, False, "execution_error"),
        ("c", "canceled", None, None, False, True, "canceled"),
        ("b1", "passed", 100.0, True, False, False, "score_threshold"),
        ("b2", "failed", 40.0, False, False, False, "score_threshold"),
        ("b3", "passed", 60.0, True, False, False, "expected_outcomes"),
        ("b4", "passed", 80.0, True, False, False, "score_threshold"),
    ]
    a = listed["data"][0]
    assert (a["hallucinations"], a["claims_total"], a["claims_supported"]) == (1, 2, 1)
    assert (a["checks_passed"], a["latency_p50_ms"], a["cost_usd"]) == (1, 500, 0.002)
    assert [r["case_id"] for r in listed["data"]] == list(flow.cases.values())


def test_a_closed_run_takes_no_more_facts_but_corrections(client: TestClient, flow: Flow) -> None:
    before = event_count(flow.services)
    r = client.post(f"/cases/{flow.cases['b2']}/claims", json={"claims": []})
    assert (r.status_code, r.json()["code"]) == (409, "run_closed")
    r = client.post(f"/runs/{flow.run_id}/cases", json={"test_case": {"key": "late"}})
    assert (r.status_code, r.json()["code"]) == (409, "run_closed")
    assert event_count(flow.services) == before


def test_available_metrics_and_a_custom_one(client: TestClient, services: Services) -> None:
    listed = ok(client.get("/config/available-metrics"), 200)
    assert listed["count"] == 9 == len(listed["data"])
    assert [m["name"] for m in listed["data"]] == BUILTIN_METRICS
    defaults = {m["name"]: m["default_weight"] for m in listed["data"]}
    assert defaults == {
        "tool_routing": 0.15,
        "parameter_extraction": 0.15,
        "result_interpretation": 0.15,
        "grounding_fidelity": 0.125,
        "instruction_compliance": 0.125,
        "information_gathering": 0.10,
        "conversation_management": 0.10,
        "response_delivery": 0.10,
        "task_completion": 0.0,
    }
    empathy = {
        "name": "empathy",
        "display_name": "Empathy",
        "description": "Acknowledges the customer's situation.",
        "tier": "delivery",
        "default_weight": 0.05,
        "score_type": "scored",
        "rubric": "5: warm\n0: cold",
        "include_in_defaults": False,
    }
    assert ok(client.post("/config/metrics", json=empathy, headers=ALICE))["events"] == 1
    listed = ok(client.get("/config/available-metrics"), 200)
    assert listed["count"] == 10
    assert listed["data"][-1] == empathy
    assert ok(client.post("/config/metrics", json=empathy), 200)["events"] == 0
    r = client.post("/config/metrics", json={**empathy, "default_weight": 0.5})
    assert (r.status_code, r.json()["code"]) == (409, "conflict")
    r = client.post("/config/metrics", json={**empathy, "name": "tool_routing"})
    assert r.status_code == 409
    assert ok(client.get("/config/available-metrics?project=other"), 200)["count"] == 9

    # A run can select it, and a verdict can score it.
    config = {"judge": {"metrics": [{"metric": "empathy"}, {"metric": "tool_routing"}]}}
    run_id = ok(client.post("/runs", json=run_body("empathic", config=config)))["id"]
    verdict = {
        "metric_scores": [
            {"metric": "empathy", "score": 5},
            {"metric": "tool_routing", "score": 0},
        ]
    }
    body = {**case("e"), "verdicts": [verdict]}
    case_id = ok(client.post(f"/runs/{run_id}/cases", json=body))["id"]
    # Weights 0.05 and 0.15 renormalise to 0.25 and 0.75: 100 × (1 × .25 + 0 × .75).
    assert ok(client.get(f"/cases/{case_id}"), 200)["score"]["overall_score"] == 25.0


def test_rescore_returns_old_and_new_and_writes_no_event(
    client: TestClient, flow: Flow, services: Services
) -> None:
    before = event_count(services)
    result = ok(
        client.post(f"/runs/{flow.run_id}/rescore", json={"judge": {"pass_threshold": 90}}), 200
    )
    assert event_count(services) == before
    own = ok(client.get(f"/runs/{flow.run_id}"), 200)["spec_id"]
    assert result["before"]["spec_id"] == own != result["spec_id"] == result["after"]["spec_id"]
    assert result["before"]["aggregate"]["passed_count"] == 4
    after = result["after"]["aggregate"]
    assert (after["passed_count"], after["failed_count"], after["pass_rate"]) == (3, 2, 3 / 7)
    assert after["weighted_metrics_score_pct"] == 72.0
    assert result["changed_cases"] == [
        {
            "case_id": flow.cases["b4"],
            "test_case_key": "b4",
            "repetition": 0,
            "before": {"overall_score": 80.0, "passed": True, "status": "passed"},
            "after": {"overall_score": 80.0, "passed": False, "status": "failed"},
        }
    ]
    # The run's own view is unchanged.
    assert ok(client.get(f"/runs/{flow.run_id}"), 200)["aggregate"]["passed_count"] == 4
    r = client.post(f"/runs/{flow.run_id}/rescore", json={"judge": {"pass_threshold": 900}})
    assert r.status_code == 422 and "pass_threshold" in r.json()["detail"]
    assert event_count(services) == before


def test_overrides_and_invalidations_change_the_score_and_keep_the_original(
    client: TestClient, flow: Flow
) -> None:
    b1, b2 = flow.cases["b1"], flow.cases["b2"]
    body = {
        "verdict_id": verdict_id_of(client, b2),
        "metric_scores": scores(5),
        "reason": "misread",
    }
    assert ok(client.post(f"/cases/{b2}/overrides", json=body, headers=AUDITOR))["events"] == 1
    score = ok(client.get(f"/cases/{b2}"), 200)["score"]
    assert (score["status"], score["overall_score"], score["passed"]) == ("passed", 100.0, True)

    body = {"verdict_id": verdict_id_of(client, b1), "reason": "judge saw another transcript"}
    assert ok(client.post(f"/cases/{b1}/invalidations", json=body, headers=AUDITOR))["events"] == 1
    score = ok(client.get(f"/cases/{b1}"), 200)["score"]
    assert (score["status"], score["overall_score"], score["passed"]) == ("pending", None, None)

    aggregate = ok(client.get(f"/runs/{flow.run_id}"), 200)["aggregate"]
    assert (aggregate["passed_count"], aggregate["failed_count"]) == (4, 0)
    # a 80, b2 100, b3 60, b4 80: exactly on the 80.0 metrics threshold passes.
    assert (aggregate["weighted_metrics_score_pct"], aggregate["metrics_passed"]) == (80.0, True)
    assert aggregate["coverage"]["pending"] == 1

    unknown = {"verdict_id": "00000000-0000-0000-0000-000000000000", "reason": "x"}
    r = client.post(f"/cases/{b2}/invalidations", json=unknown)
    assert (r.status_code, r.json()["field"]) == (422, "verdict_id")


def test_history_shows_every_event_and_earlier_states(client: TestClient, flow: Flow) -> None:
    a = ok(client.get(f"/cases/{flow.cases['a']}/history"), 200)
    assert [(e["version"], e["type"], e["actor"]) for e in a["events"]] == [
        (1, "CaseOpened", "alice"),
        (2, "TranscriptRecorded", "alice"),
        (3, "JudgeVerdictRecorded", "alice"),
        (4, "OutcomeEvaluated", "alice"),
        (5, "ClaimsVerified", "alice"),
        (6, "StructuralCheckRecorded", "alice"),
    ]
    times = [datetime.fromisoformat(e["timestamp"]) for e in a["events"]]
    assert all(t.tzinfo is not None and t.utcoffset().total_seconds() == 0 for t in times)  # type: ignore[union-attr]
    assert times == sorted(times)
    assert [e["prev_hash"] for e in a["events"][1:]] == [e["hash"] for e in a["events"][:-1]]
    assert a["events"][2]["payload"]["raw_output"] == "{}"
    assert a["events"][2]["topic"] == "evaledger.case.judge_verdict_recorded/v1"

    # At version 3 the case had a verdict but no outcomes: the score gate decided.
    v3 = ok(client.get(f"/cases/{flow.cases['a']}/history", params={"version": 3}), 200)
    assert (v3["version"], v3["latest_version"], len(v3["events"])) == (3, 6, 6)
    assert (v3["state"]["score"]["gate"], v3["state"]["score"]["passed"]) == (
        "score_threshold",
        True,
    )
    assert a["state"]["score"]["gate"] == "expected_outcomes"
    v1 = ok(client.get(f"/cases/{flow.cases['a']}/history", params={"version": 1}), 200)
    # At version 1 only CaseOpened: not run yet, so pending (never failed).
    assert (v1["state"]["score"]["status"], v1["state"]["score"]["passed"]) == ("pending", None)

    b2 = flow.cases["b2"]
    body = {
        "verdict_id": verdict_id_of(client, b2),
        "metric_scores": scores(5),
        "reason": "misread",
    }
    ok(client.post(f"/cases/{b2}/overrides", json=body, headers=AUDITOR))
    history = ok(client.get(f"/cases/{b2}/history"), 200)
    assert [(e["type"], e["actor"]) for e in history["events"]] == [
        ("CaseOpened", "alice"),
        ("TranscriptRecorded", "alice"),
        ("JudgeVerdictRecorded", "alice"),
        ("VerdictOverridden", "auditor"),
    ]
    assert history["events"][-1]["payload"]["reason"] == "misread"
    before = ok(client.get(f"/cases/{b2}/history", params={"version": 3}), 200)["state"]["score"]
    assert (before["overall_score"], before["passed"]) == (40.0, False)
    assert history["state"]["score"]["overall_score"] == 100.0

    r = client.get(f"/cases/{b2}/history", params={"version": 5})
    assert (r.status_code, r.json()["field"]) == (422, "version")
    run = ok(client.get(f"/runs/{flow.run_id}/history"), 200)
    assert [e["type"] for e in run["events"]] == [
        "RunCreated",
        "RunStarted",
        "CasesAttached",
        "CasesAttached",
        "CasesAttached",
        "CasesAttached",
        "RunCompleted",
    ]


# ---------------------------------------------------------------------------------------------
# GET /runs: filters, pagination, newest first

RUNS = {
    # key: (project, suite, agent, labels, created_at)
    "r1": ("p1", "s1", "a1", {"env": "prod"}, "2026-01-01T00:00:00Z"),
    "r2": ("p1", "s2", "a1", {"env": "dev"}, "2026-02-01T00:00:00Z"),
    "r5": ("p1", "s2", "a2", {"env": "dev"}, "2026-02-15T09:00:00+05:00"),  # 04:00 UTC
    "r3": ("p1", "s1", "a2", {"env": "prod"}, "2026-03-01T00:00:00Z"),
    "r4": ("p2", "s1", "a1", {}, "2026-04-01T00:00:00Z"),
}


@pytest.fixture
def many_runs(client: TestClient) -> TestClient:
    for key, (project, suite, agent, labels, created_at) in RUNS.items():
        body = run_body(
            key,
            project=project,
            suite={"name": suite, "version": 1},
            agent={"name": agent},
            labels=labels,
            created_at=created_at,
        )
        run_id = ok(client.post("/runs", json=body))["id"]
        if key == "r3":
            ok(client.post(f"/runs/{run_id}/complete"), 200)
        if key == "r4":
            ok(client.post(f"/runs/{run_id}/cancel", json={"reason": "obsolete"}), 200)
    return client


def keys(client: TestClient, **params: Any) -> tuple[list[str], int]:
    page = ok(client.get("/runs", params=params), 200)
    assert page["count"] == len(page["data"])
    return [r["run_key"] for r in page["data"]], page["total"]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, ["r4", "r3", "r5", "r2", "r1"]),
        ({"project": "p1"}, ["r3", "r5", "r2", "r1"]),
        ({"suite": "s1"}, ["r4", "r3", "r1"]),
        ({"agent": "a1"}, ["r4", "r2", "r1"]),
        ({"status": "completed"}, ["r3"]),
        ({"status": "canceled"}, ["r4"]),
        ({"status": "created"}, ["r5", "r2", "r1"]),
        ({"label": "env=prod"}, ["r3", "r1"]),
        ({"label": "env=nowhere"}, []),
        ({"project": "p1", "agent": "a1"}, ["r2", "r1"]),
        ({"created_from": "2026-02-01T00:00:00Z", "created_to": "2026-03-01T00:00:00Z"}, ["r3", "r5", "r2"]),
        ({"created_from": "2026-02-15T04:30:00+00:00"}, ["r4", "r3"]),
        ({"created_to": "2026-02-15T09:00:00+05:00"}, ["r5", "r2", "r1"]),  # inclusive
        ({"created_to": "2026-02-15T08:59:59+05:00"}, ["r2", "r1"]),
    ],
)  # fmt: skip
def test_list_runs_filters_newest_first(
    many_runs: TestClient, params: dict[str, Any], expected: list[str]
) -> None:
    assert keys(many_runs, **params) == (expected, len(expected))


def test_list_runs_paginates(many_runs: TestClient) -> None:
    assert keys(many_runs, limit=2) == (["r4", "r3"], 5)
    assert keys(many_runs, limit=2, offset=2) == (["r5", "r2"], 5)
    assert keys(many_runs, limit=2, offset=4) == (["r1"], 5)
    assert keys(many_runs, offset=5) == ([], 5)
    assert keys(many_runs, label="env=dev", limit=1, offset=1) == (["r2"], 2)
    page = ok(many_runs.get("/runs", params={"limit": 2, "offset": 2}), 200)
    assert (page["limit"], page["offset"]) == (2, 2)
    r = many_runs.get("/runs", params={"limit": 0})
    assert (r.status_code, r.json()["code"]) == (422, "invalid")


def test_a_listed_run_carries_its_snapshot(many_runs: TestClient) -> None:
    page = ok(many_runs.get("/runs", params={"status": "canceled"}), 200)
    (r4,) = page["data"]
    assert (r4["project"], r4["suite"]["name"], r4["agent"]["name"]) == ("p2", "s1", "a1")
    assert (r4["reason"], r4["completed_at"], r4["case_count"]) == ("obsolete", None, 0)
    assert r4["created_at"] == "2026-04-01T00:00:00+00:00"


# ---------------------------------------------------------------------------------------------
# Idempotency


@pytest.fixture
def open_case(client: TestClient) -> tuple[str, str]:
    run_id = ok(client.post("/runs", json=run_body("idem")))["id"]
    case_id = ok(client.post(f"/runs/{run_id}/cases", json={**case("a"), "verdicts": []}))["id"]
    return run_id, case_id


def test_the_same_post_with_the_same_key_writes_once(
    client: TestClient, services: Services, open_case: tuple[str, str]
) -> None:
    run_id, case_id = open_case
    key = {"Idempotency-Key": "verdict-1", **ALICE}
    verdict = {"metric_scores": scores(3), "judge": {"provider": "anthropic"}}
    first = ok(client.post(f"/cases/{case_id}/verdicts", json=verdict, headers=key))
    count = event_count(services)
    second = ok(client.post(f"/cases/{case_id}/verdicts", json=verdict, headers=key), 200)
    assert (first["events"], second["events"]) == (1, 0)
    assert second["position"] == first["position"]
    assert event_count(services) == count
    history = ok(client.get(f"/cases/{case_id}/history"), 200)["events"]
    assert [e["idempotency_key"] for e in history][-1] == "verdict-1"
    assert [e["type"] for e in history].count("JudgeVerdictRecorded") == 1

    cancel = {"Idempotency-Key": "cancel-1"}
    assert ok(client.post(f"/runs/{run_id}/cancel", json={}, headers=cancel), 200)["events"] == 1
    assert ok(client.post(f"/runs/{run_id}/cancel", json={}, headers=cancel), 200)["events"] == 0


def test_the_same_key_with_another_body_is_a_409(
    client: TestClient, services: Services, open_case: tuple[str, str]
) -> None:
    _, case_id = open_case
    key = {"Idempotency-Key": "verdict-1"}
    ok(client.post(f"/cases/{case_id}/verdicts", json={"metric_scores": scores(3)}, headers=key))
    count = event_count(services)
    r = client.post(f"/cases/{case_id}/verdicts", json={"metric_scores": scores(4)}, headers=key)
    assert r.status_code == 409
    assert r.json() == {
        "detail": "idempotency key 'verdict-1' was used before with a different body",
        "code": "idempotency_conflict",
        "status": 409,
    }
    assert event_count(services) == count


@pytest.mark.parametrize("endpoint", ["runs", "cases"])
def test_the_same_key_with_another_body_is_a_409_when_creating(
    client: TestClient, services: Services, open_case: tuple[str, str], endpoint: str
) -> None:
    run_id, _ = open_case
    key = {"Idempotency-Key": f"create-{endpoint}"}
    if endpoint == "runs":
        url, first, other = "/runs", run_body("k1"), run_body("k2")
    else:
        url, first, other = f"/runs/{run_id}/cases", case("x"), case("y")
    ok(client.post(url, json=first, headers=key))
    count = event_count(services)
    r = client.post(url, json=other, headers=key)
    assert (r.status_code, r.json().get("code")) == (409, "idempotency_conflict")
    assert event_count(services) == count


def test_nan_in_free_form_judge_params_is_refused(
    client: TestClient, services: Services, open_case: tuple[str, str]
) -> None:
    _, case_id = open_case
    count = event_count(services)
    raw = b'{"metric_scores": [{"metric": "tool_routing", "score": 3}], "judge": {"params": {"t": NaN}}}'
    r = client.post(
        f"/cases/{case_id}/verdicts", content=raw, headers={"content-type": "application/json"}
    )
    assert r.status_code == 422
    assert event_count(services) == count


# ---------------------------------------------------------------------------------------------
# 201 + Location on create, 200 on an idempotent replay; pagination and enum filters


def test_create_answers_201_with_location_and_a_replay_200(
    client: TestClient, services: Services
) -> None:
    body = run_body("located")
    first = client.post("/runs", json=body)
    run_id = first.json()["id"]
    assert (first.status_code, first.headers["location"]) == (201, f"/runs/{run_id}")
    again = client.post("/runs", json=body)
    assert (again.status_code, again.json()["events"], again.headers["location"]) == (
        200,
        0,
        f"/runs/{run_id}",
    )
    opened = client.post(f"/runs/{run_id}/cases", json={**case("a"), "verdicts": []})
    case_id = opened.json()["id"]
    assert (opened.status_code, opened.headers["location"]) == (201, f"/cases/{case_id}")
    again = client.post(f"/runs/{run_id}/cases", json={**case("a"), "verdicts": []})
    assert (again.status_code, again.json()) == (200, {**opened.json(), "events": 0})
    error = {"message": "timeout"}
    recorded = client.post(f"/cases/{case_id}/error", json=error)
    assert (recorded.status_code, recorded.headers["location"]) == (201, f"/cases/{case_id}")
    count = event_count(services)
    assert client.post(f"/cases/{case_id}/error", json=error).status_code == 200
    assert event_count(services) == count

    imported = client.post("/bundles", json=bundle())
    bundle_run = imported.json()["run_id"]
    assert (imported.status_code, imported.headers["location"]) == (201, f"/runs/{bundle_run}")
    replay = client.post("/bundles", json=bundle())
    assert (replay.status_code, replay.json()["events"]) == (200, 0)


def test_the_cases_of_a_run_are_paginated_and_filtered(store_services: Services) -> None:
    with TestClient(create_app(services=store_services)) as client:
        data = bundle(key="ten")
        data["cases"] = [case(f"c{i}", 4 if i % 3 else 2) for i in range(10)]
        _paginated_and_filtered(client, str(ok(client.post("/bundles", json=data))["run_id"]))


def _paginated_and_filtered(client: TestClient, ten_cases: str) -> None:
    def page(**params: Any) -> tuple[list[str], int, int]:
        body = ok(client.get(f"/runs/{ten_cases}/cases", params=params), 200)
        assert body["count"] == len(body["data"])
        return [c["test_case_key"] for c in body["data"]], body["total"], body["limit"]

    assert page() == ([f"c{i}" for i in range(10)], 10, 100)
    assert page(limit=3) == (["c0", "c1", "c2"], 10, 3)
    assert page(limit=3, offset=9) == (["c9"], 10, 3)
    assert page(offset=10) == ([], 10, 100)
    # Score 2 of 5 = 40 < 75 fails: c0, c3, c6, c9.
    assert page(status="failed") == (["c0", "c3", "c6", "c9"], 4, 100)
    assert page(status="failed", limit=2, offset=1) == (["c3", "c6"], 4, 2)
    assert page(status="errored") == ([], 0, 100)
    for params in ({"status": "bogus"}, {"limit": 0}, {"limit": 1001}, {"offset": -1}):
        r = client.get(f"/runs/{ten_cases}/cases", params=params)
        assert (r.status_code, r.json()["code"]) == (422, "invalid"), params
        assert next(iter(params)) in r.json()["detail"]


def test_unknown_filter_values_are_a_422(client: TestClient) -> None:
    r = client.get("/runs", params={"status": "finished"})
    assert (r.status_code, r.json()["code"]) == (422, "invalid")
    assert r.json()["detail"].startswith("query.status: Input should be 'created', 'running'")
    r = client.get("/runs", params={"label": "no-equals-sign"})
    assert (r.status_code, r.json()["code"]) == (422, "invalid")
    assert r.json()["detail"].startswith("query.label: String should match pattern")


def test_runs_are_found_by_key(many_runs: TestClient) -> None:
    assert keys(many_runs, key="r3") == (["r3"], 1)
    assert keys(many_runs, key="r3", project="p2") == ([], 0)


def test_metrics_and_histories_are_paginated(client: TestClient, flow: Flow) -> None:
    metrics = ok(client.get("/config/available-metrics", params={"limit": 2, "offset": 8}), 200)
    assert ([m["name"] for m in metrics["data"]], metrics["total"]) == (["task_completion"], 9)
    a = flow.cases["a"]
    whole = ok(client.get(f"/cases/{a}/history"), 200)
    part = ok(client.get(f"/cases/{a}/history", params={"limit": 2, "offset": 1}), 200)
    assert (whole["total"], whole["limit"], len(whole["events"])) == (6, None, 6)
    assert part["events"] == whole["events"][1:3]
    assert (part["total"], part["limit"], part["offset"]) == (6, 2, 1)
    assert part["state"] == whole["state"]
    run = ok(client.get(f"/runs/{flow.run_id}/history", params={"limit": 1}), 200)
    assert [e["type"] for e in run["events"]] == ["RunCreated"]
    assert run["total"] == len(ok(client.get(f"/runs/{flow.run_id}/history"), 200)["events"])
