"""The web report shared by a team, driven in real headless Chromium against a real server.

`evaledger demo` loads the demo into two projects of a fresh store, `evaledger token create`
issues an admin token for one, and `evaledger serve` then requires tokens. In the browser: sign
in with the token, see only its project, fail to open the other project's run, override a
failing case with a reason and see the aggregate change and the history name the principal, a
forged form refused, the review queue walked with the keyboard, answers side by side in compare;
a write-scope reviewer labels a case (agreement's judge-vs-human moves) and flags one (it leads the
queue), and a forged label form without the CSRF token stores nothing.
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

from evaledger.api.web.filters import fmt_pct
from tests.api.test_serve import EVALEDGER
from tests.api.test_web_browser import CHROMIUM, WAIT_LIMIT_MS, _require_chromium, shot
from tests.browser import live_server
from tests.helpers import bundle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@dataclass
class TeamSite:
    base: str
    token: str
    token_id: str
    other_run: str
    writer: str
    """A write-scope reviewer's token (labels and flags, no overrides)."""
    writer_id: str

    def api(self, path: str) -> Any:
        request = urllib.request.Request(
            self.base + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())


def _run(root: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(EVALEDGER), *args], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def team_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamSite]:
    _require_chromium()
    root = tmp_path_factory.mktemp("team")
    db = f"sqlite:///{root}/store/"
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    _run(root, env, "demo", "--db", db)
    other = root / "other-team.json"
    other.write_text(json.dumps(bundle(project="other-team", key="other-team-nightly")))
    _run(root, env, "import", "--db", db, str(other))
    created = json.loads(
        _run(root, env, "token", "create", "--db", db, "--project", "default",
             "--scope", "admin", "--name", "reviewer", "--json")
    )  # fmt: skip
    writer = json.loads(
        _run(root, env, "token", "create", "--db", db, "--project", "default",
             "--scope", "write", "--name", "labeller", "--json")
    )  # fmt: skip
    listed = json.loads(_run(root, env, "runs", "--db", db, "--project", "other-team", "--json"))
    other_run = str(listed["data"][0]["run_id"])
    with live_server(db, root, env) as base:
        yield TeamSite(
            base,
            created["token"],
            created["token_id"],
            other_run,
            writer["token"],
            writer["token_id"],
        )


@pytest.fixture(scope="module")
def chromium(team_site: TeamSite) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(chromium: Any, team_site: TeamSite) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    outside: list[str] = []

    def offline(route: Any) -> None:
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


def sign_in(page: Any, site: TeamSite, start: str = "/ui/", token: str = "") -> None:
    page.goto(site.base + start)
    page.wait_for_url("**/ui/signin?**")
    page.locator("#token").fill(token or site.token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"**{start}")


def runs(site: TeamSite) -> dict[str, dict[str, Any]]:
    return {r["run_key"]: r for r in site.api("/runs?limit=100")["data"]}


def test_sign_in_see_only_the_project_and_not_the_other_teams_run(
    team_site: TeamSite, page: Any
) -> None:
    sign_in(page, team_site)
    assert team_site.token not in page.url
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads the session
    own = {r["run_id"] for r in runs(team_site).values()}
    listed = set(page.locator("tbody tr[data-run-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.runId)"
    ))  # fmt: skip
    assert listed == own and len(own) == 4  # the demo's 3 runs and its online run
    assert team_site.token_id in page.locator('[data-field="principal"]').inner_text()
    assert team_site.token not in page.content()
    shot(page, "team-1-signed-in")
    # The other team's run, by its id (read from the store: this token cannot list it).
    foreign = page.goto(team_site.base + f"/ui/runs/{team_site.other_run}")
    assert foreign.status == 404
    assert "no run" in page.locator('[role="alert"]').inner_text()
    response = page.goto(team_site.base + "/ui/runs/cs-agent-v2-pr-218-2026-09-15")
    assert response.status == 200  # its own run, by key


def test_override_a_failing_case_and_see_the_aggregate_and_the_history(
    team_site: TeamSite, page: Any
) -> None:
    sign_in(page, team_site)
    run = runs(team_site)["cs-agent-v2-pr-218-2026-09-15"]
    before = team_site.api(f"/runs/{run['run_id']}")["aggregate"]
    cases = team_site.api(f"/runs/{run['run_id']}/cases?limit=500")["data"]
    failing = next(c for c in cases if c["passed"] is False and c["gate"] != "execution_error")
    page.goto(f"{team_site.base}/ui/cases/{failing['case_id']}")
    form = page.locator("#override-form")
    form.get_by_label("Force the case to").select_option("pass")
    form.get_by_label("Reason (required)").fill("a supervisor approved it in turn 6")
    form.get_by_role("button", name="Override").click()
    page.wait_for_url(f"**/ui/cases/{failing['case_id']}#corr-h")
    assert page.locator('[data-field="passed"]').inner_text() == "yes"
    row = page.locator("#corrections tbody tr").last
    assert f"reviewer (token {team_site.token_id})" in row.inner_text()
    assert "a supervisor approved it in turn 6" in row.inner_text()
    history = page.locator("#history tbody tr").last.inner_text()
    assert "VerdictOverridden" in history and f"token {team_site.token_id}" in history
    shot(page, "team-2-overridden")
    after = team_site.api(f"/runs/{run['run_id']}")["aggregate"]
    assert after["pass_rate"] > before["pass_rate"]
    page.goto(f"{team_site.base}/ui/runs/{run['run_id']}")
    assert page.locator('#aggregate [data-field="pass_rate"]').inner_text() == fmt_pct(
        after["pass_rate"]
    )


def test_a_forged_form_without_the_csrf_token_is_refused(team_site: TeamSite, page: Any) -> None:
    sign_in(page, team_site)
    run = runs(team_site)["cs-agent-v2-pr-218-2026-09-15"]
    case = team_site.api(f"/runs/{run['run_id']}/cases?limit=1")["data"][0]
    history = team_site.api(f"/cases/{case['case_id']}/history")["events"]
    page.goto(f"{team_site.base}/ui/cases/{case['case_id']}")
    page.evaluate(
        """([caseId]) => {
            const f = document.createElement('form');
            f.method = 'post';
            f.action = '/ui/cases/' + caseId + '/invalidate';
            const add = (n, v) => { const i = document.createElement('input');
                i.name = n; i.value = v; f.appendChild(i); };
            add('verdict_id', document.querySelector('#i-verdict').value);
            add('reason', 'forged');
            document.body.appendChild(f);
            f.submit();
        }""",
        [case["case_id"]],
    )
    page.wait_for_url("**/invalidate")
    assert "csrf_token: missing or stale" in page.locator('[role="alert"]').inner_text()
    assert team_site.api(f"/cases/{case['case_id']}/history")["events"] == history


def test_the_review_queue_walks_with_the_keyboard(team_site: TeamSite, page: Any) -> None:
    sign_in(page, team_site)
    run = runs(team_site)["cs-agent-v2-pr-218-2026-09-15"]
    page.goto(f"{team_site.base}/ui/runs/{run['run_id']}/queue")
    rows = page.locator("#queue tbody tr")
    assert rows.count() >= 2
    ids = rows.evaluate_all("rows => rows.map(r => r.dataset.caseId)")
    current = page.locator("#queue tbody tr.current")
    assert current.get_attribute("data-case-id") == ids[0]
    page.keyboard.press("j")
    assert current.get_attribute("data-case-id") == ids[1]
    page.keyboard.press("k")
    page.keyboard.press("j")
    shot(page, "team-3-queue")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/ui/cases/{ids[1]}?queue=*")
    assert "Review queue: case 2 of" in page.locator("nav.queue-nav").inner_text()
    page.keyboard.press("k")
    page.wait_for_url(f"**/ui/cases/{ids[0]}?queue=*")
    page.keyboard.press("u")
    page.wait_for_url(f"**/ui/runs/{run['run_id']}/queue")


def test_compare_shows_both_answers_side_by_side(team_site: TeamSite, page: Any) -> None:
    sign_in(page, team_site)
    page.goto(
        f"{team_site.base}/ui/compare?baseline=cs-agent-v1-nightly-2026-09-14"
        "&candidate=cs-agent-v2-pr-218-2026-09-15"
    )
    first = page.locator("tr.answers").first
    baseline = first.locator('[data-field="baseline_answer"]').inner_text()
    candidate = first.locator('[data-field="candidate_answer"]').inner_text()
    assert baseline not in ("", "—") and candidate not in ("", "—")
    side = first.locator(".side > div").all()
    assert len(side) == 2
    left, right = side[0].bounding_box(), side[1].bounding_box()
    assert left["y"] == right["y"] and left["x"] < right["x"]  # side by side, not stacked
    shot(page, "team-4-compare")


def _human_items(site: TeamSite, run_id: str) -> dict[tuple[str, str], int]:
    return {
        (h["judge"], h["measure"]): h["items"]
        for h in site.api(f"/runs/{run_id}/agreement")["human"]
    }


def test_a_write_reviewer_labels_a_case_and_agreement_changes(
    team_site: TeamSite, page: Any
) -> None:
    sign_in(page, team_site, token=team_site.writer)
    run = runs(team_site)["cs-agent-v1-nightly-2026-09-14"]
    before = _human_items(team_site, run["run_id"])
    cases = team_site.api(f"/runs/{run['run_id']}/cases?limit=500")["data"]
    judged = next(c for c in cases if c["passed"] is True)
    page.goto(f"{team_site.base}/ui/cases/{judged['case_id']}")
    assert page.locator("#override-form").count() == 0  # write scope: no overrides
    form = page.locator("#label-form")
    form.get_by_label("Your verdict").select_option("fail")
    form.get_by_label("Comment").fill("it never confirmed the new address")
    form.get_by_role("button", name="Save label").click()
    page.wait_for_url(f"**/ui/cases/{judged['case_id']}#labels-h")
    row = page.locator("#labels tbody tr").last.inner_text()
    assert f"labeller (token {team_site.writer_id})" in row
    assert "it never confirmed the new address" in row
    history = page.locator("#history tbody tr").last.inner_text()
    assert "HumanLabelRecorded" in history and f"token {team_site.writer_id}" in history
    shot(page, "team-5-labelled")
    after = _human_items(team_site, run["run_id"])
    judges = {judge for judge, measure in after if measure == "case_passed"}
    assert judges, "no judge-vs-human figure after the label"
    assert all(after[(j, "case_passed")] == before.get((j, "case_passed"), 0) + 1 for j in judges)


def test_a_flagged_case_appears_in_the_review_queue(team_site: TeamSite, page: Any) -> None:
    sign_in(page, team_site, token=team_site.writer)
    run = runs(team_site)["cs-agent-v1-nightly-2026-09-14"]
    cases = team_site.api(f"/runs/{run['run_id']}/cases?limit=500")["data"]
    case = next(c for c in cases if c["passed"] is False)  # the label test takes a passed one
    page.goto(f"{team_site.base}/ui/cases/{case['case_id']}")
    form = page.locator("#flag-form")
    form.get_by_label("Reason (required)").fill("the caller asked for a person twice")
    form.get_by_role("button", name="Flag").click()
    page.wait_for_url(f"**/ui/cases/{case['case_id']}#labels-h")
    assert "Flagged for review" in page.locator("#flag-status").inner_text()
    page.goto(f"{team_site.base}/ui/runs/{run['run_id']}/queue")
    first = page.locator("#queue tbody tr").first
    assert first.get_attribute("data-case-id") == case["case_id"]
    assert "flagged by a reviewer" in first.locator('[data-field="reasons"]').inner_text()
    assert "asked for a person twice" in first.locator('[data-field="flag"]').inner_text()
    shot(page, "team-6-flagged")


def test_a_forged_label_form_without_the_csrf_token_is_refused(
    team_site: TeamSite, page: Any
) -> None:
    sign_in(page, team_site, token=team_site.writer)
    run = runs(team_site)["cs-agent-v1-nightly-2026-09-14"]
    case = team_site.api(f"/runs/{run['run_id']}/cases?limit=2")["data"][1]
    history = team_site.api(f"/cases/{case['case_id']}/history")["events"]
    page.goto(f"{team_site.base}/ui/cases/{case['case_id']}")
    page.evaluate(
        """([caseId]) => {
            const f = document.createElement('form');
            f.method = 'post';
            f.action = '/ui/cases/' + caseId + '/label';
            const add = (n, v) => { const i = document.createElement('input');
                i.name = n; i.value = v; f.appendChild(i); };
            add('passed', 'fail');
            add('comment', 'forged');
            document.body.appendChild(f);
            f.submit();
        }""",
        [case["case_id"]],
    )
    page.wait_for_url("**/label")
    assert "csrf_token: missing or stale" in page.locator('[role="alert"]').inner_text()
    assert team_site.api(f"/cases/{case['case_id']}/history")["events"] == history
