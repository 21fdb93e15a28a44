"""docs/ci.md: the workflow's `run:` steps, executed locally with a temp folder as the store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evaledger.client import compare_files

DOC = Path(__file__).resolve().parents[2] / "docs" / "ci.md"


def block(text: str, language: str, after: str) -> str:
    """The first fenced block of `language` after the heading `after`."""
    return text.split(after, 1)[1].split(f"```{language}\n", 1)[1].split("```", 1)[0]


def bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.slow
def test_the_workflow_steps_record_compare_and_write_the_summary(tmp_path: Path) -> None:
    text = DOC.read_text()
    repo = tmp_path / "repo"
    (repo / "evals").mkdir(parents=True)
    (repo / "evals" / "record.py").write_text(block(text, "python", "## The recorder"))
    workflow = yaml.safe_load(block(text, "yaml", "## The workflow"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALEDGER_", "GITHUB_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"

    # On main: record and commit the approved baseline's bundle (the doc's own commands).
    main_env = {**env, "EVALEDGER_DB": f"sqlite:///{tmp_path}/main-store/"}
    approve = bash(block(text, "sh", "To approve a new baseline"), repo, main_env)
    assert approve.returncode == 0, approve.stderr
    assert (repo / "evals" / "baseline.json").stat().st_size > 0

    # In the pull request's job: every `run:` step but the install, in order.
    (job,) = workflow["jobs"].values()
    summary = tmp_path / "summary.md"
    job_env = {
        **env,
        "EVALEDGER_DB": job["env"]["EVALEDGER_DB"].replace("${{ runner.temp }}", str(tmp_path)),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    steps = [s for s in job["steps"] if "run" in s and s.get("name") != "Install"]
    assert [s["name"] for s in steps] == [
        "Load the approved baseline",
        "Record this commit's run",
        "Compare with the baseline",
    ]
    for step in steps:
        done = bash(step["run"], repo, job_env)
        assert done.returncode == 0, f"{step['name']}: {done.stdout}{done.stderr}"
    markdown = summary.read_text()
    assert markdown.startswith("### ✅ No regression\n")

    # With no store kept between jobs: the doc's file-to-file comparison, in a fresh job store.
    fresh_env = {**job_env, "EVALEDGER_DB": f"sqlite:///{tmp_path}/fresh-job/"}
    files_summary = tmp_path / "files-summary.md"
    fresh_env["GITHUB_STEP_SUMMARY"] = str(files_summary)
    compared = bash(block(text, "sh", "No store kept between jobs?"), repo, fresh_env)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert files_summary.read_text().startswith("### ✅ No regression\n")


def test_compare_files_compares_two_bundles_without_a_store(tmp_path: Path) -> None:
    import evaledger

    db = f"sqlite:///{tmp_path}/store/"
    for key, answer in (("base", "Yes, within 30 days."), ("cand", "No.")):
        with (
            evaledger.run("qa", agent="bot", key=key, db=db) as run,
            run.case("refund", input="Refund?") as case,
        ):
            case.turn("assistant", answer, latency_ms=100)
            case.outcome("mentions 30 days", passed="30 days" in answer)
    from tests.client.conftest import run_cli

    for key in ("base", "cand"):
        exported = run_cli("export", key, "--db", db)
        assert exported.returncode == 0, exported.stderr
        (tmp_path / f"{key}.json").write_text(exported.stdout)
    result = compare_files(tmp_path / "base.json", tmp_path / "cand.json")
    assert result.verdict.regression_detected is True
    assert result.aggregate.baseline_metrics.pass_rate == 1.0
    assert result.aggregate.candidate_metrics.pass_rate == 0.0
    same = compare_files(tmp_path / "base.json", tmp_path / "base.json")
    assert same.verdict.regression_detected is False


def test_the_cli_compares_two_files_without_a_store(tmp_path: Path) -> None:
    from tests.client.conftest import run_cli

    db = f"sqlite:///{tmp_path}/store/"
    for key, answer in (("base", "Yes, within 30 days."), ("cand", "No.")):
        with run_cli_recorder(db, key) as case:
            case.turn("assistant", answer, latency_ms=100)
            case.outcome("mentions 30 days", passed="30 days" in answer)
        exported = run_cli("export", key, "--db", db)
        assert exported.returncode == 0, exported.stderr
        (tmp_path / f"{key}.json").write_text(exported.stdout)
    nowhere = f"sqlite:///{tmp_path}/never/"
    same = run_cli(
        "compare", str(tmp_path / "base.json"), str(tmp_path / "base.json"), "--db", nowhere
    )
    assert same.returncode == 0, same.stdout + same.stderr
    worse = run_cli(
        "compare",
        str(tmp_path / "base.json"),
        str(tmp_path / "cand.json"),
        "--markdown",
        "--db",
        nowhere,
    )
    assert worse.returncode == 1, worse.stdout + worse.stderr
    assert "regression" in worse.stdout.lower()
    assert not (tmp_path / "never").exists()  # no store was created or needed
    refused = run_cli(
        "compare", str(tmp_path / "base.json"), str(tmp_path / "cand.json"), "--spec", "x.json"
    )
    assert refused.returncode == 2 and "--spec" in refused.stderr
    # A missing file is named as one (exit 2), not looked up as a run key in a store.
    missing = str(tmp_path / "run.json")
    for pair in ((str(tmp_path / "base.json"), missing), (missing, "also-missing.json")):
        typo = run_cli("compare", *pair, "--db", nowhere)
        assert typo.returncode == 2, typo.stdout + typo.stderr
        assert typo.stderr.strip() == (
            f"evaledger: error: {missing}: no such file (compare two result files, or two runs)"
        )
    assert not (tmp_path / "never").exists()


def run_cli_recorder(db: str, key: str) -> Any:
    """One case of a one-case run recorded with the client (its `with` block is the case)."""
    import contextlib

    import evaledger

    @contextlib.contextmanager
    def recorder() -> Any:
        with (
            evaledger.run("qa", agent="bot", key=key, db=db) as run,
            run.case("refund", input="Refund?") as case,
        ):
            yield case

    return recorder()


def test_the_recipe_installs_from_the_repository_not_from_pypi() -> None:
    """Issue 30: evaledger is not on PyPI; the recipe said `pip install evaledger`."""
    text = DOC.read_text()
    workflow = yaml.safe_load(block(text, "yaml", "## The workflow"))
    (job,) = workflow["jobs"].values()
    (install,) = [s["run"] for s in job["steps"] if s.get("name") == "Install"]
    # A git URL pinned to a ref (the name@ref form pip needs for a URL requirement).
    assert re.fullmatch(r'pip install "evaledger @ git\+https://github\.com/.+@v\d\S*"', install)
    assert "pip install evaledger\n" not in text and not text.rstrip().endswith("install evaledger")
    # The wheel route builds the way tests/client/test_packaging.py builds and installs it.
    wheel = block(text, "sh", "or build a wheel once")
    assert "python -m build --wheel" in wheel and "pip install dist/evaledger-0.1.0-" in wheel
