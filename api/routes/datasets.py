"""Versioned datasets over HTTP (DESIGN §18): `/projects/{project}/datasets...`.

Thin adapters over `application/datasets.py`. A token of another project finds no dataset
(404), as for runs: the project in the path is checked against the token's own.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import Field

from evaledger.api.deps import ContextDep, SyncedDep
from evaledger.application import datasets
from evaledger.domain.events import DatasetItem
from evaledger.domain.model import StrictModel
from evaledger.domain.types import MAX_KEY_CHARS, Key
from evaledger.projections.datasets import DatasetRow, VersionRow

router = APIRouter(tags=["datasets"])

ProjectPath = Annotated[str, Path(min_length=1, max_length=MAX_KEY_CHARS)]
NamePath = Annotated[str, Path(min_length=1, max_length=MAX_KEY_CHARS)]


class DatasetBody(StrictModel):
    """POST /projects/{project}/datasets: a new, empty dataset."""

    name: Key = Field(description="Unique in the project; no '@' or '/'.")
    description: str | None = Field(default=None, max_length=10_000)


class VersionBody(StrictModel):
    """POST .../datasets/{name}/versions: every item of the new version."""

    items: list[DatasetItem] = Field(min_length=1, description="The version's items.")
    source: str | None = Field(default=None, max_length=MAX_KEY_CHARS, description="Origin.")


class DatasetOut(StrictModel):
    """A dataset of a project, with its latest version (0: none yet)."""

    name: str
    description: str | None
    created_at: str
    created_by: str
    latest_version: int
    hash: str | None
    items: int


class VersionOut(StrictModel):
    """One version of a dataset; `items` only when one version is asked for."""

    name: str
    version: int
    hash: str
    item_count: int
    source: str | None
    added_at: str
    added_by: str
    items: list[DatasetItem] | None = None


class DatasetList(StrictModel):
    """A project's datasets, by name."""

    data: list[DatasetOut]


class VersionList(StrictModel):
    """A dataset's versions, oldest first, without their items."""

    data: list[VersionOut]


class VersionWrittenOut(StrictModel):
    """What adding a version did: `created` false when identical to the latest version."""

    name: str
    version: int
    hash: str
    items: int
    created: bool


class DiffOut(StrictModel):
    """Two versions and the keys of the items added, removed and changed."""

    old: VersionOut
    new: VersionOut
    added: list[str]
    removed: list[str]
    changed: list[str]
    unchanged: int


def _dataset(r: DatasetRow) -> DatasetOut:
    return DatasetOut(
        name=r.name,
        description=r.description,
        created_at=r.created_at,
        created_by=r.created_by,
        latest_version=r.latest_version,
        hash=r.latest_hash,
        items=r.item_count,
    )


def _version(v: VersionRow, *, items: bool) -> VersionOut:
    return VersionOut(
        name=v.name,
        version=v.version,
        hash=v.content_hash,
        item_count=v.item_count,
        source=v.source,
        added_at=v.added_at,
        added_by=v.added_by,
        items=list(v.items) if items else None,
    )


@router.get("/projects/{project}/datasets", response_model=DatasetList)
def get_datasets(services: SyncedDep, ctx: ContextDep, project: ProjectPath) -> DatasetList:
    """The project's datasets by name."""
    return DatasetList(data=[_dataset(r) for r in datasets.list_datasets(services, project, ctx)])


@router.post(
    "/projects/{project}/datasets",
    response_model=DatasetOut,
    status_code=201,
    responses={200: {"model": DatasetOut, "description": "It exists already, the same."}},
)
def post_dataset(
    services: SyncedDep,
    ctx: ContextDep,
    project: ProjectPath,
    body: DatasetBody,
    response: Response,
) -> DatasetOut:
    """Create a dataset (201); the same again: 200; another description, same name: 409."""
    made = datasets.create_dataset(services, project, body.name, body.description, ctx)
    if not made.created:
        response.status_code = 200
    services.sync(made.position)
    rows = datasets.list_datasets(services, project, ctx)
    return next(_dataset(r) for r in rows if r.name == body.name)


@router.get("/projects/{project}/datasets/{name}", response_model=VersionList)
def get_dataset_versions(
    services: SyncedDep, ctx: ContextDep, project: ProjectPath, name: NamePath
) -> VersionList:
    """Every version of a dataset, oldest first, without items."""
    found = datasets.dataset_versions(services, project, name, ctx)
    return VersionList(data=[_version(v, items=False) for v in found])


@router.post(
    "/projects/{project}/datasets/{name}/versions",
    response_model=VersionWrittenOut,
    status_code=201,
    responses={
        200: {"model": VersionWrittenOut, "description": "Identical to the latest: none added."}
    },
)
def post_dataset_version(
    services: SyncedDep,
    ctx: ContextDep,
    project: ProjectPath,
    name: NamePath,
    body: VersionBody,
    response: Response,
) -> VersionWrittenOut:
    """Add a version of the items (201), or none when identical to the latest (200)."""
    w = datasets.add_dataset_version(services, project, name, body.items, body.source, ctx)
    if not w.created:
        response.status_code = 200
    return VersionWrittenOut(
        name=name, version=w.version, hash=w.content_hash, items=w.items, created=w.created
    )


@router.get("/projects/{project}/datasets/{name}/versions/{version}", response_model=VersionOut)
def get_dataset_version(
    services: SyncedDep,
    ctx: ContextDep,
    project: ProjectPath,
    name: NamePath,
    version: Annotated[int, Path(ge=1, le=2**31 - 1)],
) -> VersionOut:
    """One version with its items."""
    return _version(datasets.show_dataset(services, project, f"{name}@{version}", ctx), items=True)


@router.get("/projects/{project}/datasets/{name}/diff", response_model=DiffOut)
def get_dataset_diff(
    services: SyncedDep,
    ctx: ContextDep,
    project: ProjectPath,
    name: NamePath,
    old: Annotated[int, Query(ge=1, le=2**31 - 1, description="The older version.")],
    new: Annotated[int, Query(ge=1, le=2**31 - 1, description="The newer version.")],
) -> DiffOut:
    """The keys of the items added, removed and changed from `old` to `new`."""
    d = datasets.diff_datasets(services, project, f"{name}@{old}", f"{name}@{new}", ctx)
    return DiffOut(
        old=_version(d.old, items=False),
        new=_version(d.new, items=False),
        added=list(d.items.added),
        removed=list(d.items.removed),
        changed=list(d.items.changed),
        unchanged=d.items.unchanged,
    )
