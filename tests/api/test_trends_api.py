"""GET /projects/{project}/series, `evaledger trend` and /ui/trends over the same use case."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Settings, build_services
from evaledger.application import trends
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_serve import EVALEDGER
from tests.application.test_trends import CTX, load

OWNER = Context(actor="ops")


def test_the_series_route_answers_the_use_case_and_only_the_tokens_project(
    store_url: str,
) -> None:
    services = build_services(Settings(db=store_url, auth="tokens"))
    try:
        load(services)
        load(services, project="elsewhere")
        shop = services.ledger.issue_token("shop", TokenScope.READ, "shop-read", OWNER).token
        other = services.ledger.issue_token("elsewhere", TokenScope.READ, "o", OWNER).token
        expected = trends.read_series(
            services, trends.parse_query(project="shop", measure="cost", by="hour"), CTX
        )
        with TestClient(create_app(services=services)) as client:
            mine = {"Authorization": f"Bearer {shop}"}
            r = client.get("/projects/shop/series?measure=cost&by=hour", headers=mine)
            assert r.status_code == 200, r.text
            assert r.json() == expected.model_dump(mode="json")
            assert len(r.json()["lines"]) == 2

            theirs = {"Authorization": f"Bearer {other}"}
            r = client.get("/projects/shop/series", headers=theirs)
            assert r.status_code == 404 and "lines" not in r.json()
            assert client.get("/projects/shop/series").status_code == 401
            assert client.get("/ui/trends?project=shop", headers=theirs).status_code == 404

            for query, field in (
                ("measure=p99", "measure"),
                ("by=week", "by"),
                ("since=2026-11-20T00:00:00", "since"),
                ("since=2026-11-21T00:00:00Z&until=2026-11-20T00:00:00Z", "until"),
            ):
                r = client.get(f"/projects/shop/series?{query}", headers=mine)
                assert r.status_code == 422, (query, r.text)
                assert field in json.dumps(r.json()), (query, r.json())
    finally:
        services.close()


def test_trend_prints_the_series_as_a_table_and_as_json(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    services = build_services(Settings(db=db))
    try:
        load(services)
        expected = trends.read_series(
            services, trends.parse_query(project="shop", version="1.0"), CTX
        )
    finally:
        services.close()
    base = [str(EVALEDGER), "trend", "--db", db, "--project", "shop", "--version", "1.0"]
    done = subprocess.run([*base, "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected.model_dump(mode="json")
    table = subprocess.run(base, capture_output=True, text=True)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["agent", "version", "day", "pass_rate", "n", "runs"]
    assert lines[1].split()[:5] == ["support-bot", "1.0", "2026-11-20", "0.6000", "5"]
    bad = subprocess.run([*base, "--measure", "p99"], capture_output=True, text=True)
    assert bad.returncode == 2 and "measure" in bad.stderr
