"""Bad input gets a clear error naming the field (HTTP 4xx, CLI exit 2) and stores nothing."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.api.cli import main
from tests.helpers import bundle, case, event_count


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


def _with_first_score(data: dict[str, Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["cases"][0]["verdicts"][0]["metric_scores"][0]["score"] = value
    return data


def _with_metric(data: dict[str, Any], **fields: Any) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["cases"][0]["verdicts"][0]["metric_scores"][0].update(fields)
    return data


BAD_BUNDLES: dict[str, tuple[Any, str]] = {
    "wrong format tag": ({**bundle(), "format": "evaledger.run-bundle/9"}, "format"),
    "score of 6": (_with_first_score(bundle(), 6), "metric_scores.0.score"),
    "score of 4.5": (_with_first_score(bundle(), 4.5), "metric_scores.0.score"),
    "unknown metric": (_with_metric(bundle(), metric="charm"), "metric_scores[0].metric"),
    "binary metric given a score": (
        _with_metric(bundle(), metric="task_completion", score=5),
        "metric_scores[0]",
    ),
    "turn outside the transcript": (_with_metric(bundle(), turns=[99]), "metric_scores[0].turns"),
    "unknown metric in config": (
        bundle(config={"judge": {"metrics": [{"metric": "charm", "weight": 1}]}}),
        "config.judge.metrics[0].metric",
    ),
    "task_completion without a weight": (
        bundle(
            config={
                "judge": {"metrics": [{"metric": "tool_routing"}, {"metric": "task_completion"}]}
            }
        ),
        "config.judge.metrics[1].weight",
    ),
    "negative weight": (
        bundle(config={"judge": {"metrics": [{"metric": "tool_routing", "weight": -1}]}}),
        "config.judge.metrics[0].weight",
    ),
    "weights summing to 0": (
        bundle(config={"judge": {"metrics": [{"metric": "tool_routing", "weight": 0}]}}),
        "config.judge.metrics",
    ),
}


@pytest.mark.parametrize("name", BAD_BUNDLES)
def test_bad_bundle_over_http_is_422_naming_the_field_and_stores_nothing(
    client: TestClient, services: Services, name: str
) -> None:
    body, field = BAD_BUNDLES[name]
    before = event_count(services)
    r = client.post("/bundles", json=body)
    assert r.status_code == 422, r.text
    error = r.json()
    assert error["status"] == 422 and error["code"] == "invalid"
    assert field in error["detail"], error["detail"]
    assert event_count(services) == before


@pytest.mark.parametrize("name", BAD_BUNDLES)
def test_bad_bundle_on_the_cli_exits_2_naming_the_field_and_stores_nothing(
    services: Services, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    body, field = BAD_BUNDLES[name]
    path = tmp_path / "bad.json"
    path.write_bytes(orjson.dumps(body))
    before = event_count(services)
    with pytest.raises(SystemExit) as exit_:
        main(["import", str(path), "--db", services.settings.db])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert field in err, err
    assert event_count(services) == before


def test_nan_is_rejected(client: TestClient, services: Services) -> None:
    raw = orjson.dumps(bundle()).replace(b'"cost_usd":0.0031', b'"cost_usd":NaN')
    r = client.post("/bundles", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert event_count(services) == 0


def test_malformed_json_is_422_over_http_and_exit_2_on_the_cli(
    client: TestClient, services: Services, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = client.post(
        "/bundles",
        content=b'{"format": "evaledger.run-bundle/1", "run": ',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422
    assert r.json()["code"] == "invalid"
    path = tmp_path / "broken.json"
    path.write_bytes(b'{"format": ')
    with pytest.raises(SystemExit) as exit_:
        main(["import", str(path), "--db", services.settings.db])
    assert exit_.value.code == 2
    assert "malformed JSON" in capsys.readouterr().err
    assert event_count(services) == 0


def test_a_case_for_a_completed_run_is_409_and_stores_nothing(
    client: TestClient, services: Services
) -> None:
    imported = client.post("/bundles", json=bundle()).json()
    before = event_count(services)
    r = client.post(f"/runs/{imported['run_id']}/cases", json=case("late"))
    assert r.status_code == 409
    assert r.json()["code"] == "run_closed"
    r = client.post(
        f"/runs/{imported['run_id']}/cases/batch", json=[case("late-1"), case("late-2")]
    )
    assert r.status_code == 409
    assert event_count(services) == before


def test_a_bad_case_in_a_batch_stores_none_of_the_batch(
    client: TestClient, services: Services
) -> None:
    run = {**bundle()["run"], "status": "running", "key": "batch-run"}
    run_id = client.post("/runs", json=run).json()["id"]
    before = event_count(services)
    bad = case("b")
    bad["verdicts"][0]["metric_scores"][2]["turns"] = [4]
    r = client.post(f"/runs/{run_id}/cases/batch", json=[case("a"), bad])
    assert r.status_code == 422
    assert "cases[1].verdicts[0].metric_scores[2].turns" in r.json()["detail"]
    assert event_count(services) == before


def test_a_binary_metric_over_the_case_endpoint_names_the_field(
    client: TestClient, services: Services
) -> None:
    run = {**bundle()["run"], "status": "running", "key": "verdict-run"}
    run_id = client.post("/runs", json=run).json()["id"]
    case_id = client.post(f"/runs/{run_id}/cases", json={**case("a"), "verdicts": []}).json()["id"]
    before = event_count(services)
    r = client.post(
        f"/cases/{case_id}/verdicts",
        json={"metric_scores": [{"metric": "task_completion", "score": 3}]},
    )
    assert r.status_code == 422
    assert "metric_scores[0]" in r.json()["detail"] and "binary" in r.json()["detail"]
    r = client.post(
        f"/cases/{case_id}/verdicts",
        json={"metric_scores": [{"metric": "tool_routing", "score": 5, "turns": [4]}]},
    )
    assert r.status_code == 422
    assert "turns" in r.json()["detail"]
    assert event_count(services) == before
