"""The compare page reads no more than a page needs: the judge-error note of each run (and whether
a run's cost is known) is counted by the database (no score decoded) and follows every change of
the run's cases (SQLite and PostgreSQL). Where the runs carry the source's own scores (issue 18), the page shows each source
metric in both runs with its delta and each named score with its paired interval, as the
comparison engine gives them.
"""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.web.filters import fmt_num, fmt_signed
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import MetricScore
from evaledger.domain.ledger import Context
from tests.api.test_web import client as client  # the fixture
from tests.api.test_web import field, html, imported
from tests.conftest import FIXTURES
from tests.helpers import bundle, case, scores

GRADED = FIXTURES / "scorers" / "inspect-graded_qa.eval"


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
    store_services.ledger.override_verdict(
        case_id,
        ops,
        verdict_id=facts.verdicts[0].verdict_id,
        metric_scores=[MetricScore.model_validate(s) for s in scores(3)],
        reason="scored by hand",
    )
    store_services.sync()
    assert reads.judge_error_count(run_id) == reference() == 1


def test_a_cost_is_reported_when_any_case_gave_one_even_zero(store_services: Services) -> None:
    ops = Context(actor="ops")
    found = {}
    for key, cost in (("unknown", None), ("zero", 0.0), ("paid", 0.5)):
        data = bundle(key=key)
        data["cases"] = [case("a", 4), case("b", 4)]
        if cost is not None:
            data["cases"][1]["cost_usd"] = cost
        run = store_services.ledger.import_bundle(RunBundle.model_validate(data), ops).run_id
        found[key] = run
    store_services.sync()
    reported = {k: store_services.reads.cost_reported(r) for k, r in found.items()}
    assert reported == {"unknown": False, "zero": True, "paid": True}


def test_the_compare_page_says_each_runs_judge_errors(client: TestClient) -> None:
    baseline = imported(client, [case("a", 4), judge_error("b")], key="base")
    candidate = imported(client, [case("a", 4), case("b", 4)], key="cand")
    page = html(client.get(f"/ui/compare?baseline={baseline}&candidate={candidate}"))
    assert field(page, "judge_error_policy.baseline") == (
        "baseline: 1 judge error counted as 0 (judge_errors: score_zero)"
    )
    assert 'data-field="judge_error_policy.candidate"' not in page


def _cells(page: str, table: str) -> dict[str, dict[str, str]]:
    body = page.split(f'id="{table}"', 1)[1].split("</tbody>", 1)[0]
    out: dict[str, dict[str, str]] = {}
    for metric, row in re.findall(r'<tr data-metric="([^"]+)">(.*?)</tr>', body, re.S):
        cells = re.findall(r'data-field="([^"]+)">(.*?)</td>', row, re.S)
        out[metric] = {k: re.sub(r"<[^>]+>", "", v).strip() for k, v in cells}
    return out


def test_compare_of_two_imported_inspect_runs_shows_the_named_scores_with_paired_intervals(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from evaledger.api.cli import main

    runs = []
    for key in ("graded-a", "graded-b"):
        assert main(["import", str(GRADED), "--run-key", key, "--db", sqlite_url, "--json"]) == 0
        runs.append(orjson.loads(capsys.readouterr().out)["imported"][0]["run_id"])
    services = build_services(Settings(db=sqlite_url))
    try:
        with TestClient(create_app(services=services), base_url="http://localhost") as client:
            page = html(client.get(f"/ui/compare?baseline={runs[0]}&candidate={runs[1]}"))
            compared = client.get(
                f"/runs/compare?baseline_run_id={runs[0]}&candidate_run_id={runs[1]}"
            ).json()
    finally:
        services.close()
    agg = compared["aggregate"]
    base, cand = (
        agg["baseline_metrics"]["scorer_metrics"],
        agg["candidate_metrics"]["scorer_metrics"],
    )
    assert "model_graded_qa/accuracy" in base
    source = _cells(page, "source-metrics")
    assert set(source) == set(base) | set(cand)
    for name, cells in source.items():
        assert cells["baseline"] == fmt_num(base.get(name), 4)
        assert cells["candidate"] == fmt_num(cand.get(name), 4)
        assert cells["delta"] == fmt_signed(cand[name] - base[name], 4)
    named = _cells(page, "named-scores")
    assert [n["name"] for n in compared["named_scores"]] == list(named)
    for n in compared["named_scores"]:
        cells, ci = named[n["name"]], n["paired"]
        assert cells["baseline"] == fmt_num(n["baseline_mean"], 4)
        assert cells["delta"] == fmt_signed(n["mean_delta"], 4)
        interval = f"[{fmt_signed(ci['low'], 4)}, {fmt_signed(ci['high'], 4)}] (n={ci['n']})"
        assert cells["ci"] == interval
        assert cells["verdict"] == n["verdict"].replace("_", " ")


def test_runs_without_source_scores_show_no_source_section(client: TestClient) -> None:
    baseline = imported(client, [case("a", 4)], key="base")
    candidate = imported(client, [case("a", 2)], key="cand")
    page = html(client.get(f"/ui/compare?baseline={baseline}&candidate={candidate}"))
    assert 'id="source-h"' not in page
