"""A reviewer's human label and flag: from the case page and the API, under the signed-in
principal, shown in the case's history at once, feeding judge-vs-human agreement (labels) and the
run's review queue (flags); bad input and a read token store nothing.

A real app over a SQLite store with tokens (tests/api/test_web_signin.py's team); the ledger and
projection parts run on SQLite and PostgreSQL as well.
"""

from __future__ import annotations

from typing import Any

import pytest

from evaledger.api.agreement import agreement_of
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import ConflictError, PermissionDeniedError, ValidationError
from evaledger.domain.events import MetricScore, TokenScope
from evaledger.domain.ledger import Context
from evaledger.projections.votes import reviewed_cases
from evaledger.scoring.agreement import judge_vs_human_pairs
from tests.api.test_web import field, html
from tests.api.test_web_review import queue_rows
from tests.api.test_web_signin import ORIGIN, Team, csrf_of
from tests.api.test_web_signin import team as team  # the fixture
from tests.helpers import bundle, case, event_count

WRITER = "a-write"
OPS = Context(actor="ops")


def _label_form(team: Team, key: str = "good", **given: str) -> tuple[str, dict[str, str]]:
    case_id = team.cases["alpha"][key]
    page = html(team.client.get(f"/ui/cases/{case_id}"))
    assert 'id="label-form"' in page
    return case_id, {"csrf_token": csrf_of(page), **given}


def _human(team: Team) -> list[dict[str, Any]]:
    r = team.client.get(f"/runs/{team.runs['alpha']}/agreement", headers=team.bearer("a-read"))
    assert r.status_code == 200, r.text
    return list(r.json()["human"])


def test_a_write_reviewer_labels_a_case_and_agreement_shows_judge_vs_human(team: Team) -> None:
    assert _human(team) == []
    team.sign_in(WRITER)
    case_id, form = _label_form(
        team, passed="fail", comment="promised a refund first", **{"score.tool_routing": "1"}
    )
    r = team.client.post(
        f"/ui/cases/{case_id}/label", data=form, headers=ORIGIN, follow_redirects=False
    )
    assert (r.status_code, r.headers["location"]) == (303, f"/ui/cases/{case_id}#labels-h")
    page = html(team.client.get(r.headers["location"]))
    actor = f"a-write (token {team.token_ids['a-write']})"
    labels = page.split('id="labels"', 1)[1].split("</table>", 1)[0]
    assert f"<td>{actor}</td>" in labels and "promised a refund first" in labels
    history = page.split('id="history"', 1)[1]
    assert "<summary>HumanLabelRecorded</summary>" in history
    last = team.client.get(f"/cases/{case_id}/history", headers=team.bearer("a-read"))
    event = last.json()["events"][-1]
    assert (event["type"], event["actor"]) == ("HumanLabelRecorded", actor)
    assert event["payload"]["passed"] is False
    # The judge scored 4 everywhere and passed the case; the reviewer disagrees on both.
    human = {(h["judge"], h["measure"]): h for h in _human(team)}
    assert set(human) == {("anthropic:claude", "tool_routing"), ("anthropic:claude", "case_passed")}
    assert all(h["items"] == 1 and h["percent_agreement"] == 0.0 for h in human.values())
    # A label scores nothing: the case still passes under the run's spec.
    assert field(page, "passed") == "yes"


def test_a_later_label_replaces_the_earlier_one_in_agreement(team: Team) -> None:
    team.sign_in(WRITER)
    for verdict in ("fail", "pass"):
        case_id, form = _label_form(team, passed=verdict)
        html(team.client.post(f"/ui/cases/{case_id}/label", data=form, headers=ORIGIN))
    human = _human(team)
    assert [(h["measure"], h["items"], h["percent_agreement"]) for h in human] == [
        ("case_passed", 1, 1.0)
    ]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({}, "passed: choose pass or fail"),
        ({"passed": "maybe"}, "passed: one of pass, fail or empty"),
        ({"passed": "pass", "score.tool_routing": "9"}, "score.tool_routing: 0-5, got 9"),
        ({"passed": "pass", "score.tool_routing": "x"}, "score.tool_routing: 0-5, pass or fail"),
        ({"passed": "pass", "score.no_such_metric": "3"}, "unknown metric"),
        ({"passed": "pass", "score.task_completion": "3"}, "is a binary metric"),
    ],
)
def test_a_bad_label_names_the_field_and_stores_nothing(
    team: Team, given: dict[str, str], message: str
) -> None:
    team.sign_in(WRITER)
    case_id, form = _label_form(team, **given)
    events = event_count(team.services)
    page = html(team.client.post(f"/ui/cases/{case_id}/label", data=form, headers=ORIGIN), 422)
    assert message in page
    assert event_count(team.services) == events


def test_a_read_token_sees_no_review_forms_and_cannot_label_or_flag(team: Team) -> None:
    team.sign_in("a-read")
    case_id = team.cases["alpha"]["good"]
    page = html(team.client.get(f"/ui/cases/{case_id}"))
    assert 'id="label-form"' not in page and 'id="flag-form"' not in page
    events = event_count(team.services)
    for action, form in (("label", {"passed": "pass"}), ("flag", {"reason": "look"})):
        refused = team.client.post(
            f"/ui/cases/{case_id}/{action}",
            data={"csrf_token": csrf_of(page), **form},
            headers=ORIGIN,
        )
        assert "needs a token with the write scope" in html(refused, 403)
    api = team.client.post(
        f"/cases/{case_id}/labels", json={"passed": True}, headers=team.bearer("a-read")
    )
    assert api.status_code == 403
    assert event_count(team.services) == events


def test_a_forged_label_form_without_the_csrf_token_is_refused(team: Team) -> None:
    team.sign_in(WRITER)
    case_id, form = _label_form(team, passed="fail")
    events = event_count(team.services)
    del form["csrf_token"]
    page = html(team.client.post(f"/ui/cases/{case_id}/label", data=form, headers=ORIGIN), 403)
    assert "csrf_token: missing or stale" in page
    assert event_count(team.services) == events
    assert _human(team) == []


def test_a_flagged_case_leads_the_review_queue_until_unflagged(team: Team) -> None:
    run_id = team.runs["alpha"]
    team.sign_in(WRITER)
    empty = "Nothing needs a person in this run."
    assert empty in html(team.client.get(f"/ui/runs/{run_id}/queue"))
    case_id, form = _label_form(team, key="good", reason="the caller asked for a human twice")
    r = team.client.post(f"/ui/cases/{case_id}/flag", data=form, headers=ORIGIN)
    page = html(r)
    status = page.split('id="flag-status">', 1)[1].split("</p>", 1)[0]
    actor = f"a-write (token {team.token_ids['a-write']})"
    assert f"Flagged for review</strong> by {actor}" in status
    assert "the caller asked for a human twice" in status
    queue = html(team.client.get(f"/ui/runs/{run_id}/queue"))
    assert queue_rows(queue) == [(case_id, "flagged by a reviewer", "to do")]
    assert field(queue, "flag") == "the caller asked for a human twice"
    again = html(team.client.post(f"/ui/cases/{case_id}/flag", data=form, headers=ORIGIN), 409)
    assert "is already flagged" in again
    unflag = {"csrf_token": csrf_of(page), "reason": "checked: handed over"}
    html(team.client.post(f"/ui/cases/{case_id}/unflag", data=unflag, headers=ORIGIN))
    assert empty in html(team.client.get(f"/ui/runs/{run_id}/queue"))
    history = team.client.get(f"/cases/{case_id}/history", headers=team.bearer("a-read")).json()
    assert [e["type"] for e in history["events"][-2:]] == ["CaseFlagged", "CaseUnflagged"]


def test_a_flag_needs_a_reason(team: Team) -> None:
    team.sign_in(WRITER)
    case_id, form = _label_form(team, reason="   ")
    events = event_count(team.services)
    page = html(team.client.post(f"/ui/cases/{case_id}/flag", data=form, headers=ORIGIN), 422)
    assert "reason: a flag needs a reason" in page
    assert event_count(team.services) == events


def test_the_api_labels_and_flags_with_the_same_validation(team: Team) -> None:
    case_id = team.cases["alpha"]["bad"]
    writer = team.bearer(WRITER)
    bad = team.client.post(
        f"/cases/{case_id}/labels",
        json={"passed": True, "metric_scores": [{"metric": "tool_routing", "score": 7}]},
        headers=writer,
    )
    assert bad.status_code == 422 and "metric_scores" in bad.text
    binary = team.client.post(
        f"/cases/{case_id}/labels",
        json={"passed": True, "metric_scores": [{"metric": "task_completion", "score": 3}]},
        headers=writer,
    )
    assert binary.status_code == 422 and "binary metric" in binary.text
    body = {"passed": True, "metric_scores": [{"metric": "tool_routing", "score": 1}]}
    ok = team.client.post(f"/cases/{case_id}/labels", json=body, headers=writer)
    assert ok.status_code == 201, ok.text
    human = {h["measure"]: h for h in _human(team)}
    # The judge gave 1 and failed the case; the reviewer passes it and agrees on the score.
    assert human["tool_routing"]["percent_agreement"] == 1.0
    assert human["case_passed"]["percent_agreement"] == 0.0
    blank = team.client.post(f"/cases/{case_id}/flag", json={"reason": " "}, headers=writer)
    assert blank.status_code == 422
    flagged = team.client.post(f"/cases/{case_id}/flag", json={"reason": "odd"}, headers=writer)
    assert flagged.status_code == 201, flagged.text
    queue = html(team.client.get(f"/ui/runs/{team.runs['alpha']}/queue", headers=writer))
    assert queue_rows(queue) == [(case_id, "flagged by a reviewer", "reviewed")]
    assert team.client.post(f"/cases/{case_id}/unflag", headers=writer).status_code == 201
    again = team.client.post(f"/cases/{case_id}/unflag", json={"reason": "x"}, headers=writer)
    assert again.status_code == 409
    # The same flag again after the unflag is a new act, not a replay of the first.
    reflag = team.client.post(f"/cases/{case_id}/flag", json={"reason": "odd"}, headers=writer)
    assert reflag.status_code == 201, reflag.text
    queue = html(team.client.get(f"/ui/runs/{team.runs['alpha']}/queue", headers=writer))
    assert queue_rows(queue) == [(case_id, "flagged by a reviewer", "reviewed")]
    resent = team.client.post(f"/cases/{case_id}/flag", json={"reason": "odd"}, headers=writer)
    assert resent.status_code == 409


def test_a_label_replaces_an_override_of_the_same_case_judge_and_measure() -> None:
    corrections = [("c1", "j", "case_passed", 1.0, 0.0), ("c2", "j", "case_passed", 1.0, 0.0)]
    labels = [("c1", "j", "case_passed", 1.0, 1.0), ("c3", "k", "tool_routing", 4.0, 2.0)]
    assert judge_vs_human_pairs(corrections, labels) == {
        ("j", "case_passed"): [(1.0, 0.0), (1.0, 1.0)],
        ("k", "tool_routing"): [(4.0, 2.0)],
    }


def test_labels_and_flags_on_both_stores(store_services: Services) -> None:
    """The ledger's rules and the read models (agreement, queue flags) on SQLite and PostgreSQL."""
    data = bundle(key="labels")
    data["cases"] = [case("a", 4)]
    ledger = store_services.ledger
    result = ledger.import_bundle(RunBundle.model_validate(data), Context(actor="ops"))
    run_id = result.run_id
    store_services.sync()
    case_id = next(iter(store_services.reads.first_cases(run_id, ["a"]).values()))
    reader = Context(actor="r", project="default", scope=TokenScope.READ)
    writer = Context(actor="w", project="default", scope=TokenScope.WRITE)
    with pytest.raises(PermissionDeniedError):
        ledger.label_case(case_id, reader, passed=True)
    with pytest.raises(ValidationError, match="unknown metric"):
        ledger.label_case(
            case_id, writer, passed=True, metric_scores=[MetricScore(metric="nope", score=1)]
        )
    # The run is completed (sealed): a reviewer's acts are still recorded, like corrections.
    ledger.label_case(case_id, writer, passed=False)
    ledger.flag_case(case_id, writer, reason="look again")
    with pytest.raises(ConflictError, match="already flagged"):
        ledger.flag_case(case_id, writer, reason="and again")
    store_services.sync()
    human = agreement_of(store_services, run_id).human
    assert [(h.measure, h.items, h.percent_agreement) for h in human] == [("case_passed", 1, 0.0)]
    flagged, labelled = reviewed_cases(store_services.engine, run_id)
    assert (flagged, labelled) == ({str(case_id): "look again"}, {str(case_id)})
    ledger.unflag_case(case_id, writer)
    store_services.sync()
    assert reviewed_cases(store_services.engine, run_id)[0] == {}


def test_the_agreement_command_shows_judge_vs_human_from_a_label(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from evaledger.api.cli import main

    services = build_services(Settings(db=sqlite_url))
    try:
        data = bundle(key="labelled")
        data["cases"] = [case("a", 4)]
        run_id = services.ledger.import_bundle(RunBundle.model_validate(data), OPS).run_id
        services.sync()
        case_id = next(iter(services.reads.first_cases(run_id, ["a"]).values()))
        writer = Context(actor="reviewer", project="default", scope=TokenScope.WRITE)
        services.ledger.label_case(case_id, writer, passed=False)
    finally:
        services.close()
    capsys.readouterr()
    assert main(["agreement", str(run_id), "--db", sqlite_url]) == 0
    out = capsys.readouterr().out
    human = out.split("judge vs human (overrides and reviewers' labels):", 1)[1]
    row = next(line for line in human.splitlines() if "case_passed" in line)
    assert row.split()[:3] == ["anthropic:claude", "case_passed", "1"]
