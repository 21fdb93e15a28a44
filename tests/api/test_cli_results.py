"""Help on every argument with its default; --json on every command with a result; what
`export -o` wrote; missing values as "—"."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.api.test_cli import RUN_ID, RUN_KEY, Cli
from tests.conftest import EXAMPLE_BUNDLE
from tests.helpers import bundle


def every_parser(
    parser: argparse.ArgumentParser, path: str = "evaledger"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from every_parser(sub, f"{path} {name}")


def test_every_option_and_positional_has_help_showing_its_default() -> None:
    from evaledger.api.cli import build_parser

    checked = 0
    for path, parser in every_parser(build_parser()):
        text = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            assert action.help, f"{path}: {action.dest} has no help"
            checked += 1
            if action.default not in (None, False, [], argparse.SUPPRESS):
                # "(default: 4)" from the formatter, or a hand-written "(default 4)".
                value = action.default
                value = f"{value:g}" if isinstance(value, float) else str(value)
                shown = re.compile(rf"default:? {re.escape(value)}\b")
                assert shown.search(" ".join(text.split())), f"{path}: {action.dest}"
    assert checked > 100


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> Cli:
    c = Cli(capsys, sqlite_url)
    assert c("import", str(EXAMPLE_BUNDLE))[0] == 0
    return c


def test_export_to_a_file_reports_path_cases_and_bytes(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    code, out, err = cli("export", RUN_KEY, "-o", str(target))
    size = target.stat().st_size
    assert (code, out) == (0, "")
    assert err == f"exported run {RUN_KEY} to {target}: 3 cases, {size} bytes\n"
    assert cli.json("export", RUN_KEY, "-o", str(target)) == {
        "exported": {
            "path": str(target),
            "run_id": RUN_ID,
            "run_key": RUN_KEY,
            "cases": 3,
            "bytes": size,
        }
    }
    assert len(orjson.loads(target.read_bytes())["cases"]) == 3


def test_project_and_migrate_answer_in_json(cli: Cli) -> None:
    caught_up = cli.json("project")
    assert caught_up["position"] > 0
    assert cli.json("project", "--rebuild", "runs_v4") == {
        "rebuilt": "runs_v4",
        "position": caught_up["position"],
    }
    migrated = cli.json("migrate")
    assert migrated == {
        "kind": "sqlite",
        "position": caught_up["position"],
        "append_only": True,
        "app_role": None,
        "seals_payloads": True,  # a new store seals (issue 34)
    }


def test_unknown_cost_and_version_print_as_a_dash(cli: Cli, tmp_path: Path) -> None:
    data = bundle(key="no-cost", agent={"name": "bare-agent", "version": None})
    for c in data["cases"]:
        c.pop("cost_usd", None)
    path = tmp_path / "no-cost.json"
    path.write_bytes(orjson.dumps(data))
    assert cli("import", str(path))[0] == 0
    code, out, _ = cli("show", "no-cost")
    assert code == 0
    assert "agent bare-agent  spec" in out and "None" not in out
    cost = next(line for line in out.splitlines() if "total_cost_usd" in line)
    assert cost.split() == ["total_cost_usd", "—"]
    # A run that reported its cost keeps the figure.
    _, shown, _ = cli("show", RUN_KEY)
    assert next(line for line in shown.splitlines() if "total_cost_usd" in line).split()[1] != "—"
