"""Issue 30: one headline per run, the same strings in every view.

An Inspect, a promptfoo, a tau-bench and a Connexity run, each imported from its real output,
read through `runs`, `show`, their `--json`, the web's runs list and run page and the compare
header (CLI and web): each view prints the run's headline metric, its figure, the pass rate and
its rule exactly as listed here. SQLite and PostgreSQL.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from tests.api.test_cli import Cli
from tests.conftest import FIXTURES
from tests.helpers import bundle, case

GRADED = FIXTURES / "scorers" / "inspect-graded_qa.eval"
PROMPTFOO = FIXTURES / "peers" / "promptfoo" / "sample-export.json"
TAU = FIXTURES / "peers" / "tau-bench" / "gpt-4o-airline.tasks-1-12-41.json"
CONNEXITY = FIXTURES / "peers" / "connexity" / "run.completed.json"
OUTCOMES_RULE = "every expected outcome passes, else overall_score >= 75"


class Expected(NamedTuple):
    """A run's headline as every view must print it."""

    path: Path
    label: str
    figure: str
    pass_rate: str
    rule: str
    passed: int
    executions: int

    @property
    def text(self) -> str:
        return f"{self.label} {self.figure}"

    @property
    def summary(self) -> str:
        return (
            f"{self.text} · pass rate {self.pass_rate} ({self.passed} of {self.executions} "
            f"cases; passes when {self.rule})"
        )


RUNS = {
    # Inspect's own log reports model_graded_qa accuracy 0.625 (checked below).
    "inspect": Expected(
        GRADED, "model_graded_qa/accuracy", "0.6250", "40.0%", "model_graded_qa >= 1", 2, 5
    ),
    "promptfoo": Expected(
        PROMPTFOO, "promptfoo@openai:gpt-5/pass_rate", "0.0000", "0.0%", "success >= 1", 0, 4
    ),
    "tau-bench": Expected(TAU, "reward/mean", "0.5833", "58.3%", OUTCOMES_RULE, 7, 12),
    "connexity": Expected(CONNEXITY, "weighted score", "74.80", "50.0%", OUTCOMES_RULE, 3, 6),
}


def test_the_inspect_headline_is_the_figure_inspect_reports() -> None:
    from inspect_ai.log import read_eval_log

    results = read_eval_log(str(GRADED)).results
    assert results is not None
    first = results.scores[0]
    metric = next(iter(first.metrics))
    assert f"{first.name}/{metric}" == RUNS["inspect"].label
    assert f"{first.metrics[metric].value:.4f}" == RUNS["inspect"].figure


def cell(page: str, name: str, within: str | None = None) -> str:
    """The text of the first element `data-field="name"` (in the element holding `within`)."""
    if within is not None:
        page = page[page.index(within) :]
    found = re.search(rf'data-field="{re.escape(name)}"[^>]*>([^<]*)<', page)
    assert found, name
    return html.unescape(found.group(1)).strip()


def run_row(page: str, run_id: str) -> str:
    start = page.index(f'data-run-id="{run_id}"')
    return page[start : page.index("</tr>", start)]


@pytest.fixture
def imported(
    store_url: str, store_services: Services, capsys: pytest.CaptureFixture[str]
) -> tuple[Cli, dict[str, dict[str, Any]]]:
    cli = Cli(capsys, store_url)
    runs = {}
    for name, expected in RUNS.items():
        (row,) = cli.json("import", str(expected.path))["imported"]
        runs[name] = row
    return cli, runs


def test_every_view_prints_the_same_headline(
    imported: tuple[Cli, dict[str, dict[str, Any]]], store_services: Services
) -> None:
    cli, runs = imported
    code, listing, err = cli("runs", "--wide")
    assert code == 0, err
    listed = {r["run_id"]: r for r in cli.json("runs")["data"]}
    with TestClient(create_app(services=store_services)) as client:
        web_runs = client.get("/ui/").text
        for name, expected in RUNS.items():
            run_id = runs[name]["run_id"]
            # runs: the metric, its figure, the pass rate and the rule, column by column.
            line = next(line for line in listing.splitlines() if line.startswith(run_id))
            cells = re.split(r"\s{2,}", line)
            assert cells[6:10] == [
                expected.label,
                expected.figure,
                expected.pass_rate,
                expected.rule,
            ], name
            # runs --json and show --json: the same headline object.
            head = listed[run_id]["headline"]
            shown = cli.json("show", run_id)["headline"]
            assert head == shown
            assert (head["text"], head["pass_rate_text"], head["rule"], head["summary"]) == (
                expected.text,
                expected.pass_rate,
                expected.rule,
                expected.summary,
            ), name
            # show: the headline line.
            code, out, err = cli("show", run_id)
            assert code == 0, err
            assert f"  headline: {expected.summary}" in out.splitlines(), name
            # The web's runs list.
            row = run_row(web_runs, run_id)
            assert cell(row, "headline_metric") == expected.label
            assert re.search(rf">{re.escape(expected.figure)}</span>", row), name
            assert cell(row, "pass_rate") == expected.pass_rate
            assert cell(row, "pass_rule") == (
                f"{expected.passed} of {expected.executions} · passes when {expected.rule}"
            )
            # The run page.
            page = client.get(f"/ui/runs/{run_id}").text
            assert cell(page, "headline_metric") == expected.label
            assert cell(page, "headline") == expected.figure
            assert cell(page, "headline_pass_rate") == expected.pass_rate
            assert cell(page, "headline_summary") == expected.summary
            # The compare header: a run against itself (one suite), CLI and web (the Connexity
            # run fails its own thresholds: not this test's concern).
            code, out, err = cli("compare", run_id, run_id, "--no-fail-on-thresholds")
            assert code == 0, err
            assert f"  baseline:   {expected.summary}" in out.splitlines()
            assert f"  candidate:  {expected.summary}" in out.splitlines()
            compared = cli.json("compare", run_id, run_id, "--no-fail-on-thresholds")["headlines"]
            assert compared["candidate"]["summary"] == expected.summary
            web = client.get(f"/ui/compare?baseline={run_id}&candidate={run_id}").text
            assert cell(web, "headline.baseline") == expected.summary
            assert cell(web, "headline.candidate") == expected.summary
            # The Markdown PR comment, from the CLI and the web (was: no headline).
            md = expected.summary.replace("|", "\\|")
            code, out, err = cli("compare", run_id, run_id, "--markdown", "--no-fail-on-thresholds")
            assert code == 0, err
            assert f"- baseline: {md}" in out.splitlines(), out
            q = f"baseline={run_id}&candidate={run_id}"
            assert f"- candidate: {md}" in client.get(f"/ui/compare.md?{q}").text.splitlines()


def test_the_run_page_shows_each_scorers_value_per_case_and_no_rubric_bars(
    imported: tuple[Cli, dict[str, dict[str, Any]]], store_services: Services
) -> None:
    cli, runs = imported
    run_id = runs["inspect"]["run_id"]
    cases = {c["test_case_key"]: c for c in cli.json("show", run_id)["cases"]}
    with TestClient(create_app(services=store_services)) as client:
        page = client.get(f"/ui/runs/{run_id}").text
    table = page[page.index('id="cases"') :]
    for key, c in cases.items():
        row = table[table.index(f'data-case-id="{c["case_id"]}"') :]
        row = row[: row.index("</tr>")]
        values = dict(re.findall(r'data-scorer="([^"]+)">([^<]*)<', row))
        assert values == {
            name: "—" if c.get("named_scores", {}).get(name) is None else f"{value:,.4f}"
            for name in ("model_graded_qa", "overlap", "has_answer")
            for value in [c.get("named_scores", {}).get(name)]
        }, key
    charts = page[page.index('id="charts-h"') : page.index('id="cases-h"')]
    assert "Per-metric means" not in charts  # the rubric's eight empty bars
    assert "Tool Routing" not in charts
    assert "model_graded_qa/accuracy 0.6250" in charts  # the chart's text alternative


def test_a_connexity_run_keeps_its_rubric_bars(
    imported: tuple[Cli, dict[str, dict[str, Any]]], store_services: Services
) -> None:
    _, runs = imported
    with TestClient(create_app(services=store_services)) as client:
        page = client.get(f"/ui/runs/{runs['connexity']['run_id']}").text
    charts = page[page.index('id="charts-h"') : page.index('id="cases-h"')]
    assert "Per-metric means" in charts


def test_an_undated_run_reads_unknown_never_1970(
    imported: tuple[Cli, dict[str, dict[str, Any]]], store_services: Services
) -> None:
    _, runs = imported
    run_id = runs["tau-bench"]["run_id"]
    with TestClient(create_app(services=store_services)) as client:
        listing = client.get("/ui/").text
        page = client.get(f"/ui/runs/{run_id}").text
        compare = client.get("/ui/compare").text
    assert cell(run_row(listing, run_id), "created_at") == "unknown"
    assert cell(page, "created_at") == "unknown"
    for text in (listing, page, compare):
        assert "1970" not in text
    assert re.search(rf'value="{run_id}"[^>]*>[^<]*\(no date\)</option>', compare)


def test_a_native_run_without_verdicts_has_no_rubric_bars(store_services: Services) -> None:
    data = bundle(key="named-only")
    data["cases"] = [case("a"), case("b")]
    for c, value in zip(data["cases"], (1.0, 0.5), strict=True):
        c["verdicts"] = []
        c["named_scores"] = [
            {"scorer": "exact", "scores": [{"name": "exact", "value": value, "scale": "fraction"}]}
        ]
    with TestClient(create_app(services=store_services)) as client:
        r = client.post("/bundles", json=data)
        assert r.status_code in (200, 201), r.text
        run_id = r.json()["run_id"]
        page = client.get(f"/ui/runs/{run_id}").text
    charts = page[page.index('id="charts-h"') : page.index('id="cases-h"')]
    assert "Per-metric means" not in charts
    assert "Named score means" in charts and "exact 0.7500" in charts
