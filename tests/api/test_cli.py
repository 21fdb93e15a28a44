"""The `evaledger` CLI: outputs and exit codes (0 ok, 1 fail, 2 usage, 3 infrastructure)."""

from __future__ import annotations

import argparse
import os
import pty
import re
import socket
import sqlite3
import subprocess
import sys
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import EXAMPLE_BUNDLE
from tests.helpers import bundle, case

EVALEDGER = Path(sys.executable).with_name("evaledger")

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
    with closing(sqlite3.connect(events_file(db))) as conn, conn:
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
    with closing(sqlite3.connect(events_file(db))) as conn, conn:
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
    report = imported.json("verify")
    link = report["checkpoint"]["link"]
    assert (code, out) == (
        0,
        "ok: 13 events in 4 aggregates, 1 sealed runs, 1 commits chained "
        "(unsigned: no checkpoint key, so every event checked, none resumed)\n"
        f"checkpoint: 13:{link}\n",
    )
    assert report == {
        "ok": True,
        "events": 13,
        "aggregates": 4,
        "runs_sealed": 1,
        "commits": 1,
        "keyed": False,
        "adopted_until": None,
        "adoption": None,
        "checkpoint": {"position": 13, "link": link, "signed": False},
        "first_broken_position": None,
        "broken": [],
        "resumed_from": None,
        "resumption": "unsigned",
    }
    # Someone edits what the agent said in the first case's transcript (its version 2): sealed
    # on a default store, so its place in the event.
    _tamper(imported.db, CASE_IDS[0], 2, b'"content":"[sealed]"', b'"content":"Yes PLEASE."')
    code, out, _ = imported("verify")
    assert code == 1
    assert out.startswith("BROKEN at position 1: positions 1–13 (one commit): the chain link ")
    assert f"  also: aggregate {CASE_IDS[0]} version 3 " in out
    assert "does not match the hash of version 2" in out
    code, out, _ = imported("verify", "--json")
    report = orjson.loads(out)
    assert code == 1 and report["ok"] is False
    assert report["first_broken_position"] == 1 and report["checkpoint"] is None
    assert len(report["broken"]) == 2
    assert report["broken"][1].startswith(f"aggregate {CASE_IDS[0]} version 3 ")


def test_verify_notices_a_tampered_last_event_through_the_run_seal(imported: Cli) -> None:
    _tamper(imported.db, CASE_IDS[0], 4, b'"supported"', b'"contradicted"')
    code, out, _ = imported("verify", "--json")
    report = orjson.loads(out)
    assert code == 1
    assert [b.split(" (")[0] for b in report["broken"]] == ["positions 1–13", f"run {RUN_ID}"]
    assert report["broken"][1].endswith("seal does not match its cases' hashes")


def test_project_rebuild(imported: Cli) -> None:
    before = imported.json("show", RUN_KEY)
    code, out, _ = imported("project", "--rebuild", "cases_v6")
    assert (code, out) == (0, "rebuilt cases_v6 to position 13\n")
    assert imported.json("show", RUN_KEY) == before
    code, out, err = imported("project", "--rebuild", "unknown")
    assert (code, out) == (2, "")
    assert "unknown projection 'unknown'" in err and "cases_v6" in err
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
    code, out, err = imported("rescore", RUN_KEY, "--spec", str(path))
    assert (code, out) == (2, "")
    assert err.startswith("evaledger: error: ") and names in err, err
    # Under --json the same failure is one JSON object on stdout, stderr silent.
    code, out, err = imported("rescore", RUN_KEY, "--spec", str(path), "--json")
    assert (code, err) == (2, "")
    failure = orjson.loads(out)
    assert failure["exit_code"] == 2 and names in failure["error"]["message"], failure
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


# ---------------------------------------------------------------------------------------------
# Exit codes 0/1/2/3, --version, completion, --help


def test_version_and_python_dash_m(capsys: pytest.CaptureFixture[str]) -> None:
    from evaledger.api.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert (exit_.value.code, capsys.readouterr().out) == (0, "evaledger 0.1.0\n")
    proc = subprocess.run(
        [sys.executable, "-m", "evaledger", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "evaledger 0.1.0\n", "")


def test_help_documents_exit_codes_and_sqlite_urls(capsys: pytest.CaptureFixture[str]) -> None:
    from evaledger.api.cli import main

    for argv in (["--help"], ["show", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        out = capsys.readouterr().out
        assert exit_.value.code == 0
        for line in (
            "  0  ok\n",
            "  1  a regression, a failed gate or threshold, a grade below --min-score",
            "  2  usage or input error",
            "  3  infrastructure error: the store does not exist, is unreachable, locked or corrupt",
            "  sqlite:///relative/dir/     three slashes: a path relative to the working directory",
            "  sqlite:////absolute/dir/    four slashes: an absolute path (/absolute/dir/)",
        ):
            assert line in out, (argv, line)


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_scripts_name_every_command(
    capsys: pytest.CaptureFixture[str], shell: str
) -> None:
    from evaledger.api.cli import build_parser, main

    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    commands = list(sub.choices)
    assert {"show", "compare", "history", "completion"} <= set(commands)
    for command in commands:
        assert command in script, command
    assert "--against-baseline" in script and "--failed" in script


def test_bash_completion_registers_and_completes_a_command(tmp_path: Path) -> None:
    script = tmp_path / "evaledger.bash"
    script.write_text(
        subprocess.run(
            [str(EVALEDGER), "completion", "bash"], capture_output=True, text=True, check=True
        ).stdout
    )
    probe = (
        f"source {script}; complete -p evaledger; "
        "COMP_WORDS=(evaledger sho); COMP_CWORD=1; COMP_LINE='evaledger sho'; COMP_POINT=13; "
        '_shtab_evaledger evaledger sho evaledger; echo "${COMPREPLY[@]}"'
    )
    proc = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("complete ") and lines[0].endswith(" evaledger")
    assert lines[-1].split() == ["show"]


def test_a_read_command_on_a_missing_store_exits_3_and_creates_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere"
    for command in (["runs"], ["show", RUN_KEY], ["verify"], ["history", CASE_IDS[0]]):
        code, out, err = cli(*command, db=f"sqlite:///{missing}/")
        assert (code, out) == (3, ""), command
        assert err == (
            f"evaledger: error: store sqlite:///{missing}/ does not exist "
            f"({missing}/events.sqlite not found); import a run bundle first, "
            "or check --db / EVALEDGER_DB\n"
        )
    assert not missing.exists()
    # A write command creates the store.
    code, _, err = cli("import", str(EXAMPLE_BUNDLE), db=f"sqlite:///{missing}/")
    assert code == 0, err
    assert sorted(p.name for p in missing.iterdir()) == ["events.sqlite", "views.sqlite"]


def test_a_corrupt_store_exits_3_with_one_line(cli: Cli, tmp_path: Path) -> None:
    store = tmp_path / "corrupt"
    store.mkdir()
    (store / "events.sqlite").write_bytes(b"this is not a database" * 100)
    for command in (["runs"], ["import", str(EXAMPLE_BUNDLE)]):
        code, out, err = cli(*command, db=f"sqlite:///{store}/")
        assert (code, out) == (3, "")
        assert err == (
            f"evaledger: error: store sqlite:///{store}/ is corrupt: file is not a database\n"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_postgresql_down_exits_3_naming_the_cause(cli: Cli) -> None:
    port = _free_port()  # nothing listens there
    url = f"postgresql://evaledger:secret@127.0.0.1:{port}/ledger"
    code, out, err = cli("import", str(EXAMPLE_BUNDLE), db=url)
    assert (code, out) == (3, "")
    assert err.startswith(
        f"evaledger: error: store postgresql://evaledger:***@127.0.0.1:{port}/ledger is "
        f'unreachable: connection failed: connection to server at "127.0.0.1", port {port} '
        "failed: Connection refused"
    )
    assert err.count("\n") == 1 and "secret" not in err


@pytest.mark.postgres
def test_a_postgresql_database_that_does_not_exist_exits_3(cli: Cli) -> None:
    from tests.conftest import require_postgres

    base = require_postgres().rpartition("/")[0]
    name = f"evaledger_absent_{uuid.uuid4().hex[:8]}"
    for command in (["runs"], ["import", str(EXAMPLE_BUNDLE)]):
        code, out, err = cli(*command, db=f"{base}/{name}")
        assert (code, out) == (3, ""), command
        assert err.startswith(f"evaledger: error: store {base}/{name} does not exist: ")
        assert err.endswith(f'FATAL:  database "{name}" does not exist\n') or err.endswith(
            f'FATAL: database "{name}" does not exist\n'
        )


@pytest.mark.postgres
def test_a_read_command_on_an_empty_postgresql_database_exits_3(cli: Cli, pg_url: str) -> None:
    code, out, err = cli("runs", db=pg_url)
    assert (code, out) == (3, "")
    assert err == (
        f"evaledger: error: store {pg_url} does not exist (no evaledger_events table); "
        "import a run bundle first, or check --db / EVALEDGER_DB\n"
    )
    assert cli("import", str(EXAMPLE_BUNDLE), db=pg_url)[0] == 0
    assert cli.json("runs", db=pg_url)["total"] == 1


def test_a_locked_sqlite_store_is_an_infrastructure_error(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    from evaledger.api.bootstrap import infrastructure_error

    path = tmp_path / "events.sqlite"
    url = f"sqlite:///{tmp_path}/"
    with closing(sqlite3.connect(path, isolation_level=None)) as holder:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN EXCLUSIVE")
        with (
            closing(sqlite3.connect(path, timeout=0)) as other,
            pytest.raises(sqlite3.OperationalError) as raw,
        ):
            other.execute("SELECT * FROM t")
        engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
        try:
            with pytest.raises(OperationalError) as wrapped, engine.connect() as conn:
                conn.execute(text("SELECT * FROM t"))
        finally:
            engine.dispose()
        holder.execute("ROLLBACK")
    expected = f"store {url} is locked by another process: database is locked"
    for exc in (raw.value, wrapped.value):
        infra = infrastructure_error(exc, url)
        assert infra is not None and (infra.detail, infra.code) == (expected, "store_unavailable")
    # Bugs are not infrastructure: they keep their traceback.
    assert infrastructure_error(sqlite3.IntegrityError("UNIQUE constraint failed"), url) is None
    assert infrastructure_error(KeyError("x"), url) is None


def test_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    big = bundle(key="big-run")
    big["cases"] = [case(f"case-{i:04d}") for i in range(400)]
    path = tmp_path / "big.json"
    path.write_bytes(orjson.dumps(big))
    env = {**os.environ, "EVALEDGER_DB": db}
    subprocess.run([str(EVALEDGER), "import", str(path)], env=env, check=True, capture_output=True)
    for command in (["export", "big-run"], ["show", "big-run"]):
        proc = subprocess.Popen(
            [str(EVALEDGER), *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.read(100)
        proc.stdout.close()  # like `| head -c 100`
        err = proc.stderr.read()
        proc.stderr.close()
        assert (proc.wait(), err) == (0, b""), command
        assert len(first) == 100


# ---------------------------------------------------------------------------------------------
# show, runs, history/explain by key, compare


def test_show_lists_case_ids_and_filters_failed_errored_and_limit(imported: Cli) -> None:
    code, out, _ = imported("show", RUN_KEY)
    rows = out.split("aggregate:", 1)[1].splitlines()
    table = rows[rows.index(next(r for r in rows if r.startswith("case_id"))) :]
    assert [r.split()[:4] for r in table] == [
        ["case_id", "test_case_key", "rep", "status"],
        [CASE_IDS[0], "refund-late-delivery", "0", "passed"],
        [CASE_IDS[1], "refund-above-limit", "0", "failed"],
        [CASE_IDS[2], "store-hours", "0", "errored"],
    ]
    failed = imported.json("show", RUN_KEY, "--failed")
    assert ([c["case_id"] for c in failed["cases"]], failed["cases_matching"]) == ([CASE_IDS[1]], 1)
    assert failed["aggregate"]["total_executions"] == 3  # the aggregate is the whole run's
    errored = imported.json("show", RUN_KEY, "--errored")
    assert [c["case_id"] for c in errored["cases"]] == [CASE_IDS[2]]
    limited = imported.json("show", RUN_KEY, "--limit", "2")
    assert ([c["case_id"] for c in limited["cases"]], limited["cases_matching"]) == (
        CASE_IDS[:2],
        3,
    )
    code, out, _ = imported("show", RUN_KEY, "--limit", "1")
    assert code == 0 and out.splitlines()[-1] == "1 of 3 cases shown (--limit 1)"
    code, _, err = imported("show", RUN_KEY, "--failed", "--errored")
    assert code == 2 and "not allowed with argument" in err
    code, _, err = imported("show", RUN_KEY, "--limit", "0")
    assert code == 2 and "--limit: must be at least 1, got 0" in err


def test_runs_shows_pass_rate_and_score(imported: Cli) -> None:
    # Issue 30: the headline's metric and figure (score), the pass rate and its rule.
    _, out, _ = imported("runs")
    header, row = out.splitlines()
    assert header.split() == [
        "run_id",
        "key",
        "suite",
        "agent",
        "status",
        "cases",
        "metric",
        "score",
        "pass",
        "passes_when",
        "created_at",
    ]
    assert re.split(r"\s{2,}", row) == [
        RUN_ID,
        RUN_KEY,
        "northwind-support-voice",
        "northwind-support",
        "completed",
        "3",
        "weighted score",
        "68.00",
        "33.3%",
        "every expected outcome passes, else overall_score >= 75",
        "2026-11-20T02:00:00+00:00",
    ]
    listed = imported.json("runs")["data"][0]
    assert (listed["pass_rate"], listed["weighted_metrics_score_pct"]) == (1 / 3, 68.0)


def test_history_and_explain_take_run_and_test_case_key(imported: Cli) -> None:
    by_id = imported.json("history", CASE_IDS[1])
    assert imported.json("history", RUN_KEY, "refund-above-limit") == by_id
    assert imported.json("history", RUN_ID, "refund-above-limit", "--rep", "0") == by_id
    explained = imported.json("explain", RUN_KEY, "refund-late-delivery")
    assert explained == imported.json("explain", CASE_IDS[0])
    assert (explained["test_case_key"], explained["repetition"]) == ("refund-late-delivery", 0)
    code, out, err = imported("history", RUN_KEY, "refund-above-limit", "--rep", "1")
    assert (code, out) == (2, "")
    assert err == (
        f"evaledger: error: no case 'refund-above-limit' repetition 1 in run '{RUN_KEY}'\n"
    )
    code, _, err = imported("explain", CASE_IDS[0], "--rep", "1")
    assert code == 2 and "--rep: give RUN TEST_CASE_KEY --rep N, or a CASE id alone" in err
    code, _, err = imported("history", RUN_KEY, "a", "b")
    assert code == 2 and "give a CASE id, or RUN TEST_CASE_KEY [--rep N]" in err


def _two_runs(cli: Cli, tmp_path: Path, base: list[int], cand: list[int]) -> None:
    for key, values in (("base", base), ("cand", cand)):
        data = bundle(key=key)
        data["cases"] = [case(f"case-{i}", v) for i, v in enumerate(values)]
        path = tmp_path / f"{key}.json"
        path.write_bytes(orjson.dumps(data))
        assert cli("import", str(path))[0] == 0


def test_compare_prints_the_flip_behind_each_regression(cli: Cli, tmp_path: Path) -> None:
    # Score 4 of 5 = 80 ≥ 75 passes; 2 of 5 = 40 fails.
    _two_runs(cli, tmp_path, [4, 4, 4], [4, 2, 5])
    code, out, _ = cli("compare", "base", "cand")
    assert code == 1
    assert out.splitlines()[0].endswith(": REGRESSION")
    flips = out.split("Δ score\n", 1)[1].splitlines()
    assert [line.split() for line in flips[:1]] == [
        ["regression", "case-1", "pass", "→", "fail", "80.00", "→", "40.00", "-40.00"],
    ]
    code, md, _ = cli("compare", "base", "cand", "--markdown")
    assert code == 1 and md.startswith("### ❌ Regression detected\n")


def test_the_markdown_comment_agrees_with_the_exit_code(cli: Cli, tmp_path: Path) -> None:
    # Nothing regresses, but the candidate fails its own thresholds (40 < 80 points).
    _two_runs(cli, tmp_path, [2, 2], [2, 2])
    code, md, _ = cli("compare", "base", "cand", "--markdown")
    assert code == 1
    assert md.startswith(
        "### ❌ No regression, but the candidate fails its own thresholds\nBaseline `"
    )
    assert (
        "- candidate fails its own metrics_passed\n- candidate fails its own cases_passed\n" in md
    )
    code, md, _ = cli("compare", "base", "cand", "--markdown", "--no-fail-on-thresholds")
    assert code == 0 and md.startswith("### ✅ No regression\n")
    assert "candidate fails" not in md
    code, out, _ = cli("compare", "base", "cand")
    assert code == 1
    assert (
        out.splitlines()[-1] == "candidate fails its own thresholds: metrics_passed, cases_passed"
    )


# ---------------------------------------------------------------------------------------------
# On a terminal: colour and a progress bar counting cases; piped: plain text


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """Run with stdout and stderr on a pseudo-terminal; what the terminal showed."""
    main_fd, terminal = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdout=terminal, stderr=terminal, close_fds=True)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    assert proc.wait() == 0
    return b"".join(chunks).decode()


def test_colour_and_progress_only_on_a_terminal(tmp_path: Path) -> None:
    env = {**os.environ, "EVALEDGER_DB": f"sqlite:///{tmp_path}/store/", "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    env["TERM"] = "xterm-256color"
    shown = _on_a_terminal([str(EVALEDGER), "import", str(EXAMPLE_BUNDLE)], env)
    assert "importing cases" in shown and "3/3" in shown
    shown = _on_a_terminal([str(EVALEDGER), "show", RUN_KEY], env)
    assert "\x1b[" in shown  # styled
    assert re.search(r"\x1b\[[0-9;]*31m\s*failed", shown), "failed is red"
    piped = subprocess.run(
        [str(EVALEDGER), "show", RUN_KEY], env=env, capture_output=True, text=True, check=True
    )
    assert "\x1b" not in piped.stdout and piped.stderr == ""
    piped = subprocess.run(
        [str(EVALEDGER), "import", str(EXAMPLE_BUNDLE)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert piped.stderr == ""  # no progress bar when stderr is not a terminal


def test_runs_filters_follow_the_api_rules(imported: Cli) -> None:
    assert imported.json("runs", "--key", RUN_KEY)["total"] == 1
    assert imported.json("runs", "--key", "other")["total"] == 0
    assert imported.json("runs", "--status", "completed")["total"] == 1
    code, out, err = imported("runs", "--status", "finished")
    assert (code, out) == (2, "")
    assert "argument --status: invalid choice: 'finished'" in err
    code, out, err = imported("runs", "--label", "no-equals-sign")
    assert (code, out) == (2, "")
    assert "argument --label: expected key=value, got 'no-equals-sign'" in err
