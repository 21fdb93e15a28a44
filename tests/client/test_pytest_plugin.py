"""`pytest --evaledger` on a small test folder, in a subprocess, with and without xdist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import evaledger
from evaledger.api.bootstrap import Settings, build_services
from evaledger.application import datasets
from evaledger.domain.events import (
    DatasetItem,
    ExecutionErrored,
    ExecutionSkipped,
    OutcomeEvaluated,
    TranscriptRecorded,
)
from evaledger.domain.ledger import Context
from tests.client.conftest import Target

TESTS = """
import pytest

def test_scored(evaledger_case):
    evaledger_case.turn("user", "hi")
    evaledger_case.score("accuracy", 0.75)

def test_fails():
    assert 1 + 1 == 3, "math is broken"

@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("setup exploded")

def test_errors(broken):
    pass
"""


def run_pytest(
    folder: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_sample.py").write_text(TESTS)
    return tmp_path / "suite"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workers", "where"),
    [([], "store"), (["-n", "2"], "store"), ([], "server"), (["-n", "2"], "server")],
    ids=["serial-store", "xdist-store", "serial-server", "xdist-server"],
)
def test_a_session_is_one_run_and_each_test_one_case(
    folder: Path, tmp_path: Path, workers: list[str], where: str, request: pytest.FixtureRequest
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    if where == "server":
        # A server URL, its token from the environment.
        server: Target = request.getfixturevalue("server_target")
        option, db, reads = server.kwargs["url"], server.db, server.kwargs
        env["EVALEDGER_TOKEN"] = server.kwargs["token"]
    else:
        option = db = f"sqlite:///{tmp_path}/store/"
        reads = {"db": db}
    done = run_pytest(
        folder,
        "--evaledger",
        option,
        "--evaledger-suite",
        "smoke",
        "--evaledger-agent",
        "bot@7",
        *workers,
        env=env,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 3 passed, 1 skipped, 1 error" in done.stdout
    with evaledger.open(**reads) as reader:
        (run,) = reader.runs()
        report = reader.show(run.run_id)
    assert (run.suite["name"], run.agent["name"], run.agent["version"]) == ("smoke", "bot", "7")
    assert run.status == "completed"
    cases = {c.test_case_key: c for c in report.cases}
    assert sorted(cases) == [
        "test_sample.py::test_errors",
        "test_sample.py::test_fails",
        "test_sample.py::test_param[1]",
        "test_sample.py::test_param[2]",
        "test_sample.py::test_scored",
        "test_sample.py::test_skipped",
    ]
    statuses = {key: (c.status.value, c.passed) for key, c in cases.items()}
    assert statuses == {
        "test_sample.py::test_errors": ("errored", False),
        "test_sample.py::test_fails": ("failed", False),
        "test_sample.py::test_param[1]": ("passed", True),
        "test_sample.py::test_param[2]": ("passed", True),
        "test_sample.py::test_scored": ("passed", True),
        # Issue 30: a skip is not an execution (it was "canceled", in the denominator).
        "test_sample.py::test_skipped": ("skipped", None),
    }
    assert cases["test_sample.py::test_scored"].named_scores == {"accuracy": 0.75}
    ran = [k for k in cases if k != "test_sample.py::test_skipped"]
    assert all(cases[k].latency_p50_ms is not None for k in ran)  # the test's duration
    # The failure's assertion message and the error's text are kept with their cases.
    services = build_services(Settings(db=db))
    try:
        failed = services.ledger.events_of(cases["test_sample.py::test_fails"].case_id)
        errored = services.ledger.events_of(cases["test_sample.py::test_errors"].case_id)
    finally:
        services.close()
    (outcome,) = [e for e in failed if isinstance(e, OutcomeEvaluated)]
    assert outcome.results[0].passed is False
    assert "math is broken" in (outcome.results[0].justification or "")
    (error,) = [e for e in errored if isinstance(e, ExecutionErrored)]
    assert "setup exploded" in error.message


def test_without_the_option_the_plugin_is_inert(folder: Path) -> None:
    (folder / "test_sample.py").write_text(
        "def test_scratch_case(evaledger_case):\n    evaledger_case.score('accuracy', 1.0)\n"
    )
    done = run_pytest(folder, "-W", "error")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert not (folder / ".evaledger").exists()
    assert "--evaledger=URL_OR_DB" in run_pytest(folder, "--help").stdout


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--evaledger", "mysql://x"], 4, "ERROR: --evaledger: unsupported URL scheme 'mysql'"),
        (
            ["--evaledger", "sqlite:///store/", "--evaledger-agent=@1"],
            4,
            "ERROR: --evaledger-agent: String should have at least 1 character",
        ),
        (
            ["--evaledger", "sqlite:////proc/no-such-dir/store/"],
            3,
            "evaledger: store sqlite:////proc/no-such-dir/store/ cannot be created",
        ),
    ],
    ids=["bad-store-url", "empty-agent-name", "store-cannot-be-created"],
)
def test_a_bad_option_or_store_is_one_line_and_its_exit_code(
    folder: Path, args: list[str], code: int, says: str
) -> None:
    """pytest's usage error (4) names the option; a store out of reach is exit 3; no traceback."""
    done = run_pytest(folder, *args)
    output = done.stdout + done.stderr
    assert done.returncode == code, output
    assert says in output
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    assert not (folder / "store").exists()


def test_an_interrupted_session_cancels_its_run(folder: Path, tmp_path: Path) -> None:
    (folder / "test_sample.py").write_text(
        "def test_one():\n    pass\n\ndef test_two():\n    raise KeyboardInterrupt\n"
    )
    db = f"sqlite:///{tmp_path}/store/"
    done = run_pytest(folder, "--evaledger", db)
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout + done.stderr
    with evaledger.open(db) as reader:
        (run,) = reader.runs()
        report = reader.show(run.run_id)
    assert (run.status, run.reason) == (
        "canceled",
        "KeyboardInterrupt: the test session was interrupted",
    )
    assert [c.test_case_key for c in report.cases] == ["test_sample.py::test_one"]


OUTCOMES = """
import pytest

def test_passes_1():
    pass

def test_passes_2():
    pass

def test_passes_3():
    pass

def test_fails():
    assert 2 + 2 == 5, "arithmetic"

@pytest.fixture
def broken():
    raise RuntimeError("setup exploded")

def test_errors(broken):
    pass

@pytest.mark.skip(reason="no network here")
def test_skipped():
    pass

@pytest.mark.xfail(reason="issue 12: rounding")
def test_xfailed():
    assert 0.1 + 0.2 == 0.3
"""


@pytest.mark.slow
def test_pytest_outcomes_count_as_pytest_counts_them(folder: Path, tmp_path: Path) -> None:
    """3 passed, 1 failed, 1 error, 1 skipped, 1 xfailed: a pass rate of 3/5, the rest apart."""
    (folder / "test_sample.py").write_text(OUTCOMES)
    db = f"sqlite:///{tmp_path}/store/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    done = run_pytest(folder, "--evaledger", db, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 3 passed, 1 skipped, 1 xfailed, 1 error" in done.stdout
    with evaledger.open(db) as reader:
        (run,) = reader.runs()
        report = reader.show(run.run_id)
    agg = report.aggregate
    assert (agg.passed_count, agg.total_executions, agg.pass_rate) == (3, 5, 3 / 5)
    assert (agg.failed_count, agg.error_count, agg.canceled_count) == (1, 1, 0)
    assert agg.skipped_count == 2
    assert agg.unique_test_case_count == 7
    statuses = {c.test_case_key.split("::")[1]: c.status.value for c in report.cases}
    assert statuses["test_skipped"] == statuses["test_xfailed"] == "skipped"
    # Recorded facts, not a display trick: the event says what pytest reported, and why.
    services = build_services(Settings(db=db))
    try:
        skips = {
            c.test_case_key.split("::")[1]: [
                e for e in services.ledger.events_of(c.case_id) if isinstance(e, ExecutionSkipped)
            ]
            for c in report.cases
        }
    finally:
        services.close()
    assert [(e.outcome, e.reason) for e in skips["test_skipped"]] == [
        ("skipped", "no network here")
    ]
    assert [(e.outcome, e.reason) for e in skips["test_xfailed"]] == [
        ("xfailed", "issue 12: rounding")
    ]
    assert all(not skips[k] for k in skips if k not in ("test_skipped", "test_xfailed"))
    # `evaledger show` says it apart from the executions.
    shown = subprocess.run(
        [sys.executable, "-m", "evaledger", "show", "--db", db, str(run.run_id)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "skipped_count" in shown.stdout and "2 skipped" in shown.stdout


@pytest.mark.slow
def test_an_xpass_is_not_an_execution_and_a_strict_xpass_fails(
    folder: Path, tmp_path: Path
) -> None:
    (folder / "test_sample.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.xfail(reason='was broken')\ndef test_xpassed():\n    pass\n\n"
        "@pytest.mark.xfail(reason='must fail', strict=True)\ndef test_strict():\n    pass\n"
    )
    db = f"sqlite:///{tmp_path}/store/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    done = run_pytest(folder, "--evaledger", db, env=env)
    assert "1 failed, 1 xpassed" in done.stdout, done.stdout
    with evaledger.open(db) as reader:
        (run,) = reader.runs()
        report = reader.show(run.run_id)
    statuses = {c.test_case_key.split("::")[1]: c.status.value for c in report.cases}
    assert statuses == {"test_xpassed": "skipped", "test_strict": "failed"}
    agg = report.aggregate
    assert (agg.total_executions, agg.failed_count, agg.skipped_count) == (1, 1, 1)


def readme_fixture_example() -> str:
    """The README's `evaledger_case` example, as written."""
    text = (Path(__file__).parents[2] / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    (example,) = [b for b in blocks if "def test_" in b and "evaledger_case" in b]
    return str(example)


@pytest.mark.slow
def test_the_readme_fixture_example_records_its_turns_and_score(
    folder: Path, tmp_path: Path
) -> None:
    (folder / "test_sample.py").write_text(readme_fixture_example())
    db = f"sqlite:///{tmp_path}/store/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    done = run_pytest(folder, "--evaledger", db, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    with evaledger.open(db) as reader:
        (run,) = reader.runs()
        (case,) = reader.show(run.run_id).cases
    assert (case.test_case_key, case.status.value) == (
        "test_sample.py::test_refund_policy",
        "passed",
    )
    assert case.named_scores == {"mentions_30_days": 1.0}
    services = build_services(Settings(db=db))
    try:
        (transcript,) = [
            e for e in services.ledger.events_of(case.case_id) if isinstance(e, TranscriptRecorded)
        ]
    finally:
        services.close()
    # The turns as given, then the test's duration (no turn of the test's carried a latency).
    assert [(t.role, t.content) for t in transcript.turns] == [
        ("user", "Can I get a refund?"),
        ("assistant", "Yes, within 30 days."),
        ("assistant", None),
    ]
    assert transcript.turns[-1].latency_ms is not None
    # Without --evaledger the same file runs as a plain test.
    plain = run_pytest(folder, env=env)
    assert plain.returncode == 0 and "1 passed" in plain.stdout, plain.stdout


def test_the_session_records_the_dataset_version_it_ran(folder: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    db = f"sqlite:///{tmp_path}/store/"
    services = build_services(Settings(db=db))
    try:
        datasets.create_dataset(services, "default", "qa", None, Context(actor="ann"))
        items = [DatasetItem(key="test_sample.py::test_scored")]
        digest = datasets.add_dataset_version(
            services, "default", "qa", items, None, Context(actor="ann")
        ).content_hash
    finally:
        services.close()
    bad = run_pytest(folder, "--evaledger", db, "--evaledger-dataset", "qa@x", env=env)
    assert bad.returncode == 4
    assert "--evaledger-dataset" in bad.stderr and "NAME@VERSION" in bad.stderr
    done = run_pytest(folder, "--evaledger", db, "--evaledger-dataset", "qa@1", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    with evaledger.open(db=db) as reader:
        (run,) = reader.runs()
    services = build_services(Settings(db=db))
    try:
        ref = services.ledger.run_dataset(run.run_id)
    finally:
        services.close()
    assert ref is not None and (ref.name, ref.version, ref.hash) == ("qa", 1, digest)
