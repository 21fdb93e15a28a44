"""The live Inspect hook: a task run with the mock model fills the ledger as samples end; its
log imported afterwards adds no case, only what the log alone has."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import evaledger
from tests.client.conftest import Target, run_cli, run_inspect

EVAL = """
import sys
import time
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

def reply(text):
    # With its usage given, the mock model needs no tokenizer download.
    out = ModelOutput.from_content(model="mockllm/model", content=text)
    out.usage = ModelUsage(input_tokens=7, output_tokens=3, total_tokens=10)
    return out

task = Task(
    name="hello",
    dataset=[
        Sample(id="a", input="Say hello", target="hello"),
        Sample(id="b", input="Say bye", target="nope"),
    ],
    solver=generate(),
    scorer=includes(),
)
outputs = [reply("hello there"), reply("bye"), reply("hello"), reply("ciao")]
model = get_model("mockllm/model", custom_outputs=outputs)
(log,) = eval(task, model=model, epochs=2, log_dir=sys.argv[1], display="none")
print(log.location)
"""


@pytest.mark.slow
def test_a_task_recorded_live_then_imported_adds_only_the_logs_own_facts(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    done = run_inspect(EVAL, tmp_path, {"EVALEDGER_DB": db})
    assert done.returncode == 0, done.stdout + done.stderr
    log = done.stdout.strip().splitlines()[-1]
    with evaledger.open(db) as reader:
        (run,) = reader.runs()
        report = reader.show(run.run_id)
    assert (run.status, run.suite["name"], run.agent["name"]) == (
        "completed",
        "hello",
        "mockllm/model",
    )
    assert sorted((c.test_case_key, c.repetition, c.passed) for c in report.cases) == [
        ("a", 0, True),
        ("a", 1, True),
        ("b", 0, False),
        ("b", 1, False),
    ]
    imported = run_cli("import", log, "--db", db, "--json")
    assert imported.returncode == 0, imported.stderr
    (result,) = json.loads(imported.stdout)["imported"]
    # Session 7: the same run and cases; the log's status and Inspect's figures, which only
    # the log has, are added as one event (was: nothing written).
    assert (result["run_id"], result["cases"], result["new_cases"], result["events"]) == (
        str(run.run_id),
        4,
        0,
        1,
    )
    with evaledger.open(db) as reader:
        (after,) = reader.runs()
    assert after.labels["inspect.status"] == "success"


# A task for the real `inspect eval` command: samples run one at a time, and each sample's scorer
# reads the ledger (through the client, as configured by the environment) before scoring, so a
# later sample sees what the hook recorded for the earlier ones while the task is still running.
LIVE_TASK = """
import json
import os
import signal
import sqlite3
from uuid import UUID

import evaledger
from evaledger.api.bootstrap import Settings, build_services
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate


def reply(messages, tools, tool_choice, config):
    # With its usage given, the mock model needs no tokenizer download.
    out = ModelOutput.from_content(model="mockllm/model", content="echo " + messages[-1].text)
    out.usage = ModelUsage(input_tokens=7, output_tokens=3, total_tokens=10)
    return out


def event_types(case_id):
    services = build_services(Settings(db=os.environ["PEEK_STORE"]))
    try:
        return [type(e).__name__ for e in services.ledger.events_of(UUID(case_id))]
    finally:
        services.close()


@scorer(metrics=[accuracy()])
def peek():
    async def score(state: TaskState, target: Target) -> Score:
        with evaledger.open() as reader:
            runs = [
                {
                    "status": r.status,
                    "cases": [
                        {
                            "key": c.test_case_key,
                            "passed": c.passed,
                            "named_scores": c.named_scores,
                            "tokens": [c.prompt_tokens, c.completion_tokens],
                            "events": event_types(str(c.case_id)),
                        }
                        for c in reader.show(r.run_id).cases
                    ],
                }
                for r in reader.runs()
            ]
        with open(os.environ["PEEK_FILE"], "a") as f:
            f.write(json.dumps({"sample": state.sample_id, "runs": runs}) + "\\n")
        return Score(value="C" if target.text in state.output.completion else "I")

    return score


@task
def live():
    return Task(
        dataset=[Sample(id=s, input=s, target=s) for s in ("one", "two", "three")],
        solver=generate(),
        scorer=peek(),
        model=get_model("mockllm/model", custom_outputs=reply),
    )
"""


@pytest.mark.slow
def test_inspect_eval_cli_fills_the_ledger_live(target: Target, tmp_path: Path) -> None:
    """`inspect eval` with the hook: each sample's case is in the ledger, with its scores,
    transcript and usage, before the next sample is scored and while the run is still open."""
    (tmp_path / "live_task.py").write_text(LIVE_TASK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    if "url" in target.kwargs:
        env["EVALEDGER_URL"] = target.kwargs["url"]
        env["EVALEDGER_TOKEN"] = target.kwargs["token"]
    else:
        env["EVALEDGER_DB"] = target.kwargs["db"]
    env["PEEK_STORE"] = target.db
    env["PEEK_FILE"] = str(tmp_path / "peek.jsonl")
    inspect = Path(sys.executable).parent / "inspect"
    done = subprocess.run(
        [
            *(str(inspect), "eval", "live_task.py", "--max-samples", "1"),
            *("--log-dir", str(tmp_path / "logs"), "--display", "none"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "evaledger/evaledger" in done.stdout + done.stderr  # the hook was enabled by the env
    peeks = [json.loads(line) for line in (tmp_path / "peek.jsonl").read_text().splitlines()]
    assert [p["sample"] for p in peeks] == ["one", "two", "three"]
    recorded = {
        "key": "one",
        "passed": True,
        "named_scores": {"peek": 1.0},
        "tokens": [7, 3],
        "events": ["CaseOpened", "TranscriptRecorded", "NamedScoresRecorded"],
    }
    seen = [[(r["status"], [c["key"] for c in r["cases"]]) for r in p["runs"]] for p in peeks]
    assert seen == [
        [("running", [])],
        [("running", ["one"])],
        [("running", ["one", "two"])],
    ]
    assert peeks[1]["runs"][0]["cases"][0] == recorded
    assert peeks[2]["runs"][0]["cases"][1] == {**recorded, "key": "two"}
    with evaledger.open(**target.kwargs) as reader:
        (run,) = reader.runs()
        report = reader.show(run.run_id)
    assert run.status == "completed"
    assert [c.test_case_key for c in report.cases] == ["one", "two", "three"]


def test_the_hook_is_registered_and_inert_without_a_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import entry_points

    from evaledger.client.inspect_hook import EvaledgerHooks

    (entry,) = [e for e in entry_points(group="inspect_ai") if e.name == "evaledger"]
    assert entry.value == "evaledger.client.inspect_hook"
    for name in ("EVALEDGER_DB", "EVALEDGER_URL"):
        monkeypatch.delenv(name, raising=False)
    assert EvaledgerHooks().enabled() is False
    monkeypatch.setenv("EVALEDGER_URL", "http://127.0.0.1:9")
    assert EvaledgerHooks().enabled() is True
    monkeypatch.delenv("EVALEDGER_URL")
    monkeypatch.setenv("EVALEDGER_DB", "sqlite:///nowhere/")
    assert EvaledgerHooks().enabled() is True


# A task whose second sample raises: under Inspect's default `fail_on_error` the task errors,
# and Inspect calls `on_run_end` but never `on_task_end` for it.
FAILING_EVAL = """
import sys
import time
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import solver

def reply(text):
    out = ModelOutput.from_content(model="mockllm/model", content=text)
    out.usage = ModelUsage(input_tokens=7, output_tokens=3, total_tokens=10)
    return out

@solver
def flaky():
    async def solve(state, generate):
        if state.sample_id == "b":
            raise RuntimeError("solver blew up")
        return await generate(state)
    return solve

task = Task(
    name="flaky",
    dataset=[Sample(id="a", input="Say hello", target="hello"), Sample(id="b", input="x", target="y")],
    solver=flaky(),
    scorer=includes(),
)
model = get_model("mockllm/model", custom_outputs=[reply("hello there"), reply("bye")])
(log,) = eval(task, model=model, log_dir=sys.argv[1], display="none", max_samples=1)
print(log.status)
"""


@pytest.mark.slow
def test_a_task_that_errors_leaves_no_run_running(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    done = run_inspect(FAILING_EVAL, tmp_path, {"EVALEDGER_DB": db})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "error"
    with evaledger.open(db) as reader:
        (run,) = reader.runs()
        report = reader.show(run.run_id)
    # Closed as `evaledger import` reads the errored log: failed, with Inspect's error message.
    assert (run.status, run.reason) == ("failed", "RuntimeError('solver blew up')")
    assert {c.test_case_key: c.status for c in report.cases} == {"a": "passed", "b": "errored"}
    # The errored log is the same run: importing it is accepted and adds no case (session 7:
    # the hook no longer writes a successful log's `inspect.status` at start).
    (log,) = (tmp_path / "logs").glob("*.eval")
    imported = run_cli("import", str(log), "--db", db, "--json")
    assert imported.returncode == 0, imported.stderr
    (result,) = json.loads(imported.stdout)["imported"]
    # The same run and cases; the log's status label is added (one event).
    assert (result["run_id"], result["new_cases"], result["events"]) == (str(run.run_id), 0, 1)


SLOW_EVAL = (
    FAILING_EVAL.replace(
        'raise RuntimeError("solver blew up")', "import asyncio; await asyncio.sleep(60)"
    )
    .replace("(log,) = eval(", "logs = eval(")
    .replace("print(log.status)", 'print(logs[0].status if logs else "interrupted")')
    # Ctrl-C raises KeyboardInterrupt, as in a terminal, even when the tests run as a shell's
    # background job (started with SIGINT ignored, which a child inherits).
    .replace(
        "import sys\n",
        "import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n",
        1,
    )
)


@pytest.mark.slow
def test_a_task_interrupted_by_ctrl_c_cancels_its_run(tmp_path: Path) -> None:
    """Ctrl-C: Inspect ends its run with no log and no exception; the run is canceled, as the
    importer reads the cancelled log, and the samples that ended are kept."""
    db = f"sqlite:///{tmp_path}/store/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    env["EVALEDGER_DB"] = db
    script = tmp_path / "run_eval.py"
    assert "signal.default_int_handler" in SLOW_EVAL
    script.write_text(SLOW_EVAL)
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "logs")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not case_recorded(tmp_path / "store" / "events.sqlite"):
            assert process.poll() is None and time.monotonic() < deadline, process.stdout
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert output.strip().splitlines()[-1] == "interrupted", output
    from inspect_ai.log import read_eval_log

    (log,) = (tmp_path / "logs").glob("*.eval")
    assert read_eval_log(str(log), header_only=True).status == "cancelled"
    with evaledger.open(db) as reader:
        (run,) = reader.runs()
        report = reader.show(run.run_id)
    assert (run.status, run.reason) == ("canceled", "cancelled in Inspect")
    assert report.cases[0].test_case_key == "a"
    imported = run_cli("import", str(log), "--db", db, "--json")
    assert imported.returncode == 0, imported.stderr
    (result,) = json.loads(imported.stdout)["imported"]
    # The same run and cases; the log's status label is added (one event).
    assert (result["run_id"], result["new_cases"], result["events"]) == (str(run.run_id), 0, 1)


def case_recorded(events: Path) -> bool:
    """Whether a case is in the store yet (read-only, straight from the event table)."""
    if not events.exists():
        return False
    conn = sqlite3.connect(f"file:{events}?mode=ro", uri=True)
    try:
        found = conn.execute(
            "SELECT 1 FROM stored_events WHERE topic = 'evaledger.case.opened/v1' LIMIT 1"
        ).fetchone()
    except sqlite3.OperationalError:  # the table is not created yet
        return False
    finally:
        conn.close()
    return found is not None
