"""The live Inspect hook: a task run with the mock model fills the ledger as samples end; its
log imported afterwards writes nothing new."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import evaledger
from tests.client.conftest import run_cli

EVAL = """
import sys
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
def test_a_task_recorded_live_then_imported_writes_nothing_new(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    env["EVALEDGER_DB"] = db
    script = tmp_path / "run_eval.py"
    script.write_text(EVAL)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "logs")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
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
    assert (result["run_id"], result["cases"], result["new_cases"], result["events"]) == (
        str(run.run_id),
        4,
        0,
        0,
    )
