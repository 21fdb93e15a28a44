"""The Dataset aggregate: a named, versioned set of items of one project (DESIGN §18).

Each version is immutable and named by its content hash: the sha256 of the canonical JSON of
its items sorted by key (`content_hash`). The same items give the same hash whatever their order
in the file; adding content identical to the latest version adds no version; an item edited,
added or removed makes a new one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID, uuid5

import orjson

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.errors import ConflictError, ValidationError
from evaledger.domain.events.base import DomainEvent
from evaledger.domain.events.dataset import (
    DatasetCreated,
    DatasetItem,
    DatasetRef,
    DatasetVersionAdded,
)

MAX_DATASET_ITEMS = 100_000
"""Items in one version (a version is one event: its size is bounded by this and the file's)."""


def dataset_id_for(project: str, name: str) -> UUID:
    """Id of the Dataset aggregate named `name` in `project` (tenants never share)."""
    return uuid5(NAMESPACE, f"dataset\x1f{project}\x1f{name}")


def sorted_items(items: Sequence[DatasetItem]) -> list[DatasetItem]:
    """The items in key order; a key given twice is refused naming it."""
    seen: set[str] = set()
    for item in items:
        if item.key in seen:
            raise ValidationError(f"item key {item.key!r} appears twice", field="key")
        seen.add(item.key)
    if len(items) > MAX_DATASET_ITEMS:
        raise ValidationError(f"more than {MAX_DATASET_ITEMS} items", field="items")
    return sorted(items, key=lambda i: i.key)


def canonical_item(item: DatasetItem) -> bytes:
    """One item as canonical JSON: every field (defaults included), keys sorted."""
    return orjson.dumps(item.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)


def content_hash(items: Sequence[DatasetItem]) -> str:
    """sha256 (hex) of the canonical JSON array of the items sorted by key."""
    digest = hashlib.sha256(b"[")
    for n, item in enumerate(sorted_items(items)):
        if n:
            digest.update(b",")
        digest.update(canonical_item(item))
    digest.update(b"]")
    return digest.hexdigest()


class Dataset(Aggregate):
    """A project's named dataset and its versions (each one whole)."""

    created: DatasetCreated | None
    versions: list[DatasetVersionAdded]

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.created = None
        self.versions = []

    def create(self, project: str, name: str, description: str | None, meta: Meta) -> bool:
        """Record the dataset's creation (once): False when it exists with this description.

        Created again with another description: a conflict (409), nothing changes.
        """
        if self.created is not None:
            if self.created.description == description:
                return False
            raise ConflictError(f"dataset {name!r} already exists with another description")
        self._trigger(DatasetCreated, meta, project=project, name=name, description=description)
        return True

    def add_version(
        self, items: Sequence[DatasetItem], source: str | None, meta: Meta
    ) -> tuple[DatasetVersionAdded, bool]:
        """Add a version of these items; (the version, whether it is new).

        Content identical to the latest version adds nothing: that version is returned.
        """
        if self.created is None:
            raise ConflictError("a dataset must be created before a version is added")
        ordered = sorted_items(items)
        if not ordered:
            raise ValidationError("a dataset version needs at least one item", field="items")
        digest = content_hash(ordered)
        if self.versions and self.versions[-1].content_hash == digest:
            return self.versions[-1], False
        event = self._trigger(
            DatasetVersionAdded,
            meta,
            version=len(self.versions) + 1,
            content_hash=digest,
            items=ordered,
            source=source,
        )
        return event, True

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, DatasetCreated):
            self.created = event
        elif isinstance(event, DatasetVersionAdded):
            self.versions.append(event)


@dataclass(frozen=True)
class ItemsDiff:
    """What changed from one version's items to another's, by key."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: int

    @property
    def differing(self) -> tuple[str, ...]:
        """Every key whose item is not the same in both (sorted)."""
        return tuple(sorted({*self.added, *self.removed, *self.changed}))


def diff_items(old: Sequence[DatasetItem], new: Sequence[DatasetItem]) -> ItemsDiff:
    """Items added, removed and changed (any field: its canonical JSON differs) by key."""
    before = {i.key: canonical_item(i) for i in old}
    after = {i.key: canonical_item(i) for i in new}
    common = before.keys() & after.keys()
    changed = sorted(k for k in common if before[k] != after[k])
    return ItemsDiff(
        added=tuple(sorted(after.keys() - before.keys())),
        removed=tuple(sorted(before.keys() - after.keys())),
        changed=tuple(changed),
        unchanged=len(common) - len(changed),
    )


def source_dataset(name: str, sample_ids: Sequence[object]) -> DatasetRef | None:
    """The reference of a source's own dataset (an Inspect task's, an lm-eval task's).

    Its hash is the content hash of items holding only the sample ids as keys: the same
    samples give the same hash whichever tool recorded them. None without sample ids.
    """
    keys = sorted({str(s) for s in sample_ids})
    if not keys or not name:
        return None
    return DatasetRef(name=name[:200], hash=content_hash([DatasetItem(key=k) for k in keys]))


def parse_ref(text: str) -> tuple[str, int | None]:
    """`NAME@V` (or `NAME@vV`) → (name, version); `NAME` alone → (name, None: the latest)."""
    name, sep, version = text.rpartition("@")
    if not sep:
        return text, None
    digits = version[1:] if version[:1] in ("v", "V") else version
    if not name or not digits.isdigit() or int(digits) < 1 or len(digits) > 9:
        raise ValidationError(
            f"dataset {text!r}: expected NAME@VERSION (a version number from 1)", field="dataset"
        )
    return name, int(digits)
