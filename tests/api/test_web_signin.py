"""Signing in to the web report with an API token, project-scoped pages, CSRF, human review.

A real app over a SQLite store with tokens (TestClient); the session lives in the read-model
database. Security: session fixation, the cookie's flags, a revoked token's session, sign-out,
a forged form without the CSRF token or from another origin. Review: an admin's override is an
event under the signed-in principal, shown in the history and moving the aggregate.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.web.session import SESSION_COOKIE
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_web import field, html, rows_of
from tests.helpers import bundle, case, event_count

OWNER = Context(actor="ops")
ORIGIN = {"Origin": "http://localhost"}
TOKENS = {
    "a-read": ("alpha", "read"),
    "a-write": ("alpha", "write"),
    "a-admin": ("alpha", "admin"),
    "b-admin": ("beta", "admin"),
}


@dataclass
class Team:
    services: Services
    client: TestClient
    tokens: dict[str, str]
    token_ids: dict[str, str]
    runs: dict[str, str]
    cases: dict[str, dict[str, str]]

    def bearer(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def sign_in(self, name: str) -> Any:
        """Sign in through the form the way a browser does; the response is the redirect."""
        form = html(self.client.get("/ui/signin?next=/ui/"))
        return self.client.post(
            "/ui/signin",
            data={"token": self.tokens[name], "csrf_token": csrf_of(form), "next": "/ui/"},
            headers=ORIGIN,
            follow_redirects=False,
        )


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match, "no CSRF token in the page"
    return match.group(1)


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    services = build_services(Settings(db=f"sqlite:///{tmp_path}/store/", auth="tokens"))
    issued = {
        name: services.ledger.issue_token(project, TokenScope(scope), name, OWNER)
        for name, (project, scope) in TOKENS.items()
    }
    try:
        with TestClient(create_app(services=services)) as client:
            t = Team(
                services,
                client,
                {n: i.token for n, i in issued.items()},
                {n: i.token_id for n, i in issued.items()},
                {},
                {},
            )
            for project, admin in (("alpha", "a-admin"), ("beta", "b-admin")):
                data = bundle(project=project, key=f"{project}-nightly")
                data["cases"] = [case("good", 4), case("bad", 1)]
                r = client.post("/bundles", json=data, headers=t.bearer(admin))
                assert r.status_code == 201, r.text
                run_id = r.json()["run_id"]
                t.runs[project] = run_id
                listed = client.get(f"/runs/{run_id}/cases", headers=t.bearer(admin))
                t.cases[project] = {c["test_case_key"]: c["case_id"] for c in listed.json()["data"]}
            yield t
    finally:
        services.close()


def test_a_page_without_a_session_asks_to_sign_in(team: Team) -> None:
    r = team.client.get(f"/ui/runs/{team.runs['alpha']}?show=failed", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == (
        f"/ui/signin?next=%2Fui%2Fruns%2F{team.runs['alpha']}%3Fshow%3Dfailed"
    )
    form = html(team.client.get(r.headers["location"]))
    assert 'type="password"' in form
    assert f'name="next" value="/ui/runs/{team.runs["alpha"]}?show=failed"' in form


def test_sign_in_sets_a_strict_httponly_cookie_and_never_shows_the_token(team: Team) -> None:
    r = team.sign_in("a-read")
    assert (r.status_code, r.headers["location"]) == (303, "/ui/")
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    flags = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= flags
    assert team.tokens["a-read"] not in cookie
    secret = team.tokens["a-read"].rsplit("_", 1)[1]
    page = html(team.client.get("/ui/"))
    assert secret not in page and team.tokens["a-read"] not in page
    assert field(page, "principal") == f"a-read (token {team.token_ids['a-read']}) · alpha · read"


def test_pages_show_only_the_tokens_project(team: Team) -> None:
    team.sign_in("a-read")
    listing = html(team.client.get("/ui/"))
    assert f'data-run-id="{team.runs["alpha"]}"' in listing
    assert team.runs["beta"] not in listing
    # Another project's run, case, scorecard and compare: the HTML 404, as if absent.
    for url in (
        f"/ui/runs/{team.runs['beta']}",
        f"/ui/runs/{team.runs['beta']}/scorecard",
        f"/ui/cases/{team.cases['beta']['bad']}",
        f"/ui/compare?baseline={team.runs['beta']}&candidate={team.runs['alpha']}",
        "/ui/runs/beta-nightly",
    ):
        page = html(team.client.get(url), 404)
        assert '<p role="alert" class="alert">' in page, url
    # Its own run by key as well as by id.
    by_key = html(team.client.get("/ui/runs/alpha-nightly"))
    by_id = html(team.client.get(f"/ui/runs/{team.runs['alpha']}"))
    assert rows_of(by_key, "cases") == rows_of(by_id, "cases") != []


def test_a_wrong_token_is_refused_and_no_session_starts(team: Team) -> None:
    form = html(team.client.get("/ui/signin"))
    r = team.client.post(
        "/ui/signin",
        data={"token": "evl_000000000000_nope", "csrf_token": csrf_of(form)},
        headers=ORIGIN,
        follow_redirects=False,
    )
    page = html(r, 401)
    assert field(page, "signin_error") == "token: unknown, malformed or revoked"
    assert "set-cookie" not in r.headers


def test_session_fixation_a_planted_session_id_is_never_adopted(team: Team) -> None:
    team.client.cookies.set(SESSION_COOKIE, "planted-by-an-attacker")
    assert team.client.get("/ui/", follow_redirects=False).status_code == 303
    first = team.sign_in("a-read").cookies[SESSION_COOKIE]
    assert first != "planted-by-an-attacker"
    # Signing in again (another token) starts yet another session and ends the first.
    second = team.sign_in("a-admin").cookies[SESSION_COOKIE]
    assert second != first
    fresh = TestClient(team.client.app)
    fresh.cookies.set(SESSION_COOKIE, first)
    assert fresh.get("/ui/", follow_redirects=False).status_code == 303
    fresh.cookies.set(SESSION_COOKIE, second)
    assert fresh.get("/ui/", follow_redirects=False).status_code == 200


def test_a_revoked_tokens_session_ends_on_the_next_request(team: Team) -> None:
    team.sign_in("a-read")
    assert team.client.get("/ui/", follow_redirects=False).status_code == 200
    team.services.ledger.revoke_token(team.token_ids["a-read"], OWNER, "left the team")
    r = team.client.get("/ui/", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/ui/signin?next=%2Fui%2F")


def test_sign_out_ends_the_session_on_the_server(team: Team) -> None:
    session_id = team.sign_in("a-read").cookies[SESSION_COOKIE]
    page = html(team.client.get("/ui/"))
    r = team.client.post(
        "/ui/signout", data={"csrf_token": csrf_of(page)}, headers=ORIGIN, follow_redirects=False
    )
    assert (r.status_code, r.headers["location"]) == (303, "/ui/signin")
    assert f'{SESSION_COOKIE}=""' in r.headers["set-cookie"]
    replay = TestClient(team.client.app)
    replay.cookies.set(SESSION_COOKIE, session_id)
    assert replay.get("/ui/", follow_redirects=False).status_code == 303


def _override_form(team: Team, project: str = "alpha") -> tuple[str, dict[str, str]]:
    case_id = team.cases[project]["bad"]
    page = html(team.client.get(f"/ui/cases/{case_id}"))
    verdict = re.search(r'<select id="o-verdict" name="verdict_id"><option value="([^"]+)"', page)
    assert verdict, "no override form"
    form = {
        "csrf_token": csrf_of(page),
        "verdict_id": verdict.group(1),
        "passed": "pass",
        "reason": "the refund was approved by a supervisor",
    }
    return case_id, form


def test_an_admin_overrides_a_failing_case_under_their_name(team: Team) -> None:
    team.sign_in("a-admin")
    before = html(team.client.get(f"/ui/runs/{team.runs['alpha']}"))
    assert field(before, "pass_rate") == "50.0%"
    case_id, form = _override_form(team)
    r = team.client.post(
        f"/ui/cases/{case_id}/override", data=form, headers=ORIGIN, follow_redirects=False
    )
    assert (r.status_code, r.headers["location"]) == (303, f"/ui/cases/{case_id}#corr-h")
    page = html(team.client.get(r.headers["location"]))
    assert field(page, "passed") == "yes"
    actor = f"a-admin (token {team.token_ids['a-admin']})"
    corrections = page.split('id="corrections"', 1)[1].split("</table>", 1)[0]
    assert f"<td>{actor}</td>" in corrections
    assert "<td>the refund was approved by a supervisor</td>" in corrections
    history = team.client.get(f"/cases/{case_id}/history", headers=team.bearer("a-admin"))
    last = history.json()["events"][-1]
    assert (last["type"], last["actor"]) == ("VerdictOverridden", actor)
    after = html(team.client.get(f"/ui/runs/{team.runs['alpha']}"))
    assert field(after, "pass_rate") == "100.0%"


def test_an_override_needs_a_reason_and_the_admin_scope(team: Team) -> None:
    team.sign_in("a-admin")
    case_id, form = _override_form(team)
    events = event_count(team.services)
    page = html(
        team.client.post(
            f"/ui/cases/{case_id}/override", data={**form, "reason": "  "}, headers=ORIGIN
        ),
        422,
    )
    assert "reason: an override needs a reason" in page
    team.sign_in("a-write")
    write_page = html(team.client.get(f"/ui/cases/{case_id}"))
    assert 'id="override-form"' not in write_page
    form["csrf_token"] = csrf_of(write_page)
    page = html(team.client.post(f"/ui/cases/{case_id}/override", data=form, headers=ORIGIN), 403)
    assert "needs a token with the admin scope" in page
    assert event_count(team.services) == events


def test_a_forged_form_is_refused_and_nothing_is_stored(team: Team) -> None:
    team.sign_in("a-admin")
    case_id, form = _override_form(team)
    events = event_count(team.services)
    url = f"/ui/cases/{case_id}/override"
    no_token = {k: v for k, v in form.items() if k != "csrf_token"}
    page = html(team.client.post(url, data=no_token, headers=ORIGIN), 403)
    assert "csrf_token: missing or stale" in page
    wrong = html(team.client.post(url, data={**form, "csrf_token": "x" * 43}, headers=ORIGIN), 403)
    assert "csrf_token: missing or stale" in wrong
    other_site = html(
        team.client.post(url, data=form, headers={"Origin": "http://evil.example"}), 403
    )
    assert "not sent from a page of this server (Origin)" in other_site
    assert "Origin" in html(team.client.post(url, data=form), 403)
    assert event_count(team.services) == events


def test_an_admin_cannot_review_another_projects_case(team: Team) -> None:
    team.sign_in("a-admin")
    _, form = _override_form(team)
    events = event_count(team.services)
    beta_case = team.cases["beta"]["bad"]
    page = html(team.client.post(f"/ui/cases/{beta_case}/override", data=form, headers=ORIGIN), 404)
    assert f"no case {beta_case}" in page
    assert event_count(team.services) == events


def test_open_local_serving_needs_no_sign_in_and_still_checks_forms(tmp_path: Path) -> None:
    services = build_services(Settings(db=f"sqlite:///{tmp_path}/store/"))
    try:
        with TestClient(create_app(services=services)) as client:
            data = bundle()
            data["cases"] = [case("bad", 1)]
            run_id = client.post("/bundles", json=data).json()["run_id"]
            case_id = client.get(f"/runs/{run_id}/cases").json()["data"][0]["case_id"]
            page = html(client.get(f"/ui/cases/{case_id}"))
            assert 'data-field="principal"' not in page
            form = {
                "csrf_token": csrf_of(page),
                "verdict_id": re.findall(r'name="verdict_id"><option value="([^"]+)"', page)[0],
                "reason": "judge hallucinated a policy",
            }
            events = event_count(services)
            forged = {**form, "csrf_token": "forged"}
            html(client.post(f"/ui/cases/{case_id}/invalidate", data=forged, headers=ORIGIN), 403)
            assert event_count(services) == events
            r = client.post(f"/ui/cases/{case_id}/invalidate", data=form, headers=ORIGIN)
            after = html(r)
            assert "<td>invalidation</td>" in after
            assert f"<td>{services.settings.default_actor}</td>" in after
            assert event_count(services) == events + 1
    finally:
        services.close()


def test_the_favicon_is_served_and_linked(team: Team) -> None:
    r = team.client.get("/favicon.ico")
    assert (r.status_code, r.headers["content-type"]) == (200, "image/svg+xml")
    assert r.content.startswith(b"<svg")
    assert '<link rel="icon" href="/favicon.ico"' in html(team.client.get("/ui/signin"))
