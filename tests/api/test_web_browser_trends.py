"""The trend page in a real headless Chromium (issue 33): the chart's point opens its day's run."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.projections.queries import RunFilter
from tests.api.test_web_browser import CHROMIUM, WAIT_LIMIT_MS, _require_chromium, shot
from tests.application.test_trends import load
from tests.browser import live_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    _require_chromium()
    root = tmp_path_factory.mktemp("trends")
    db = f"sqlite:///{root}/store/"
    services = build_services(Settings(db=db))
    try:
        load(services)
        rows, _ = services.reads.list_runs(RunFilter(project="shop"))
        keys = {r.run_key: str(r.run_id) for r in rows}
    finally:
        services.close()
    env = {k: v for k, v in os.environ.items() if k not in ("EVALEDGER_DB", "EVALEDGER_URL")}
    with live_server(db, root, env) as base:
        yield base, keys


def test_the_chart_draws_a_line_per_version_and_a_point_opens_its_run(
    served: tuple[str, dict[str, str]],
) -> None:
    from playwright.sync_api import sync_playwright  # lazy: the browser driver, only here

    base, keys = served
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page: Any = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.set_default_timeout(WAIT_LIMIT_MS)
            page.goto(base + "/ui/trends?project=shop")
            chart = page.locator("#trend-chart svg")
            assert chart.locator("g.trend-line").count() == 2
            assert chart.locator("g.trend-line").first.get_attribute("data-line") == (
                "support-bot 1.0"
            )
            points = chart.locator('g[data-line="support-bot 1.1"] a.trend-point')
            assert points.count() == 2
            shot(page, "trends-1-chart")
            # The second day's point of 1.1 opens that day's run.
            day2_run = keys["support-bot-1.1-2026-11-21-2"]
            assert points.nth(1).get_attribute("href") == f"/ui/runs/{day2_run}"
            points.nth(1).locator("circle").click()
            page.wait_for_url(f"**/ui/runs/{day2_run}")
            assert not page.title().startswith("Error")
            assert day2_run[:8] in page.content()
        finally:
            browser.close()


def test_the_page_names_a_bad_measure(served: tuple[str, dict[str, str]]) -> None:
    base, _ = served
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(base + "/ui/trends?project=shop&measure=p99", timeout=30)
    assert refused.value.code == 422 and "measure" in refused.value.read().decode()
