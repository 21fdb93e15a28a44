"""Use cases of versioned datasets (DESIGN §18): create, add a version, list, show, diff.

Writes go through the ledger's dataset commands; reads through the datasets projection
(`projections/datasets.py`), after a sync to the write they follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evaledger.application.ports import Services
from evaledger.domain.dataset_commands import VersionWritten
from evaledger.domain.dataset_files import read_items
from evaledger.domain.datasets import ItemsDiff, diff_items, parse_ref
from evaledger.domain.errors import NotFoundError
from evaledger.domain.events import DatasetItem, DatasetRef
from evaledger.domain.ledger import Context
from evaledger.projections import datasets as reads
from evaledger.projections.datasets import DatasetRow, VersionRow


@dataclass(frozen=True)
class DatasetCreatedResult:
    """A created dataset."""

    project: str
    name: str
    position: int
    created: bool
    """False: it existed already with this description (nothing written)."""


@dataclass(frozen=True)
class DatasetDiff:
    """Two versions of a dataset and the keys of the items that differ."""

    name: str
    old: VersionRow
    new: VersionRow
    items: ItemsDiff


def create_dataset(
    services: Services, project: str, name: str, description: str | None, ctx: Context
) -> DatasetCreatedResult:
    """Create a named dataset (again with the same description: nothing; another: 409)."""
    written, created = services.ledger.create_dataset(project, name, description, ctx)
    return DatasetCreatedResult(project, name, written.position, created)


def add_dataset_version(
    services: Services,
    project: str,
    name: str,
    items: Sequence[DatasetItem],
    source: str | None,
    ctx: Context,
) -> VersionWritten:
    """Add a version of these items (none when identical to the latest version)."""
    return services.ledger.add_dataset_version(project, name, items, source, ctx)


def add_dataset_file(
    services: Services, project: str, name: str, path: Path, ctx: Context
) -> VersionWritten:
    """Read a dataset file (JSONL, JSON, CSV, YAML), then add its items as a version.

    A bad file is refused naming the line and field before anything is written.
    """
    ctx.check_project(project, f"dataset {name!r}")
    items = read_items(path)
    return add_dataset_version(services, project, name, items, path.name, ctx)


def list_datasets(services: Services, project: str, ctx: Context) -> list[DatasetRow]:
    """A project's datasets by name, each with its latest version."""
    ctx.check_project(project, f"project {project!r}")
    return reads.list_datasets(services.reads.engine, project)


def dataset_versions(services: Services, project: str, name: str, ctx: Context) -> list[VersionRow]:
    """Every version of a dataset, oldest first (404 when there is no such dataset)."""
    ctx.check_project(project, f"dataset {name!r}")
    found = reads.dataset_versions_of(services.reads.engine, project, name)
    if found is None:
        raise NotFoundError(f"no dataset {name!r}")
    return found


def show_dataset(services: Services, project: str, ref: str, ctx: Context) -> VersionRow:
    """One version with its items: `NAME@V`, or `NAME` for the latest (404 when none)."""
    name, version = parse_ref(ref)
    ctx.check_project(project, f"dataset {name!r}")
    found = reads.dataset_version(services.reads.engine, project, name, version)
    if found is None:
        if version is None or not reads.dataset_exists(services.reads.engine, project, name):
            raise NotFoundError(f"no dataset {ref!r}" + ("" if version else " with a version"))
        raise NotFoundError(f"dataset {name!r} has no version {version}")
    return found


def diff_datasets(
    services: Services, project: str, old_ref: str, new_ref: str, ctx: Context
) -> DatasetDiff:
    """The items added, removed and changed from one version to another."""
    old = show_dataset(services, project, old_ref, ctx)
    new = show_dataset(services, project, new_ref, ctx)
    return DatasetDiff(new.name, old, new, diff_items(old.items, new.items))


def differing_items(
    services: Services, project: str, old: DatasetRef | None, new: DatasetRef | None
) -> tuple[str, ...] | None:
    """Keys of the items two runs' dataset references differ by (None: none known).

    None also when they are not two versions of one ledger dataset in `project`. The
    comparison guard (`application.compare.run_datasets`) asks only when the references
    differ, so a compare of two runs of one version does not load this module (issue 32).
    """
    if (
        old is None
        or new is None
        or old.hash == new.hash
        or old.name != new.name
        or old.version is None
        or new.version is None
    ):
        return None
    engine = services.reads.engine
    before = reads.dataset_version(engine, project, old.name, old.version)
    after = reads.dataset_version(engine, project, new.name, new.version)
    if before is None or after is None:
        return None
    return diff_items(before.items, after.items).differing
