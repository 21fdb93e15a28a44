"""The run page's download links in a real headless Chromium (issue 36).

The demo store served on loopback; a person clicks "CSV", "JUnit XML" and "Parquet" on a run's
page and the browser saves each file; each reads back with its format's reader and has the
run's counts as the JSON API gives them.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from junitparser import JUnitXml

from tests.api.test_web_browser import Site
from tests.api.test_web_browser import browser as browser  # the fixtures
from tests.api.test_web_browser import page as page
from tests.api.test_web_browser import site as site

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def download(page: Any, name: str, target: Path) -> Path:
    with page.expect_download() as info:
        page.locator("p.downloads").get_by_role("link", name=name, exact=True).click()
    saved: Path = target / str(info.value.suggested_filename)
    info.value.save_as(str(saved))
    return saved


def test_a_run_page_downloads_csv_junit_and_parquet(page: Any, site: Site, tmp_path: Path) -> None:
    # The newest offline demo run (the demo's online run is newer; its key has slashes).
    run = next(r for r in site.api("/runs")["data"] if not r["run_key"].startswith("online/"))
    detail = site.api(f"/runs/{run['run_id']}")
    aggregate = detail["aggregate"]
    page.goto(f"{site.base}/ui/runs/{run['run_id']}")

    saved = download(page, "CSV", tmp_path)
    assert saved.suffix == ".csv" and saved.name.startswith(run["run_key"][:20])
    rows = list(csv.DictReader(io.StringIO(saved.read_text(encoding="utf-8"), newline="")))
    assert len(rows) == run["case_count"]
    assert sum(r["status"] == "passed" for r in rows) == aggregate["passed_count"]
    assert sum(r["status"] == "failed" for r in rows) == aggregate["failed_count"]

    saved = download(page, "JUnit XML", tmp_path)
    (suite,) = list(JUnitXml.fromfile(str(saved)))
    assert (suite.tests, suite.failures, suite.errors) == (
        run["case_count"],
        aggregate["failed_count"],
        aggregate["error_count"],
    )

    saved = download(page, "Parquet", tmp_path)
    table = pq.read_table(saved)
    assert table.num_rows == run["case_count"]
    assert table.column("passed").to_pylist().count(True) == aggregate["passed_count"]
