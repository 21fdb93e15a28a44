"""`gate --baseline` (issue 35): the gate compares the run with a baseline as `compare` does.

The same comparability guard (common items of two dataset versions unless
--allow-different-datasets, cached cases, graders) and the same regression rule (exit 1), on
SQLite and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.api.test_cli import Cli
from tests.api.test_comparability import _items, _run


def _gate(cli: Cli, *args: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = cli("gate", *args, "--json")
    assert code in (0, 1), err
    return code, orjson.loads(out), err


def _compare_exit(cli: Cli, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = cli("compare", *args, "--json", "--no-fail-on-thresholds")
    assert code in (0, 1), err
    return code, orjson.loads(out)


@pytest.fixture
def two_versions(capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path) -> Cli:
    """Runs of qa@1 and qa@2: alike on the common items, a bad item only in the new version."""
    cli = Cli(capsys, store_url)
    cli.json("dataset", "create", "qa")
    v1 = [{"key": k} for k in ("a", "b", "gone")]
    v2 = [{"key": k} for k in ("a", "b", "new")]
    cli.json("dataset", "add", "qa", _items(tmp_path / "v1.jsonl", v1))
    cli.json("dataset", "add", "qa", _items(tmp_path / "v2.jsonl", v2))
    runs = {
        "old": ({"a": 5, "b": 5, "gone": 5}, 1),
        "new": ({"a": 5, "b": 5, "new": 1}, 2),
        "worse": ({"a": 1, "b": 1, "new": 1}, 2),
    }
    for key, (scores, version) in runs.items():
        cli.json("import", _run(tmp_path, key, scores, version))
    return cli


def test_the_gate_compares_common_items_with_the_guard_and_fails_as_compare_does(
    two_versions: Cli,
) -> None:
    cli = two_versions
    code, found, err = _gate(cli, "new", "--baseline", "old")
    against = found["baseline"]
    guard = against["comparability"]
    assert guard["restricted"] is True and guard["common_items"] == 2
    assert (guard["baseline_only_items"], guard["candidate_only_items"]) == (["gone"], ["new"])
    assert "warning: runs of different dataset versions: qa@1" in err
    # The same verdict as compare's, over the same (common) items.
    compare_code, compared = _compare_exit(cli, "old", "new")
    assert against["verdict"] == compared["verdict"]
    assert against["comparability"] == compared["comparability"]
    assert against["regression"] == [] and compare_code == 0
    assert "baseline" not in found["failed"]
    # Every case compared: the new version's bad item makes it a regression, as in compare.
    code, everything, err = _gate(cli, "new", "--baseline", "old", "--allow-different-datasets")
    assert everything["baseline"]["comparability"]["restricted"] is False
    compare_code, compared = _compare_exit(cli, "old", "new", "--allow-different-datasets")
    assert everything["baseline"]["verdict"] == compared["verdict"]
    assert compare_code == 1 and everything["baseline"]["regression"]
    assert everything["baseline"]["regression"] == compared["verdict"]["reasons"]
    assert code == 1 and "baseline" in everything["failed"]
    assert "compared every case (--allow-different-datasets)" in err


def test_the_approved_baseline_and_a_regression_on_the_common_items(two_versions: Cli) -> None:
    cli = two_versions
    code, out, err = cli("gate", "new", "--baseline", "approved")
    assert code == 2 and "baseline" in err.lower() and out == ""
    cli.json("baseline", "approve", "old", "--reason", "release 1")
    code, approved, _ = _gate(cli, "worse", "--baseline", "approved")
    code_by_key, by_key, _ = _gate(cli, "worse", "--baseline", "old")
    assert approved == by_key and code == code_by_key == 1
    assert approved["baseline"]["baseline_run_id"] == by_key["baseline"]["baseline_run_id"]
    assert "baseline" in approved["failed"] and approved["baseline"]["regression"]
    compare_code, compared = _compare_exit(cli, "old", "worse")
    assert compare_code == 1
    assert approved["baseline"]["regression"] == compared["verdict"]["reasons"]
    # Text: the verdict is said, and the gate fails naming the baseline.
    code, text, _ = cli("gate", "worse", "--baseline", "old")
    assert code == 1 and "regression (" in text and text.rstrip().endswith("baseline)")


def test_comparison_options_without_a_baseline_are_a_usage_error(two_versions: Cli) -> None:
    for option in ("--exclude-cached", "--allow-different-datasets", "--allow-different-suites"):
        code, out, err = two_versions("gate", "new", option)
        assert code == 2 and "only with --baseline" in err and out == ""
