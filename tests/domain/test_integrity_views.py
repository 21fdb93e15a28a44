"""Issue 23 item 4: read models are checkable (`verify --views`, `GET /verify?views=1`).

The read models are rebuilt from the same log in a scratch store and compared table by table;
an edited row is named (table, key, column, both values) on SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from evaledger.api.app import create_app
from evaledger.domain.store.chain import KEY_ENV
from evaledger.projections.drift import check_views
from tests.api.test_cli import Cli
from tests.domain.test_integrity import Story

pytestmark = pytest.mark.reliability


def _flip_passed(story: Story) -> str:
    """Edit case b's passed flag in the live read model; returns the case id."""
    case_id = str(story.ids["b"])
    with story.services.engine.begin() as conn:
        flipped = conn.execute(
            text("UPDATE cases_v6 SET passed = NOT passed WHERE case_id = :c"), {"c": case_id}
        ).rowcount
    assert flipped == 1
    return case_id


def test_untouched_read_models_match_a_rebuild(story: Story) -> None:
    story.services.sync()
    report = check_views(story.services.ledger, story.services.engine)
    assert report.ok, report.drift
    # runs_v4, baselines_v4, run_summaries_v6, cases_v6, cases_v6_runs, metrics_v1 and the
    # four judge_votes_v1 tables (votes, cases, labels, flags), the three search_v1 tables (the
    # text, its cases and runs; the engines' own indexes over the text are not ours to compare),
    # case_times_v1 and the two datasets_v1 tables: every read model, no cache.
    assert (report.position, report.tables) == (23, 16)
    assert report.rows > 10


def test_an_edited_passed_flag_is_named_with_both_values(story: Story) -> None:
    story.services.sync()
    case_id = _flip_passed(story)
    report = check_views(story.services.ledger, story.services.engine)
    assert report.drift is not None
    d = report.drift
    assert (d.table, d.key, d.column, d.live, d.rebuilt) == (
        "cases_v6",
        {"case_id": case_id},
        "passed",
        False,
        True,
    )
    assert str(d) == (
        f"cases_v6 row (case_id={case_id}) column passed: live False, rebuilt from the log True"
    )


def test_an_edited_run_pass_rate_and_a_deleted_row_are_named(story: Story) -> None:
    story.services.sync()
    run_id = str(story.ids["sealed"])
    with story.services.engine.begin() as conn:
        conn.execute(
            text("UPDATE run_summaries_v6 SET aggregate = :a WHERE run_id = :r"),
            {"a": '{"cases_pass_rate_pct": 100.0}', "r": run_id},
        )
    d = check_views(story.services.ledger, story.services.engine).drift
    assert d is not None and (d.table, d.key, d.column) == (
        "run_summaries_v6",
        {"run_id": run_id},
        "aggregate",
    )
    assert d.live == '{"cases_pass_rate_pct": 100.0}'
    with story.services.engine.begin() as conn:
        conn.execute(text("DELETE FROM runs_v4 WHERE run_id = :r"), {"r": run_id})
    d = check_views(story.services.ledger, story.services.engine).drift
    assert d is not None and (d.table, d.key, d.column) == ("runs_v4", {"run_id": run_id}, None)
    assert str(d).endswith("missing from the live table (not what the log folds to)")


def test_the_cli_exits_1_naming_the_row_and_0_when_untouched(
    story: Story, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, str(story.key_file))  # the story's commits are signed
    cli = Cli(capsys, story.services.settings.db)
    code, out, _ = cli("verify", "--views")
    assert code == 0, out
    assert re.fullmatch(
        r"views: ok: 16 tables, \d+ rows match a rebuild from the log at position 23",
        out.splitlines()[-1],
    ), out
    case_id = _flip_passed(story)
    code, out, _ = cli("verify", "--views")
    assert code == 1
    assert out.splitlines()[0].startswith("ok: ")  # the log itself is whole
    assert out.splitlines()[-1] == (
        f"views: DRIFT at position 23: cases_v6 row (case_id={case_id}) column passed: "
        "live False, rebuilt from the log True"
    )
    code, out, _ = cli("verify", "--views", "--json")
    assert code == 1
    assert '"column":"passed"' in out.replace(" ", "")


def test_health_reports_drift_found_by_get_verify_views(story: Story) -> None:
    with TestClient(create_app(services=story.services)) as client:
        first = client.get("/verify", params={"views": 1}).json()
        assert (first["ok"], first["views"]["ok"]) == (True, True)
        assert client.get("/health").json()["status"] == "ok"
        case_id = _flip_passed(story)
        # A verify without views leaves the last comparison's verdict in place.
        second = client.get("/verify", params={"views": 1}).json()
        assert (second["ok"], second["views"]["ok"]) == (True, False)
        assert second["views"]["drift"]["key"] == {"case_id": case_id}
        health = client.get("/health").json()
        assert health["status"] == "degraded"
        assert health["verify"]["views"]["drift"]["column"] == "passed"
        assert client.get("/verify").json()["ok"] is True
        assert client.get("/health").json()["status"] == "degraded"


def _health_when(client: TestClient, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """`/health` once `done` holds of it (the periodic check runs in its own thread)."""
    deadline = time.monotonic() + 60
    while True:
        health: dict[str, Any] = client.get("/health").json()
        if done(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


def test_the_servers_periodic_check_finds_drift_and_health_reports_it(story: Story) -> None:
    settings = story.services.settings.model_copy(update={"verify_every_s": 0.1})
    with TestClient(create_app(settings=settings, services=story.services)) as client:
        first = _health_when(client, lambda h: h["verify"] is not None)
        assert first["status"] == "ok"
        assert first["verify"]["views"]["ok"] is True
        case_id = _flip_passed(story)
        health = _health_when(client, lambda h: h["status"] != "ok")
        assert health["status"] == "degraded"
        assert health["verify"]["ok"] is True  # the log is whole; the read model drifted
        drift = health["verify"]["views"]["drift"]
        assert (drift["table"], drift["key"], drift["column"]) == (
            "cases_v6",
            {"case_id": case_id},
            "passed",
        )


def test_serve_refuses_a_period_that_is_not_above_0(
    story: Story, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(capsys, story.services.settings.db)
    for bad in ("0", "-1", "soon"):
        code, _, err = cli("serve", "--verify-every", bad)
        assert code == 2, err
        assert "--verify-every" in err
