"""Versioned datasets through the use cases, on SQLite and PostgreSQL (issue 35)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaledger.api.bootstrap import Services
from evaledger.application import datasets, verification
from evaledger.domain.errors import ConflictError, NotFoundError, ValidationError
from evaledger.domain.events import DatasetCreated, DatasetItem, DatasetVersionAdded
from evaledger.domain.ledger import Context
from evaledger.projections.datasets import DatasetsProjection

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
