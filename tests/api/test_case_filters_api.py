"""The cases table's filters through their entry points (issue 36): `GET /runs/{id}/cases`,
`show` and the run page, each giving the cases `CaseFilter` keeps; bad input names the field."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.application import cases, runs
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from tests.api.test_cli import Cli
from tests.conftest import EXAMPLE_BUNDLE
from tests.helpers import bundle

CTX = Context(actor="reviewer")
PASSED, FAILED, ERRORED = "refund-late-delivery", "refund-above-limit", "store-hours"


@pytest.fixture
def client(services: Services) -> Iterator[tuple[TestClient, str]]:
    run_id = runs.import_run(services, RunBundle.model_validate(bundle()), CTX).run_id
    services.sync()
    ids = {k: c for (k, _), c in services.reads.first_cases(run_id, [FAILED]).items()}
    cases.flag_case(services, ids[FAILED], CTX, reason="above the limit")
    with TestClient(create_app(services=services)) as c:
        yield c, str(run_id)


@pytest.mark.parametrize(
    ("params", "keys"),
    [
        ({"min_score": "50"}, [PASSED]),
        ({"min_latency_ms": "700", "max_latency_ms": "2000"}, [FAILED]),
        ({"metric": "instruction_compliance", "metric_max": "1"}, [FAILED]),
        ({"flag": "flagged"}, [FAILED]),
        ({"label": "unlabelled", "status": "errored"}, [ERRORED]),
        ({"status": "passed"}, [PASSED]),
    ],
)
def test_the_api_filters_the_cases(
    client: tuple[TestClient, str], params: dict[str, str], keys: list[str]
) -> None:
    c, run_id = client
    r = c.get(f"/runs/{run_id}/cases", params=params)
    assert r.status_code == 200, r.text
    assert [row["test_case_key"] for row in r.json()["data"]] == keys
    assert r.json()["total"] == len(keys)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"min_score": "9", "max_score": "1"}, "min_score"),
        ({"metric_min": "1"}, "metric"),
        ({"flag": "red"}, "flag"),
        ({"min_latency_ms": "nan"}, "min_latency_ms"),
    ],
)
def test_the_api_names_a_bad_filter(
    client: tuple[TestClient, str], params: dict[str, str], field: str
) -> None:
    c, run_id = client
    r = c.get(f"/runs/{run_id}/cases", params=params)
    assert r.status_code == 422, r.text
    assert field in json.dumps(r.json())


def _table_keys(page: str) -> list[str]:
    table = page.split('id="cases"')[1].split("</table>")[0]
    return re.findall(r'<a href="/ui/cases/[^"]+">([^<]+)</a>', table)


def test_the_run_page_filters_and_keeps_the_filters_in_its_links(
    client: tuple[TestClient, str],
) -> None:
    c, run_id = client
    page = c.get(f"/ui/runs/{run_id}", params={"min_score": "40", "max_score": "60"}).text
    assert _table_keys(page) == [FAILED]
    assert "min_score=40&amp;max_score=60" in page  # the sort links keep them
    flagged = c.get(f"/ui/runs/{run_id}", params={"flag": "flagged", "min_latency": "1000"})
    assert _table_keys(flagged.text) == [FAILED]
    none = c.get(f"/ui/runs/{run_id}", params={"max_latency": "10"}).text
    assert "No cases match these filters" in none
    bad = c.get(f"/ui/runs/{run_id}", params={"min_score": "9", "max_score": "1"})
    assert bad.status_code == 422 and "min_score" in bad.text


def test_show_filters_its_cases(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    cli = Cli(capsys, sqlite_url)
    assert cli("import", str(EXAMPLE_BUNDLE))[0] == 0
    run = cli.json("runs")["data"][0]["run_key"]
    shown = cli.json("show", run, "--min-score", "50", "--max-latency", "700")
    assert [c["test_case_key"] for c in shown["cases"]] == [PASSED]
    assert shown["cases_matching"] == 1
    metric = cli.json("show", run, "--metric", "instruction_compliance", "--metric-max", "0")
    assert [c["test_case_key"] for c in metric["cases"]] == [FAILED]
    code, out, err = cli("show", run, "--failed", "--label", "unlabelled")
    assert code == 0 and FAILED in out and PASSED not in out
    for bad in (["--min-score", "9", "--max-score", "1"], ["--metric-min", "1"]):
        code, _, err = cli("show", run, *bad)
        assert code == 2, err
    assert cli("show", run, "--min-score", "inf")[0] == 2
