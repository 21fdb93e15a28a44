"""The published OpenAPI document (snapshot), and the one error shape `{detail, code, status}`.

Regenerate the snapshot after a deliberate API change:
    UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/api/test_openapi.py
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings
from evaledger.api.deps import get_services
from tests.conftest import FIXTURES
from tests.helpers import bundle, case, event_count

SNAPSHOT = FIXTURES / "openapi.snapshot.json"
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"
ERROR_KEYS = {"detail", "code", "status"}


def render(schema: dict[str, Any]) -> bytes:
    """Stable bytes of an OpenAPI document."""
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def current_openapi() -> dict[str, Any]:
    # No lifespan runs: building the document opens no store.
    return create_app(Settings(db="sqlite:///never-opened/")).openapi()


def _explain(old: dict[str, Any], new: dict[str, Any]) -> str:
    added = sorted(set(new["paths"]) - set(old["paths"]))
    removed = sorted(set(old["paths"]) - set(new["paths"]))
    diff = difflib.unified_diff(
        render(old).decode().splitlines(),
        render(new).decode().splitlines(),
        "snapshot",
        "current",
        lineterm="",
        n=2,
    )
    lines = list(diff)
    return (
        "The OpenAPI document changed.\n"
        f"  paths added: {added or 'none'}; paths removed: {removed or 'none'}\n"
        + "\n".join(lines[:60])
        + ("\n  ..." if len(lines) > 60 else "")
        + "\nIf the change is intended, regenerate the snapshot with:\n"
        "  UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/api/test_openapi.py"
    )


def test_openapi_matches_the_snapshot() -> None:
    schema = current_openapi()
    if UPDATE or not SNAPSHOT.exists():
        if not UPDATE:
            pytest.fail(
                f"{SNAPSHOT.name} is missing: create it with "
                "UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/api/test_openapi.py"
            )
        SNAPSHOT.write_bytes(render(schema))
    snapshot = orjson.loads(SNAPSHOT.read_bytes())
    if schema != snapshot:
        pytest.fail(_explain(snapshot, schema), pytrace=False)
    assert SNAPSHOT.read_bytes() == render(schema), "snapshot is not in canonical form"


def test_openapi_is_deterministic_and_names_the_api() -> None:
    first, second = current_openapi(), current_openapi()
    assert render(first) == render(second)
    assert first["info"]["title"] == "evaledger"
    assert first["info"]["version"] == "0.1.0"


def test_openapi_publishes_the_design_endpoints() -> None:
    ops = {(m.upper(), p) for p, item in current_openapi()["paths"].items() for m in item}
    assert {
        ("GET", "/health"),
        ("GET", "/config/available-metrics"),
        ("POST", "/config/metrics"),
        ("POST", "/runs"),
        ("GET", "/runs"),
        ("GET", "/runs/{run_id}"),
        ("GET", "/runs/{run_id}/cases"),
        ("POST", "/runs/{run_id}/complete"),
        ("POST", "/runs/{run_id}/cancel"),
        ("POST", "/runs/{run_id}/baseline"),
        ("POST", "/runs/{run_id}/cases"),
        ("POST", "/runs/{run_id}/cases/batch"),
        ("POST", "/runs/{run_id}/rescore"),
        ("POST", "/bundles"),
        ("POST", "/ingest"),
        ("POST", "/cases/{case_id}/transcript"),
        ("POST", "/cases/{case_id}/verdicts"),
        ("POST", "/cases/{case_id}/outcomes"),
        ("POST", "/cases/{case_id}/claims"),
        ("POST", "/cases/{case_id}/checks"),
        ("POST", "/cases/{case_id}/overrides"),
        ("POST", "/cases/{case_id}/invalidations"),
        ("GET", "/cases/{case_id}"),
        ("GET", "/cases/{case_id}/history"),
    } <= ops


def _error_responses(schema: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    yield method.upper(), path, status, response


def _resolve(schema: dict[str, Any], ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    ref = ref_or_schema.get("$ref")
    if ref is None:
        return ref_or_schema
    found: dict[str, Any] = schema
    for part in ref.removeprefix("#/").split("/"):
        found = found[part]
    return found


def test_openapi_documents_errors_as_detail_code_status() -> None:
    schema = current_openapi()
    wrong = []
    documented: dict[tuple[str, str], set[str]] = {}
    for method, path, status, response in _error_responses(schema):
        documented.setdefault((method, path), set()).add(status)
        body = response.get("content", {}).get("application/json", {}).get("schema", {})
        resolved = _resolve(schema, body)
        props = set(resolved.get("properties", {}))
        if not (props >= ERROR_KEYS and set(resolved.get("required", [])) >= ERROR_KEYS):
            wrong.append(f"{method} {path} {status}: {sorted(props)}")
    assert wrong == []
    operations = {(m.upper(), p) for p, item in schema["paths"].items() for m in item}
    assert set(documented) == operations, "every operation documents its errors"
    assert all({"422", "500"} <= statuses for statuses in documented.values())
    detail = _resolve(schema, {"$ref": "#/components/schemas/ErrorResponse"})["properties"]
    assert (detail["detail"]["type"], detail["code"]["type"], detail["status"]["type"]) == (
        "string",
        "string",
        "integer",
    )


# ---------------------------------------------------------------------------------------------
# Every error the API actually answers has the one shape.


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


def _assert_error(r: Any, status: int, code: str, extra: frozenset[str] = frozenset()) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == ERROR_KEYS | extra, body
    assert (body["status"], body["code"]) == (status, code)
    assert isinstance(body["detail"], str) and body["detail"]


def test_every_error_answer_is_detail_code_status(client: TestClient, services: Services) -> None:
    _assert_error(client.get("/no/such/route"), 404, "http_error")
    _assert_error(client.delete("/runs"), 405, "http_error")
    _assert_error(client.get("/runs/00000000-0000-0000-0000-000000000000"), 404, "not_found")
    _assert_error(client.get("/cases/not-a-uuid"), 422, "invalid", frozenset({"errors"}))
    _assert_error(
        client.post("/bundles", json={"format": "x"}), 422, "invalid", frozenset({"errors"})
    )
    bad_config = bundle(config={"judge": {"metrics": [{"metric": "charm", "weight": 1}]}})
    r = client.post("/bundles", json=bad_config)
    _assert_error(r, 422, "invalid", frozenset({"field"}))
    assert r.json()["field"] == "config.judge.metrics[0].metric"

    imported = client.post("/bundles", json=bundle()).json()
    r = client.post(f"/runs/{imported['run_id']}/cases", json=case("late"))
    _assert_error(r, 409, "run_closed")

    run = {**bundle()["run"], "status": "running", "key": "errors-run"}
    run_id = client.post("/runs", json=run).json()["id"]
    case_id = client.post(f"/runs/{run_id}/cases", json={**case("a"), "verdicts": []}).json()["id"]
    key = {"Idempotency-Key": "same-key"}
    client.post(f"/cases/{case_id}/error", json={"message": "boom"}, headers=key)
    r = client.post(f"/cases/{case_id}/error", json={"message": "other"}, headers=key)
    _assert_error(r, 409, "idempotency_conflict")
    before = event_count(services)
    r = client.get(f"/cases/{case_id}/history", params={"version": 99})
    _assert_error(r, 422, "invalid", frozenset({"field"}))
    assert event_count(services) == before


def test_an_unexpected_failure_is_a_500_with_the_error_shape(services: Services) -> None:
    app = create_app(services=services)

    def store_down() -> Services:
        raise RuntimeError("the store went away")

    app.dependency_overrides[get_services] = store_down
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/health")
    _assert_error(r, 500, "internal")
    # The cause goes to the server log, never to the client.
    assert r.json()["detail"] == "internal server error"
    assert "went away" not in r.text


# ---------------------------------------------------------------------------------------------
# A document clients can be generated from


def _operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, op in item.items():
            yield method.upper(), path, op


def test_every_success_answer_has_a_named_model() -> None:
    schema = current_openapi()
    bare = []
    for method, path, op in _operations(schema):
        successes = {s: r for s, r in op["responses"].items() if s.startswith("2")}
        assert successes, (method, path)
        for status, response in successes.items():
            body = response.get("content", {}).get("application/json", {}).get("schema", {})
            if not body.get("$ref", "").startswith("#/components/schemas/"):
                bare.append(f"{method} {path} {status}: {body}")
    assert bare == []


def test_operation_ids_are_the_route_names_and_unique() -> None:
    ids = {(m, p): op["operationId"] for m, p, op in _operations(current_openapi())}
    assert len(set(ids.values())) == len(ids)
    assert all(re.fullmatch(r"[a-z][a-z_]*[a-z]", i) for i in ids.values()), ids
    assert {
        ids[("GET", "/runs")],
        ids[("POST", "/runs")],
        ids[("GET", "/runs/{run_id}/cases")],
        ids[("POST", "/cases/{case_id}/verdicts")],
        ids[("GET", "/runs/compare")],
        ids[("GET", "/cases/{case_id}/history")],
        ids[("GET", "/runs/{run_id}/history")],
    } == {
        "list_runs",
        "create_run",
        "list_run_cases",
        "record_verdict",
        "compare_runs",
        "get_case_history",
        "get_run_history",
    }


def test_every_operation_is_tagged_and_creates_document_201_and_200() -> None:
    schema = current_openapi()
    for method, path, op in _operations(schema):
        assert op.get("tags"), (method, path)
    creates = [(m, p, op) for m, p, op in _operations(schema) if "201" in op["responses"]]
    assert {(m, p) for m, p, _ in creates} >= {
        ("POST", "/runs"),
        ("POST", "/bundles"),
        ("POST", "/ingest"),
        ("POST", "/runs/{run_id}/cases"),
        ("POST", "/cases/{case_id}/transcript"),
    }
    for _, path, op in creates:
        replay = op["responses"]["200"]["content"]["application/json"]["schema"]
        assert replay == op["responses"]["201"]["content"]["application/json"]["schema"], path
    components = schema["components"]["schemas"]
    assert components["Written"]["examples"][0]["events"] == 1
    assert components["ErrorResponse"]["examples"][0]["code"] == "not_found"


def test_list_filters_are_enums_and_pages_are_bounded() -> None:
    schema = current_openapi()
    params = {
        (path, p["name"]): p["schema"]
        for path, item in schema["paths"].items()
        for op in item.values()
        for p in op.get("parameters", [])
    }
    run_status = params[("/runs", "status")]["anyOf"][0]["$ref"]
    case_status = params[("/runs/{run_id}/cases", "status")]["anyOf"][0]["$ref"]
    components = schema["components"]["schemas"]
    assert components[run_status.rsplit("/", 1)[1]]["enum"] == [
        "created",
        "running",
        "completed",
        "canceled",
        "failed",
    ]
    assert "pending" in components[case_status.rsplit("/", 1)[1]]["enum"]
    for path in ("/runs", "/runs/{run_id}/cases", "/config/available-metrics"):
        assert params[(path, "limit")]["minimum"] == 1 and params[(path, "limit")]["maximum"]
        assert params[(path, "offset")]["minimum"] == 0


def test_a_store_outage_is_a_503_with_the_error_shape(services: Services) -> None:
    import socket

    import psycopg

    app = create_app(services=services)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def store_down() -> Services:
        # A real driver error: nothing listens on the port.
        psycopg.connect(host="127.0.0.1", port=port, dbname="x", connect_timeout=2)
        return services

    app.dependency_overrides[get_services] = store_down
    with TestClient(app, raise_server_exceptions=False) as c:
        # Not a probe (/health, /ready): those are also cut at 1.5 s with a message of their
        # own, which a loaded machine reaches before the refused connection's error.
        r = c.get("/verify")
    _assert_error(r, 503, "store_unavailable")
    assert (r.json()["detail"], r.headers["retry-after"]) == (
        "the store is unavailable; retry later",
        "5",
    )
