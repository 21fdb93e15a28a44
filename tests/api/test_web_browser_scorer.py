"""Review of an imported case in its own terms, in a real headless Chromium (issue 30).

`evaledger import` loads the Inspect log of tests/fixtures/peers/inspect_ai (3 of 4 samples
correct under Inspect's `match`), two tokens are issued (a write-scope reviewer, an admin) and
`evaledger serve` requires them. In the browser: the reviewer opens the failed case from the
run's review queue and labels it with its own scorer (`match`: pass); the label scores nothing.
The admin then overrides the scorer, with a reason: the case passes and the run's figures
(`match/accuracy`, pass rate) change on the page and in the JSON API alike.
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

pytestmark = [pytest.mark.browser, pytest.mark.slow]

INSPECT_LOG = Path(__file__).parents[1] / "fixtures/peers/inspect_ai/eval-logs/log_streaming.eval"


@dataclass
class Served:
    base: str
    admin: str
    writer: str
    run_id: str

    def api(self, path: str) -> Any:
        request = urllib.request.Request(
            self.base + path, headers={"Authorization": f"Bearer {self.admin}"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())


def _cli(root: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(EVALEDGER), *args], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    _require_chromium()
    root = tmp_path_factory.mktemp("scorer")
    db = f"sqlite:///{root}/store/"
    env = {k: v for k, v in os.environ.items() if k not in ("EVALEDGER_DB", "EVALEDGER_URL")}
    _cli(root, env, "import", "--db", db, str(INSPECT_LOG))
    run_id = json.loads(_cli(root, env, "runs", "--db", db, "--json"))["data"][0]["run_id"]
    tokens = {
        scope: json.loads(
            _cli(
                root,
                env,
                "token",
                "create",
                "--db",
                db,
                "--project",
                "default",
                "--scope",
                scope,
                "--name",
                name,
                "--json",
            )
        )["token"]
        for scope, name in (("admin", "auditor"), ("write", "reviewer"))
    }
    with live_server(db, root, env) as base:
        yield Served(base, tokens["admin"], tokens["write"], str(run_id))


@pytest.fixture(scope="module")
def chromium(served: Served) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield b
        finally:
            b.close()


def _page(chromium: Any) -> tuple[Any, Any, list[str]]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []

    def offline(route: Any) -> None:
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            problems.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.set_default_timeout(WAIT_LIMIT_MS)
    return context, page, problems


def _sign_in(page: Any, served: Served, token: str, start: str) -> None:
    page.goto(served.base + start)
    page.wait_for_url("**/ui/signin?**")
    page.locator("#token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"**{start}")


def _accuracy(page: Any, served: Served) -> str:
    page.goto(served.base + f"/ui/runs/{served.run_id}")
    row = page.locator('#scorer-metrics tr[data-metric="match/accuracy"] td.num').first
    return str(row.inner_text()).strip()


def _failed_case(served: Served) -> str:
    cases = served.api(f"/runs/{served.run_id}/cases?status=failed")["data"]
    assert [c["named_scores"] for c in cases] == [{"match": 0.0}]
    return str(cases[0]["case_id"])


def test_a_reviewer_labels_an_inspect_case_with_its_scorer_and_an_admin_overrides_it(
    served: Served, chromium: Any
) -> None:
    case_id = _failed_case(served)
    before = served.api(f"/runs/{served.run_id}")["aggregate"]
    assert (before["passed_count"], before["scorer_metrics"]["match/accuracy"]) == (3, 0.75)

    # The reviewer (write scope): from the run's review queue to the case, labels its `match`.
    context, page, problems = _page(chromium)
    try:
        _sign_in(page, served, served.writer, f"/ui/runs/{served.run_id}/queue")
        page.locator(f'a[href*="/ui/cases/{case_id}"]').first.click()
        page.wait_for_url(f"**/ui/cases/{case_id}**")
        form = page.locator("#label-form")
        assert form.locator('[name^="score."]').count() == 0  # no rubric metric offered
        assert page.locator("#score-override-form").count() == 0  # overriding is an admin's
        form.locator("#l-passed").select_option("pass")
        form.locator('[name="named.match"]').select_option("pass")
        form.locator("#l-comment").fill("the answer is right")
        form.get_by_role("button", name="Save label").click()
        page.wait_for_url(f"**/ui/cases/{case_id}**#labels-h")
        labels = page.locator("#labels").inner_text()
        assert "match" in labels and "the answer is right" in labels
        shot(page, "scorer-1-labelled")
        assert _accuracy(page, served) == "0.7500"  # a label scores nothing
    finally:
        context.close()
    assert problems == []

    # The admin overrides the scorer's verdict, with a reason.
    context, page, problems = _page(chromium)
    try:
        _sign_in(page, served, served.admin, f"/ui/cases/{case_id}")
        assert page.locator('[data-field="passed"]').inner_text().strip() == "no"
        form = page.locator("#score-override-form")
        form.locator("#so-score").select_option("match")
        form.locator("#so-value").fill("pass")
        form.locator("#so-reason").fill("right answer, the target spells it differently")
        form.get_by_role("button", name="Override the scorer").click()
        page.wait_for_url(f"**/ui/cases/{case_id}#corr-h")
        assert page.locator('[data-field="passed"]').inner_text().strip() == "yes"
        corrections = page.locator("#corrections").inner_text()
        assert "scorer override" in corrections and "auditor" in corrections
        assert "spells it differently" in page.locator('[data-field="gate_reason"]').inner_text()
        shot(page, "scorer-2-overridden")
        assert _accuracy(page, served) == "1.0000"
    finally:
        context.close()
    assert problems == []

    after = served.api(f"/runs/{served.run_id}")["aggregate"]
    assert (after["passed_count"], after["failed_count"], after["pass_rate"]) == (4, 0, 1.0)
    assert after["scorer_metrics"]["match/accuracy"] == 1.0
    event = served.api(f"/cases/{case_id}/history")["events"][-1]
    assert (event["type"], event["payload"]["score"]) == ("ScoreOverridden", "match")
    assert "auditor" in event["actor"]
