"""Failures a script can read: under --json one JSON object on stdout with the documented exit
code; without it one line on stderr. And "did you mean" for near misses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.api.test_cli import RUN_KEY, Cli
from tests.conftest import EXAMPLE_BUNDLE

EVALEDGER = Path(sys.executable).with_name("evaledger")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> Cli:
    c = Cli(capsys, sqlite_url)
    assert c("import", str(EXAMPLE_BUNDLE))[0] == 0
    return c


def json_failure(cli: Cli, *argv: str, db: str | None = None) -> tuple[int, dict[str, Any]]:
    code, out, err = cli(*argv, "--json", db=db)
    assert err == "", err
    body = orjson.loads(out)
    assert body.keys() == {"error", "exit_code"} and body["exit_code"] == code
    assert body["error"].keys() == {"code", "message", "field"}
    return code, body["error"]


@pytest.mark.parametrize(
    ("argv", "code", "error_code", "field"),
    [
        (["runs", "--limit", "x"], 2, "usage", "--limit"),
        (["serve", "--port", "99999"], 2, "usage", "--port"),  # was a bind() traceback, exit 1
        (["serve", "--port", "-1"], 2, "usage", "--port"),
        (["runs", "--status", "done"], 2, "usage", "--status"),
        (["show"], 2, "usage", "RUN"),
        (["show", "no-such-run"], 2, "not_found", "RUN"),
        (["rescore", RUN_KEY, "--spec", "/nonexistent/spec.json"], 2, "usage", None),
    ],
    ids=[
        "bad-type",
        "port-too-high",
        "port-negative",
        "bad-choice",
        "missing-positional",
        "unknown-run",
        "missing-file",
    ],
)
def test_json_failures_exit_2_name_the_field(
    cli: Cli, argv: list[str], code: int, error_code: str, field: str | None
) -> None:
    got, error = json_failure(cli, *argv)
    assert (got, error["code"], error["field"]) == (code, error_code, field)
    assert error["message"]


def test_json_failure_for_a_missing_store_is_exit_3(cli: Cli, tmp_path: Path) -> None:
    code, error = json_failure(cli, "runs", db=f"sqlite:///{tmp_path}/none/")
    assert (code, error["code"]) == (3, "store_unavailable")
    assert "does not exist" in error["message"]


def test_a_failed_gate_is_exit_1_with_its_json_result(cli: Cli) -> None:
    # Exit 1 is a verdict, not an error: the result itself is the JSON on stdout.
    code, out, _ = cli("gate", RUN_KEY, "--json")
    assert code == 1
    assert "error" not in orjson.loads(out)


def test_an_unknown_command_under_json_is_json_too(cli: Cli) -> None:
    code, error = json_failure(cli, "shwo")
    assert (code, error["code"], error["field"]) == (2, "usage", "COMMAND")
    assert "did you mean 'show'?" in error["message"]


def test_without_json_one_line_on_stderr_and_nothing_on_stdout(cli: Cli) -> None:
    code, out, err = cli("show", "no-such-run")
    assert (code, out) == (2, "")
    assert err == "evaledger: error: no run with id or key 'no-such-run' in project 'default'\n"


def test_the_installed_command_prints_json_failures_too(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(EVALEDGER), "runs", "--json", "--db", f"sqlite:///{tmp_path}/none/"],
        capture_output=True,
    )
    assert (done.returncode, done.stderr) == (3, b"")
    assert orjson.loads(done.stdout)["error"]["code"] == "store_unavailable"


# ---------------------------------------------------------------------------------------------
# did you mean


def test_a_mistyped_command_gets_the_closest(cli: Cli) -> None:
    code, _, err = cli("shwo", RUN_KEY)
    assert code == 2
    assert err.splitlines()[-1] == (
        "evaledger: error: argument COMMAND: invalid choice: 'shwo' (did you mean 'show'?)"
    )


def test_a_mistyped_option_gets_the_commands_closest(cli: Cli) -> None:
    code, _, err = cli("show", RUN_KEY, "--faild")
    assert code == 2
    assert err.splitlines()[-1] == (
        "evaledger: error: unrecognized arguments: --faild (did you mean '--failed'?)"
    )
    assert err.startswith("usage: evaledger show ")


def test_a_one_letter_typo_in_a_run_key_gets_the_key(cli: Cli) -> None:
    typo = RUN_KEY.replace("nightly", "nightl")
    code, _, err = cli("show", typo)
    assert code == 2
    assert err == (
        f"evaledger: error: no run with id or key {typo!r} in project 'default' "
        f"(did you mean {RUN_KEY!r}?)\n"
    )


def test_a_typo_in_a_case_key_gets_the_runs_case_key(cli: Cli) -> None:
    code, _, err = cli("explain", RUN_KEY, "refund-abov-limit")
    assert code == 2
    assert err == (
        f"evaledger: error: no case 'refund-abov-limit' repetition 0 in run {RUN_KEY!r} "
        "(did you mean 'refund-above-limit'?)\n"
    )


def test_nothing_close_suggests_nothing(cli: Cli) -> None:
    _, _, err = cli("show", "zzzz")
    assert "did you mean" not in err


def test_the_short_id_a_table_shows_names_the_run(cli: Cli) -> None:
    full = cli.json("show", RUN_KEY)["run"]["run_id"]
    assert cli.json("show", full[:8])["run"]["run_id"] == full
    code, error = json_failure(cli, "show", "ffff0000")
    assert (code, error["code"], error["field"]) == (2, "not_found", "RUN")
