"""Versioned datasets through the use cases, on SQLite and PostgreSQL (issue 35)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

import evaledger
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import datasets, runs, verification
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import ConflictError, NotFoundError, ValidationError
from evaledger.domain.events import DatasetCreated, DatasetItem, DatasetRef, DatasetVersionAdded
from evaledger.domain.ledger import Context
from evaledger.importers.load import open_imports
from evaledger.projections.datasets import DatasetsProjection
from tests.conftest import FIXTURES
from tests.helpers import bundle

ADMIN = Context(actor="ann")
SHOP = Context(actor="token:shop-ci", project="shop")


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _events(services: Services) -> int:
    return services.ledger.position()


def test_versions_are_content_hashed_and_identical_content_adds_none(
    store_services: Services, tmp_path: Path
) -> None:
    s = store_services
    datasets.create_dataset(s, "shop", "qa", "refund questions", SHOP)
    v1 = _write(tmp_path / "v1.jsonl", '{"key": "a", "input": "hi"}', '{"key": "b"}')
    same = _write(tmp_path / "same.jsonl", '{"key": "b"}', '{"key": "a", "input": "hi"}')
    first = datasets.add_dataset_file(s, "shop", "qa", v1, SHOP)
    assert (first.version, first.items, first.created) == (1, 2, True)
    before = _events(s)
    again = datasets.add_dataset_file(s, "shop", "qa", same, SHOP)
    assert (again.version, again.content_hash, again.created) == (1, first.content_hash, False)
    assert _events(s) == before

    edited = _write(tmp_path / "v2.csv", "key,input", "a,hello", "b,")
    second = datasets.add_dataset_file(s, "shop", "qa", edited, SHOP)
    assert (second.version, second.created) == (2, True)
    assert second.content_hash != first.content_hash
    removed = _write(tmp_path / "v3.yaml", "- key: a", "  input: hello")
    third = datasets.add_dataset_file(s, "shop", "qa", removed, SHOP)
    assert third.version == 3

    s.sync()
    (row,) = datasets.list_datasets(s, "shop", SHOP)
    assert (row.name, row.description, row.latest_version, row.item_count) == (
        "qa",
        "refund questions",
        3,
        1,
    )
    assert row.latest_hash == third.content_hash and row.created_by == "token:shop-ci"
    versions = datasets.dataset_versions(s, "shop", "qa", SHOP)
    assert [(v.version, v.source) for v in versions] == [
        (1, "v1.jsonl"),
        (2, "v2.csv"),
        (3, "v3.yaml"),
    ]

    shown = datasets.show_dataset(s, "shop", "qa@1", SHOP)
    assert [i.key for i in shown.items] == ["a", "b"] and shown.items[0].input == "hi"
    assert datasets.show_dataset(s, "shop", "qa", SHOP).version == 3

    d = datasets.diff_datasets(s, "shop", "qa@1", "qa@2", SHOP)
    assert (d.items.added, d.items.removed, d.items.changed, d.items.unchanged) == (
        (),
        (),
        ("a",),
        1,
    )
    d = datasets.diff_datasets(s, "shop", "qa@2", "qa@3", SHOP)
    assert (d.items.removed, d.items.changed) == (("b",), ())


def test_every_fact_is_an_event_with_its_author(store_services: Services) -> None:
    s = store_services
    datasets.create_dataset(s, "shop", "qa", None, SHOP)
    datasets.add_dataset_version(s, "shop", "qa", [DatasetItem(key="a")], "api", SHOP)
    dataset = s.ledger.get_dataset("shop", "qa")
    assert dataset is not None
    created, added = s.ledger.events_of(dataset.id)
    assert isinstance(created, DatasetCreated) and isinstance(added, DatasetVersionAdded)
    assert created.actor == added.actor == "token:shop-ci"
    assert (created.project, created.name, added.version, added.source) == ("shop", "qa", 1, "api")


def test_the_projection_rebuilds_to_the_same_rows(store_services: Services) -> None:
    s = store_services
    datasets.create_dataset(s, "shop", "qa", None, ADMIN)
    datasets.add_dataset_version(s, "shop", "qa", [DatasetItem(key="a")], None, ADMIN)
    datasets.add_dataset_version(s, "shop", "qa", [DatasetItem(key="b")], None, ADMIN)
    s.sync()
    before = datasets.dataset_versions(s, "shop", "qa", ADMIN)
    report = verification.check_views(s)
    assert report.ok, report
    assert report.rows >= 3
    verification.rebuild_projection(s, DatasetsProjection.name)
    s.sync()
    assert datasets.dataset_versions(s, "shop", "qa", ADMIN) == before


def test_another_projects_token_finds_no_dataset_and_writes_nothing(
    store_services: Services, tmp_path: Path
) -> None:
    s = store_services
    datasets.create_dataset(s, "shop", "qa", None, SHOP)
    datasets.add_dataset_version(s, "shop", "qa", [DatasetItem(key="a")], None, SHOP)
    s.sync()
    other = Context(actor="token:rival", project="rival")
    before = _events(s)
    file = _write(tmp_path / "x.jsonl", '{"key": "forged"}')
    for attempt in (
        lambda: datasets.add_dataset_file(s, "shop", "qa", file, other),
        lambda: datasets.add_dataset_version(s, "shop", "qa", [DatasetItem(key="f")], None, other),
        lambda: datasets.create_dataset(s, "shop", "qa2", None, other),
        lambda: datasets.show_dataset(s, "shop", "qa@1", other),
        lambda: datasets.dataset_versions(s, "shop", "qa", other),
        lambda: datasets.list_datasets(s, "shop", other),
        lambda: datasets.diff_datasets(s, "shop", "qa@1", "qa@1", other),
    ):
        with pytest.raises(NotFoundError):
            attempt()
    assert _events(s) == before
    # The same name in its own project is its own dataset.
    datasets.create_dataset(s, "rival", "qa", None, other)
    s.sync()
    assert datasets.list_datasets(s, "rival", other)[0].latest_version == 0
    assert datasets.show_dataset(s, "shop", "qa", SHOP).items[0].key == "a"


def test_refusals_name_the_problem_and_store_nothing(
    store_services: Services, tmp_path: Path
) -> None:
    s = store_services
    with pytest.raises(NotFoundError, match="create it first"):
        datasets.add_dataset_version(s, "shop", "nope", [DatasetItem(key="a")], None, ADMIN)
    assert datasets.create_dataset(s, "shop", "qa", None, ADMIN).created
    position = _events(s)
    assert not datasets.create_dataset(s, "shop", "qa", None, ADMIN).created
    assert _events(s) == position
    with pytest.raises(ConflictError, match="another description"):
        datasets.create_dataset(s, "shop", "qa", "other", ADMIN)
    for name in ("a@b", "a/b", "", "x" * 201, "tab\there"):
        with pytest.raises(ValidationError) as e:
            datasets.create_dataset(s, "shop", name, None, ADMIN)
        assert e.value.field == "name"
    before = _events(s)
    bad = _write(tmp_path / "bad.jsonl", '{"key": "a"}', '{"key": "b", "expected_outcomes": 3}')
    with pytest.raises(ValidationError) as e:
        datasets.add_dataset_file(s, "shop", "qa", bad, ADMIN)
    assert e.value.field == "expected_outcomes" and "line 2" in e.value.detail
    twice = [DatasetItem(key="a"), DatasetItem(key="a")]
    with pytest.raises(ValidationError, match="appears twice"):
        datasets.add_dataset_version(s, "shop", "qa", twice, None, ADMIN)
    with pytest.raises(ValidationError, match="at least one item"):
        datasets.add_dataset_version(s, "shop", "qa", [], None, ADMIN)
    nul = [DatasetItem(key="a", input="bad\x00byte")]
    with pytest.raises(ValidationError):
        datasets.add_dataset_version(s, "shop", "qa", nul, None, ADMIN)
    assert _events(s) == before
    s.sync()
    with pytest.raises(NotFoundError, match="has no version 1"):
        datasets.show_dataset(s, "shop", "qa@1", ADMIN)
    with pytest.raises(NotFoundError):
        datasets.show_dataset(s, "shop", "missing@1", ADMIN)


def _qa_v1(s: Services) -> str:
    datasets.create_dataset(s, "shop", "qa", None, ADMIN)
    items = [DatasetItem(key="refund-1"), DatasetItem(key="refund-2")]
    return datasets.add_dataset_version(s, "shop", "qa", items, None, ADMIN).content_hash


def test_a_run_records_the_dataset_version_it_ran_and_exports_it(store_services: Services) -> None:
    s = store_services
    digest = _qa_v1(s)
    body = bundle(key="with-dataset", project="shop", dataset={"name": "qa", "version": 1})
    run_id = runs.import_run(s, RunBundle.model_validate(body), ADMIN).run_id
    created = s.ledger.get_run(run_id).created
    assert created.dataset == DatasetRef(name="qa", version=1, hash=digest)
    exported = runs.recorded_run(s, run_id)
    assert exported is not None
    assert exported.run.dataset == DatasetRef(name="qa", version=1, hash=digest)
    # The same bundle again, or its export, is the same run (its body's digest is the resolved).
    assert runs.import_run(s, RunBundle.model_validate(body), ADMIN).run_id == run_id
    assert runs.import_run(s, exported, ADMIN).run_id == run_id
    # `name` alone is the latest version.
    latest = bundle(key="latest", project="shop", dataset={"name": "qa"})
    latest_id = runs.import_run(s, RunBundle.model_validate(latest), ADMIN).run_id
    assert s.ledger.get_run(latest_id).created.dataset == DatasetRef(
        name="qa", version=1, hash=digest
    )


def test_a_run_without_a_dataset_keeps_its_stored_bytes(store_services: Services) -> None:
    s = store_services
    run_id = runs.import_run(s, RunBundle.model_validate(bundle(key="plain")), ADMIN).run_id
    (stored, *_) = s.ledger.stored_events_of(run_id)
    assert b"dataset" not in stored.state


def test_a_run_naming_an_unknown_dataset_or_a_wrong_hash_is_refused(
    store_services: Services,
) -> None:
    s = store_services
    _qa_v1(s)
    before = _events(s)
    for ref, field in (
        ({"name": "qa", "version": 2}, "run.dataset"),
        ({"name": "nope"}, "run.dataset"),
        ({"name": "qa", "version": 1, "hash": "0" * 64}, "run.dataset.hash"),
    ):
        body = RunBundle.model_validate(bundle(key="bad", project="shop", dataset=ref))
        with pytest.raises(ValidationError) as e:
            runs.import_run(s, body, ADMIN)
        assert e.value.field == field
    # Another project's dataset of the same name is not found from this one.
    other = RunBundle.model_validate(bundle(key="x", project="rival", dataset={"name": "qa"}))
    with pytest.raises(ValidationError):
        runs.import_run(s, other, ADMIN)
    assert _events(s) == before
    # A source's own dataset (not in the ledger) is kept with the hash it gives.
    source = {"name": "gsm8k", "hash": "ab" * 32}
    body = RunBundle.model_validate(bundle(key="lm-eval", project="shop", dataset=source))
    run_id = runs.import_run(s, body, ADMIN).run_id
    assert s.ledger.get_run(run_id).created.dataset == DatasetRef(name="gsm8k", hash="ab" * 32)


def test_the_client_records_the_dataset_it_was_given(sqlite_url: str) -> None:
    s = build_services(Settings(db=sqlite_url))
    try:
        digest = _qa_v1(s)
    finally:
        s.close()
    with (
        evaledger.run(
            "qa-suite", agent="bot", key="client-1", project="shop", dataset="qa@1", db=sqlite_url
        ) as run,
        run.case("refund-1") as case,
    ):
        case.turn("assistant", "done")
    s = build_services(Settings(db=sqlite_url))
    try:
        created = s.ledger.get_run(run.id).created
    finally:
        s.close()
    assert created.dataset == DatasetRef(name="qa", version=1, hash=digest)
    with pytest.raises(ValidationError) as e:
        evaledger.run("qa-suite", agent="bot", dataset="qa@x", db=sqlite_url)
    assert e.value.field == "dataset"


def test_an_inspect_log_records_its_tasks_dataset_and_the_hash_of_its_samples(
    services: Services,
) -> None:
    path = FIXTURES / "peers" / "inspect_ai" / "eval-logs" / "log_streaming.eval"
    spec = read_eval_log(str(path), header_only=True).eval
    ids = sorted({str(s) for s in spec.dataset.sample_ids or []})
    assert ids, "the fixture's log lists its sample ids"
    reference = hashlib.sha256(
        json.dumps(
            [
                {
                    "expected_outcomes": [],
                    "input": None,
                    "key": k,
                    "label": None,
                    "metadata": {},
                    "tags": [],
                }
                for k in ids
            ],
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
    ).hexdigest()
    (opened,) = open_imports([path])
    assert opened.run.dataset == DatasetRef(name=spec.dataset.name or spec.task, hash=reference)
    run_id = runs.import_files(services, [path], ADMIN)[0].run.run_id
    assert services.ledger.run_dataset(run_id) == opened.run.dataset
