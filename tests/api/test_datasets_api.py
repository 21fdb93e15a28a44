"""Datasets over HTTP and the CLI: versions, diff, tenancy, bad input (issue 35)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import datasets
from evaledger.application.projects import issue_token
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import DatasetItem, TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_cli import Cli
from tests.helpers import bundle, case

ITEMS = [
    {"key": "refund-1", "input": {"q": "Where is my refund?"}, "expected_outcomes": ["looks up"]},
    {"key": "refund-2", "label": {"passed": True, "score": 4, "by": ["token:ann"]}},
]


class Api:
    """A client and bearer tokens of two projects."""

    def __init__(self, client: TestClient, services: Services) -> None:
        admin = Context(actor="admin")
        self.client, self.services = client, services
        self.shop = issue_token(services, "shop", TokenScope.WRITE, "ci", admin).token
        self.reader = issue_token(services, "shop", TokenScope.READ, "viewer", admin).token
        self.rival = issue_token(services, "rival", TokenScope.ADMIN, "rival", admin).token

    def call(self, method: str, path: str, token: str, body: Any = None) -> Any:
        headers = {"authorization": f"Bearer {token}"}
        return self.client.request(method, path, json=body, headers=headers)


@pytest.fixture
def api(store_url: str) -> Iterator[Api]:
    services = build_services(Settings(db=store_url))
    try:
        with TestClient(create_app(services=services)) as client:
            yield Api(client, services)
    finally:
        services.close()


def test_a_team_versions_its_dataset_over_http(api: Api) -> None:
    base = "/projects/shop/datasets"
    made = api.call("POST", base, api.shop, {"name": "qa", "description": "refunds"})
    assert made.status_code == 201, made.text
    assert made.json()["latest_version"] == 0 and made.json()["created_by"].startswith("ci (token")
    again = api.call("POST", base, api.shop, {"name": "qa", "description": "refunds"})
    assert again.status_code == 200 and again.json() == made.json()
    other = api.call("POST", base, api.shop, {"name": "qa", "description": "else"})
    assert other.status_code == 409
    first = api.call("POST", f"{base}/qa/versions", api.shop, {"items": ITEMS})
    assert first.status_code == 201, first.text
    assert (first.json()["version"], first.json()["items"], first.json()["created"]) == (1, 2, True)
    same = api.call("POST", f"{base}/qa/versions", api.shop, {"items": ITEMS[::-1]})
    assert same.status_code == 200 and same.json()["created"] is False
    assert same.json()["hash"] == first.json()["hash"]
    edited = [ITEMS[0], {**ITEMS[1], "label": {"passed": False}}, {"key": "refund-3"}]
    second = api.call("POST", f"{base}/qa/versions", api.shop, {"items": edited, "source": "x"})
    assert second.json()["version"] == 2

    listed = api.call("GET", base, api.reader).json()["data"]
    assert [(d["name"], d["latest_version"], d["items"]) for d in listed] == [("qa", 2, 3)]
    versions = api.call("GET", f"{base}/qa", api.reader).json()["data"]
    assert [(v["version"], v["items"]) for v in versions] == [(1, None), (2, None)]
    one = api.call("GET", f"{base}/qa/versions/1", api.reader).json()
    assert [i["key"] for i in one["items"]] == ["refund-1", "refund-2"]
    assert one["items"][1]["label"] == {"passed": True, "score": 4.0, "by": ["token:ann"]}
    diff = api.call("GET", f"{base}/qa/diff?old=1&new=2", api.reader).json()
    assert (diff["added"], diff["removed"], diff["changed"]) == (["refund-3"], [], ["refund-2"])


def test_another_projects_token_is_refused_and_nothing_is_stored(api: Api) -> None:
    base = "/projects/shop/datasets"
    api.call("POST", base, api.shop, {"name": "qa"})
    api.call("POST", f"{base}/qa/versions", api.shop, {"items": ITEMS})
    before = api.services.ledger.position()
    for method, path, body in (
        ("GET", base, None),
        ("GET", f"{base}/qa", None),
        ("GET", f"{base}/qa/versions/1", None),
        ("GET", f"{base}/qa/diff?old=1&new=1", None),
        ("POST", base, {"name": "forged"}),
        ("POST", f"{base}/qa/versions", {"items": [{"key": "forged"}]}),
    ):
        response = api.call(method, path, api.rival, body)
        assert response.status_code == 404, (method, path, response.text)
    # A read-only token of the project reads but cannot write.
    refused = api.call("POST", f"{base}/qa/versions", api.reader, {"items": [{"key": "x"}]})
    assert refused.status_code == 403
    assert api.services.ledger.position() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"items": [{"key": "a", "tags": "x"}]}, "tags"),
        ({"items": [{"input": "no key"}]}, "key"),
        ({"items": [{"key": "a", "label": {"score": 1}}]}, "passed"),
        ({"items": []}, "items"),
        ({"items": [{"key": "a"}, {"key": "a"}]}, "key"),
        ({"items": [{"key": "a", "input": "nul\u0000"}]}, "input"),
    ],
)
def test_a_bad_version_names_the_field_and_stores_nothing(
    api: Api, body: dict[str, Any], field: str
) -> None:
    base = "/projects/shop/datasets"
    api.call("POST", base, api.shop, {"name": "qa"})
    before = api.services.ledger.position()
    response = api.call("POST", f"{base}/qa/versions", api.shop, body)
    assert 400 <= response.status_code < 500, response.text
    assert field in response.text
    assert api.services.ledger.position() == before


def test_the_cli_adds_a_review_export_and_refuses_a_bad_file(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, sqlite_url)
    made = {"name": "gold", "project": "default", "created": True}
    assert cli.json("dataset", "create", "gold") == made
    assert cli.json("dataset", "create", "gold") == {**made, "created": False}
    gold = tmp_path / "gold.jsonl"
    gold.write_text(
        '{"key": "c1", "input": "hi", "expected_outcomes": [], "tags": [], "metadata": {}, '
        '"label": {"passed": true, "score": null, "by": ["token:ann", "token:bo"]}}\n'
        '{"key": "c2", "input": "bye", "expected_outcomes": [], "tags": [], "metadata": {}, '
        '"label": null}\n'
    )
    added = cli.json("dataset", "add", "gold", str(gold))
    assert (added["version"], added["items"], added["created"]) == (1, 2, True)
    assert cli.json("dataset", "add", "gold", str(gold))["created"] is False
    bad = tmp_path / "bad.csv"
    bad.write_text("key,label_passed\nc1,perhaps\n")
    code, _, err = cli("dataset", "add", "gold", str(bad))
    assert code == 2 and "label_passed" in err and "line 2" in err
    code, _, err = cli("dataset", "add", "nope", str(gold))
    assert code == 2 and "create it first" in err
    shown = cli.json("dataset", "show", "gold@1")
    assert [i["label"] is not None for i in shown["items"]] == [True, False]
    code, out, _ = cli("dataset", "list")
    assert code == 0 and "gold" in out and added["hash"] in out
    (row,) = cli.json("dataset", "list")
    assert row["latest_version"] == 1
    gold.write_text('{"key": "c1", "input": "hi!"}\n{"key": "c3"}\n')
    cli.json("dataset", "add", "gold", str(gold))
    code, out, _ = cli("dataset", "diff", "gold@1", "gold@2")
    assert code == 0
    assert out.splitlines()[1:4] == ["+ c3", "- c2", "~ c1"]
    code, _, err = cli("dataset", "show", "gold@x")
    assert code == 2 and "NAME@VERSION" in err


def _two_versions(cli: Cli, tmp_path: Path) -> None:
    cli.json("dataset", "create", "qa")
    first = tmp_path / "v1.jsonl"
    first.write_text('{"key": "greeting"}\n{"key": "refund"}\n{"key": "gone"}\n')
    cli.json("dataset", "add", "qa", str(first))
    second = tmp_path / "v2.jsonl"
    second.write_text('{"key": "greeting"}\n{"key": "refund", "input": "new"}\n{"key": "new"}\n')
    cli.json("dataset", "add", "qa", str(second))


def _run_file(tmp_path: Path, key: str, dataset: dict[str, Any] | None) -> str:
    data = bundle(key=key, **({"dataset": dataset} if dataset else {}))
    data["cases"] = [case("greeting", 4), case("refund", 4)]
    path = tmp_path / f"{key}.json"
    path.write_bytes(orjson.dumps(data))
    return str(path)


def test_compare_of_two_dataset_versions_compares_the_common_items_and_says_so(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, sqlite_url)
    _two_versions(cli, tmp_path)
    for key, version in (("old", 1), ("new", 2), ("same", 2), ("plain", None)):
        ref = {"name": "qa", "version": version} if version else None
        cli.json("import", _run_file(tmp_path, key, ref))
    code, _, err = cli("compare", "old", "new")
    assert code == 0, err
    assert "warning: runs of different dataset versions" in err
    assert "qa@1" in err and "qa@2" in err and "items that differ: gone, new, refund" in err
    # refund changed between the versions: only greeting is compared.
    assert "compared only the 1 item(s) common to both runs" in err
    assert "1 changed between the versions left out" in err
    code, _, err = cli("compare", "old", "new", "--allow-different-datasets")
    assert code == 0, err
    assert "warning: runs of different dataset versions" in err and "compared every case" in err
    code, _, err = cli("compare", "new", "same")
    assert code == 0 and "dataset" not in err
    # A run that names no dataset against one that does is not silently the same.
    code, _, err = cli("compare", "plain", "new")
    assert code == 0 and "no dataset" in err and "compared only the 2 item(s)" in err
    # Two result files are held to the same rule (their hashes: no diff of items).
    refs = [{"name": "gsm8k", "hash": c * 64} for c in "ab"]
    files = [_run_file(tmp_path, f"file-{n}", r) for n, r in enumerate(refs)]
    code, out, err = cli("compare", *files, "--json")
    assert code == 0 and "gsm8k" in err
    guard = orjson.loads(out)["comparability"]
    assert (guard["restricted"], guard["common_items"]) == (True, 2)


def test_the_web_compare_page_shows_the_dataset_banner(services: Services, tmp_path: Path) -> None:
    ctx = Context(actor="ops")
    datasets.create_dataset(services, "default", "qa", None, ctx)
    for keys in (("greeting", "refund"), ("greeting", "refund", "new")):
        items = [DatasetItem(key=k) for k in keys]
        datasets.add_dataset_version(services, "default", "qa", items, None, ctx)
    runs_ = {}
    for key, version in (("old", 1), ("new", 2)):
        data = bundle(key=key, dataset={"name": "qa", "version": version})
        data["cases"] = [case("greeting", 4), case("refund", 4)]
        runs_[key] = services.ledger.import_bundle(RunBundle.model_validate(data), ctx).run_id
    with TestClient(create_app(services=services)) as client:
        page = client.get(f"/ui/compare?baseline={runs_['old']}&candidate={runs_['new']}")
        assert page.status_code == 200, page.text[:500]
        banner = re.search(r'data-field="datasets"><p>([^<]*)<', page.text)
        assert banner is not None
        assert "qa@1" in banner.group(1) and "items that differ: new" in banner.group(1)
        assert "compared only the 2 item(s) common to both runs" in banner.group(1)
        same = client.get(f"/ui/compare?baseline={runs_['old']}&candidate={runs_['old']}")
        assert 'data-field="datasets"' not in same.text


def test_the_web_pages_list_show_and_diff_versions_in_the_viewers_project(api: Api) -> None:
    base = "/projects/shop/datasets"
    api.call("POST", base, api.shop, {"name": "qa", "description": "refunds"})
    api.call("POST", f"{base}/qa/versions", api.shop, {"items": ITEMS, "source": "v1.jsonl"})
    edited = [ITEMS[0], {"key": "refund-3", "tags": ["new"]}]
    api.call("POST", f"{base}/qa/versions", api.shop, {"items": edited})

    def page(path: str, token: str) -> Any:
        return api.client.get(path, headers={"authorization": f"Bearer {token}"})

    listed = page("/ui/datasets", api.reader)
    assert listed.status_code == 200, listed.text[:500]
    row = re.search(r'<tr data-dataset="qa">(.*?)</tr>', listed.text, re.S)
    assert row is not None and 'data-field="latest_version">2<' in row.group(1)
    shown = page("/ui/datasets/qa?version=1", api.reader)
    assert shown.status_code == 200
    assert re.findall(r'<tr data-item="([^"]+)">', shown.text) == ["refund-1", "refund-2"]
    assert "pass (4.0)" in shown.text and "by token:ann" in shown.text
    latest = page("/ui/datasets/qa", api.reader)
    assert re.findall(r'<tr data-item="([^"]+)">', latest.text) == ["refund-1", "refund-3"]
    diff = page("/ui/datasets/qa/diff?old=1&new=2", api.reader)
    assert diff.status_code == 200
    assert re.findall(r'data-field="(added|removed|changed)"><li><code>([^<]+)<', diff.text) == [
        ("added", "refund-3"),
        ("removed", "refund-2"),
    ]
    # Another project's viewer finds nothing, whatever it asks for.
    for path in ("/ui/datasets/qa", "/ui/datasets/qa?project=shop", "/ui/datasets?project=shop"):
        assert page(path, api.rival).status_code == 404, path
    assert "qa" not in page("/ui/datasets", api.rival).text.split("<main")[1]


def test_a_run_created_over_http_names_its_dataset_version_and_gets_its_hash(api: Api) -> None:
    base = "/projects/shop/datasets"
    api.call("POST", base, api.shop, {"name": "qa"})
    digest = api.call("POST", f"{base}/qa/versions", api.shop, {"items": ITEMS}).json()["hash"]
    run = {**bundle()["run"], "key": "http-run", "status": "running"}
    del run["project"]  # the token's own
    made = api.call("POST", "/runs", api.shop, {**run, "dataset": {"name": "qa", "version": 1}})
    assert made.status_code == 201, made.text
    exported = api.call("GET", f"/runs/{made.json()['id']}/bundle", api.shop).json()
    assert exported["run"]["dataset"] == {"name": "qa", "version": 1, "hash": digest}
    # The rival project has no dataset "qa": its run naming one is refused, nothing stored.
    before = api.services.ledger.position()
    refused = api.call("POST", "/runs", api.rival, {**run, "dataset": {"name": "qa"}})
    assert refused.status_code == 422 and "run.dataset" in refused.text
    assert api.services.ledger.position() == before
