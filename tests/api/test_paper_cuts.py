"""Issue 30's paper cuts at the command line: a percentage where a fraction is expected, and a
comparison of runs of two different suites. SQLite and PostgreSQL where a store is involved."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.api.test_cli import Cli
from tests.conftest import EXAMPLE_BUNDLE, FIXTURES

TAU = FIXTURES / "peers" / "tau-bench" / "gpt-4o-airline.tasks-1-12-41.json"
EXAMPLE_KEY = "northwind-support-v12-nightly-2026-11-20"
TAU_KEY = "tau-bench-gpt-4o-airline.tasks-1-12-41"
DIFFERENT = (
    "runs of different suites: 'northwind-support-voice' (baseline) vs 'tau-bench' (candidate); "
    "their test cases are not the same tests (use --allow-different-suites to compare them "
    "anyway)"
)


@pytest.fixture
def cli(store_url: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    cli = Cli(capsys, store_url)
    for path in (EXAMPLE_BUNDLE, TAU):
        code, _, err = cli("import", str(path))
        assert code == 0, err
    return cli


def json_error(cli: Cli, *args: str) -> dict[str, Any]:
    code, out, err = cli(*args, "--json")
    assert (code, err) == (2, "")
    error: dict[str, Any] = orjson.loads(out)["error"]
    return error


@pytest.mark.parametrize(
    ("args", "option", "given", "hint"),
    [
        (["gate", EXAMPLE_KEY, "--min-pass-rate"], "--min-pass-rate", "55", " (0.55?)"),
        (
            ["compare", EXAMPLE_KEY, EXAMPLE_KEY, "--max-pass-rate-drop"],
            "--max-pass-rate-drop",
            "20",
            " (0.2?)",
        ),
        (["gate", EXAMPLE_KEY, "--min-pass-rate"], "--min-pass-rate", "-0.1", ""),
    ],
)
def test_a_percentage_where_a_fraction_is_expected_is_a_usage_error(
    cli: Cli, args: list[str], option: str, given: str, hint: str
) -> None:
    message = f"argument {option}: a fraction from 0 to 1 is expected, got {given}{hint}"
    code, out, err = cli(*args, given)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == f"evaledger: error: {message}"
    assert json_error(cli, *args, given) == {"code": "usage", "field": option, "message": message}


def test_a_fraction_is_accepted(cli: Cli) -> None:
    # The example run passes 1 of 3 cases.
    for given, passed in (("0.3", True), ("1", False)):
        code, out, err = cli("gate", EXAMPLE_KEY, "--min-pass-rate", given, "--json")
        assert code == 1, err  # the run fails its own cases threshold either way
        assert orjson.loads(out)["checks"] == [
            {"name": "pass_rate", "value": 1 / 3, "minimum": float(given), "passed": passed}
        ]


def test_runs_of_different_suites_are_refused_unless_allowed(cli: Cli) -> None:
    code, out, err = cli("compare", EXAMPLE_KEY, TAU_KEY)
    assert (code, out, err) == (2, "", f"evaledger: error: {DIFFERENT}\n")
    assert json_error(cli, "compare", EXAMPLE_KEY, TAU_KEY) == {
        "code": "different_suites",
        "field": "--allow-different-suites",
        "message": DIFFERENT,
    }
    code, out, err = cli("compare", EXAMPLE_KEY, TAU_KEY, "--allow-different-suites")
    assert code in (0, 1), err
    assert (
        "warning: runs use different suites: 'northwind-support-voice' vs 'tau-bench'"
        in out.splitlines()
    )


def test_result_files_of_different_suites_are_refused_unless_allowed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from evaledger.api.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, err = run("compare", str(EXAMPLE_BUNDLE), str(TAU))
    assert (code, out, err) == (2, "", f"evaledger: error: {DIFFERENT}\n")
    code, out, _ = run("compare", str(EXAMPLE_BUNDLE), str(TAU), "--allow-different-suites")
    assert code in (0, 1)
    assert "warning: runs use different suites" in out
