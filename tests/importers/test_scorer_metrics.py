"""Issue 18: every imported run's `scorer_metrics` equal what the source tool itself reports.

The expected figures are read back with each tool's own means: Inspect's log reader
(`read_eval_log(...).results`), promptfoo's per-prompt `metrics` written in its output, and
tau-bench's own pass^k formula (`run.py`: mean over tasks of C(c, k) / C(n, k), success iff
reward == 1) applied to the raw records. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.conftest import FIXTURES

PEERS = FIXTURES / "peers"
SCORERS = FIXTURES / "scorers"
INSPECT_FILES = sorted(
    [*(PEERS / "inspect_ai").glob("*/*.eval"), *(PEERS / "inspect_ai").glob("*/*.json")]
) + sorted([*SCORERS.glob("inspect-*")])
PROMPTFOO_FILES = sorted((PEERS / "promptfoo").glob("*.json")) + sorted(
    SCORERS.glob("promptfoo-*.yaml")
)
TAU_FILES = sorted((PEERS / "tau-bench").glob("*.json"))
ALL_FILES = [*INSPECT_FILES, *PROMPTFOO_FILES, *TAU_FILES]


def inspect_reported(path: Path) -> dict[str, float]:
    from inspect_ai.log import read_eval_log

    log = read_eval_log(str(path), header_only=True)
    scores = log.results.scores if log.results else []
    return {
        f"{s.name}/{k}": float(m.value)
        for s in scores
        for k, m in s.metrics.items()
        if math.isfinite(m.value)
    }


def promptfoo_reported(path: Path) -> dict[str, float]:
    # YAML is a superset of JSON: one reader for promptfoo's JSON and YAML outputs.
    prompts = yaml.safe_load(path.read_text())["results"]["prompts"]
    several = len(prompts) > 1
    out: dict[str, float] = {}
    for p in prompts:
        m = p["metrics"]
        at = f"@{p['provider']}" if several else ""
        rows = m["testPassCount"] + m["testFailCount"] + m["testErrorCount"]
        out[f"promptfoo{at}/pass_rate"] = m["testPassCount"] / rows
        out[f"score{at}/mean"] = m["score"] / rows
        for name, total in m["namedScores"].items():
            out[f"{name}{at}/mean"] = total / m["namedScoresCount"][name]
    return out


def tau_reported(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    records = json.loads(path.read_text())
    rewards = [r["reward"] for r in records]
    trials = len({r["trial"] for r in records})
    c_per_task: Counter[int] = Counter()
    for r in records:
        c_per_task[r["task_id"]] += int(1 - 1e-6 <= r["reward"] <= 1 + 1e-6)
    pass_hat = {
        str(k): sum(math.comb(c, k) / math.comb(trials, k) for c in c_per_task.values())
        / len(c_per_task)
        for k in range(1, trials + 1)
    }
    return {"reward/mean": sum(rewards) / len(rewards)}, pass_hat


def source_figures(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    if path in TAU_FILES:
        return tau_reported(path)
    if path in PROMPTFOO_FILES:
        return promptfoo_reported(path), {}
    return inspect_reported(path), {}


def import_and_show(url: str, path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from evaledger.api.cli import main

    assert main(["import", str(path), "--db", url, "--json"]) == 0
    (row,) = orjson.loads(capsys.readouterr().out)["imported"]
    assert main(["show", row["run_id"], "--db", url, "--json"]) == 0
    shown: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return shown


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_scorer_metrics_equal_what_the_source_tool_reports(
    store_url: str, path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected, expected_pass_hat = source_figures(path)
    agg = import_and_show(store_url, path, capsys)["aggregate"]
    got = agg.get("scorer_metrics", {})
    assert got.keys() == expected.keys()
    for key, figure in expected.items():
        assert got[key] == pytest.approx(figure, rel=1e-12, abs=1e-12), key
    assert "scorer_metrics_mismatched" not in agg
    if expected_pass_hat:
        assert agg["pass_hat_k"].keys() == expected_pass_hat.keys()
        for k, figure in expected_pass_hat.items():
            assert agg["pass_hat_k"][k] == pytest.approx(figure, rel=1e-12, abs=1e-12)


def test_the_fixtures_cover_what_inspect_metrics_must_get_right() -> None:
    """Partial credit, an errored sample, a float scorer, a dict scorer, epochs: all present."""
    from inspect_ai.log import read_eval_log

    graded = read_eval_log(str(SCORERS / "inspect-graded_qa.eval"))
    epochs = read_eval_log(str(SCORERS / "inspect-epochs_checks.json"))
    values = [s.scores["model_graded_qa"].value for s in graded.samples or [] if s.scores]
    assert "P" in values
    assert any(s.error is not None for s in graded.samples or [])
    assert epochs.eval.config.epochs == 2
    assert any(isinstance(s.scores["checks"].value, dict) for s in epochs.samples or [] if s.scores)
    overlaps = [s.scores["overlap"].value for s in epochs.samples or [] if s.scores]
    assert any(isinstance(v, float) and 0 < v < 1 for v in overlaps)


def run_cli(url: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from evaledger.api.cli import main

    capsys.readouterr()
    try:
        code = main([*args, "--db", url])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    out = capsys.readouterr()
    return code, out.out, out.err


GRADED = SCORERS / "inspect-graded_qa.eval"


def test_an_imported_run_passes_gate_with_nothing_configured_and_fails_below_a_min(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = import_and_show(store_url, GRADED, capsys)["run"]["run_id"]
    accuracy = inspect_reported(GRADED)["model_graded_qa/accuracy"]
    code, out, _ = run_cli(store_url, capsys, "gate", run_id)
    assert code == 0
    assert "no thresholds configured" in out
    above, below = (
        f"model_graded_qa/accuracy={accuracy}",
        f"model_graded_qa/accuracy={accuracy + 0.01}",
    )
    assert run_cli(store_url, capsys, "gate", run_id, "--min", above)[0] == 0
    code, out, _ = run_cli(store_url, capsys, "gate", run_id, "--min", above, "--min", below)
    assert code == 1
    assert "gate: FAILED (model_graded_qa/accuracy)" in out
    # The pass rate counts the errored sample: 2 of 5 cases pass.
    assert run_cli(store_url, capsys, "gate", run_id, "--min-pass-rate", "0.4")[0] == 0
    code, out, _ = run_cli(store_url, capsys, "gate", run_id, "--min-pass-rate", "0.41", "--json")
    result = orjson.loads(out)
    assert (code, result["passed"], result["failed"]) == (1, False, ["pass_rate"])
    assert result["checks"] == [
        {"name": "pass_rate", "value": 0.4, "minimum": 0.41, "passed": False}
    ]


def test_gate_refuses_an_unknown_metric_or_a_malformed_min_with_exit_2(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = import_and_show(sqlite_url, GRADED, capsys)["run"]["run_id"]
    code, _, err = run_cli(sqlite_url, capsys, "gate", run_id, "--min", "accuracy=0.5")
    assert code == 2
    assert "--min: the run has no metric 'accuracy'" in err
    assert "model_graded_qa/accuracy" in err
    code, _, err = run_cli(sqlite_url, capsys, "gate", run_id, "--min", "model_graded_qa/accuracy")
    assert (code, "expected SCORER/METRIC=VALUE" in err) == (2, True)
    assert "Traceback" not in err


def test_compare_of_two_identical_imported_runs_exits_0(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = import_and_show(sqlite_url, GRADED, capsys)["run"]["run_id"]
    code, out, err = run_cli(
        sqlite_url, capsys, "import", str(GRADED), "--run-key", "again", "--json"
    )
    assert code == 0, err
    second = orjson.loads(out)["imported"][0]["run_id"]
    code, _, err = run_cli(sqlite_url, capsys, "compare", first, second)
    assert code == 0, err


def test_show_leads_with_the_source_metrics_and_each_cases_scorer_values(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = import_and_show(sqlite_url, GRADED, capsys)["run"]["run_id"]
    code, out, _ = run_cli(sqlite_url, capsys, "show", run_id)
    assert code == 0
    lines = out.splitlines()
    # Issue 30: the run's one headline first, then the source's metrics.
    assert lines[2] == (
        "  headline: model_graded_qa/accuracy 0.6250 · pass rate 40.0% "
        "(2 of 5 cases; passes when model_graded_qa >= 1)"
    )
    assert lines[3] == "source metrics:"
    assert lines[6].split() == ["model_graded_qa/accuracy", "0.6250"]
    assert (
        "pass rate                        0.4000 (2 of 5 cases; 2 failed, 1 errored, 0 pending)"
        in out
    )
    assert "a case passes when               model_graded_qa >= 1" in out
    assert "weighted_metrics_score_pct" not in out
    header = next(line for line in lines if line.startswith("case_id"))
    assert header.split() == [
        "case_id",
        "test_case_key",
        "rep",
        "status",
        "model_graded_qa",
        "overlap",
        "has_answer",
        "gate",
    ]
    q3 = next(line for line in lines if " q3 " in line)
    assert q3.split()[3:7] == ["failed", "0.5000", "0.4000", "1.0000"]


def test_promptfoo_variants_are_listed_and_are_not_repetitions(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = PEERS / "promptfoo" / "sample-export.json"
    shown = import_and_show(sqlite_url, path, capsys)
    assert "pass_hat_k" not in shown["aggregate"]
    assert sorted((c["test_case_key"], c["variant"]) for c in shown["cases"]) == [
        ("test-0", "openai:gpt-5"),
        ("test-0", "openai:gpt-5-mini"),
        ("test-1", "openai:gpt-5"),
        ("test-1", "openai:gpt-5-mini"),
    ]


def test_rescore_with_a_spec_file_keeps_the_imported_runs_scorers_and_score_gate(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = import_and_show(sqlite_url, GRADED, capsys)
    run_id = shown["run"]["run_id"]
    spec = Path(__file__).parents[2] / "examples" / "spec.strict.json"
    code, out, err = run_cli(sqlite_url, capsys, "rescore", run_id, "--spec", str(spec), "--json")
    assert code == 0, err
    after = orjson.loads(out)["after"]["aggregate"]
    assert after["coverage"]["pending"] == 0
    assert after["pass_rate"] == shown["aggregate"]["pass_rate"] == 0.4
    assert after["scorer_metrics"] == shown["aggregate"]["scorer_metrics"]
    assert orjson.loads(out)["changed_cases"] == []


def test_explain_shows_a_case_in_its_scorers_terms_without_an_empty_rubric_table(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from inspect_ai.log import read_eval_log

    sample = next(s for s in read_eval_log(str(GRADED)).samples or [] if s.id == "q3")
    graded = sample.scores["model_graded_qa"] if sample.scores else None
    assert graded is not None
    run_id = import_and_show(sqlite_url, GRADED, capsys)["run"]["run_id"]
    code, out, err = run_cli(sqlite_url, capsys, "explain", run_id, "q3")
    assert code == 0, err
    assert f"scorer model_graded_qa: model_graded_qa = {graded.value}" in out
    assert f"  answer: {graded.answer!r}" in out
    assert f"  target: {sample.target!r}" in out
    assert f"  grader reply: {graded.explanation!r}" in out
    assert "metric" not in out.split()  # no rubric table header
    assert "overall_score" not in out
    payload = orjson.loads(run_cli(sqlite_url, capsys, "explain", run_id, "q3", "--json")[1])
    first = payload["source_scores"][0]
    assert (first["scorer"], first["values"], first["grader_reply"]) == (
        "model_graded_qa",
        {"model_graded_qa": graded.value},
        graded.explanation,
    )


def test_runs_lists_an_imported_runs_source_headline(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import_and_show(sqlite_url, GRADED, capsys)
    accuracy = inspect_reported(GRADED)["model_graded_qa/accuracy"]
    code, out, _ = run_cli(sqlite_url, capsys, "runs")
    assert code == 0
    assert out.splitlines()[0].split()[6:9] == ["metric", "score", "pass"]
    assert f"model_graded_qa/accuracy  {accuracy:.4f}" in out
    listed = orjson.loads(run_cli(sqlite_url, capsys, "runs", "--json")[1])["data"][0]
    assert listed["scorer_metrics"]["model_graded_qa/accuracy"] == accuracy


def test_promptfoo_yaml_output_is_detected_by_content_and_imports_like_its_json(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from evaledger.importers.base import Format
    from evaledger.importers.detect import detect

    yaml_output = SCORERS / "promptfoo-sample-export.yaml"
    renamed = tmp_path / "out.txt"  # content decides, not the name
    renamed.write_bytes(yaml_output.read_bytes())
    assert detect(renamed) is Format.PROMPTFOO
    from_yaml = import_and_show(sqlite_url, yaml_output, capsys)
    json_output = PEERS / "promptfoo" / "sample-export.json"
    from_json = import_and_show(f"sqlite:///{tmp_path}/json-store/", json_output, capsys)
    assert from_yaml["run"]["run_id"] == from_json["run"]["run_id"]  # the same eval, by its id
    assert from_yaml["aggregate"] == from_json["aggregate"]


def test_compare_markdown_carries_the_source_metrics_and_named_scores(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = import_and_show(sqlite_url, GRADED, capsys)["run"]["run_id"]
    code, out, err = run_cli(
        sqlite_url, capsys, "import", str(GRADED), "--run-key", "again", "--json"
    )
    assert code == 0, err
    second = orjson.loads(out)["imported"][0]["run_id"]
    code, out, err = run_cli(sqlite_url, capsys, "compare", first, second, "--markdown")
    assert code == 0, err
    accuracy = inspect_reported(GRADED)["model_graded_qa/accuracy"]
    assert f"| model_graded_qa/accuracy | {accuracy:.4f} | {accuracy:.4f} | +0.0000 |" in out
    assert "| Named score | Baseline | Candidate | Δ | paired 95% CI | verdict |" in out
    assert f"| model_graded_qa | {accuracy:.4f} | {accuracy:.4f} | +0.0000 |" in out
