"""Imported runs record the dataset they ran (issue 35): the source's name and its sample ids.

Each expectation is read from the fixture file itself (its task names, document ids, sample ids
or task ids), and its hash is the one helper (`domain.datasets.source_dataset`) over those ids,
which Inspect's importer uses too. Formats that name no dataset or give no ids record none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from evaledger.api.bootstrap import Services
from evaledger.application import runs
from evaledger.domain.bundle import RunBundle
from evaledger.domain.datasets import source_dataset
from evaledger.domain.events import DatasetRef
from evaledger.domain.ledger import Context
from evaledger.importers.load import open_imports
from tests.conftest import FIXTURES
from tests.helpers import event_count

CTX = Context(actor="test")
LM_EVAL = FIXTURES / "lm_eval"
OPENAI = FIXTURES / "openai_evals" / "test-match.jsonl"
TAU2 = FIXTURES / "tau2" / "mock-text.results.json"
TAU_BENCH = FIXTURES / "peers" / "tau-bench" / "gpt-4o-airline.tasks-1-12-41.json"
PROMPTFOO = FIXTURES / "peers" / "promptfoo" / "sample-export.json"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def lm_eval_dataset() -> tuple[Path, DatasetRef | None]:
    """The results JSON's tasks that have samples, and `task/doc_id` of each document."""
    results = next(LM_EVAL.glob("results_*.json"))
    time = results.name.removeprefix("results_").removesuffix(".json")
    tasks = [
        t
        for t in orjson.loads(results.read_bytes())["results"]
        if (LM_EVAL / f"samples_{t}_{time}.jsonl").is_file()
    ]
    ids = [
        f"{task}/{line['doc_id']}"
        for task in tasks
        for line in _jsonl(LM_EVAL / f"samples_{task}_{time}.jsonl")
    ]
    assert len(tasks) == 2 and ids
    return results, source_dataset(", ".join(tasks), ids)


def openai_evals_dataset() -> tuple[Path, DatasetRef | None]:
    """The eval's name (with its split) and every sample id its events name."""
    lines = _jsonl(OPENAI)
    ids = {line["sample_id"] for line in lines if "sample_id" in line}
    assert ids
    return OPENAI, source_dataset(lines[0]["spec"]["eval_name"], sorted(ids))


def tau2_dataset() -> tuple[Path, DatasetRef | None]:
    """`tau2-<domain>` and `task-<id>` of each task the run was given."""
    data = orjson.loads(TAU2.read_bytes())
    domain = data["info"]["environment_info"]["domain_name"]
    ids = [f"task-{t['id']}" for t in data["tasks"]]
    assert {f"task-{s['task_id']}" for s in data["simulations"]} <= set(ids)
    return TAU2, source_dataset(f"tau2-{domain}", ids)


@pytest.mark.parametrize(
    "expected", [lm_eval_dataset, openai_evals_dataset, tau2_dataset], ids=lambda f: f.__name__
)
def test_an_imported_run_records_its_sources_dataset(
    store_services: Services, expected: Any
) -> None:
    path, dataset = expected()
    assert dataset is not None and dataset.version is None
    (first,) = runs.import_files(store_services, [path], CTX)
    assert store_services.ledger.run_dataset(first.run.run_id) == dataset
    # The same file again is the same run: nothing written.
    before = event_count(store_services)
    (again,) = runs.import_files(store_services, [path], CTX)
    assert again.run.run_id == first.run.run_id and again.run.events == 0
    assert event_count(store_services) == before


def test_the_hash_is_that_of_the_sample_ids_whatever_their_order() -> None:
    _, dataset = openai_evals_dataset()
    lines = _jsonl(OPENAI)
    ids = [line["sample_id"] for line in reversed(lines) if "sample_id" in line]
    assert source_dataset(lines[0]["spec"]["eval_name"], ids) == dataset


@pytest.mark.parametrize("path", [TAU_BENCH, PROMPTFOO], ids=["tau-bench", "promptfoo"])
def test_a_format_with_no_dataset_name_or_ids_records_none(services: Services, path: Path) -> None:
    # tau-bench's records name no domain; promptfoo's tests have positions, not ids.
    (imported,) = runs.import_files(services, [path], CTX)
    assert services.ledger.run_dataset(imported.run.run_id) is None


@pytest.mark.parametrize(
    "expected", [lm_eval_dataset, openai_evals_dataset, tau2_dataset], ids=lambda f: f.__name__
)
def test_a_run_imported_before_it_recorded_a_dataset_is_the_same_run(
    services: Services, expected: Any
) -> None:
    path, dataset = expected()
    (opened,) = open_imports([path])
    assert opened.run.dataset == dataset
    # What this importer stored before issue 35: the same run without its dataset.
    legacy = RunBundle(
        format="evaledger.run-bundle/1",
        run=opened.run.model_copy(update={"dataset": None}),
        cases=list(opened.cases()),
    )
    stored = runs.import_run(services, legacy, CTX)
    before = event_count(services)
    (again,) = runs.import_files(services, [path], CTX)
    assert again.run.run_id == stored.run_id and again.run.events == 0
    assert event_count(services) == before
