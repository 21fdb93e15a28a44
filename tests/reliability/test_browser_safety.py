"""Issue 23 item 6: a token-less (open) server cannot be driven by other web pages or hosts."""

from __future__ import annotations

from uuid import uuid4

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings
from tests.helpers import bundle

pytestmark = pytest.mark.reliability


def _runs(client: TestClient) -> int:
    count: int = client.get("/runs").json()["count"]
    return count


def test_a_foreign_host_is_not_answered_in_open_mode(store_services: Services) -> None:
    with TestClient(create_app(services=store_services)) as client:
        got = client.get("/runs", headers={"Host": "attacker.example:8000"})
        assert got.status_code == 421
        assert got.json() == {
            "detail": "Host 'attacker.example:8000' is not served here (allow it: --allowed-hosts)",
            "code": "bad_host",
            "status": 421,
        }
        for host in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000"):
            assert client.get("/runs", headers={"Host": host}).status_code == 200, host


def test_an_allowed_host_is_answered(store_services: Services) -> None:
    settings = store_services.settings.model_copy(update={"allowed_hosts": ("evals.lan",)})
    with TestClient(create_app(settings=settings, services=store_services)) as client:
        assert client.get("/runs", headers={"Host": "evals.lan"}).status_code == 200
        assert client.get("/runs", headers={"Host": "other.lan"}).status_code == 421


def test_cross_origin_and_form_writes_are_refused_and_store_nothing(
    store_services: Services,
) -> None:
    data = bundle(key="r1", status="running")["run"] | {"completed_at": None}
    with TestClient(create_app(services=store_services)) as client:
        cross = client.post("/runs", json=data, headers={"Origin": "http://attacker.example"})
        assert (cross.status_code, cross.json()["code"]) == (403, "cross_origin")
        referer = client.post(
            "/runs", json=data, headers={"Referer": "http://attacker.example/page"}
        )
        assert referer.status_code == 403
        null = client.post("/runs", json=data, headers={"Origin": "null"})
        assert null.status_code == 403
        form = client.post(
            "/imports",
            files={"file": ("b.json", b"{}", "application/json")},
            headers={"Origin": "http://localhost"},
        )
        assert (form.status_code, form.json()["code"]) == (415, "unsupported_media_type")
        assert _runs(client) == 0
        # The same write from this server's own page (same origin, JSON), or from a non-browser
        # client (no Origin/Referer at all), goes through.
        same = client.post("/runs", json=data, headers={"Origin": "http://localhost"})
        assert same.status_code == 201, same.text
        assert _runs(client) == 1


def test_a_client_from_another_machine_is_refused_in_open_mode(
    store_services: Services,
) -> None:
    app = create_app(services=store_services)
    with TestClient(app, client=("203.0.113.7", 40000)) as client:
        got = client.get("/runs")
        assert (got.status_code, got.json()["code"]) == (403, "forbidden")
    with TestClient(app, client=("127.0.0.1", 40000)) as client:
        assert client.get("/runs").status_code == 200


def test_with_tokens_required_the_host_allow_list_still_applies(store_url: str) -> None:
    """Issue 29 (this test asserted the opposite before): token mode refuses a foreign Host."""
    from evaledger.api.bootstrap import build_services
    from evaledger.domain.events import TokenScope
    from evaledger.domain.ledger import Context

    services = build_services(Settings(db=store_url))
    try:
        token = services.ledger.issue_token("default", TokenScope.ADMIN, "ci", Context("cli")).token
        auth = {"Authorization": f"Bearer {token}"}
        with TestClient(create_app(services=services)) as client:
            got = client.get("/runs", headers={**auth, "Host": "evals.example.com"})
            assert (got.status_code, got.json()["code"]) == (421, "bad_host")
            assert (
                client.get("/runs", headers={**auth, "Host": "localhost:8000"}).status_code == 200
            )
        for allowed, host in ((("evals.example.com",), "evals.example.com"), (("*",), "any.lan")):
            settings = services.settings.model_copy(update={"allowed_hosts": allowed})
            with TestClient(create_app(settings=settings, services=services)) as client:
                got = client.get("/runs", headers={**auth, "Host": host})
                assert got.status_code == 200, (allowed, got.text)
                # The origin rule is open mode's: an authenticated client is left alone.
                got = client.get("/runs", headers={**auth, "Host": host, "Origin": "http://x.y"})
                assert got.status_code == 200
    finally:
        services.close()


def test_run_routes_answer_404_for_aggregates_that_are_not_runs(
    store_services: Services,
) -> None:
    from evaledger.domain.aggregates import catalogue_id_for
    from evaledger.domain.events import TokenScope
    from evaledger.domain.ledger import Context
    from evaledger.domain.tokens import token_aggregate_id

    new = store_services.ledger.issue_token("default", TokenScope.READ, "r", Context("cli"))
    token_agg = token_aggregate_id(new.token_id)
    with TestClient(create_app(services=store_services)) as client:
        auth = {"Authorization": f"Bearer {new.token}"}
        for aggregate in (token_agg, catalogue_id_for("default")):
            for path in ("history", "summary", "cases"):
                got = client.get(f"/runs/{aggregate}/{path}", headers=auth)
                assert got.status_code == 404, (path, got.text)
                assert "TokenIssued" not in got.text and "secret" not in got.text
            got = client.get(f"/cases/{aggregate}/history", headers=auth)
            assert got.status_code == 404


def test_a_huge_case_offset_is_a_422_naming_it(store_services: Services) -> None:
    with TestClient(create_app(services=store_services)) as client:
        for name in ("case_offset", "case_limit"):
            got = client.get(
                "/runs/compare",
                params={
                    "baseline_run_id": str(uuid4()),
                    "candidate_run_id": str(uuid4()),
                    name: 2**63 + 1,
                },
            )
            assert got.status_code == 422, got.text
            assert name in got.text
