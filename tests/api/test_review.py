"""Review queues at the command line and over HTTP, on SQLite and PostgreSQL.

CLI: a queue from a rule, two reviewers walking it blind, adjudication, the gold export read
back as the dataset item format, bad input refused with exit 2 and nothing stored. HTTP: two
tokens of one project in a blind queue (no verdict, score or other label in any answer before
their own label), a reviewer the item was not given to (404), another project's token (404 for
every act, nothing stored), and the read scope refused a label (403).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_cli import Cli
from tests.helpers import bundle, case, event_count

ITEM_KEYS = {"key", "input", "expected_outcomes", "tags", "metadata", "label"}


def _bundle(project: str = "default", key: str = "nightly", n: int = 12) -> dict[str, Any]:
    data = bundle(status="completed", project=project, key=key)
    data["cases"] = [case(f"c{i:02d}", i % 6) for i in range(n)]
    data["cases"][2]["test_case"]["expected_outcomes"] = ["says sorry"]
    data["cases"][2]["test_case"]["tags"] = ["refunds"]
    return data


def check_item_format(line: dict[str, Any]) -> None:
    """One gold line is exactly the dataset item format."""
    assert set(line) == ITEM_KEYS
    assert isinstance(line["key"], str)
    assert isinstance(line["expected_outcomes"], list)
    assert all(isinstance(o, str) for o in line["expected_outcomes"])
    assert isinstance(line["tags"], list) and all(isinstance(t, str) for t in line["tags"])
    assert {"run_id", "case_id"} <= set(line["metadata"])
    label = line["label"]
    assert set(label) == {"passed", "score", "by"}
    assert isinstance(label["passed"], bool)
    assert label["score"] is None or isinstance(label["score"], int | float)
    assert label["by"] and all(isinstance(b, str) for b in label["by"])


# -- CLI ----------------------------------------------------------------------------------------


@pytest.fixture
def cli(store_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Cli:
    c = Cli(capsys, store_url)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_bundle()))
    c.json("import", str(path))
    return c


def test_two_reviewers_walk_a_blind_queue_and_export_a_gold_set(cli: Cli, tmp_path: Path) -> None:
    made = cli.json(
        "review", "queue", "create", "failed", "--run", "nightly",
        "--where", "status = failed and judge_score >= 2",
        "--reviewers", "alice,bob", "--per-item", "2", "--blind",
    )  # fmt: skip
    assert made == {"project": "default", "name": "failed", "cases": 4}
    first = cli.json("review", "next", "failed", "--actor", "alice")["case_id"]
    hidden = cli.json("review", "item", "failed", first, "--actor", "alice")
    assert hidden["hidden"] is True and hidden["verdict"] is None and hidden["labels"] == []
    assert hidden["key"] == "c02" and hidden["expected_outcomes"] == ["says sorry"]
    code, out, _ = cli("review", "item", "failed", "c02", "--actor", "alice")
    assert code == 0 and "blind: label this case" in out and "verdict:" not in out
    for actor in ("alice", "bob"):
        code, _, err = cli("review", "label", "failed", "c02", "--fail", "--score", "1",
                           "--actor", actor)  # fmt: skip
        assert code == 0, err
    shown = cli.json("review", "item", "failed", "c02", "--actor", "alice")
    assert shown["hidden"] is False and shown["verdict"]["status"] == "failed"
    assert sorted(lab["reviewer"] for lab in shown["labels"]) == ["alice", "bob"]
    assert cli.json("review", "next", "failed", "--actor", "alice")["case_id"] != first
    cli.json("review", "label", "failed", "c03", "--pass", "--actor", "alice")
    cli.json("review", "label", "failed", "c03", "--fail", "--actor", "bob")
    code, _, err = cli("review", "adjudicate", "failed", "c03", "--pass", "--score", "3",
                       "--reason", "the refund was right", "--actor", "lead")  # fmt: skip
    assert code == 0, err
    out_file = tmp_path / "gold.jsonl"
    assert cli.json("review", "export", "failed", "-o", str(out_file))["items"] == 2
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    for line in lines:
        check_item_format(line)
    assert [(x["key"], x["label"]) for x in lines] == [
        ("c02", {"passed": False, "score": 1.0, "by": ["alice", "bob"]}),
        ("c03", {"passed": True, "score": 3.0, "by": ["lead"]}),
    ]
    assert lines[0]["input"] == "hi" and lines[0]["tags"] == ["refunds"]
    code, out, _ = cli("review", "queue", "show", "failed")
    assert code == 0
    assert "passed: Cohen's κ insufficient data over 2 item(s)" in out
    assert "alice: 2/4 labelled" in out and "bootstrap 95 %" in out
    assert cli.json("review", "queue", "list") == [{"project": "default", "name": "failed"}]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--where", "status = maybe", "--reviewers", "a"], "where"),
        (["--reviewers", "a", "--per-item", "3"], "per_item"),
        (["--reviewers", " , "], "reviewers"),
    ],
)
def test_a_bad_queue_exits_2_naming_the_field_and_stores_nothing(
    cli: Cli, args: list[str], field: str
) -> None:
    before = len(cli.json("runs")["data"])
    code, out, err = cli("review", "queue", "create", "q", "--run", "nightly", *args, "--json")
    assert code == 2, err
    assert json.loads(out or err)["error"]["field"] == field
    assert cli.json("review", "queue", "list") == []
    assert len(cli.json("runs")["data"]) == before


def test_a_second_label_by_the_same_reviewer_is_refused(cli: Cli) -> None:
    cli.json("review", "queue", "create", "q", "--run", "nightly", "--reviewers", "alice")
    cli.json("review", "label", "q", "c00", "--pass", "--actor", "alice")
    code, _, err = cli("review", "label", "q", "c00", "--fail", "--actor", "alice")
    assert code == 2 and "already labelled" in err
    code, _, err = cli("review", "label", "q", "c00", "--fail", "--actor", "mallory")
    assert code == 2 and "not assigned" in err


# -- HTTP ---------------------------------------------------------------------------------------


class Site:
    def __init__(self, client: TestClient, tokens: dict[str, str], services: Services) -> None:
        self.client, self.tokens, self.services = client, tokens, services

    def call(self, who: str, method: str, path: str, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[who]}", **kw.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kw)


@pytest.fixture
def site(store_url: str) -> Iterator[Site]:
    services = build_services(Settings(db=store_url))
    admin = Context(actor="setup")
    services.ledger.ingest(RunBundle.model_validate(_bundle()), admin)
    services.ledger.ingest(RunBundle.model_validate(_bundle("rival", "theirs", 3)), admin)
    tokens = {}
    for name, project, scope in (
        ("lead", "default", TokenScope.ADMIN),
        ("alice", "default", TokenScope.WRITE),
        ("bob", "default", TokenScope.WRITE),
        ("carol", "default", TokenScope.WRITE),
        ("peek", "default", TokenScope.READ),
        ("eve", "rival", TokenScope.ADMIN),
    ):
        tokens[name] = services.ledger.issue_token(project, scope, name, admin).token
    try:
        with TestClient(create_app(services=services)) as client:
            yield Site(client, tokens, services)
    finally:
        services.close()


def _queue(site: Site, **body: Any) -> dict[str, Any]:
    runs = site.call("lead", "GET", "/runs").json()["data"]
    run = next(r["run_id"] for r in runs if r["run_key"] == "nightly")
    sent = {"name": "q", "runs": [run], "where": "status = failed", **body}
    key = {"Idempotency-Key": "make-q"}
    made = site.call("lead", "POST", "/review/queues", json=sent, headers=key)
    assert made.status_code == 201, made.text
    again = site.call("lead", "POST", "/review/queues", json=sent, headers=key)
    assert again.status_code == 200 and again.json()["cases"] == made.json()["cases"]
    assert site.call("lead", "POST", "/review/queues", json=sent).status_code == 409
    return dict(made.json())


def test_blind_answers_carry_no_verdict_before_the_readers_own_label(site: Site) -> None:
    _queue(site, reviewers=["alice", "bob"], per_item=2, blind=True)
    item = site.call("alice", "GET", "/review/queues/q/next").json()["case_id"]
    assert site.call("bob", "GET", "/review/queues/q/next").json()["case_id"] == item
    path = f"/review/queues/q/items/{item}"
    assert (
        site.call("bob", "POST", f"{path}/label", json={"passed": False, "score": 1}).status_code
        == 201
    )
    for who in ("alice",):
        got = site.call(who, "GET", path)
        assert got.status_code == 200
        body = got.json()
        assert body["hidden"] is True
        assert body["verdict"] is None and body["labels"] == [] and body["gold"] is None
        text = got.text
        assert "overall_score" not in text and "gate_reason" not in text and '"score":1' not in text
        queue = site.call(who, "GET", "/review/queues/q").json()
        mine = next(i for i in queue["items"] if i["case_id"] == item)
        assert mine["visible"] is False and mine["labels"] == [] and mine["gold"] is None
        assert site.call(who, "GET", "/review/queues/q/export").json() == {"items": []}
    # nor anywhere else: the case's own answers and its run's results are refused (403)
    runs = site.call("lead", "GET", "/runs").json()["data"]
    run = next(r["run_id"] for r in runs if r["run_key"] == "nightly")
    for held in (f"/cases/{item}", f"/cases/{item}/history", f"/cases/{item}/explain",
                 f"/runs/{run}", f"/runs/{run}/cases"):  # fmt: skip
        refused = site.call("alice", "GET", held)
        assert refused.status_code == 403 and "blind review" in refused.text, held
    assert site.call("lead", "GET", f"/cases/{item}").status_code == 200
    assert (
        site.call("alice", "POST", f"{path}/label", json={"passed": False, "score": 1}).status_code
        == 201
    )
    assert site.call("alice", "GET", f"/cases/{item}").status_code == 200  # labelled: shown
    assert site.call("alice", "GET", f"/runs/{run}/cases").status_code == 403  # 3 more to go
    after = site.call("alice", "GET", path).json()
    assert after["hidden"] is False and after["verdict"]["status"] == "failed"
    assert {lab["reviewer"] for lab in after["labels"]} == {"alice", "bob"}
    exported = site.call("alice", "GET", "/review/queues/q/export").json()["items"]
    assert [x["key"] for x in exported] == [after["key"]]
    for line in exported:
        check_item_format(line)
    events = site.services.ledger.events_of(site.services.ledger.review_queue("default", "q").id)
    assert [e.actor.split(" ")[0] for e in events[-2:]] == ["bob", "alice"]


def test_an_item_not_given_to_the_reader_is_a_404(site: Site) -> None:
    _queue(site, reviewers=["alice", "bob"], per_item=1)
    queue = site.call("lead", "GET", "/review/queues/q").json()
    bobs = next(i["case_id"] for i in queue["items"] if i["reviewers"] == ["bob"])
    before = event_count(site.services)
    assert site.call("alice", "GET", f"/review/queues/q/items/{bobs}").status_code == 404
    assert site.call("carol", "GET", f"/review/queues/q/items/{bobs}").status_code == 404
    assert site.call("carol", "POST", f"/review/queues/q/items/{bobs}/label",
                     json={"passed": True}).status_code == 404  # fmt: skip
    assert site.call("peek", "POST", f"/review/queues/q/items/{bobs}/label",
                     json={"passed": True}).status_code == 403  # fmt: skip
    assert site.call("alice", "POST", f"/review/queues/q/items/{bobs}/adjudicate",
                     json={"passed": True, "reason": "mine"}).status_code == 403  # fmt: skip
    assert site.call("bob", "GET", f"/review/queues/q/items/{bobs}").status_code == 200
    assert site.call("lead", "GET", f"/review/queues/q/items/{bobs}").status_code == 200
    assert event_count(site.services) == before


def test_another_projects_token_is_refused_every_review_act(site: Site) -> None:
    _queue(site, reviewers=["alice", "eve"], per_item=2)
    item = site.call("alice", "GET", "/review/queues/q/next").json()["case_id"]
    runs = site.call("lead", "GET", "/runs").json()["data"]
    run = next(r["run_id"] for r in runs if r["run_key"] == "nightly")
    before = event_count(site.services)
    base = f"/review/queues/q/items/{item}"
    for method, path, body in (
        ("GET", "/review/queues/q?project=default", None),
        ("GET", "/review/queues/q", None),
        ("GET", "/review/queues/q/next", None),
        ("GET", base, None),
        ("POST", f"{base}/label", {"passed": True}),
        ("POST", f"{base}/skip", {}),
        ("POST", f"{base}/adjudicate", {"passed": True, "reason": "x"}),
        ("POST", "/review/queues/q/assign", {"assignments": {item: ["eve"]}}),
        ("GET", "/review/queues/q/export", None),
        ("POST", "/review/queues", {"name": "mine", "runs": [run], "reviewers": ["eve"]}),
    ):
        answer = site.call("eve", method, path, json=body)
        assert answer.status_code in (403, 404), (method, path, answer.status_code)
    assert site.call("eve", "GET", "/review/queues").json() == {"data": []}
    assert event_count(site.services) == before


def test_bad_bodies_are_refused_naming_the_field(site: Site) -> None:
    _queue(site, reviewers=["alice"])
    item = site.call("alice", "GET", "/review/queues/q/next").json()["case_id"]
    before = event_count(site.services)
    bad = site.call("alice", "POST", f"/review/queues/q/items/{item}/label",
                    json={"passed": True, "score": 9})  # fmt: skip
    assert bad.status_code == 422 and "score" in bad.text
    runs = site.call("lead", "GET", "/runs").json()["data"]
    run = next(r["run_id"] for r in runs if r["run_key"] == "nightly")
    bad = site.call("lead", "POST", "/review/queues",
                    json={"name": "z", "runs": [run], "reviewers": ["a"], "where": "zz > 1"})  # fmt: skip
    assert bad.status_code == 422 and bad.json()["field"] == "where"
    assert event_count(site.services) == before
