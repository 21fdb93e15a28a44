"""POST /ingest (issue 32): many cases of a run in one request and one transaction.

Create or append, the run header's status applied after the cases, idempotent on a retried
key, a refused batch stores nothing (not even its run), and a token reaches only its project.
SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application.ingest import MAX_INGEST_CASES
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.helpers import bundle, case, event_count

OWNER = Context(actor="ops")


@pytest.fixture
def served(store_url: str) -> Iterator[tuple[TestClient, Services]]:
    services = build_services(Settings(db=store_url))
    try:
        with TestClient(create_app(services=services)) as client:
            yield client, services
    finally:
        services.close()


def header(key: str = "ingested", **fields: Any) -> dict[str, Any]:
    run = {**bundle()["run"], "key": key, "status": "running", **fields}
    run.pop("completed_at", None)
    return run


def body(*keys: str, run: dict[str, Any] | None = None, score: int = 4) -> dict[str, Any]:
    return {"run": run or header(), "cases": [case(k, score) for k in keys]}


def run_of(client: TestClient, run_id: str) -> dict[str, Any]:
    r = client.get(f"/runs/{run_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_ingest_creates_appends_and_seals(served: tuple[TestClient, Services]) -> None:
    client, services = served
    r = client.post("/ingest", json=body("a", "b", "c"))
    assert r.status_code == 201, r.text
    first = r.json()
    assert (len(first["case_ids"]), first["new_cases"]) == (3, 3)
    assert first["events"] > 3
    assert r.headers["location"] == f"/runs/{first['run_id']}"
    detail = run_of(client, first["run_id"])
    assert (detail["status"], detail["aggregate"]["total_executions"]) == ("running", 3)

    # The same run again with more cases: appended to it, the known case kept as it is.
    r = client.post("/ingest", json=body("c", "d"))
    assert r.status_code == 201, r.text
    second = r.json()
    assert second["run_id"] == first["run_id"]
    assert second["case_ids"][0] == first["case_ids"][2]
    assert second["new_cases"] == 1

    # The last batch closes the run: the header's status is applied after its cases.
    r = client.post("/ingest", json=body("e", run=header(status="completed")))
    assert r.status_code == 201, r.text
    detail = run_of(client, first["run_id"])
    assert (detail["status"], detail["aggregate"]["total_executions"]) == ("completed", 5)
    before = event_count(services)
    r = client.post("/ingest", json=body("f"))
    assert (r.status_code, r.json()["code"]) == (409, "run_closed")
    assert event_count(services) == before


def test_a_retry_under_its_key_writes_nothing(served: tuple[TestClient, Services]) -> None:
    client, services = served
    key = {"Idempotency-Key": "batch-1"}
    r = client.post("/ingest", json=body("a", "b"), headers=key)
    assert r.status_code == 201, r.text
    first = r.json()
    count = event_count(services)
    again = client.post("/ingest", json=body("a", "b"), headers=key)
    assert again.status_code == 200, again.text
    replay = again.json()
    assert replay["events"] == 0
    assert (replay["run_id"], replay["case_ids"]) == (first["run_id"], first["case_ids"])
    assert event_count(services) == count
    # The key with another body is a conflict, and stores nothing.
    other = client.post("/ingest", json=body("a", "b", "c"), headers=key)
    assert (other.status_code, other.json()["code"]) == (409, "idempotency_conflict")
    assert event_count(services) == count
    # Without a key, the same cases again are the same facts: nothing new either.
    plain = client.post("/ingest", json=body("a", "b"))
    assert (plain.status_code, plain.json()["events"]) == (200, 0)
    assert event_count(services) == count


def test_a_bad_case_stores_nothing_of_the_batch(served: tuple[TestClient, Services]) -> None:
    client, services = served
    bad = body("a", "b")
    bad["cases"][1]["verdicts"][0]["metric_scores"][2]["score"] = 9
    r = client.post("/ingest", json=bad)
    assert r.status_code == 422, r.text
    assert "cases" in str(r.json()["errors"][0]["loc"]) and "score" in r.text
    assert event_count(services) == 0  # not even the run

    # A case the ledger refuses (an unknown metric): named by its index, nothing stored.
    unknown = body("a", "b")
    unknown["cases"][1]["verdicts"][0]["metric_scores"][0]["metric"] = "no_such_metric"
    r = client.post("/ingest", json=unknown)
    assert r.status_code == 422, r.text
    assert r.json()["field"].startswith("cases[1]")
    assert event_count(services) == 0

    # The same case twice in one batch.
    r = client.post("/ingest", json=body("a", "a"))
    assert (r.status_code, r.json()["field"]) == (422, "cases[1].test_case.key")
    assert event_count(services) == 0

    # A known case sent with other content: a conflict, and the new case beside it is not stored.
    assert client.post("/ingest", json=body("a")).status_code == 201
    count = event_count(services)
    r = client.post("/ingest", json=body("b", "a", score=2))
    assert (r.status_code, r.json()["field"]) == (409, "cases[1]")
    assert event_count(services) == count

    # An unknown field anywhere is refused by name.
    extra = body("c")
    extra["surprise"] = 1
    r = client.post("/ingest", json=extra)
    assert r.status_code == 422 and "surprise" in r.text
    assert event_count(services) == count


def test_a_huge_number_or_a_nul_is_refused_by_name(served: tuple[TestClient, Services]) -> None:
    client, services = served
    huge = body("a")
    huge["cases"][0]["cost_usd"] = 10**400
    r = client.post("/ingest", json=huge)
    assert r.status_code == 422, r.text
    nul = body("a")
    nul["cases"][0]["transcript"][0]["content"] = "hi\u0000"
    r = client.post("/ingest", json=nul)
    assert r.status_code == 422 and "transcript" in r.text, r.text
    assert event_count(services) == 0


def test_too_many_cases_are_refused_by_name(served: tuple[TestClient, Services]) -> None:
    client, services = served
    many = {"run": header(), "cases": [case("x")] * (MAX_INGEST_CASES + 1)}
    r = client.post("/ingest", json=many)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"][-1] == "cases"
    assert event_count(services) == 0


def test_a_body_over_the_limit_is_413(store_url: str) -> None:
    services = build_services(Settings(db=store_url, max_body_bytes=20_000))
    try:
        with TestClient(create_app(services=services)) as client:
            r = client.post("/ingest", json=body(*(f"k{i}" for i in range(20))))
            assert r.status_code == 413, r.text
            assert event_count(services) == 0
    finally:
        services.close()


def test_deep_nesting_is_refused_before_parsing(served: tuple[TestClient, Services]) -> None:
    client, services = served
    deep = b'{"run": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = client.post("/ingest", content=deep, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert event_count(services) == 0


def test_a_token_ingests_only_into_its_own_project(store_url: str) -> None:
    services = build_services(Settings(db=store_url, auth="tokens"))
    tokens = {
        name: services.ledger.issue_token(project, TokenScope(scope), name, OWNER).token
        for name, project, scope in (
            ("a-write", "tenant-a", "write"),
            ("a-read", "tenant-a", "read"),
            ("b-write", "tenant-b", "write"),
        )
    }

    def auth(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tokens[name]}"}

    unnamed = header()
    del unnamed["project"]
    try:
        with TestClient(create_app(services=services)) as client:
            r = client.post("/ingest", json=body("a", run=unnamed), headers=auth("a-write"))
            assert r.status_code == 201, r.text
            a_run = r.json()["run_id"]
            assert run_of_token(client, a_run, auth("a-write"))["project"] == "tenant-a"
            count = event_count(services)

            # Naming the other project in the body is refused, and stores nothing.
            other = header(project="tenant-a")
            r = client.post("/ingest", json=body("b", run=other), headers=auth("b-write"))
            assert (r.status_code, r.json()["field"]) == (403, "run.project")
            # A read token writes nothing; no token is refused.
            r = client.post("/ingest", json=body("b", run=unnamed), headers=auth("a-read"))
            assert r.status_code == 403
            assert client.post("/ingest", json=body("b", run=unnamed)).status_code == 401
            assert event_count(services) == count

            # The same run key from the other tenant is its own run: tenant-a's is untouched.
            r = client.post("/ingest", json=body("b", run=unnamed), headers=auth("b-write"))
            assert r.status_code == 201, r.text
            assert r.json()["run_id"] != a_run
            a_detail = run_of_token(client, a_run, auth("a-write"))
            assert a_detail["aggregate"]["total_executions"] == 1
            assert client.get(f"/runs/{a_run}", headers=auth("b-write")).status_code in (403, 404)
            # The same idempotency key in two projects names two records.
            key = {"Idempotency-Key": "shared"}
            for name in ("a-write", "b-write"):
                r = client.post(
                    "/ingest", json=body("k", run=unnamed), headers={**auth(name), **key}
                )
                assert r.status_code == 201, r.text
    finally:
        services.close()


def run_of_token(client: TestClient, run_id: str, headers: dict[str, str]) -> dict[str, Any]:
    r = client.get(f"/runs/{run_id}", headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json())
