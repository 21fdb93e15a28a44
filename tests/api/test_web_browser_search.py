"""Search in real headless Chromium against a real `evaledger serve` (issue 36).

Two projects hold a case whose transcript carries the same word and some HTML; a token of one
project signs in, types the word into the search box of the runs page, gets its own case only
(the HTML shown as text, the word marked), and opens the case page at the transcript with the
word marked there too.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.api.test_search_api import XSS, search_bundle
from tests.api.test_serve import EVALEDGER
from tests.api.test_web_browser import CHROMIUM, WAIT_LIMIT_MS, _require_chromium, shot
from tests.browser import live_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _cli(root: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(EVALEDGER), *args], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """(base URL, alpha's token, beta's run id) of a served two-project store."""
    _require_chromium()
    root = tmp_path_factory.mktemp("search")
    db = f"sqlite:///{root}/store/"
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    env["EVALEDGER_SEAL_PAYLOADS"] = "0"  # inline text: a sealing store does not index it
    for project in ("alpha", "beta"):
        path = root / f"{project}.json"
        path.write_text(json.dumps(search_bundle(project, f"{project}-run", XSS)))
        _cli(root, env, "import", "--db", db, str(path))
    token = json.loads(
        _cli(root, env, "token", "create", "--db", db, "--project", "alpha",
             "--scope", "read", "--name", "searcher", "--json")
    )["token"]  # fmt: skip
    beta = json.loads(_cli(root, env, "runs", "--db", db, "--project", "beta", "--json"))
    with live_server(db, root, env) as base:
        yield base, token, str(beta["data"][0]["run_id"])


@pytest.fixture
def page(served: tuple[str, str, str]) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        outside: list[str] = []
        dialogs: list[str] = []

        def offline(route: Any) -> None:
            if urlparse(route.request.url).hostname == "127.0.0.1":
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        page.route("**/*", offline)

        def dialog(d: Any) -> None:
            dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", dialog)
        page.set_default_timeout(WAIT_LIMIT_MS)
        try:
            yield page
        finally:
            browser.close()
        assert outside == [], f"requests off loopback: {outside}"
        assert dialogs == [], f"a transcript's script ran: {dialogs}"


def test_search_box_results_and_the_case_with_the_hit_marked(
    served: tuple[str, str, str], page: Any
) -> None:
    base, token, beta_run = served
    page.goto(base + "/ui/")
    page.wait_for_url("**/ui/signin?**")
    page.locator("#token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/ui/")
    box = page.get_by_role("search").first.get_by_label("Search cases")
    box.fill("refund approved")
    box.press("Enter")
    page.wait_for_url("**/ui/search?q=refund+approved**")
    hits = page.locator("ol.hits li")
    assert hits.count() == 1
    hit = hits.first
    assert hit.get_attribute("data-field") == "transcript"
    assert hit.locator("mark").all_inner_texts() == ["refund", "refund", "approved"]
    # The transcript's HTML is text on the page: no element was made of it.
    assert '<script>alert("refund")</script>' in hit.locator(".snippet").inner_text()
    assert hit.locator(".snippet script, .snippet img").count() == 0
    assert beta_run not in page.content()
    shot(page, "search-1-results")
    hit.get_by_role("link", name="refund-001").click()
    page.wait_for_url("**/ui/cases/**#tr-h")
    marked = page.locator(".transcript mark").all_inner_texts()
    assert marked == ["refund", "refund", "approved"]
    assert page.locator(".transcript script, .transcript img").count() == 0
    shot(page, "search-2-case")
