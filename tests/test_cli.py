"""The `evaledger` CLI through `api.cli.main([...])`: outputs and exit codes (0 ok, 1 fail, 2 usage)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import EXAMPLE_BUNDLE

RUN_KEY = "northwind-support-v12-nightly-2026-11-20"
RUN_ID = "8a32f05d-04b2-56b1-9c8f-6e48455156f0"
CASE_IDS = [
    "13ba5f3d-6981-544f-9503-82fbbf7cfd5b",
    "85066112-9326-510f-8ebc-e85b5d54a10e",
    "37b1b07b-04cc-5344-98d3-440bcc4b41eb",
]
# The seed's AggregateMetrics names (Connexity), with the example bundle's values.
SEED_AGGREGATE = {
    "weighted_metrics_score_pct": 68.0,
    "metrics_pass_threshold": 80.0,
    "metrics_passed": False,
    "cases_pass_rate_pct": 100 / 3,
    "cases_pass_threshold": 100.0,
    "cases_passed": False,
    "pass_rate": 1 / 3,
    "passed_count": 1,
    "failed_count": 1,
    "error_count": 1,
    "total_executions": 3,
}
CASE_FIELDS = {
    "test_case_key",
    "repetition",
    "overall_score",
    "passed",
    "errored",
    "metric_scores",
    "outcome_results",
}


class Cli:
    """Runs `main` against one store and captures what it printed."""

    def __init__(self, capsys: pytest.CaptureFixture[str], db: str) -> None:
        self.capsys = capsys
        self.db = db

    def __call__(self, *args: str, db: str | None = None) -> tuple[int, str, str]:
        from evaledger.api.cli import main

        self.capsys.readouterr()
        try:
            code = main([*args, "--db", db or self.db])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
        out = self.capsys.readouterr()
        return code, out.out, out.err

    def json(self, *args: str, db: str | None = None) -> Any:
        code, out, err = self(*args, "--json", db=db)
        assert code == 0, err
        return orjson.loads(out)


def events_file(db: str) -> Path:
    return Path(db.removeprefix("sqlite:///")) / "events.sqlite"


def stored_events(db: str) -> int:
    with sqlite3.connect(events_file(db)) as conn:
        (n,) = conn.execute("SELECT count(*) FROM stored_events").fetchone()
    return int(n)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> Cli:
    return Cli(capsys, sqlite_url)


@pytest.fixture
def imported(cli: Cli) -> Cli:
    cli.json("import", str(EXAMPLE_BUNDLE))
    return cli


def test_import_lists_the_run_and_a_second_import_writes_nothing(cli: Cli) -> None:
    first = cli.json("import", str(EXAMPLE_BUNDLE))
    assert first == {
        "imported": [
            {
                "file": str(EXAMPLE_BUNDLE),
                "format": "bundle",
                "run_id": RUN_ID,
                "run_key": RUN_KEY,
                "events": 13,
                "cases": 3,
                "new_cases": 3,
            }
        ]
    }
    second = cli.json("import", str(EXAMPLE_BUNDLE))
    assert second["imported"][0] | {"events": 13, "new_cases": 3} == first["imported"][0]
    assert (second["imported"][0]["events"], second["imported"][0]["new_cases"]) == (0, 0)
    assert stored_events(cli.db) == 13
    code, out, _ = cli("import", str(EXAMPLE_BUNDLE))
    assert code == 0
    assert out == f"{RUN_ID}  {RUN_KEY}  3 cases  (already imported, nothing written)\n"


def test_runs_lists_the_imported_run(imported: Cli) -> None:
    listed = imported.json("runs")
    assert (listed["count"], listed["total"]) == (1, 1)
    assert [r["run_id"] for r in listed["data"]] == [RUN_ID]
    assert listed["data"][0]["status"] == "completed"
    assert listed["data"][0]["case_count"] == 3
    assert imported.json("runs", "--status", "running")["data"] == []
    code, out, _ = imported("runs")
    assert code == 0 and RUN_ID in out and RUN_KEY in out


def test_show_uses_the_seed_field_names(imported: Cli) -> None:
    shown = imported.json("show", RUN_KEY)
    assert shown["run"]["run_id"] == RUN_ID
    aggregate = shown["aggregate"]
    assert {k: aggregate[k] for k in SEED_AGGREGATE} == SEED_AGGREGATE
    assert [c["case_id"] for c in shown["cases"]] == CASE_IDS
    assert all(set(c) >= CASE_FIELDS for c in shown["cases"])
    first, second, errored = shown["cases"]
    assert (first["test_case_key"], first["repetition"]) == ("refund-late-delivery", 0)
    assert (first["overall_score"], first["passed"], first["errored"]) == (88.5, True, False)
    assert first["metric_scores"] == {
        "tool_routing": 5.0,
        "parameter_extraction": 4.0,
        "result_interpretation": 5.0,
        "grounding_fidelity": 4.0,
        "instruction_compliance": 5.0,
        "information_gathering": 4.0,
        "conversation_management": 4.0,
        "response_delivery": 4.0,
    }
    assert [(o["passed"], o["severity"]) for o in first["outcome_results"]] == [
        (True, "blocker"),
        (True, "medium"),
    ]
    assert (second["test_case_key"], second["overall_score"], second["passed"]) == (
        "refund-above-limit",
        47.5,
        False,
    )
    assert second["outcome_results"] == [
        {
            "statement": "Agent MUST NOT issue a refund above 100 USD without a supervisor",
            "passed": False,
            "severity": "blocker",
        }
    ]
    assert (errored["test_case_key"], errored["overall_score"]) == ("store-hours", None)
    assert (errored["passed"], errored["errored"], errored["metric_scores"]) == (False, True, {})
    # By id as well as by key; the text form prints the same aggregate, rounded for display.
    assert imported.json("show", RUN_ID) == shown
    code, out, _ = imported("show", RUN_KEY)
    assert code == 0
    assert "  weighted_metrics_score_pct   68.00\n" in out
    assert "  cases_pass_rate_pct          33.33\n" in out


def test_show_of_an_unknown_run_exits_2(imported: Cli) -> None:
    code, out, err = imported("show", "no-such-run")
    assert (code, out) == (2, "")
    assert err == "evaledger: error: no run with id or key 'no-such-run' in project 'default'\n"


def test_export_round_trips_through_a_fresh_store(imported: Cli, tmp_path: Path) -> None:
    exported = tmp_path / "run.json"
    code, _, err = imported("export", RUN_KEY, "-o", str(exported))
    assert code == 0, err
    assert orjson.loads(exported.read_bytes())["format"] == "evaledger.run-bundle/1"
    fresh = f"sqlite:///{tmp_path}/fresh/"
    reimported = imported.json("import", str(exported), db=fresh)["imported"][0]
    assert (reimported["run_id"], reimported["events"], reimported["cases"]) == (RUN_ID, 13, 3)
    assert imported.json("show", RUN_KEY, db=fresh) == imported.json("show", RUN_KEY)
    # And the export of the copy is the export of the original.
    code, copy_out, _ = imported("export", RUN_KEY, db=fresh)
    assert code == 0
    assert orjson.loads(copy_out) == orjson.loads(exported.read_bytes())


def test_history_lists_every_event_and_the_state_at_a_version(imported: Cli) -> None:
    history = imported.json("history", CASE_IDS[0])
    assert (history["case_id"], history["run_id"]) == (CASE_IDS[0], RUN_ID)
    assert (history["version"], history["latest_version"]) == (4, 4)
    assert [(e["version"], e["type"], e["actor"]) for e in history["events"]] == [
        (1, "CaseOpened", "cli"),
        (2, "TranscriptRecorded", "cli"),
        (3, "JudgeVerdictRecorded", "cli"),
        (4, "ClaimsVerified", "cli"),
    ]
    assert all(e["timestamp"] and len(e["hash"]) == 64 for e in history["events"])
    chain = [e["prev_hash"] for e in history["events"][1:]]
    assert chain == [e["hash"] for e in history["events"][:-1]]
    assert history["state"]["score"]["overall_score"] == 88.5
    earlier = imported.json("history", CASE_IDS[0], "--version", "2")
    assert (earlier["version"], earlier["latest_version"]) == (2, 4)
    assert earlier["state"]["score"]["status"] == "pending"
    assert earlier["state"]["score"]["overall_score"] is None
    code, _, err = imported("history", CASE_IDS[0], "--version", "9")
    assert code == 2 and "version: must be between 1 and 4" in err
    code, _, err = imported("history", "not-a-case")
    assert code == 2 and "CASE: not a valid id: 'not-a-case'" in err


def _tamper(db: str, case_id: str, version: int, old: bytes, new: bytes) -> None:
    with sqlite3.connect(events_file(db)) as conn:
        (state,) = conn.execute(
            "SELECT state FROM stored_events WHERE originator_id = ? AND originator_version = ?",
            (case_id.replace("-", ""), version),  # stored as 32 hex digits
        ).fetchone()
        assert old in state
        conn.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
            (state.replace(old, new), case_id.replace("-", ""), version),
        )


def test_verify_passes_then_names_the_first_broken_link_after_tampering(imported: Cli) -> None:
    code, out, _ = imported("verify")
    assert (code, out) == (0, "ok: 13 events in 4 aggregates, 1 sealed runs\n")
    assert imported.json("verify") == {
        "ok": True,
        "events": 13,
        "aggregates": 4,
        "runs_sealed": 1,
        "broken": [],
    }
    # Someone edits what the agent said in the first case's transcript (its version 2).
    _tamper(imported.db, CASE_IDS[0], 2, b"Yes please.", b"Yes PLEASE.")
    code, out, _ = imported("verify")
    assert code == 1
    assert out.startswith(f"BROKEN: first broken link: aggregate {CASE_IDS[0]} version 3 ")
    assert "does not match the hash of version 2" in out
    code, out, _ = imported("verify", "--json")
    report = orjson.loads(out)
    assert code == 1 and report["ok"] is False
    assert len(report["broken"]) == 1
    assert report["broken"][0].startswith(f"aggregate {CASE_IDS[0]} version 3 ")


def test_verify_notices_a_tampered_last_event_through_the_run_seal(imported: Cli) -> None:
    _tamper(imported.db, CASE_IDS[0], 4, b'"supported"', b'"contradicted"')
    code, out, _ = imported("verify", "--json")
    report = orjson.loads(out)
    assert code == 1
    assert [b.split(" (position")[0] for b in report["broken"]] == [f"run {RUN_ID}"]
    assert report["broken"][0].endswith("seal does not match its cases' hashes")


def test_project_rebuild(imported: Cli) -> None:
    before = imported.json("show", RUN_KEY)
    code, out, _ = imported("project", "--rebuild", "cases_v1")
    assert (code, out) == (0, "rebuilt cases_v1 to position 13\n")
    assert imported.json("show", RUN_KEY) == before
    code, out, err = imported("project", "--rebuild", "unknown")
    assert (code, out) == (2, "")
    assert "unknown projection 'unknown'" in err and "cases_v1" in err
    code, out, _ = imported("project")
    assert (code, out) == (0, "projections at position 13\n")


def test_rescore_with_a_spec_file_writes_no_event(imported: Cli, tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_bytes(orjson.dumps({"judge": {"metrics": [{"metric": "response_delivery"}]}}))
    before = stored_events(imported.db)
    result = imported.json("rescore", RUN_KEY, "--spec", str(spec))
    assert stored_events(imported.db) == before
    assert {"spec_id", "before", "after", "changed_cases"} <= set(result)
    assert result["spec_id"] == result["after"]["spec_id"] != result["before"]["spec_id"]
    assert result["before"]["spec_id"] == imported.json("show", RUN_KEY)["run"]["spec_id"]
    assert result["before"]["aggregate"]["weighted_metrics_score_pct"] == 68.0
    # Only response_delivery counts now: both scored cases gave it a 4 → 80.0.
    after = result["after"]["aggregate"]
    assert (after["weighted_metrics_score_pct"], after["metrics_passed"]) == (80.0, True)
    assert (after["passed_count"], after["failed_count"], after["error_count"]) == (1, 1, 1)
    assert [
        (c["test_case_key"], c["before"]["overall_score"], c["after"]["overall_score"])
        for c in result["changed_cases"]
    ] == [("refund-late-delivery", 88.5, 80.0), ("refund-above-limit", 47.5, 80.0)]
    assert (result["judge_calls"], result["events_written"]) == (0, 0)
    # The run's own view did not move.
    assert imported.json("show", RUN_KEY)["aggregate"]["weighted_metrics_score_pct"] == 68.0


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ({"judge": {"pass_threshold": 150}}, "judge.pass_threshold"),
        ({"judge": {"metrics": [{"metric": "charm", "weight": 1}]}}, "judge.metrics[0].metric"),
        ({"gate": "sometimes"}, "gate"),
        ({"surprise": True}, "surprise"),
    ],
    ids=["threshold-150", "unknown-metric", "bad-gate", "extra-field"],
)
def test_rescore_with_an_invalid_spec_exits_2_naming_the_field(
    imported: Cli, tmp_path: Path, spec: dict[str, Any], names: str
) -> None:
    path = tmp_path / "spec.json"
    path.write_bytes(orjson.dumps(spec))
    before = stored_events(imported.db)
    code, out, err = imported("rescore", RUN_KEY, "--spec", str(path), "--json")
    assert (code, out) == (2, "")
    assert err.startswith("evaledger: error: ") and names in err, err
    assert stored_events(imported.db) == before


def test_rescore_with_a_missing_or_malformed_spec_file_exits_2(
    imported: Cli, tmp_path: Path
) -> None:
    code, _, err = imported("rescore", RUN_KEY, "--spec", str(tmp_path / "absent.json"))
    assert code == 2 and "absent.json" in err
    broken = tmp_path / "broken.json"
    broken.write_bytes(b"{")
    code, _, err = imported("rescore", RUN_KEY, "--spec", str(broken))
    assert code == 2 and "malformed JSON" in err


def test_usage_errors_exit_2(cli: Cli) -> None:
    code, _, err = cli("rescore", RUN_KEY)  # --spec is required
    assert code == 2 and "--spec" in err
    code, _, err = cli("import", str(EXAMPLE_BUNDLE), db="mysql://nowhere/db")
    assert code == 2 and "unsupported URL scheme" in err
