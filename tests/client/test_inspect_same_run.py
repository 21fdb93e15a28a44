"""Issue 30: a task recorded live by the Inspect hook and its log imported are the same run.

The same Inspect tasks (named reducers, a dict scorer, grouped and random metrics beside a
second scorer, an errored sample, epochs) run once with the hook and are imported once from
their logs: the runs are equal case for case and event for event, each source metric equals
Inspect's own figure (read with inspect_ai's log reader), and importing the log over the live
run adds what only the log has (its status, Inspect's figures) as one event. On SQLite and
PostgreSQL.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from evaledger.api.bootstrap import Settings, build_services
from tests.client.conftest import run_cli, run_inspect
from tests.conftest import drop_pg_database, fresh_pg_database

TASKS = """
import sys
from collections import Counter
from inspect_ai import Epochs, Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import (
    Score, accuracy, bootstrap_stderr, grouped, includes, match, mean, scorer, stderr,
)
from inspect_ai.solver import generate, solver

# Per sample, the replies of its successive epochs (samples run one at a time).
REPLIES = {"s0": "yes yes no yes", "s1": "no no yes no", "s2": "yes no no no", "s3": "yes"}
calls = Counter()

def reply(messages, tools, tool_choice, config):
    sample = messages[-1].text
    words = REPLIES[sample].split()
    text = words[calls[sample] % len(words)]
    calls[sample] += 1
    # With its usage given, the mock model needs no tokenizer download.
    out = ModelOutput.from_content(model="mockllm/model", content=text)
    out.usage = ModelUsage(input_tokens=7, output_tokens=3, total_tokens=10)
    return out

CATEGORIES = {"s0": "math", "s1": "math", "s2": "science", "s3": "science"}
LEVELS = {"s0": 1, "s1": 2, "s2": 2, "s3": 2}

def dataset():
    return [
        Sample(id=s, input=s, target="yes", metadata={"category": c, "level": LEVELS[s]})
        for s, c in CATEGORIES.items()
    ]

@scorer(metrics={"correct": [mean()], "short": [mean()]})
def checks():
    async def score(state, target):
        a = state.output.completion
        return Score(value={"correct": float(a == "yes"), "short": float(len(a) < 3)}, answer=a)
    return score

@scorer(metrics=[grouped(accuracy(), "category"), accuracy(), stderr(), bootstrap_stderr()])
def by_category():
    async def score(state, target):
        return Score(value="C" if state.output.completion == "yes" else "I")
    return score

@scorer(metrics=[
    grouped(mean(), "category", all="groups", all_label="overall", name_template="{group_name}_mean"),
    grouped(stderr(), "level", all=False),
])
def by_level():
    async def score(state, target):
        return Score(value=float(state.output.completion == "yes"))
    return score

@solver
def flaky():
    async def solve(state, generate):
        if state.sample_id == "s3":
            raise RuntimeError("tool backend unavailable")
        return await generate(state)
    return solve

def task(name, **kwargs):
    model = get_model("mockllm/model", custom_outputs=reply)
    return Task(name=name, dataset=dataset(), solver=generate(), model=model, **kwargs)

TASKS = {
    "mode": lambda: task("mode", scorer=match(), epochs=Epochs(2, "mode")),
    "reducers": lambda: task(
        "reducers", scorer=match(), epochs=Epochs(4, ["max", "at_least_3", "pass_at_2", "mode"])
    ),
    "dict": lambda: task("dict", scorer=checks(), epochs=2),
    "grouped": lambda: task("grouped", scorer=[by_category(), includes()]),
    "grouped_options": lambda: task("grouped_options", scorer=[by_level()], epochs=Epochs(2, "max")),
    "errors": lambda: Task(
        name="errors",
        dataset=dataset(),
        solver=[flaky(), generate()],
        scorer=match(),
        epochs=2,
        model=get_model("mockllm/model", custom_outputs=reply),
    ),
}
(log,) = eval(
    TASKS[sys.argv[2]](), log_dir=sys.argv[1], display="none", max_samples=1, fail_on_error=False
)
print(log.location)
"""

NAMES = ["mode", "reducers", "dict", "grouped", "grouped_options", "errors"]
GROUPS = {
    "grouped": {"by_category/math", "by_category/science", "by_category/all"},
    "grouped_options": {
        "by_level (max)/math_mean",
        "by_level (max)/science_mean",
        "by_level (max)/overall",
        "by_level (max)/1",
        "by_level (max)/2",
    },
}
"""Each grouped task's group figures, as Inspect keys them (its log has the same keys)."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store the hook records into."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/live/"
        return
    url, name = fresh_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


def inspect_figures(log: str) -> dict[str, float] | None:
    """Inspect's own `SCORER/METRIC` figures, keyed as the ledger names its scorers.

    None when the log has no results: inspect_ai 0.3.285 writes none for the `errors` task
    (a sample erroring under `fail_on_error=False`, with epochs), though its status is success.
    """
    from inspect_ai.log import read_eval_log

    from evaledger.importers.inspect import reducer_views, shown_name

    header = read_eval_log(log, header_only=True)
    views = set(reducer_views(header.eval.config.epochs_reducer))
    if header.results is None:
        return None
    return {
        f"{shown_name(s.name, s.reducer if s.reducer in views else None)}/{k}": m.value
        for s in header.results.scores
        for k, m in s.metrics.items()
        if math.isfinite(m.value)
    }


def recorded(db: str, run_id: str) -> dict[str, Any]:
    """The run's show payload and every case's events (their facts: who, when and the chain left out)."""
    from evaledger.api.cli.runs import show_payload

    services = build_services(Settings(db=db))
    try:
        services.sync()
        payload = show_payload(services, UUID(run_id), None, 1000)
        events = {
            (c["test_case_key"], c["repetition"]): [
                (
                    type(e).__name__,
                    e.model_dump(exclude={"timestamp", "prev_hash", "actor", "idempotency_key"}),
                )
                for e in services.ledger.events_of(UUID(c["case_id"]))
            ]
            for c in payload["cases"]
        }
        return {"payload": payload, "events": events}
    finally:
        services.close()


def import_json(log: str, db: str) -> dict[str, Any]:
    done = run_cli("import", log, "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)["imported"]
    return dict(result)


def assert_an_older_import_stays_the_same_run(log: str, tmp_path: Path) -> None:
    """A log imported before cases kept their group tags re-imports as the same cases; the run's
    group figures stay the source's, "not recomputed" (its cases name no group)."""
    from evaledger.domain.bundle import RunBundle
    from evaledger.domain.ledger import Context
    from evaledger.importers.inspect import open_inspect

    db = f"sqlite:///{tmp_path}/older/"
    peer = open_inspect(Path(log))
    cases = list(peer.cases())
    assert all(c.legacy is not None and not c.legacy.test_case.tags for c in cases)
    older = RunBundle(
        format="evaledger.run-bundle/1", run=peer.run, cases=[c.legacy or c for c in cases]
    )
    services = build_services(Settings(db=db))
    try:
        run_id = str(services.ledger.import_bundle(older, Context(actor="older")).run_id)
    finally:
        services.close()
    result = import_json(log, db)
    assert (result["run_id"], result["new_cases"]) == (run_id, 0)
    aggregate = recorded(db, run_id)["payload"]["aggregate"]
    groups = {k for k in aggregate["scorer_metrics_mismatched"] if not k.endswith("stderr")}
    assert groups and not groups & aggregate.get("scorer_metrics", {}).keys()
    shown = run_cli("show", run_id, "--db", db)
    assert all(f"{g} " in shown.stdout for g in groups)
    assert shown.stdout.count("not recomputed: a case has no group") >= len(groups)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_task_recorded_live_is_the_run_its_log_imports(
    name: str, store: str, tmp_path: Path
) -> None:
    done = run_inspect(TASKS, tmp_path, {"EVALEDGER_DB": store}, name)
    assert done.returncode == 0, done.stdout + done.stderr
    log = done.stdout.strip().splitlines()[-1]
    imported_db = f"sqlite:///{tmp_path}/imported/"
    run_id = import_json(log, imported_db)["run_id"]
    live, imported = recorded(store, run_id), recorded(imported_db, run_id)

    # Case for case and event for event, the same facts.
    assert live["events"].keys() == imported["events"].keys()
    assert live["events"] == imported["events"]
    live_agg, imported_agg = live["payload"]["aggregate"], imported["payload"]["aggregate"]
    for field in ("pass_rate", "passed_count", "failed_count", "scorer_metrics", "pass_hat_k"):
        assert live_agg.get(field) == imported_agg.get(field), field
    assert (
        live["payload"]["run"]["spec"]["score_gates"]
        == (imported["payload"]["run"]["spec"]["score_gates"])
    )

    # Each source metric the ledger recomputes is Inspect's own figure.
    figures = inspect_figures(log)
    got = imported_agg.get("scorer_metrics", {})
    assert (figures is None) == (name == "errors")
    if figures is not None:
        assert got, "no source metric recomputed"
        for key, value in got.items():
            assert value == pytest.approx(figures[key], rel=1e-12, abs=1e-12), key
        # Every figure Inspect reports is reproduced, grouped() ones too (each group and
        # `all`), except a random one: none is shown as the source's alone.
        assert {k for k in figures if not k.endswith("/bootstrap_stderr")} <= got.keys()
        assert not imported_agg.get("scorer_metrics_mismatched")
        assert not live_agg.get("scorer_metrics_mismatched")
        shown = run_cli("show", run_id, "--db", imported_db)
        assert shown.returncode == 0, shown.stderr
        not_recomputed = [line for line in shown.stdout.splitlines() if "not recomputed" in line]
        assert all("/bootstrap_stderr " in line for line in not_recomputed), not_recomputed
    if name.startswith("grouped"):
        groups = {k for k in got if k.rpartition("/")[2] not in ("accuracy", "stderr", "mean")}
        assert groups == GROUPS[name], groups
        assert_an_older_import_stays_the_same_run(log, tmp_path)

    # The log imported over the live run is accepted: the same run and cases; what only the
    # log has (its status, Inspect's figures) is added as one event, and then the two agree.
    assert "inspect.status" not in live["payload"]["run"]["labels"]
    result = import_json(log, store)
    assert (result["run_id"], result["new_cases"], result["events"]) == (run_id, 0, 1)
    final = recorded(store, run_id)
    assert final["events"] == imported["events"]
    for part in ("labels", "spec"):
        assert final["payload"]["run"][part] == imported["payload"]["run"][part], part
    assert final["payload"]["aggregate"] == imported_agg
    assert import_json(log, store)["events"] == 0
