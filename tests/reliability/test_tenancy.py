"""Tenancy and tokens (DESIGN §13): a token of project A reads and writes nothing of project B.

Two tenants import the same bundle (same run key) into their own project; every read and write
a token can attempt on the other tenant's data answers 403/404 and stores nothing. Scopes, the
token's principal as the actor, revocation, the cookie rule and the loopback rule are checked
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.cli import main
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_serve import EVALEDGER, free_port
from tests.helpers import bundle, event_count

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.reliability

OWNER = Context(actor="ops")
TOKENS = {
    "a-read": ("tenant-a", "read"),
    "a-write": ("tenant-a", "write"),
    "a-admin": ("tenant-a", "admin"),
    "b-admin": ("tenant-b", "admin"),
}


@dataclass
class Tenants:
    services: Services
    client: TestClient
    tokens: dict[str, str]
    token_ids: dict[str, str]
    runs: dict[str, str]
    cases: dict[str, list[str]]

    def auth(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def call(self, name: str, method: str, path: str, **kw: Any) -> Any:
        return self.client.request(
            method, path, headers={**self.auth(name), **kw.pop("headers", {})}, **kw
        )


def tenant_bundle(project: str | None) -> dict[str, Any]:
    data = bundle()
    if project is None:
        del data["run"]["project"]
    else:
        data["run"]["project"] = project
    return data


@pytest.fixture
def tenants(store_url: str) -> Iterator[Tenants]:
    services = build_services(Settings(db=store_url, auth="tokens"))
    issued = {
        name: services.ledger.issue_token(project, TokenScope(scope), name, OWNER)
        for name, (project, scope) in TOKENS.items()
    }
    try:
        with TestClient(create_app(services=services)) as client:
            t = Tenants(
                services,
                client,
                {n: i.token for n, i in issued.items()},
                {n: i.token_id for n, i in issued.items()},
                {},
                {},
            )
            # The same bundle (same run key) in both projects: two different runs.
            for name, project in (("a-write", None), ("b-admin", "tenant-b")):
                r = t.call(name, "POST", "/bundles", json=tenant_bundle(project))
                assert r.status_code == 201, r.text
                run_id = r.json()["run_id"]
                t.runs[name[0]] = run_id
                cases = t.call(name, "GET", f"/runs/{run_id}/cases").json()["data"]
                t.cases[name[0]] = [c["case_id"] for c in cases]
            yield t
    finally:
        services.close()


def test_each_token_sees_only_its_own_project(tenants: Tenants) -> None:
    t = tenants
    assert t.runs["a"] != t.runs["b"]
    listed = t.call("a-read", "GET", "/runs").json()
    assert (listed["total"], [r["run_id"] for r in listed["data"]]) == (1, [t.runs["a"]])
    assert listed["data"][0]["project"] == "tenant-a"
    listed = t.call("b-admin", "GET", "/runs").json()
    assert (listed["total"], [r["run_id"] for r in listed["data"]]) == (1, [t.runs["b"]])
    r = t.call("a-read", "GET", "/runs", params={"project": "tenant-b"})
    assert (r.status_code, r.json()["code"], r.json()["field"]) == (403, "forbidden", "project")
    r = t.call("a-read", "GET", "/config/available-metrics", params={"project": "tenant-b"})
    assert r.status_code == 403


B_READS = [
    "/runs/{b_run}",
    "/runs/{b_run}/cases",
    "/runs/{b_run}/bundle",
    "/runs/{b_run}/export?format=csv",
    "/runs/{b_run}/export?format=parquet",
    "/runs/{b_run}/history",
    "/runs/{b_run}/grade?preset=ifixai-v1",
    "/cases/{b_case}",
    "/cases/{b_case}/history",
    "/cases/{b_case}/explain",
    "/runs/compare?baseline_run_id={a_run}&candidate_run_id={b_run}",
    "/runs/compare?baseline_run_id={b_run}&candidate_run_id={a_run}",
    "/rollups?run_id={a_run}&run_id={b_run}",
    "/statistics/significance?baseline_run_id={a_run}&candidate_run_id={b_run}",
    "/statistics/significance?baseline_run_id={b_run}&candidate_run_id={a_run}",
    "/statistics/plan?baseline=0.8&mde=0.05&run_id={b_run}",
]


@pytest.mark.parametrize("template", B_READS)
def test_a_token_of_a_reads_nothing_of_b(tenants: Tenants, template: str) -> None:
    t = tenants
    path = template.format(b_run=t.runs["b"], a_run=t.runs["a"], b_case=t.cases["b"][0])
    r = t.call("a-admin", "GET", path)
    assert (r.status_code, r.json()["code"]) == (404, "not_found"), r.text
    assert t.runs["b"] not in r.text or "no run" in r.json()["detail"]
    # The owner of B reads B's side fine (the 404 is about the token, not the data).
    own = template.replace("?run_id={a_run}&", "?").format(
        b_run=t.runs["b"], a_run=t.runs["b"], b_case=t.cases["b"][0]
    )
    assert t.call("b-admin", "GET", own).status_code == 200


def _b_writes(t: Tenants) -> list[tuple[str, str, Any]]:
    b_run, b_case = t.runs["b"], t.cases["b"][0]
    verdict = {"metric_scores": [{"metric": "tool_routing", "score": 5}]}
    return [
        ("POST", "/bundles", tenant_bundle("tenant-b")),
        ("POST", "/runs", {**tenant_bundle("tenant-b")["run"], "key": "intruder"}),
        ("POST", f"/runs/{b_run}/cases", bundle()["cases"][0]),
        ("POST", f"/runs/{b_run}/cases/batch", bundle()["cases"][:1]),
        ("POST", f"/runs/{b_run}/start", None),
        ("POST", f"/runs/{b_run}/cancel", {"reason": "sabotage"}),
        ("POST", f"/runs/{b_run}/baseline", {"reason": "sabotage"}),
        ("POST", f"/runs/{b_run}/rescore", {}),
        ("POST", f"/cases/{b_case}/verdicts", verdict),
        ("POST", f"/cases/{b_case}/error", {"message": "sabotage"}),
        (
            "POST",
            f"/cases/{b_case}/overrides",
            {"verdict_id": "00000000-0000-0000-0000-000000000001", "reason": "x", "passed": True},
        ),
        ("POST", "/config/metrics?project=tenant-b", _metric("sabotage")),
    ]


def test_a_token_of_a_writes_nothing_of_b(tenants: Tenants) -> None:
    t = tenants
    before = event_count(t.services)
    for method, path, body in _b_writes(t):
        r = t.call("a-admin", method, path, json=body)
        assert r.status_code in (403, 404), (path, r.status_code, r.text)
        assert r.json()["code"] in ("forbidden", "not_found"), (path, r.text)
    assert event_count(t.services) == before
    listed = t.call("b-admin", "GET", "/runs").json()
    assert (listed["total"], listed["data"][0]["status"]) == (1, "completed")


def test_scopes_read_write_admin(tenants: Tenants) -> None:
    t = tenants
    a_run, a_case = t.runs["a"], t.cases["a"][0]
    before = event_count(t.services)
    r = t.call("a-read", "POST", "/runs", json={**tenant_bundle(None)["run"], "key": "r2"})
    assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    assert "write scope" in r.json()["detail"]
    history = t.call("a-read", "GET", f"/cases/{a_case}/history").json()
    verdict_id = next(
        e["payload"]["verdict_id"] for e in history["events"] if e["type"] == "JudgeVerdictRecorded"
    )
    override = {"verdict_id": verdict_id, "passed": False, "reason": "misheard the order id"}
    for path, body in (
        (f"/cases/{a_case}/overrides", override),
        (f"/cases/{a_case}/invalidations", {"verdict_id": verdict_id, "reason": "wrong judge"}),
        (f"/runs/{a_run}/baseline", {"reason": "release"}),
        ("/config/metrics", _metric("empathy")),
    ):
        r = t.call("a-write", "POST", path, json=body)
        assert (r.status_code, r.json().get("code")) == (403, "forbidden"), (path, r.text)
        assert "admin scope" in r.json()["detail"]
    # A bundle carrying overrides needs admin too.
    with_override = tenant_bundle(None)
    with_override["run"]["key"] = "with-override"
    with_override["cases"][0]["overrides"] = [
        {"verdict_index": 0, "passed": True, "reason": "human review", "actor": "boss"}
    ]
    r = t.call("a-write", "POST", "/bundles", json=with_override)
    assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    assert event_count(t.services) == before

    # Admin: with a reason only.
    r = t.call("a-admin", "POST", f"/runs/{a_run}/baseline", json={})
    assert (r.status_code, r.json()["field"]) == (422, "reason")
    r = t.call("a-admin", "DELETE", f"/runs/{a_run}/baseline")
    assert (r.status_code, r.json()["field"]) == (422, "reason")
    assert event_count(t.services) == before
    assert t.call("a-admin", "POST", f"/cases/{a_case}/overrides", json=override).status_code == 201
    r = t.call("a-admin", "POST", f"/runs/{a_run}/baseline", json={"reason": "release 12"})
    assert r.status_code == 200
    r = t.call("a-admin", "POST", "/config/metrics", json=_metric("empathy"))
    assert r.status_code == 201
    names = [m["name"] for m in t.call("a-read", "GET", "/config/available-metrics").json()["data"]]
    assert names[-1] == "empathy"
    names = [
        m["name"] for m in t.call("b-admin", "GET", "/config/available-metrics").json()["data"]
    ]
    assert "empathy" not in names
    assert event_count(t.services) == before + 3


def test_the_token_is_the_actor_whatever_x_actor_says(tenants: Tenants) -> None:
    t = tenants
    r = t.call(
        "a-admin",
        "POST",
        "/runs",
        json={**tenant_bundle(None)["run"], "key": "open-run", "status": "running"},
        headers={"X-Actor": "admin@tenant-b"},
    )
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    history = t.call("a-read", "GET", f"/runs/{run_id}/history").json()
    actor = f"a-admin (token {t.token_ids['a-admin']})"
    assert [e["actor"] for e in history["events"]] == [actor]
    # An override's author is the token too, even when a bundle names another.
    bundled = tenant_bundle(None)
    bundled["run"]["key"] = "bundled-override"
    bundled["cases"][0]["overrides"] = [
        {"verdict_index": 0, "passed": True, "reason": "human review", "actor": "admin@tenant-b"}
    ]
    r = t.call("a-admin", "POST", "/bundles", json=bundled, headers={"X-Actor": "someone"})
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    cases = t.call("a-read", "GET", f"/runs/{run_id}/cases").json()["data"]
    events = t.call("a-read", "GET", f"/cases/{cases[0]['case_id']}/history").json()["events"]
    assert {e["actor"] for e in events} == {actor}
    assert events[-1]["type"] == "VerdictOverridden"


def test_no_token_bad_token_revoked_token_are_401(tenants: Tenants) -> None:
    t = tenants
    for headers in ({}, {"Authorization": "Bearer evl_nope"}, {"Authorization": "Basic abc"}):
        r = t.client.get("/runs", headers=headers)
        assert (r.status_code, r.json()["code"]) == (401, "unauthenticated"), headers
    forged = t.tokens["a-read"][:-4] + "AAAA"
    assert t.client.get("/runs", headers={"Authorization": f"Bearer {forged}"}).status_code == 401
    assert t.call("a-read", "GET", "/runs").status_code == 200
    t.services.ledger.revoke_token(t.token_ids["a-read"], OWNER, "left the team")
    r = t.call("a-read", "GET", "/runs")
    assert (r.status_code, r.json()["code"]) == (401, "unauthenticated")
    # /health stays public (load balancers, probes).
    assert t.client.get("/health").status_code == 200


def test_a_cookie_reads_but_never_writes(tenants: Tenants) -> None:
    t = tenants
    t.client.cookies.set("evaledger_token", t.tokens["a-admin"])
    try:
        listed = t.client.get("/runs").json()
        assert [r["run_id"] for r in listed["data"]] == [t.runs["a"]]
        r = t.client.post("/runs", json={**tenant_bundle(None)["run"], "key": "csrf"})
        assert (r.status_code, r.json()["code"]) == (401, "unauthenticated")
    finally:
        t.client.cookies.clear()


def test_same_idempotency_key_in_two_projects_makes_two_runs(tenants: Tenants) -> None:
    t = tenants
    key = {"Idempotency-Key": "nightly-42"}
    a = t.call(
        "a-write", "POST", "/runs", json={**tenant_bundle(None)["run"], "key": "k"}, headers=key
    )
    b = t.call(
        "b-admin",
        "POST",
        "/runs",
        json={**tenant_bundle("tenant-b")["run"], "key": "k"},
        headers=key,
    )
    assert (a.status_code, b.status_code) == (201, 201), (a.text, b.text)
    assert a.json()["id"] != b.json()["id"]


def test_baselines_are_per_project(tenants: Tenants) -> None:
    t = tenants
    for name, run in (("a-admin", t.runs["a"]), ("b-admin", t.runs["b"])):
        r = t.call(name, "POST", f"/runs/{run}/baseline", json={"reason": "release"})
        assert r.status_code == 200, r.text
    params = {"agent": "northwind-support", "suite": "northwind-support-voice"}
    assert t.call("a-admin", "GET", "/runs/baseline", params=params).json()["run_id"] == t.runs["a"]
    assert t.call("b-admin", "GET", "/runs/baseline", params=params).json()["run_id"] == t.runs["b"]
    # B's approval did not take A's away.
    assert t.call("a-admin", "GET", f"/runs/{t.runs['a']}").json()["baseline"] is True


def test_openapi_declares_the_bearer_scheme(tenants: Tenants) -> None:
    doc = tenants.client.get("/openapi.json").json()
    schemes = doc["components"]["securitySchemes"]
    assert schemes["token"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token from `evaledger token create` (scoped to one project).",
    }
    assert schemes["cookie"]["in"] == "cookie"
    assert {"token": []} in doc["paths"]["/runs"]["get"]["security"]
    assert "security" not in doc["paths"]["/health"]["get"]


def _metric(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "display_name": name.title(),
        "description": "Acknowledges the customer's situation.",
        "tier": "delivery",
        "default_weight": 0.05,
        "score_type": "scored",
        "rubric": "5: warm\n0: cold",
        "include_in_defaults": False,
    }


# ---------------------------------------------------------------------------------------------
# CLI: create, list, revoke; the loopback rule


def test_token_cli_create_list_revoke(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", store_url]
    assert (
        main(["token", "create", "--project", "acme", "--scope", "write", "--name", "ci", *db]) == 0
    )
    out, err = capsys.readouterr()
    secret = out.strip()
    assert secret.startswith("evl_") and len(secret) == 4 + 12 + 1 + 43
    token_id = secret[4:16]
    assert f"token {token_id} for project 'acme', scope write" in err
    assert main(["token", "create", "--project", "other", "--scope", "admin", "--json", *db]) == 0
    created = json.loads(capsys.readouterr().out)
    assert (created["project"], created["scope"]) == ("other", "admin")

    assert main(["token", "list", "--json", *db]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["count"] == 2
    first = listed["data"][0]
    assert (first["token_id"], first["project"], first["scope"], first["name"]) == (
        token_id,
        "acme",
        "write",
        "ci",
    )
    assert (first["active"], first["issued_by"], first["actor"]) == (
        True,
        "cli",
        f"ci (token {token_id})",
    )
    assert secret not in json.dumps(listed) and secret[17:] not in json.dumps(listed)

    assert main(["token", "revoke", token_id, "--reason", "rotated", *db]) == 0
    assert capsys.readouterr().out == f"revoked token {token_id}\n"
    assert main(["token", "list", "--project", "acme", "--json", *db]) == 0
    (only,) = json.loads(capsys.readouterr().out)["data"]
    assert (only["active"], only["revoke_reason"], only["revoked_by"]) == (False, "rotated", "cli")
    for again, message in ((token_id, "already revoked"), ("000000000000", "no token")):
        with pytest.raises(SystemExit) as exit_:
            main(["token", "revoke", again, *db])
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err

    services = build_services(Settings(db=store_url))
    try:
        assert services.ledger.authenticate(secret) is None
        principal = services.ledger.authenticate(created["token"])
        assert principal is not None
        assert (principal.project, principal.scope) == ("other", TokenScope.ADMIN)
    finally:
        services.close()


@pytest.mark.parametrize(
    "args",
    [
        ["--project", "", "--scope", "read"],
        ["--project", "x" * 201, "--scope", "read"],
        ["--project", "a\x00b", "--scope", "read"],
        ["--project", "p", "--scope", "root"],
    ],
    ids=["empty project", "long project", "NUL", "unknown scope"],
)
def test_token_cli_refuses_bad_input(
    sqlite_url: str, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["token", "create", *args, "--db", sqlite_url])
    assert exit_.value.code == 2
    assert "--project" in capsys.readouterr().err or "--scope" in args
    services = build_services(Settings(db=sqlite_url))
    try:
        assert event_count(services) == 0
    finally:
        services.close()


def test_serve_refuses_a_public_address_without_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    for host in ("0.0.0.0", "192.0.2.7", "::"):
        with pytest.raises(SystemExit) as exit_:
            main(["serve", "--host", host, "--db", db])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"refusing to serve on {host} without API tokens" in err
        assert "evaledger token create" in err


def test_open_serving_keeps_x_actor_and_every_project(services: Services) -> None:
    # No token in the store: open (the loopback case). The local user names the actor.
    data = copy.deepcopy(bundle())
    data["run"]["project"] = "p1"
    with TestClient(create_app(services=services)) as client:
        assert client.post("/bundles", json=data, headers={"X-Actor": "alice"}).status_code == 201
        data["run"]["project"] = "p2"
        assert client.post("/bundles", json=data).status_code == 201
        assert client.get("/runs").json()["total"] == 2
        assert client.get("/runs", params={"project": "p2"}).json()["total"] == 1
        run_id = client.get("/runs", params={"project": "p1"}).json()["data"][0]["run_id"]
        events = client.get(f"/runs/{run_id}/history").json()["events"]
        assert events[0]["actor"] == "alice"


# ---------------------------------------------------------------------------------------------
# The README's token commands, against a real server bound to every address


def test_the_readme_token_commands_and_a_public_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (ROOT / "README.md").read_text()
    block = text.split("## API tokens\n", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [
        ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.split("#", 1)[0].strip()
    ]
    assert [shlex.split(ln)[:3] for ln in lines] == [
        ["evaledger", "token", "create"],
        ["evaledger", "token", "list"],
        ["evaledger", "token", "revoke"],
        ["curl", "-H", "Authorization: Bearer $TOKEN"],
    ]
    db = f"sqlite:///{tmp_path}/store/"
    assert main([*shlex.split(lines[0])[1:], "--db", db]) == 0
    token = capsys.readouterr().out.strip()
    token_id = token[4:16]
    assert main([*shlex.split(lines[1])[1:], "--db", db]) == 0
    listing = capsys.readouterr().out
    assert f"{token_id}  acme     write  ci    active" in listing and token not in listing

    with serving(db, "0.0.0.0", tmp_path / "serve.log") as base:
        url = shlex.split(lines[3])[-1].replace("http://127.0.0.1:8000", base)
        assert get(url, None)[0] == 401
        status, body = get(url, token)
        assert (status, body["total"]) == (200, 0)
        assert main([*shlex.split(lines[2].replace("TOKEN_ID", token_id))[1:], "--db", db]) == 0
        assert capsys.readouterr().out == f"revoked token {token_id}\n"
        assert get(url, token)[0] == 401


def get(url: str, token: str | None) -> tuple[int, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


PORT_TAKEN = "address already in use"
"""What uvicorn says when another process took the free port between `free_port` and its bind."""


@contextlib.contextmanager
def serving(db: str, host: str, log: Path) -> Iterator[str]:
    for attempt in range(3):
        port = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(EVALEDGER), "serve", "--host", host, "--port", str(port), "--db", db],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        base = f"http://127.0.0.1:{port}"
        try:
            if _answers(proc, base, log, retry=attempt < 2):
                break
        except BaseException:
            _stop(proc)
            raise
    try:
        yield base
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _answers(proc: subprocess.Popen[bytes], base: str, log: Path, retry: bool) -> bool:
    """Wait for /health; False when the port was taken meanwhile (by another test's process)
    and `retry`: the caller starts the server again on another port."""
    deadline = time.monotonic() + 60  # a bound on waiting, never an assertion on speed
    while True:
        if proc.poll() is not None:
            if retry and PORT_TAKEN in log.read_text(errors="replace"):
                return False
            raise AssertionError(log.read_text())
        try:
            if get(f"{base}/health", None)[0] == 200:
                return True
        except (urllib.error.URLError, ConnectionError):
            pass
        assert time.monotonic() < deadline, "serve did not answer /health"
        time.sleep(0.1)


def test_cli_baselines_are_per_project(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", store_url]
    run_ids = {}
    for project in ("p1", "p2"):
        path = tmp_path / f"{project}.json"
        path.write_text(json.dumps(tenant_bundle(project)))
        assert main(["import", str(path), "--json", *db]) == 0
        run_ids[project] = json.loads(capsys.readouterr().out)["imported"][0]["run_id"]
        key = tenant_bundle(project)["run"]["key"]
        approve = ["baseline", "approve", key, "--project", project, "--reason", "release"]
        assert main([*approve, *db]) == 0
        capsys.readouterr()
    show = [
        "baseline",
        "show",
        "--agent",
        "northwind-support",
        "--suite",
        "northwind-support-voice",
    ]
    for project in ("p1", "p2"):
        assert main([*show, "--project", project, "--json", *db]) == 0
        assert json.loads(capsys.readouterr().out)["run_id"] == run_ids[project]
    with pytest.raises(SystemExit) as exit_:
        main(["baseline", "approve", tenant_bundle("p1")["run"]["key"], "--project", "p1", *db])
    assert exit_.value.code == 2
    assert "reason: approving a baseline needs a reason" in capsys.readouterr().err


PUBLIC_ROUTES = {"/health", "/ready"}
"""Probes a load balancer sends without a token (issue 24: /ready like /health)."""


def test_every_route_but_health_is_behind_the_router_level_auth(tenants: Tenants) -> None:
    # A new router joins with `app.include_router(router, dependencies=AUTH)`; one that forgets
    # would serve every project to anyone: this names it. Every operation declares the token,
    # and every write answers 403 to a read token before it looks at its input.
    doc = tenants.client.get("/openapi.json").json()
    undeclared, unchecked = [], []
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            if path in PUBLIC_ROUTES:
                continue
            if {"token": []} not in operation.get("security", []):
                undeclared.append(f"{method.upper()} {path}")
            if method != "get":
                concrete = re.sub(r"\{[a-z_]+\}", "00000000-0000-0000-0000-000000000000", path)
                r = tenants.call("a-read", method.upper(), concrete)
                if r.status_code != 403:
                    unchecked.append(f"{method.upper()} {path}: {r.status_code}")
    assert (undeclared, unchecked) == ([], [])
    assert len(doc["paths"]) > len(PUBLIC_ROUTES)


def test_the_web_report_shows_a_project_token_its_project_only(
    tenants: Tenants, tmp_path: Path
) -> None:
    # Issue 21: a project token sees its own project's runs; another's run is the HTML 404.
    r = tenants.call("a-admin", "GET", "/ui/")
    assert r.status_code == 200
    assert f'data-run-id="{tenants.runs["a"]}"' in r.text
    assert tenants.runs["b"] not in r.text
    other = tenants.call("a-admin", "GET", f"/ui/runs/{tenants.runs['b']}")
    assert (other.status_code, other.headers["content-type"][:9]) == (404, "text/html")
    # Without a token or a session: the sign-in form.
    r = tenants.client.get("/ui/", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/ui/signin?next=%2Fui%2F")
    services = build_services(Settings(db=f"sqlite:///{tmp_path}/open/"))
    try:
        with TestClient(create_app(services=services)) as open_client:
            assert open_client.get("/ui/").status_code == 200
    finally:
        services.close()


def test_a_judging_job_of_b_is_not_found_for_a(tenants: Tenants) -> None:
    from datetime import UTC, datetime
    from uuid import UUID, uuid4

    from evaledger.api.routes.judging import JobStatus, JudgeJob, get_jobs, job_queue
    from evaledger.domain.ledger import Context

    t = tenants
    job = JudgeJob(
        job_id=uuid4(),
        run_id=UUID(t.runs["b"]),
        status=JobStatus.RUNNING,
        cases_total=3,
        cases_done=1,
        created_at=datetime(2026, 11, 26, tzinfo=UTC),
    )

    class _Request:  # get_jobs only reads the app's state
        app = t.client.app

    get_jobs(_Request()).put(job)  # type: ignore[arg-type]
    queue = job_queue(_Request.app.state.services)  # type: ignore[attr-defined]
    if queue is not None:  # PostgreSQL: the durable queue holds the jobs (issue 24)
        ctx = Context(actor="b", project="tenant-b")
        queued = queue.enqueue({}, job.run_id, ["openai:gpt-4.1"], 3, ctx, "tenant-b")
        job = job.model_copy(update={"job_id": queued.job_id, "cases_done": 0})
    r = t.call("a-admin", "GET", f"/jobs/{job.job_id}")
    assert (r.status_code, r.json()["code"]) == (404, "not_found"), r.text
    own = t.call("b-admin", "GET", f"/jobs/{job.job_id}")
    assert own.status_code == 200, own.text
    assert (own.status_code, own.json()["cases_done"], own.json()["run_id"]) == (
        200,
        job.cases_done,
        t.runs["b"],
    )
