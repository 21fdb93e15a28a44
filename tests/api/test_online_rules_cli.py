"""`evaledger online rule add|list|disable`: rules recorded with their author; bad input exit 2."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.api.test_cli import Cli, stored_events

ROOT = Path(__file__).resolve().parents[2]
RUBRIC = ROOT / "examples" / "rubric.geval.yaml"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> Cli:
    return Cli(capsys, sqlite_url)


def test_add_list_and_disable_a_rule(cli: Cli) -> None:
    (added,) = cli.json(
        "online", "rule", "add", "helpful",
        "--sample", "0.1",
        "--where", "agent=support-bot and  model=gpt-4o-mini",
        "--judge", "anthropic:claude-sonnet-4-6",
        "--rubric", str(RUBRIC),
        "--outcome", "The agent says where the order is",
        "--outcome", "The agent is polite",
        "--max-cost-per-day", "2.5",
        "--project", "shop",
        "--actor", "alice",
    )  # fmt: skip
    assert added["where"] == "agent=support-bot and model=gpt-4o-mini"
    assert added["outcomes"] == ["The agent says where the order is", "The agent is polite"]
    assert added["rubric_metrics"] == ["response_delivery", "information_gathering"]
    assert (added["max_cost_per_day_usd"], added["added_by"], added["enabled"]) == (
        2.5,
        "alice",
        True,
    )
    code, out, _ = cli("online", "rule", "list", "--project", "shop")
    assert code == 0
    assert out.splitlines()[0].startswith(
        "helpful  enabled  sample 0.1  where agent=support-bot and model=gpt-4o-mini  "
        "judge anthropic:claude-sonnet-4-6  $2.5/day  added by alice "
    )
    assert out.splitlines()[-1] == "1 rule(s)"
    assert cli.json("online", "rule", "list") == []  # another project has none
    (off,) = cli.json(
        "online", "rule", "disable", "helpful", "--reason", "noisy", "--project", "shop",
        "--actor", "bob",
    )  # fmt: skip
    assert (off["enabled"], off["disabled_by"], off["disabled_reason"]) == (False, "bob", "noisy")
    code, _, err = cli("online", "rule", "disable", "helpful", "--project", "shop")
    assert code == 2 and "disabled already" in err


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--sample", "2", "--judge", "openai:gpt-4.1"], "sample"),
        (["--sample", "nan", "--judge", "openai:gpt-4.1"], "sample"),
        (["--sample", "0.1", "--judge", "gemini:x"], "judge"),
        (["--sample", "0.1", "--judge", "openai:gpt-4.1", "--where", "team=a"], "where"),
        (["--sample", "0.1", "--judge", "openai:gpt-4.1", "--where", "agent=a or b"], "where"),
        (["--sample", "0.1", "--judge", "openai:gpt-4.1", "--max-cost-per-day", "-1"], None),
        (["--sample", "0.1", "--judge", "openai:gpt-4.1", "--rubric", "/nonexistent.yaml"], None),
        (["--sample", "x", "--judge", "openai:gpt-4.1"], "--sample"),
    ],
)
def test_bad_input_is_exit_2_naming_the_field_and_nothing_is_stored(
    cli: Cli, sqlite_url: str, argv: list[str], field: str | None
) -> None:
    assert cli("online", "rule", "list")[0] == 0  # the store exists
    before = stored_events(sqlite_url)
    code, out, _ = cli("online", "rule", "add", "r1", *argv, "--json")
    assert code == 2
    error = orjson.loads(out)["error"]
    expected = field or ("max_cost_per_day" if "--max-cost-per-day" in argv else "rubric")
    assert error["field"] == expected, error
    assert stored_events(sqlite_url) == before
    assert cli.json("online", "rule", "list") == []
