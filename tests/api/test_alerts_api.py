"""/projects/{project}/online/alerts and `evaledger online alert` (issue 33)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_serve import EVALEDGER
from tests.application.test_trends import load
from tests.helpers import event_count
from tests.webhook import Hook, webhook

OWNER = Context(actor="ops")


@pytest.fixture
def hook() -> Iterator[Hook]:
    with webhook() as served:
        yield served


def test_alerts_over_http_are_scoped_to_the_tokens_project(store_url: str, hook: Hook) -> None:
    services = build_services(Settings(db=store_url, auth="tokens", alert_private_webhooks=True))
    try:
        load(services)
        write = services.ledger.issue_token("shop", TokenScope.WRITE, "shop-ops", OWNER).token
        read = services.ledger.issue_token("shop", TokenScope.READ, "shop-read", OWNER).token
        other = services.ledger.issue_token("elsewhere", TokenScope.WRITE, "o", OWNER).token
        mine, reader = ({"Authorization": f"Bearer {t}"} for t in (write, read))
        theirs = {"Authorization": f"Bearer {other}"}
        rule = {"name": "low-pass", "below": 0.9, "window": "1h", "webhook": hook.url}
        with TestClient(create_app(services=services)) as client:
            r = client.post("/projects/shop/online/alerts", json=rule, headers=mine)
            assert r.status_code == 200, r.text
            assert r.json()["defined_by"].startswith("shop-ops (token ")
            assert r.json()["window_s"] == 3600 and r.json()["enabled"] is True

            listed = client.get("/projects/shop/online/alerts", headers=reader)
            assert [a["name"] for a in listed.json()["data"]] == ["low-pass"]
            # A read token lists but does not add; another project's token finds nothing.
            assert (
                client.post(
                    "/projects/shop/online/alerts", json={**rule, "name": "x"}, headers=reader
                ).status_code
                == 403
            )
            for method, path in (
                ("GET", "/projects/shop/online/alerts"),
                ("POST", "/projects/shop/online/alerts/low-pass/disable"),
                ("POST", "/projects/shop/online/alerts/check"),
            ):
                assert client.request(method, path, headers=theirs).status_code == 404, path
            assert (
                client.post(
                    "/projects/shop/online/alerts", json={**rule, "name": "x"}, headers=theirs
                ).status_code
                == 404
            )

            before = event_count(services)
            for bad, field in (
                ({"webhook": "file:///etc/passwd"}, "webhook"),
                ({"window": "1w"}, "window"),
                ({"measure": "p99"}, "measure"),
                ({"below": None}, "below"),
            ):
                r = client.post(
                    "/projects/shop/online/alerts", json={**rule, "name": "b", **bad}, headers=mine
                )
                assert r.status_code == 422, (bad, r.text)
                assert field in json.dumps(r.json()), (bad, r.json())
            assert event_count(services) == before

            r = client.post(
                "/projects/shop/online/alerts/low-pass/disable",
                json={"reason": "too noisy"},
                headers=mine,
            )
            assert r.status_code == 200 and r.json()["enabled"] is False
            assert client.post("/projects/shop/online/alerts/check", headers=mine).json() == {
                "data": []
            }
    finally:
        services.close()


def test_the_cli_adds_lists_checks_and_disables(tmp_path: Path, hook: Hook) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    services = build_services(Settings(db=db))
    try:
        load(services)
    finally:
        services.close()
    env = {**os.environ, "EVALEDGER_ALERT_PRIVATE_WEBHOOKS": "1"}
    env.pop("EVALEDGER_DB", None)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(EVALEDGER), "online", "alert", *args, "--db", db, "--project", "shop"],
            capture_output=True,
            text=True,
            env=env,
        )

    added = cli("add", "any-cost", "--measure", "cost", "--above", "0", "--window", "31d",
                "--webhook", hook.url, "--actor", "alice", "--json")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)[0]["defined_by"] == "alice"
    listed = cli("list")
    assert listed.returncode == 0 and "any-cost" in listed.stdout and "> 0" in listed.stdout
    bad = cli("add", "x", "--below", "1", "--webhook", "gopher://example.com/")
    assert bad.returncode == 2 and "webhook" in bad.stderr
    nan = cli("add", "y", "--below", "nan", "--webhook", hook.url)
    assert nan.returncode == 2 and "below" in nan.stderr
    checked = cli("check", "--json")
    assert checked.returncode == 0, checked.stderr
    (reading,) = json.loads(checked.stdout)
    assert reading["name"] == "any-cost"
    disabled = cli("disable", "any-cost", "--reason", "done", "--json")
    assert disabled.returncode == 0 and json.loads(disabled.stdout)[0]["enabled"] is False
    missing = cli("disable", "nope")
    assert missing.returncode == 2 and "nope" in missing.stderr
