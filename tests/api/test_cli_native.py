"""Issues 18 and 25 at the command line: a case's transcript, `--variant`, a run no case decided
(shown as "—" from its counts; its JSON keeps the seed's 0.0, issue 29), and a run whose source
has no date (listed by its import time). SQLite and PostgreSQL, through `evaledger.api.cli.main`
on real stores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.api.test_cli import Cli as CliBase
from tests.conftest import FIXTURES
from tests.helpers import bundle, case

DIALOGUE = FIXTURES / "scorers" / "inspect-tool_dialogue.eval"
PROMPTFOO = FIXTURES / "peers" / "promptfoo" / "sample-export.json"
TAU = FIXTURES / "peers" / "tau-bench" / "gpt-4o-airline.tasks-1-12-41.json"
GRADED = FIXTURES / "scorers" / "inspect-graded_qa.eval"


class Cli(CliBase):
    """`evaledger …` against one store, importing peers' files."""

    def imported(self, path: Path) -> dict[str, Any]:
        (row,) = self.json("import", str(path))["imported"]
        return dict(row)


@pytest.fixture
def cli(store_url: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys, store_url)


# ---------------------------------------------------------------------------------------------
# transcript


def test_transcript_prints_every_message_in_order_within_80_columns(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inspect_ai.log import read_eval_log

    sample = next(s for s in read_eval_log(str(DIALOGUE)).samples or [] if s.id == "d1")
    run = cli.imported(DIALOGUE)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli("transcript", run["run_key"], "d1")
    assert code == 0, err
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert lines[0] == f"case d1 rep 0 of run {run['run_key']}: {len(sample.messages)} messages"
    headers = [line for line in lines if line.startswith("[")]
    calls = getattr(sample.messages[1], "tool_calls", None) or []
    call = calls[0]
    assert headers == [
        "[1] user",
        "[2] assistant",
        f"[3] tool (answers call {call.id})",
        "[4] assistant",
    ]
    assert f"    → {call.function}({json.dumps(call.arguments, separators=(',', ':'))}) " in out
    assert lines[-1] == f"    {sample.messages[-1].text}"
    # Wrapped, not cut: every word of the long tool reply is there.
    body = " ".join(line.strip() for line in lines)
    assert sample.messages[2].text in body


def test_transcript_json_carries_the_turns_and_names_the_case(cli: Cli) -> None:
    run = cli.imported(DIALOGUE)
    payload = cli.json("transcript", run["run_key"], "d3")
    shown = cli.json("show", run["run_id"])
    (d3,) = [c for c in shown["cases"] if c["test_case_key"] == "d3"]
    assert (payload["case_id"], payload["run_id"], payload["test_case_key"]) == (
        d3["case_id"],
        run["run_id"],
        "d3",
    )
    assert payload["turns"][1]["tool_calls"][0]["name"] == "lookup"
    assert payload["turns"][2]["tool_call_id"] == payload["turns"][1]["tool_calls"][0]["id"]
    assert payload["errors"] == []
    assert cli.json("transcript", d3["case_id"]) == payload


def test_transcript_of_an_errored_case_prints_its_error(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "bundle.json"
    path.write_text(
        json.dumps(bundle(key="errored-run") | {"cases": [case("a", status="errored")]})
    )
    run = cli.imported(path)
    code, out, _ = cli("transcript", run["run_key"], "a")
    assert code == 0
    assert out.splitlines()[1:] == ["no transcript recorded", "", "error: timeout"]


def test_transcript_of_an_unknown_key_suggests_the_closest(cli: Cli) -> None:
    run = cli.imported(DIALOGUE)
    code, out, err = cli("transcript", run["run_key"], "d11")
    assert (code, out) == (2, "")
    assert err == (
        f"evaledger: error: no case 'd11' repetition 0 in run '{run['run_key']}' "
        "(did you mean 'd1'?)\n"
    )


# ---------------------------------------------------------------------------------------------
# --variant


@pytest.mark.parametrize("command", ["explain", "history", "transcript"])
def test_a_key_with_several_variants_needs_variant_and_lists_them(cli: Cli, command: str) -> None:
    run = cli.imported(PROMPTFOO)
    code, out, err = cli(command, run["run_key"], "test-0")
    assert code == 2 and out == ""
    assert err.strip() == (
        "evaledger: error: 'test-0' repetition 0 has 2 variants: 'openai:gpt-5'; "
        "'openai:gpt-5-mini' — give one with --variant, e.g. --variant openai:gpt-5"
    )
    code, out, _ = cli(command, run["run_key"], "test-0", "--json")
    assert code == 2
    assert orjson.loads(out)["error"]["field"] == "--variant"


def test_variant_picks_the_case_as_listed_or_by_a_part_naming_one(cli: Cli) -> None:
    run = cli.imported(PROMPTFOO)
    cases = {
        c["variant"]: c["case_id"]
        for c in cli.json("show", run["run_id"])["cases"]
        if c["test_case_key"] == "test-0"
    }
    assert set(cases) == {"openai:gpt-5", "openai:gpt-5-mini"}
    # The full label wins over the longer label that contains it.
    for given, variant in (
        ("openai:gpt-5", "openai:gpt-5"),
        ("openai:gpt-5-mini", "openai:gpt-5-mini"),
        ("MINI", "openai:gpt-5-mini"),
    ):
        explained = cli.json("explain", run["run_key"], "test-0", "--variant", given)
        assert explained["case_id"] == cases[variant]
        history = cli.json("history", run["run_key"], "test-0", "--variant", given)
        assert history["case_id"] == cases[variant]


def test_a_variant_matching_none_or_several_is_a_usage_error(cli: Cli) -> None:
    run = cli.imported(PROMPTFOO)
    code, _, err = cli("explain", run["run_key"], "test-0", "--variant", "gpt")
    assert code == 2
    assert "--variant 'gpt' matches 2 variants of 'test-0'" in err
    code, _, err = cli("explain", run["run_key"], "test-0", "--variant", "opnai:gpt-5-mimi")
    assert code == 2
    assert "no variant 'opnai:gpt-5-mimi' (did you mean 'openai:gpt-5-mini'?)" in err
    code, _, err = cli("explain", run["run_id"], "--variant", "gpt")
    assert code == 2
    assert "--variant: give RUN TEST_CASE_KEY --variant V, or a CASE id alone" in err


def test_a_key_with_one_variant_needs_no_variant(cli: Cli) -> None:
    run = cli.imported(DIALOGUE)
    assert cli.json("explain", run["run_key"], "d1")["test_case_key"] == "d1"


# ---------------------------------------------------------------------------------------------
# a run no case decided has no pass rate


def _undecided_run(cli: Cli, tmp_path: Path) -> dict[str, Any]:
    """A native run of one errored case and one case with no verdict yet (pending)."""
    pending = case("b")
    pending["verdicts"] = []
    data = bundle(key="undecided") | {"cases": [case("a", status="errored"), pending]}
    path = tmp_path / "undecided.json"
    path.write_text(json.dumps(data))
    return cli.imported(path)


def test_a_run_with_no_case_passed_or_failed_keeps_the_seed_pass_rate_0_with_its_counts(
    cli: Cli, tmp_path: Path
) -> None:
    # Issue 29: the seed's fields keep the seed's values (errored and pending cases are in the
    # denominator); the counts say no case was decided, and text displays show "—" from them.
    run = _undecided_run(cli, tmp_path)
    agg = cli.json("show", run["run_id"])["aggregate"]
    assert (agg["pass_rate"], agg["cases_pass_rate_pct"], agg["cases_passed"]) == (0.0, 0.0, False)
    assert (agg["passed_count"], agg["failed_count"]) == (0, 0)
    assert (agg["coverage"]["errored"], agg["coverage"]["pending"]) == (1, 1)
    (listed,) = cli.json("runs")["data"]
    assert {k: listed[k] for k in ("pass_rate", "passed", "failed", "errored", "pending")} == {
        "pass_rate": 0.0,
        "passed": 0,
        "failed": 0,
        "errored": 1,
        "pending": 1,
    }


def test_runs_show_and_gate_never_print_0_percent_for_an_undecided_run(
    cli: Cli, tmp_path: Path
) -> None:
    run = _undecided_run(cli, tmp_path)
    code, out, _ = cli("runs")
    assert code == 0
    row = next(line for line in out.splitlines() if "undecided" in line)
    assert "%" not in row and " — " in row
    code, out, _ = cli("show", run["run_key"])
    assert code == 0
    assert "  pass_rate                    —  (no case passed or failed: 1 errored, 1 pending)" in (
        out.splitlines()
    )
    assert "0.00" not in "\n".join(line for line in out.splitlines() if "pass_rate" in line)
    # The cases threshold still fails a run nothing shows met it; the reason is printed.
    code, out, _ = cli("gate", run["run_key"])
    assert code == 1
    assert "cases: — vs 100.00 → no (no case passed or failed: 1 errored, 1 pending)" in out
    code, out, _ = cli("gate", run["run_key"], "--min-pass-rate", "0.5")
    assert code == 1
    assert "pass_rate: — vs min 0.5000 → FAILED" in out
    gate = cli("gate", run["run_key"], "--json")
    checks = orjson.loads(gate[1])
    assert (gate[0], checks["passed"], checks["aggregate"]["pass_rate"]) == (1, False, 0.0)


def test_an_imported_run_with_one_pending_case_and_no_failure_never_reads_0(
    cli: Cli, tmp_path: Path
) -> None:
    """An Inspect log whose only sample errored: Inspect leaves it out; the ledger shows —."""
    data = orjson.loads(orjson.dumps(bundle(key="one-errored")))
    data["cases"] = [case("only", status="errored")]
    path = tmp_path / "one.json"
    path.write_text(json.dumps(data))
    run = cli.imported(path)
    assert cli.json("show", run["run_id"])["aggregate"]["pass_rate"] == 0.0
    compared = cli("compare", run["run_key"], run["run_key"], "--markdown")
    assert "| Pass rate | 0.0% | 0.0% | +0.0pt |" in compared[1]


# ---------------------------------------------------------------------------------------------
# a run whose source has no date


def test_a_run_without_a_source_date_is_listed_by_its_import_time_and_says_so(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    inspect_run = cli.imported(GRADED)  # created at its source, before today's imports
    tau_run = cli.imported(TAU)
    listed = cli.json("runs")["data"]
    assert [r["run_id"] for r in listed] == [tau_run["run_id"], inspect_run["run_id"]]
    tau, inspect = listed
    assert tau["created_at"].startswith("1970-01-01") and tau["undated"] is True
    assert tau["recorded_at"] > inspect["created_at"]
    assert (inspect["undated"], inspect["recorded_at"]) == (False, None)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli("runs", "--wide")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].endswith(f"{tau['recorded_at']} *")
    assert "1970" not in out
    assert lines[-1] == "* imported at this time; the source has no date"
    code, out, _ = cli("show", tau_run["run_key"])
    assert (
        f"  imported {tau['recorded_at']}; the source has no date (listed by import time)"
        in out.splitlines()
    )


def test_reimporting_an_undated_run_is_the_same_run_at_its_first_import_time(cli: Cli) -> None:
    first = cli.imported(TAU)
    before = cli.json("runs")["data"]
    again = cli.imported(TAU)
    assert (again["run_id"], again["new_cases"], again["events"]) == (first["run_id"], 0, 0)
    assert cli.json("runs")["data"] == before


@pytest.mark.parametrize("columns", [80, 200])
def test_the_undated_footnote_shows_only_with_the_time_column(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], columns: int
) -> None:
    """On a terminal: at 80 columns the time column gives way, and its footnote with it."""
    from tests.api.test_cli_tables import on_terminal

    Cli(capsys, sqlite_url).imported(TAU)
    lines = on_terminal(["runs"], columns, sqlite_url)
    note = "* imported at this time; the source has no date"
    header = lines[0].split()
    assert ("created_at" in header) is (columns == 200)
    assert (note in lines) is (columns == 200)
    assert "1970" not in "\n".join(lines)
