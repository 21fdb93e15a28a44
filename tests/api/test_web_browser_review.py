"""Blind review by two reviewers, in real headless Chromium against a real server.

`evaledger import` loads a 12-case run, `evaledger token create` issues two write tokens (alice,
bob) and an admin's, `evaledger review queue create --blind` gives every failed case to both, and
`evaledger serve` then requires tokens. Each reviewer signs in in their own browser: "Next" opens
their item with no verdict, score or other label on the page (nor in the API's answer for their
token, nor on the case's own page: 403) until their own label, after which the verdict, both
labels and the gold label show; the queue page shows the agreement with its method.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.api.test_serve import EVALEDGER
from tests.api.test_web_browser import CHROMIUM, WAIT_LIMIT_MS, _require_chromium, shot
from tests.browser import live_server
from tests.helpers import bundle, case

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GATE_REASON = "pass_threshold"
"""Words of a failed case's gate reason: the verdict's own text."""


@dataclass
class ReviewSite:
    base: str
    tokens: dict[str, str]

    def api(self, who: str, path: str) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.base + path, headers={"Authorization": f"Bearer {self.tokens[who]}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


def _run(root: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(EVALEDGER), *args], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def review_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewSite]:
    _require_chromium()
    root = tmp_path_factory.mktemp("review")
    db = f"sqlite:///{root}/store/"
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    data = bundle(status="completed", key="nightly")
    data["cases"] = [case(f"c{i:02d}", i % 6) for i in range(12)]
    (root / "run.json").write_text(json.dumps(data))
    _run(root, env, "import", "--db", db, str(root / "run.json"))
    tokens = {}
    for name, scope in (("alice", "write"), ("bob", "write"), ("lead", "admin")):
        made = json.loads(
            _run(root, env, "token", "create", "--db", db, "--project", "default",
                 "--scope", scope, "--name", name, "--json")
        )  # fmt: skip
        tokens[name] = made["token"]
    _run(root, env, "review", "queue", "create", "blind", "--db", db, "--run", "nightly",
         "--where", "status = failed", "--reviewers", "alice,bob", "--per-item", "2",
         "--blind")  # fmt: skip
    with live_server(db, root, env) as base:
        yield ReviewSite(base, tokens)


@pytest.fixture(scope="module")
def chromium(review_site: ReviewSite) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield b
        finally:
            b.close()


def _page(chromium: Any, outside: list[str], errors: list[str]) -> Any:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()

    def offline(route: Any) -> None:
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(WAIT_LIMIT_MS)
    return page


def sign_in(page: Any, site: ReviewSite, who: str, start: str) -> None:
    page.goto(site.base + start)
    page.wait_for_url("**/ui/signin?**")
    page.locator("#token").fill(site.tokens[who])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"**{start}")


def assert_blind(page: Any) -> None:
    """Nothing of the verdict or of another reviewer's label is on the page."""
    assert page.locator("#blind-note").is_visible()
    assert page.locator("#verdict").count() == 0 and page.locator("#labels").count() == 0
    html = page.content()
    assert GATE_REASON not in html and "overall score" not in html and "Gold label" not in html
    assert "bob:" not in html and "alice:" not in html


def test_two_blind_reviewers_see_no_verdict_before_their_own_label(
    review_site: ReviewSite, chromium: Any
) -> None:
    outside: list[str] = []
    errors: list[str] = []
    alice, bob = _page(chromium, outside, errors), _page(chromium, outside, errors)
    try:
        sign_in(alice, review_site, "alice", "/ui/review/blind")
        alice.locator("#next").click()
        alice.wait_for_url("**/ui/review/blind/items/**")
        item_url = alice.url
        case_id = item_url.rsplit("/", 1)[-1]
        assert_blind(alice)
        assert alice.locator("#turns li").count() == 4  # the conversation itself is shown
        shot(alice, "review-1-blind-item")
        status, body = review_site.api("alice", f"/review/queues/blind/items/{case_id}")
        assert status == 200 and body["hidden"] is True and body["verdict"] is None
        # the case's own page would show the verdict: refused while the item is unlabelled
        assert alice.goto(review_site.base + f"/ui/cases/{case_id}").status == 403
        assert review_site.api("alice", f"/cases/{case_id}")[0] == 403

        # bob labels the same case first
        sign_in(bob, review_site, "bob", "/ui/review/blind")
        bob.locator("#next").click()
        bob.wait_for_url(item_url)
        assert_blind(bob)
        bob.locator("#r-passed").select_option("fail")
        bob.locator("#r-score").fill("1")
        bob.locator("#r-comment").fill("promised what it could not do")
        bob.get_by_role("button", name="Label").click()
        bob.wait_for_selector("#verdict")
        assert GATE_REASON in bob.locator("#verdict").inner_text()
        assert bob.locator("#labels li[data-reviewer]").count() == 1

        # alice, still unlabelled, sees none of it: not the verdict, not bob's label
        alice.goto(item_url)
        assert_blind(alice)
        status, body = review_site.api("alice", f"/review/queues/blind/items/{case_id}")
        assert body["labels"] == [] and body["verdict"] is None and body["gold"] is None
        status, queue = review_site.api("alice", "/review/queues/blind")
        row = next(i for i in queue["items"] if i["case_id"] == case_id)
        assert row["visible"] is False and row["labels"] == [] and row["labelled_by"] == ["bob"]

        alice.locator("#r-passed").select_option("fail")
        alice.locator("#r-score").fill("1")
        alice.get_by_role("button", name="Label").click()
        alice.wait_for_selector("#verdict")
        reviewers = alice.locator("#labels li[data-reviewer]").evaluate_all(
            "items => items.map(i => i.dataset.reviewer)"
        )
        assert sorted(reviewers) == ["alice", "bob"]
        assert "unanimous by alice, bob" in alice.locator("#gold").inner_text()
        shot(alice, "review-2-after-label")
        assert alice.goto(review_site.base + f"/ui/cases/{case_id}").status == 200

        alice.goto(review_site.base + "/ui/review/blind")
        lines = alice.locator('[data-field="agreement"]').all_inner_texts()
        assert lines[0].startswith("passed: Cohen's κ") and "1 item(s)" in lines[0]
        assert "bootstrap 95 % percentile" in alice.locator('[data-field="method"]').inner_text()
        shot(alice, "review-3-queue")
    finally:
        alice.context.close()
        bob.context.close()
    assert outside == [], f"requests off loopback: {outside}"
    assert errors == [], f"JavaScript errors: {errors}"


def test_a_forged_label_form_without_the_csrf_token_stores_nothing(
    review_site: ReviewSite, chromium: Any
) -> None:
    outside: list[str] = []
    errors: list[str] = []
    page = _page(chromium, outside, errors)
    try:
        sign_in(page, review_site, "bob", "/ui/review/blind")
        _, before = review_site.api("lead", "/review/queues/blind")
        target = before["items"][-1]["case_id"]
        answer = page.request.post(
            review_site.base + f"/ui/review/blind/items/{target}/label",
            form={"passed": "pass"},
            headers={"Origin": review_site.base},
        )
        assert answer.status == 403
        _, after = review_site.api("lead", "/review/queues/blind")
        assert after["progress"] == before["progress"]
    finally:
        page.context.close()
