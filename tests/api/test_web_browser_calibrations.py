"""The calibrations page in real headless Chromium against `evaledger serve` (issue 35).

A store gets a gold set, a run judged on its items and a calibration through the CLI; the
browser reads the figures on /ui/calibrations and follows the gold set's link, and reads a run
page's calibration gate: a calibrated judge accepted, an uncalibrated one refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.test_calibration_gate import OTHER, OTHER_TEMPLATE, two_judges_run
from tests.api.test_web_browser import Site, _require_chromium, shot, text
from tests.api.test_web_browser import browser as browser  # the fixtures
from tests.api.test_web_browser import page as page
from tests.api.test_web_browser_datasets import _cli
from tests.application.test_calibration import JUDGE, TEMPLATE, gold_file, judged_run
from tests.browser import live_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    _require_chromium()
    root = tmp_path_factory.mktemp("web-calibrations")
    db = f"sqlite:///{root}/store/"
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    run_file = root / "run.json"
    run_file.write_text(json.dumps(judged_run("judged", "default")))
    _cli(root, env, "dataset", "create", "gold", "--db", db)
    _cli(root, env, "dataset", "add", "gold", str(gold_file(root / "gold.jsonl")), "--db", db)
    _cli(root, env, "import", str(run_file), "--db", db)
    _cli(root, env, "calibrate", "--judge", JUDGE, "--gold", "gold@1", "--from-run", "judged",
         "--db", db)  # fmt: skip
    two = root / "two-judges.json"
    two.write_text(json.dumps(two_judges_run("two-judges")))
    _cli(root, env, "import", str(two), "--db", db)
    with live_server(db, root, env) as base:
        yield Site(base)


def test_the_calibrations_page_shows_the_figures_and_links_the_gold_set(
    site: Site, page: Any
) -> None:
    page.goto(site.base + "/ui/datasets")
    page.get_by_role("link", name="Calibrations").click()
    row = page.locator(f'tr[data-judge="{JUDGE}"]')
    assert row.count() == 1
    assert text(row, '[data-field="template"]') == TEMPLATE[:12]
    assert text(row, '[data-field="n"]') == "12"
    assert text(row, '[data-field="kappa"]').startswith("0.667 [")
    assert text(row, '[data-field="tpr"]').startswith("0.833 [")
    shot(page, "calibrations-1-list")
    row.get_by_role("link", name="gold@1").click()
    assert page.locator('tr[data-item="k00"]').count() == 1


def test_the_run_page_shows_a_calibrated_and_an_uncalibrated_judge(site: Site, page: Any) -> None:
    page.goto(site.base + "/ui/runs/two-judges")
    gate = page.locator("#calibration-gate")
    assert text(gate, '[data-field="calibration_accepted"]') == "no"
    mine = gate.locator(f'tr[data-judge="{JUDGE}"]')
    assert mine.count() == 1
    assert text(mine, "code.hash") == TEMPLATE[:12]
    assert text(mine, '[data-field="calibrated"]') == "calibrated"
    assert text(mine, '[data-field="kappa"]').startswith("0.667 (")
    assert text(mine, '[data-field="n"]') == "12"
    assert text(mine, '[data-field="accepted"]') == "accepted"
    other = gate.locator(f'tr[data-judge="{OTHER}"]')
    assert text(other, "code.hash") == OTHER_TEMPLATE[:12]
    assert text(other, '[data-field="calibrated"]') == "not calibrated"
    assert text(other, '[data-field="kappa"]') == "—"
    assert text(other, '[data-field="accepted"]') == "refused"
    shot(page, "calibrations-2-run-gate")
    # A higher minimum refuses the calibrated judge too; the JSON says the same.
    page.goto(site.base + "/ui/runs/two-judges?min_kappa=0.99")
    assert text(gate.locator(f'tr[data-judge="{JUDGE}"]'), '[data-field="accepted"]') == "refused"
    gate.get_by_role("link", name="JSON").click()
    body = json.loads(page.locator("body").inner_text())
    assert body["min_kappa"] == 0.99 and body["accepted"] is False
    assert [j["accepted"] for j in body["judges"]] == [False, False]
