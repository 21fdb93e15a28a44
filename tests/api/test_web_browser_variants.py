"""The compare page of two promptfoo runs with variants, in a real headless Chromium.

Real promptfoo outputs (2 providers × 2 prompts, `--repeat 2`) are imported into a fresh store,
`evaledger serve` answers on a loopback port, and the page's per-variant table and test ×
variant matrix are read as a person sees them, against the JSON API's comparison.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from evaledger.api.web.filters import fmt_pct
from tests.api.test_serve import EVALEDGER
from tests.api.test_web_browser import Site, _require_chromium, shot, text
from tests.api.test_web_browser import browser as browser  # the fixtures
from tests.api.test_web_browser import page as page
from tests.browser import live_server
from tests.conftest import FIXTURES

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OUTPUTS = FIXTURES / "promptfoo"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    _require_chromium()
    root = tmp_path_factory.mktemp("variants")
    db = f"sqlite:///{root}/store/"
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    for name in ("baseline.json", "candidate.json"):
        done = subprocess.run(
            [str(EVALEDGER), "import", str(OUTPUTS / name), "--db", db],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
    with live_server(db, root, env) as base:
        yield Site(base)


def test_compare_shows_each_variant_and_the_test_by_variant_matrix(site: Site, page: Any) -> None:
    listed = sorted(site.api("/runs")["data"], key=lambda r: r["created_at"])
    baseline, candidate = (r["run_id"] for r in listed)  # the baseline eval ran first
    api = site.api(f"/runs/compare?baseline_run_id={baseline}&candidate_run_id={candidate}")
    page.goto(f"{site.base}/ui/compare?baseline={baseline}&candidate={candidate}")
    for v in api["aggregate"]["per_variant"]:
        row = page.locator(f'#variant-deltas tr[data-variant="{v["variant"]}"]')
        assert row.locator('[data-field="baseline_pass_rate"]').inner_text().strip() == fmt_pct(
            v["baseline_pass_rate"]
        )
        assert row.locator('[data-field="candidate_pass_rate"]').inner_text().strip() == fmt_pct(
            v["candidate_pass_rate"]
        )
    grid = page.locator("#compare-matrix")
    assert grid.is_visible()
    for t in api["test_case_comparisons"]:
        cell = grid.locator(
            f'tr[data-key="{t["test_case_key"]}"] td[data-variant="{t["variant"]}"]'
        )
        assert cell.get_attribute("data-status") == t["status"]
        assert t["status"] in cell.inner_text()
    assert grid.locator('[data-status="regression"]').count() == 1
    assert page.locator(".s-flaky").count() == 0
    assert text(page, 'strong[data-field="total_regressions"]') == "1"
    shot(page, "compare-variants")
