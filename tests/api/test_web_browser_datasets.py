"""The datasets pages in real headless Chromium against `evaledger serve` (issue 35).

A store gets a dataset with two versions through the CLI; the browser goes from the list to a
version's items and to the diff of the two versions, by the links on the pages.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_serve import EVALEDGER
from tests.api.test_web_browser import Site, _require_chromium, shot, text
from tests.api.test_web_browser import browser as browser  # the fixtures
from tests.api.test_web_browser import page as page
from tests.browser import live_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _cli(root: Path, env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [str(EVALEDGER), *args], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    _require_chromium()
    root = tmp_path_factory.mktemp("web-datasets")
    db = f"sqlite:///{root}/store/"
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    v1, v2 = root / "v1.jsonl", root / "v2.csv"
    v1.write_text(
        '{"key": "greeting", "input": "hello", "expected_outcomes": ["greets back"]}\n'
        '{"key": "refund", "input": "where is my refund?", '
        '"label": {"passed": true, "score": 4, "by": ["token:ann"]}}\n'
    )
    v2.write_text("key,input,tags\ngreeting,hello,smoke\nhandoff,a human please,\n")
    _cli(root, env, "dataset", "create", "qa", "--db", db, "--description", "support questions")
    _cli(root, env, "dataset", "add", "qa", str(v1), "--db", db)
    _cli(root, env, "dataset", "add", "qa", str(v2), "--db", db)
    with live_server(db, root, env) as base:
        yield Site(base)


def test_from_the_list_to_a_version_and_the_diff(site: Site, page: Any) -> None:
    listed = site.api("/projects/default/datasets")["data"]
    assert [(d["name"], d["latest_version"]) for d in listed] == [("qa", 2)]

    page.goto(site.base + "/ui/")
    page.get_by_role("link", name="Datasets").click()
    row = page.locator('tr[data-dataset="qa"]')
    assert text(row, '[data-field="latest_version"]') == "2"
    assert text(row, '[data-field="hash"]') == listed[0]["hash"][:12]
    shot(page, "datasets-1-list")

    row.get_by_role("link", name="qa").click()
    items = page.locator("tr[data-item]")
    assert items.count() == 2
    assert [items.nth(i).get_attribute("data-item") for i in range(2)] == ["greeting", "handoff"]
    shot(page, "datasets-2-latest")

    page.locator('tr[data-version="1"] a').first.click()
    assert text(page, '[data-field="version"]') == "version 1"
    refund = page.locator('tr[data-item="refund"]')
    assert text(refund, '[data-field="label"]').startswith("pass (4.0)")

    page.locator('tr[data-version="2"]').get_by_role("link", name="1 → 2").click()
    assert text(page, '[data-field="added"]') == "handoff"
    assert text(page, '[data-field="removed"]') == "refund"
    assert text(page, '[data-field="changed"]') == "greeting"
    assert "1 added, 1 removed, 1 changed, 0 unchanged" in text(page, '[data-field="summary"]')
    shot(page, "datasets-3-diff")
