"""The web report driven in a real headless Chromium (Debian's package) against a real server.

`evaledger demo` loads the demo into a fresh store, `evaledger serve` answers on a free loopback
port, and Playwright clicks through the pages with every request off loopback refused (offline).
Each page's numbers are checked against the JSON API's; screenshots go to tests/artifacts/web/.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from evaledger.api.web.filters import fmt_num, fmt_pct, fmt_signed
from tests.api.test_serve import EVALEDGER, call
from tests.browser import live_server
from tests.conftest import IN_CI

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).parents[1] / "artifacts" / "web"
WAIT_LIMIT_MS = 90_000  # a bound on waiting (a busy 2-core machine), never an assertion on speed


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    message = f"{CHROMIUM} missing: apt-get install -y chromium chromium-driver"
    if IN_CI:
        pytest.fail(message + " (CI must run the browser tests, never skip them)")
    pytest.skip(message)


class Site:
    """A served demo store."""

    def __init__(self, base: str) -> None:
        self.base = base

    def api(self, path: str) -> Any:
        status, body = call(self.base, "GET", path)
        assert status == 200, body
        return body


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    _require_chromium()
    root = tmp_path_factory.mktemp("web")
    db = f"sqlite:///{root}/store/"
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    demo = subprocess.run(
        [str(EVALEDGER), "demo", "--db", db], cwd=root, env=env, capture_output=True, text=True
    )
    assert demo.returncode == 0, demo.stderr
    with live_server(db, root, env) as base:
        yield Site(base)


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, site: Site) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    outside: list[str] = []

    def offline(route: Any) -> None:
        # Everything must come from the app itself: anything else is refused and reported.
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(WAIT_LIMIT_MS)
    try:
        yield page
    finally:
        context.close()
    assert outside == [], f"requests off loopback: {outside}"
    assert errors == [], f"JavaScript errors: {errors}"


def shot(page: Any, name: str) -> None:
    """Save a full-page screenshot and check the page fits 1280 px without horizontal scroll."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, f"{name}: page is {width} px wide at a 1280 px viewport"
    unlabeled = page.evaluate(
        """[...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
           .filter(e => e.labels.length === 0 && !e.closest('label')).map(e => e.name)"""
    )
    assert unlabeled == [], f"{name}: form controls without a label: {unlabeled}"
    assert page.locator("h1").count() == 1


def text(page: Any, selector: str) -> str:
    return str(page.locator(selector).first.inner_text()).strip()


def runs_by_key(site: Site) -> dict[str, dict[str, Any]]:
    return {r["run_key"]: r for r in site.api("/runs")["data"]}


def test_runs_to_a_failing_case_show_the_api_numbers(site: Site, page: Any) -> None:
    runs = runs_by_key(site)
    candidate = runs["cs-agent-v2-pr-218-2026-09-15"]
    run_id = candidate["run_id"]
    aggregate = site.api(f"/runs/{run_id}")["aggregate"]

    # Runs list: the candidate's key figures are the API's.
    page.goto(site.base + "/")
    assert page.url == site.base + "/ui/"
    assert page.locator("tbody tr[data-run-id]").count() == 4  # 3 offline runs, 1 online
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    assert text(row, '[data-field="pass_rate"]') == fmt_pct(aggregate["pass_rate"])
    assert text(row, '[data-field="weighted_metrics_score_pct"]') == fmt_num(
        aggregate["weighted_metrics_score_pct"]
    )
    shot(page, "1-runs")

    # Run report: aggregate cards, then the failed cases only.
    row.get_by_role("link", name=candidate["name"]).click()
    page.wait_for_url(f"**/ui/runs/{run_id}")
    cards = page.locator("#aggregate")
    assert text(cards, '[data-field="pass_rate"]') == fmt_pct(aggregate["pass_rate"])
    assert text(cards, '[data-field="weighted_metrics_score_pct"]') == fmt_num(
        aggregate["weighted_metrics_score_pct"]
    )
    assert text(cards, '[data-field="cases_pass_rate_pct"]') == fmt_num(
        aggregate["cases_pass_rate_pct"]
    )
    assert text(cards, '[data-field="total_executions"]') == str(aggregate["total_executions"])
    assert page.locator("figure.chart svg").count() == 3
    shot(page, "2-run")

    cases = site.api(f"/runs/{run_id}/cases")["data"]
    failed = [c for c in cases if c["passed"] is False]
    page.get_by_label("Show").select_option("failed")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url("**show=failed**")
    rows = page.locator("#cases tbody tr")
    assert rows.count() == min(len(failed), 50)
    assert page.locator("#cases tbody tr[data-status=passed]").count() == 0
    shot(page, "3-run-failed-cases")

    # Case audit page: score, gate and the judge's prompt and raw reply, as the API has them.
    first = failed[0]
    rows.first.get_by_role("link").click()
    page.wait_for_url(f"**/ui/cases/{first['case_id']}")
    assert text(page, '[data-field="overall_score"]') == fmt_num(first["overall_score"])
    assert text(page, '[data-field="gate_rule"]') == first["gate"].replace("_", " ")
    assert text(page, '[data-field="passed"]') == "no"
    assert text(page, '[data-field="gate_reason"]') == "Why: " + first["gate_reason"]
    explain = site.api(f"/cases/{first['case_id']}/explain")
    verdict = explain["verdicts"][0]
    article = page.locator("article.verdict").first
    assert text(article, '[data-field="parse_status"]') == verdict["parse_status"]
    article.locator("details.prompt summary").click()
    prompt = article.locator('[data-field="prompt"]')
    assert prompt.is_visible()
    assert prompt.text_content() == verdict["prompt"]
    article.locator("details.raw summary").click()
    assert article.locator('[data-field="raw_output"]').text_content() == verdict["raw_output"]
    contributions = page.locator('#weights [data-field="contribution"]').all_inner_texts()
    assert contributions == [fmt_num(w["contribution"]) for w in explain["weights"]]
    shot(page, "4-case")

    # History: every event's hash, and the chain verified.
    history = site.api(f"/cases/{first['case_id']}/history")["events"]
    hashes = page.locator('#history [data-field="hash"] code')
    assert [hashes.nth(i).get_attribute("title") for i in range(hashes.count())] == [
        e["hash"] for e in history
    ]
    assert text(page, "#chain-status").startswith(
        f"Hash chain intact: all {len(history)} events link"
    )
    page.locator("#history").scroll_into_view_if_needed()
    shot(page, "5-case-history")


def test_compare_the_two_demo_runs(site: Site, page: Any) -> None:
    runs = runs_by_key(site)
    baseline = runs["cs-agent-v1-nightly-2026-09-14"]["run_id"]
    candidate = runs["cs-agent-v2-pr-218-2026-09-15"]["run_id"]
    api = site.api(f"/runs/compare?baseline_run_id={baseline}&candidate_run_id={candidate}")

    page.goto(site.base + "/ui/")
    page.get_by_label("Baseline").select_option(baseline)
    page.get_by_label("Candidate").select_option(candidate)
    page.get_by_role("button", name="Compare").click()
    page.wait_for_url("**/ui/compare?**")
    expected = "regression detected" if api["verdict"]["regression_detected"] else "no regression"
    assert text(page, '[data-field="regression_detected"]') == expected
    for reason in api["verdict"]["reasons"]:
        assert page.get_by_text(reason, exact=True).count() == 1
    agg = api["aggregate"]
    assert text(page, '[data-field="pass_rate_delta"]') == fmt_signed(agg["pass_rate_delta"], 4)
    assert text(page, '[data-field="total_regressions"]') == str(agg["total_regressions"])
    stat = api["statistics"]["verdict"].replace("_", " ")
    assert text(page, '[data-field="stat_verdict"]').startswith(stat)
    assert page.locator("#case-classes tbody tr[data-status]").count() == len(
        api["test_case_comparisons"]
    )
    shot(page, "6-compare")

    page.get_by_label("Class", exact=True).select_option("regression")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**show=regression**")
    regressions = [t for t in api["test_case_comparisons"] if t["status"] == "regression"]
    assert page.locator("#case-classes tbody tr[data-status=regression]").count() == len(
        regressions
    )
    assert (
        page.locator("#case-classes tbody tr[data-status]:not([data-status=regression])").count()
        == 0
    )

    with page.expect_response("**/ui/compare.md?**") as response:
        page.get_by_role("link", name="Markdown PR comment").click()
    body = response.value.text()
    assert response.value.headers["content-type"].startswith("text/markdown")
    assert ("No regression" in body) is not api["verdict"]["regression_detected"]
    assert all(t["test_case_key"] in body for t in regressions)


def test_rollup_scorecard_and_offline_api_docs(site: Site, page: Any) -> None:
    runs = runs_by_key(site)
    baseline = runs["cs-agent-v1-nightly-2026-09-14"]["run_id"]
    candidate = runs["cs-agent-v2-pr-218-2026-09-15"]["run_id"]
    governance = runs["governance-audit-2026-11-01"]["run_id"]

    page.goto(site.base + "/ui/rollup")
    page.get_by_label(runs["cs-agent-v1-nightly-2026-09-14"]["name"]).check()
    page.get_by_label(runs["cs-agent-v2-pr-218-2026-09-15"]["name"]).check()
    page.get_by_label("Rows", exact=True).select_option("agent")
    page.get_by_role("button", name="Pivot").click()
    page.wait_for_url("**/ui/rollup?**")
    api = site.api(f"/rollups?run_id={baseline}&run_id={candidate}&rows=agent&columns=test")
    # 22 tests as columns would not fit: the pivot is shown with the tests down the page.
    assert len(api["columns"]) > 10
    assert page.locator("#transposed").count() == 1
    assert page.locator("#pivot tbody tr").count() == len(api["columns"])
    assert page.locator("#pivot thead th").count() == len(api["rows"]) + 2
    assert text(page, '#pivot [data-field="score"]') == fmt_num(api["summary"]["score"], 1)
    shot(page, "7-rollup")

    grade = site.api(f"/runs/{governance}/grade")
    page.goto(site.base + f"/ui/runs/{governance}/scorecard")
    assert text(page, '[data-field="grade"]') == grade["overall"]["grade"]
    assert text(page, '[data-field="score"]') == fmt_num(grade["overall"]["score"], 4)
    assert page.locator("#tests tbody tr").count() == len(grade["test_results"])
    shot(page, "8-scorecard")

    # Swagger UI renders from the app's own files (requests off loopback are refused).
    page.goto(site.base + "/docs")
    page.locator(".swagger-ui .info .title").wait_for()
    assert "evaledger" in text(page, ".swagger-ui .info .title")
    assert page.locator(".opblock").count() > 10
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "9-docs.png"))


def test_keyboard_reaches_the_content_and_the_what_if_picker(site: Site, page: Any) -> None:
    candidate = runs_by_key(site)["cs-agent-v2-pr-218-2026-09-15"]["run_id"]
    cases = site.api(f"/runs/{candidate}/cases")["data"]
    case_id = cases[0]["case_id"]
    page.goto(site.base + f"/ui/cases/{case_id}")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"

    # What if: the demo stored a stricter rescore; picking it re-renders the chain under it.
    rescore = site.api("/runs/" + candidate)  # own spec id
    stored = [o for o in page.locator("#w-spec option").all() if o.get_attribute("value")]
    assert len(stored) == 1
    spec_id = stored[0].get_attribute("value")
    assert spec_id != rescore["spec_id"]
    picker = page.get_by_label("What if: scoring spec")
    picker.focus()
    picker.select_option(spec_id)
    page.keyboard.press("Tab")  # to the Re-render button
    page.keyboard.press("Enter")
    page.wait_for_url(f"**spec={spec_id}")
    explain = site.api(f"/cases/{case_id}/explain?spec={spec_id}")
    assert text(page, '[data-field="overall_score"]') == fmt_num(explain["overall_score"]["value"])
    assert (
        text(page, '[data-field="passed"]')
        == {True: "yes", False: "no", None: "—"}[explain["gate"]["passed"]]
    )
    assert page.get_by_text("what if: not the run's spec").count() == 1
    shot(page, "10-case-what-if")
