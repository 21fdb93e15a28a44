"""The web report's pages rendered through the app (TestClient) for edge cases, and its helpers.

A run with no cases, an errored case, a judge error verdict, a paginated run, an override,
HTML escaping, error pages, offline API docs, and the pure helpers behind the pages.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape as html_escape

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.api.web import views
from evaledger.api.web.filters import fmt_num, fmt_pct
from evaledger.domain.events import GENESIS_HASH
from evaledger.scoring.models import CaseScore, CaseStatus, GateRule
from tests.api.test_serve import EVALEDGER, STARTUP_LIMIT_S, free_port
from tests.helpers import bundle, case


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


def html(response: Any, status: int = 200) -> str:
    assert response.status_code == status, response.text[:2000]
    assert response.headers["content-type"].startswith("text/html")
    return str(response.text)


def imported(client: TestClient, cases: list[dict[str, Any]], **run: Any) -> str:
    data = bundle(**run)
    data["cases"] = cases
    r = client.post("/bundles", json=data)
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def case_ids(client: TestClient, run_id: str) -> dict[str, str]:
    data = client.get(f"/runs/{run_id}/cases").json()["data"]
    return {c["test_case_key"] + f"#{c['repetition']}": c["case_id"] for c in data}


def rows_of(page: str, table: str) -> list[str]:
    body = page.split(f'id="{table}"', 1)[1].split("</tbody>", 1)[0]
    return re.findall(r"<tr data-case-id=\"([^\"]+)\"", body)


def field(page: str, name: str) -> str:
    match = re.search(rf'data-field="{re.escape(name)}">([^<]*)<', page)
    assert match, name
    return match.group(1).strip()


def test_a_run_without_cases(client: TestClient) -> None:
    r = client.post("/runs", json={**bundle()["run"], "key": "empty", "status": "running"})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    page = html(client.get(f"/ui/runs/{run_id}"))
    assert "No cases in this run yet." in page
    assert field(page, "total_executions") == "0"
    assert field(page, "pass_rate") == "—"  # no case decided: no pass rate, never 0 % (issue 18)
    assert field(page, "weighted_metrics_score_pct") == "—"
    assert "Overall score distribution (cases): no values." in page
    listing = html(client.get("/ui/"))
    assert f'data-run-id="{run_id}"' in listing
    assert "Two completed runs are needed for a comparison." in listing


def test_errored_case_and_judge_error_verdict(client: TestClient) -> None:
    judge_error = case("judged-badly", 4)
    judge_error["verdicts"][0].update(
        metric_scores=[], raw_output="I cannot grade this", error="no JSON object in the reply"
    )
    run_id = imported(client, [case("fine", 5), case("broken", status="errored"), judge_error])
    ids = case_ids(client, run_id)

    page = html(client.get(f"/ui/runs/{run_id}"))
    assert field(page, "total_executions") == "3"
    assert field(page, "coverage.errored") == "1"
    assert '<span class="pill s-errored">judge error</span>' in page
    assert rows_of(html(client.get(f"/ui/runs/{run_id}?show=errored")), "cases") == [
        ids["broken#0"]
    ]
    assert rows_of(html(client.get(f"/ui/runs/{run_id}?show=judge_error")), "cases") == [
        ids["judged-badly#0"]
    ]

    errored = html(client.get(f"/ui/cases/{ids['broken#0']}"))
    assert "<strong>Execution error (timeout):</strong> timeout" in errored
    assert "No judge verdict recorded." in errored
    assert field(errored, "gate_rule") == "execution error"
    assert field(errored, "passed") == "no"

    bad = html(client.get(f"/ui/cases/{ids['judged-badly#0']}"))
    assert field(bad, "parse_status") == "unparseable"
    assert "<strong>Judge error:</strong> no JSON object in the reply" in bad
    assert '<pre data-field="raw_output">I cannot grade this</pre>' in bad
    assert field(bad, "overall_score") == "0.00"
    assert field(bad, "gate_rule") == "judge error"


def test_the_case_page_shows_the_chain_and_an_override(client: TestClient) -> None:
    run_id = imported(client, [case("a", 4), case("b", 2)], status="running")
    case_id = case_ids(client, run_id)["b#0"]
    verdict_id = client.get(f"/cases/{case_id}/history").json()["events"][2]["payload"][
        "verdict_id"
    ]
    r = client.post(
        f"/cases/{case_id}/overrides",
        json={"verdict_id": verdict_id, "passed": True, "reason": "rubric misread"},
        headers={"X-Actor": "auditor@example"},
    )
    assert r.status_code == 201, r.text
    explain = client.get(f"/cases/{case_id}/explain").json()
    page = html(client.get(f"/ui/cases/{case_id}"))
    assert field(page, "overall_score") == fmt_num(explain["overall_score"]["value"]) == "40.00"
    assert field(page, "passed") == "yes"
    assert field(page, "gate_rule") == "override"
    assert re.findall(r'data-field="contribution">([^<]*)<', page) == [
        fmt_num(w["contribution"]) for w in explain["weights"]
    ]
    corrections = page.split('id="corrections"', 1)[1].split("</table>", 1)[0]
    assert "<td>override</td>" in corrections
    assert "<td>auditor@example</td>" in corrections
    assert "<td>rubric misread</td>" in corrections
    history = client.get(f"/cases/{case_id}/history").json()["events"]
    assert re.findall(r'data-field="hash"><code class="hash" title="([0-9a-f]+)"', page) == [
        e["hash"] for e in history
    ]
    assert f"Hash chain intact: all {len(history)} events link" in page
    # The run aggregate the case enters is the API's.
    aggregate = client.get(f"/runs/{run_id}").json()["aggregate"]
    assert f"<strong>{fmt_num(aggregate['weighted_metrics_score_pct'])}</strong>" in page


def test_what_if_a_run_config_of_ones_own(client: TestClient) -> None:
    run_id = imported(client, [case("a", 4)])
    case_id = case_ids(client, run_id)["a#0"]
    config = bundle()["run"]["config"]
    config["judge"]["pass_threshold"] = 90.0
    spec = json.dumps(config)
    own = html(client.get(f"/ui/cases/{case_id}"))
    assert (field(own, "overall_score"), field(own, "passed")) == ("80.00", "yes")
    what_if = html(client.get("/ui/cases/" + case_id, params={"spec": spec}))
    explain = client.get(f"/cases/{case_id}/explain", params={"spec": spec}).json()
    assert explain["gate"]["passed"] is False
    assert (field(what_if, "overall_score"), field(what_if, "passed")) == ("80.00", "no")
    assert "what if: not the run&#39;s spec" in what_if
    assert str(html_escape(spec)) in what_if  # the pasted config stays in the form


def test_text_from_the_ledger_is_escaped(client: TestClient) -> None:
    c = case("xss", 4)
    c["transcript"][1]["content"] = "<script>alert(1)</script>"
    c["verdicts"][0]["raw_output"] = '<img src=x onerror="alert(2)">'
    run_id = imported(client, [c])
    page = html(client.get(f"/ui/cases/{case_ids(client, run_id)['xss#0']}"))
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page


def test_a_paginated_run_filters_and_sorts_every_case(client: TestClient) -> None:
    cases = [case(f"k{i:03d}", i % 6) for i in range(120)]
    run_id = imported(client, cases)
    scores = client.get(f"/runs/{run_id}/cases", params={"limit": 1000}).json()["data"]
    first = html(client.get(f"/ui/runs/{run_id}"))
    assert rows_of(first, "cases") == [s["case_id"] for s in scores[:50]]
    assert "Page 1 of 3" in first
    last = html(client.get(f"/ui/runs/{run_id}?page=3"))
    assert rows_of(last, "cases") == [s["case_id"] for s in scores[100:]]
    beyond = html(client.get(f"/ui/runs/{run_id}?page=99"))
    assert rows_of(beyond, "cases") == rows_of(last, "cases")

    # Scores 0..5 twenty times each: the best 50 are twenty 100.0s, twenty 80.0s, ten 60.0s.
    by_score = html(client.get(f"/ui/runs/{run_id}?sort=score&desc=true"))
    overall = {s["case_id"]: s["overall_score"] for s in scores}
    shown = [overall[i] for i in rows_of(by_score, "cases")]
    assert shown == [100.0] * 20 + [80.0] * 20 + [60.0] * 10
    assert '<th scope="col" class="num" aria-sort="descending">' in by_score
    by_key = html(client.get(f"/ui/runs/{run_id}?sort=key&desc=true&page=3"))
    assert rows_of(by_key, "cases") == [s["case_id"] for s in reversed(scores[:20])]

    below = html(client.get(f"/ui/runs/{run_id}?metric=tool_routing&below=2"))
    expected = [s["case_id"] for s in scores if s["overall_score"] < 40.0]
    assert rows_of(below, "cases") == expected[:50]
    assert f"{len(expected)} of 120 cases" in below
    failed = html(client.get(f"/ui/runs/{run_id}?show=failed&q=k01"))
    assert rows_of(failed, "cases") == [
        s["case_id"] for s in scores if s["passed"] is False and "k01" in s["test_case_key"]
    ]


def test_compare_rollup_and_scorecard_pages(client: TestClient) -> None:
    base = imported(client, [case("alpha", 5), case("beta", 5)], key="base")
    cand = imported(client, [case("alpha", 5), case("beta", 1)], key="cand")
    api = client.get(f"/runs/compare?baseline_run_id={base}&candidate_run_id={cand}").json()
    page = html(client.get(f"/ui/compare?baseline={base}&candidate={cand}"))
    assert field(page, "regression_detected") == "regression detected"
    assert field(page, "total_regressions") == str(api["aggregate"]["total_regressions"]) == "1"
    for reason in api["verdict"]["reasons"]:
        assert reason in page
    only = html(client.get(f"/ui/compare?baseline={base}&candidate={cand}&show=improvement"))
    assert "No case in this class." in only
    md = client.get(f"/ui/compare.md?baseline={base}&candidate={cand}")
    assert md.headers["content-type"].startswith("text/markdown")
    assert "beta" in md.text
    assert "alpha" not in md.text

    rollup = client.get(f"/rollups?run_id={base}&run_id={cand}&rows=run&columns=test").json()
    pivot = html(client.get(f"/ui/rollup?run_id={base}&run_id={cand}&rows=run&columns=test"))
    assert field(pivot, "score") == fmt_num(rollup["summary"]["score"], 1)
    assert html(client.get("/ui/rollup")).count('name="run_id"') == 2

    card = html(client.get(f"/ui/runs/{base}/scorecard"))
    assert "has no grading section" in card
    graded = client.get(f"/runs/{base}/grade?preset=ifixai-v1").json()
    card = html(client.get(f"/ui/runs/{base}/scorecard?preset=ifixai-v1"))
    assert field(card, "grade") == graded["overall"]["grade"]


@pytest.mark.parametrize(
    ("url", "status", "detail"),
    [
        ("/ui/runs/{missing}", 404, "no run"),
        ("/ui/cases/{missing}", 404, "no case"),
        ("/ui/?label=abc", 422, "label: use key=value"),
        ("/ui/?status=done", 422, "status: one of"),
        ("/ui/?created_from=yesterday", 422, "created_from: not a date"),
        ("/ui/runs/{run}?below=low", 422, "below: not a number"),
        ("/ui/compare?baseline=x&candidate={run}", 404, "baseline: no run with the id or key"),
        ("/ui/runs/{run}?sort=bogus", 422, "query.sort: Input should be"),
        ("/ui/runs/{run}?page=0", 422, "query.page: Input should be greater than"),
        ("/ui/no-such-page", 404, "Not Found"),
        ("/ui/compare?baseline={run}&candidate={run}&max_pass_rate_drop=-1", 422, "≥ 0"),
        ("/ui/compare?baseline={open}&candidate={run}", 400, "only completed runs"),
        ("/ui/runs/{run}/scorecard?preset=nope", 422, "unknown grading preset"),
        ("/ui/cases/{case}?spec=%7Bnot%20json", 422, "spec: invalid spec"),
    ],
)
def test_bad_input_is_an_html_error_page_naming_the_field(
    client: TestClient, url: str, status: int, detail: str
) -> None:
    run = imported(client, [case("a", 4)])
    open_run = imported(client, [case("a", 4)], key="open", status="running")
    case_id = next(iter(case_ids(client, run).values()))
    url = url.format(missing=uuid4(), run=run, open=open_run, case=case_id)
    page = html(client.get(url), status)
    assert detail in page
    assert '<p role="alert" class="alert">' in page


def test_api_docs_and_assets_are_served_by_the_app(client: TestClient) -> None:
    docs = html(client.get("/docs"))
    scripts = re.findall(r'(?:src|href)="([^"]+)"', docs)
    assert scripts and all(s.startswith("/") for s in scripts), scripts
    for asset in scripts:
        assert client.get(asset).status_code == 200, asset
    assert "https://" not in docs
    redoc = html(client.get("/redoc"))
    assert "https://" not in redoc.replace("https://fonts", "")
    assert client.get("/ui/static/app.css").headers["content-type"].startswith("text/css")
    assert client.get("/", follow_redirects=False).headers["location"] == "/ui/"
    # The pages stay out of the published API.
    assert not [p for p in client.get("/openapi.json").json()["paths"] if p.startswith("/ui")]


def test_the_pages_read_sqlite_and_postgresql_alike(store_services: Services) -> None:
    with TestClient(create_app(services=store_services)) as client:
        run_id = imported(client, [case("a", 5), case("b", status="errored")])
        aggregate = client.get(f"/runs/{run_id}").json()["aggregate"]
        page = html(client.get(f"/ui/runs/{run_id}"))
        assert field(page, "pass_rate") == fmt_pct(aggregate["pass_rate"]) == "50.0%"
        assert field(page, "coverage.errored") == "1"
        ids = case_ids(client, run_id)
        assert rows_of(page, "cases") == [ids["a#0"], ids["b#0"]]
        audit = html(client.get(f"/ui/cases/{ids['a#0']}"))
        assert field(audit, "overall_score") == "100.00"
        history = client.get(f"/cases/{ids['a#0']}/history").json()["events"]
        assert [e["type"] for e in history] == [
            "CaseOpened",
            "TranscriptRecorded",
            "JudgeVerdictRecorded",
        ]
        assert "Hash chain intact: all 3 events link" in audit
        listing = html(client.get("/ui/?status=completed"))
        assert f'data-run-id="{run_id}"' in listing


# -- helpers ----------------------------------------------------------------------------------


def score(key: str, overall: float | None, status: CaseStatus) -> views.CaseRow:
    model = CaseScore(
        case_id=uuid4(),
        run_id=uuid4(),
        test_case_key=key,
        test_id=key,
        repetition=0,
        status=status,
        overall_score=overall,
        passed={CaseStatus.PASSED: True, CaseStatus.FAILED: False}.get(status),
        errored=status is CaseStatus.ERRORED,
        scored=overall is not None,
        gate=GateRule.SCORE_THRESHOLD,
        gate_reason="",
    )
    return views.CaseRow.of(model.model_dump(mode="json"))


def test_select_cases_sorts_missing_values_last_both_ways() -> None:
    rows = [
        score("a", 50.0, CaseStatus.FAILED),
        score("b", None, CaseStatus.PENDING),
        score("c", 90.0, CaseStatus.PASSED),
    ]
    up = views.select_cases(rows, set(), views.CaseQuery(sort=views.SortKey.SCORE))
    down = views.select_cases(rows, set(), views.CaseQuery(sort=views.SortKey.SCORE, desc=True))
    assert [s.test_case_key for s in up.rows] == ["a", "c", "b"]
    assert [s.test_case_key for s in down.rows] == ["c", "a", "b"]
    flaky = views.select_cases(rows, {("c", "")}, views.CaseQuery(show=views.Show.FLAKY))
    assert [s.test_case_key for s in flaky.rows] == ["c"]
    empty: views.CasePage[views.CaseRow] = views.select_cases([], set(), views.CaseQuery(page=4))
    assert (empty.rows, empty.matching, empty.page, empty.pages, empty.first) == ([], 0, 1, 1, 0)


def test_histograms() -> None:
    bins = views.histogram([0.0, 9.99, 10.0, 100.0, 55.0], 0.0, 100.0)
    assert [b.count for b in bins] == [2, 1, 0, 0, 0, 1, 0, 0, 0, 1]
    assert (bins[0].low, bins[-1].high) == (0.0, 100.0)
    latency = views.latency_bins([120.0, 1_565.0, 4_000.0])
    assert (latency[-1].high, [b.count for b in latency]) == (
        4000.0,
        [1, 0, 0, 1, 0, 0, 0, 0, 0, 1],
    )
    assert views.latency_bins([]) == []


def test_chain_links_name_the_broken_link() -> None:
    events = [
        {"version": 1, "prev_hash": GENESIS_HASH, "hash": "h1"},
        {"version": 2, "prev_hash": "h1", "hash": "h2"},
        {"version": 3, "prev_hash": "edited", "hash": "h3"},
    ]
    assert [link.linked for link in views.chain_links(events)] == [True, True, False]


def test_formats() -> None:
    assert (fmt_pct(0.6), fmt_pct(None), fmt_num(70.833), fmt_num(None)) == (
        "60.0%",
        "—",
        "70.83",
        "—",
    )


@pytest.mark.slow
def test_serve_open_opens_the_web_report(tmp_path: Path) -> None:
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(browser.stat().st_mode | stat.S_IEXEC)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    env["BROWSER"] = f"{browser} %s"
    db = f"sqlite:///{tmp_path}/store/"
    proc = subprocess.Popen(
        [str(EVALEDGER), "serve", "--open", "--port", str(port), "--db", db],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while not opened.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert opened.read_text().strip() == f"http://127.0.0.1:{port}/ui/"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
