"""Search through its entry points (issue 36): `GET /search` with two projects' tokens, the
results page and the case page with the words marked (HTML in a transcript stays text), and
`evaledger search`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import runs
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_cli import Cli
from tests.helpers import bundle, case

OWNER = Context(actor="owner")
ORIGIN = {"Origin": "http://localhost"}
XSS = '<script>alert("refund")</script><img src=x onerror=alert(1)> refund approved'


def search_bundle(project: str, key: str, agent_says: str) -> dict[str, Any]:
    """A run of three cases; the first says `agent_says`, its judge writes 'hallucinated'."""
    data = bundle(project=project, key=key)
    first, second, third = case("refund-001"), case("greeting-002"), case("shipping-003")
    first["transcript"][1]["content"] = agent_says
    first["verdicts"][0]["raw_output"] = "The agent hallucinated a <b>refund</b> policy."
    second["transcript"][1]["content"] = "Hello there, nothing about money."
    third["test_case"]["tags"] = ["logistics"]
    data["cases"] = [first, second, third]
    return data


@dataclass
class Site:
    services: Services
    client: TestClient
    tokens: dict[str, str]
    run_ids: dict[str, str]

    def get(self, path: str, token: str, **params: Any) -> Any:
        return self.client.get(
            path, params=params, headers={"Authorization": f"Bearer {self.tokens[token]}"}
        )


@pytest.fixture
def site(store_url: str) -> Iterator[Site]:
    services = build_services(Settings(db=store_url, auth="tokens"))
    tokens = {
        p: services.ledger.issue_token(p, TokenScope.READ, f"{p}-reader", OWNER).token
        for p in ("alpha", "beta")
    }
    run_ids = {
        p: str(
            runs.import_run(
                services, RunBundle.model_validate(search_bundle(p, f"{p}-run", XSS)), OWNER
            ).run_id
        )
        for p in ("alpha", "beta")
    }
    try:
        with TestClient(create_app(services=services)) as client:
            yield Site(services, client, tokens, run_ids)
    finally:
        services.close()


def test_each_token_finds_only_its_projects_cases(site: Site) -> None:
    for project, other in (("alpha", "beta"), ("beta", "alpha")):
        r = site.get("/search", project, q="refund")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["project"] == project
        assert body["count"] >= 2  # the transcript and the judge reply
        assert {h["run_id"] for h in body["hits"]} == {site.run_ids[project]}
        assert {h["field"] for h in body["hits"]} >= {"transcript", "judge", "key"}
        # Another project's run, by id or key: not found; another project by name: refused.
        assert site.get("/search", project, q="refund", run=site.run_ids[other]).status_code == 404
        assert site.get("/search", project, q="refund", run=f"{other}-run").status_code == 404
        assert site.get("/search", project, q="refund", project=other).status_code == 403
    assert site.client.get("/search", params={"q": "refund"}).status_code == 401


def test_hits_are_ranked_marked_and_escaped(site: Site) -> None:
    r = site.get("/search", "alpha", q="hallucinated", field="judge")
    (hit,) = r.json()["hits"]
    assert hit["test_case_key"] == "refund-001"
    assert hit["snippet_html"] == (
        "The agent <mark>hallucinated</mark> a &lt;b&gt;refund&lt;/b&gt; policy."
    )
    start, end = hit["marks"][0]
    assert hit["snippet"][start:end] == "hallucinated"
    tagged = site.get("/search", "alpha", q="logis*", field="tag").json()["hits"]
    assert [h["test_case_key"] for h in tagged] == ["shipping-003"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"q": ""}, "q"),
        ({"q": '"*"'}, "q"),
        ({"q": "x" * 501}, "q"),
        ({"q": "a", "field": "body"}, "field"),
        ({"q": "a", "limit": "0"}, "limit"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(
    site: Site, params: dict[str, str], field: str
) -> None:
    r = site.get("/search", "alpha", **params)
    assert r.status_code == 422, r.text
    assert field in json.dumps(r.json())


def _sign_in(site: Site, project: str) -> None:
    form = site.client.get("/ui/signin?next=/ui/").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert csrf
    r = site.client.post(
        "/ui/signin",
        data={"token": site.tokens[project], "csrf_token": csrf.group(1), "next": "/ui/"},
        headers=ORIGIN,
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text


def test_the_results_page_and_the_case_page_mark_the_words_and_keep_html_as_text(
    site: Site,
) -> None:
    _sign_in(site, "alpha")
    home = site.client.get("/ui/").text
    assert 'action="/ui/search"' in home  # the box is on every page
    page = site.client.get("/ui/search", params={"q": "refund approved"}).text
    assert "<script>alert" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&quot;<mark>refund</mark>&quot;)&lt;/script&gt;" in page
    assert site.run_ids["beta"] not in page
    link = re.search(r'href="(/ui/cases/[^"]+)"', page)
    assert link
    case_page = site.client.get(link.group(1).replace("&amp;", "&")).text
    assert "<script>alert" not in case_page and "<img" not in case_page
    assert "<mark>refund</mark> <mark>approved</mark>" in case_page
    # The other project's case, even with the right words: not found.
    site.client.cookies.clear()
    _sign_in(site, "beta")
    other = site.client.get(link.group(1).replace("&amp;", "&"))
    assert other.status_code == 404
    blank = site.client.get("/ui/search").text
    assert "hit" not in blank.split("<h1>Search</h1>")[1].split("</form>")[1]


def test_the_cli_searches_one_project(
    capsys: pytest.CaptureFixture[str],
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EVALEDGER_SEAL_PAYLOADS", "0")  # inline text: the only text indexed
    cli = Cli(capsys, sqlite_url)
    for project in ("alpha", "beta"):
        path = tmp_path / f"{project}.json"
        path.write_text(json.dumps(search_bundle(project, f"{project}-run", XSS)))
        assert cli("import", str(path))[0] == 0
    found = cli.json("search", "hallucin*", "--project", "alpha")
    assert [(h["test_case_key"], h["field"]) for h in found["hits"]] == [("refund-001", "judge")]
    code, out, _ = cli("search", "refund approved", "--project", "beta", "--field", "transcript")
    assert code == 0
    assert "refund-001 [transcript]" in out and "[refund] [approved]" in out
    assert cli("search", "--", "***", "--project", "alpha")[0] == 2
    assert cli("search", "refund", "--project", "alpha", "--run", "beta-run")[0] != 0
    code, out, _ = cli("search", "nowhere", "--project", "alpha")
    assert code == 0 and "no case" in out
