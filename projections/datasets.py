"""`datasets_v1`: each project's datasets and their versions, and the queries over them.

A version's row keeps its items (JSON, sorted by key). Versions are immutable: a row is
written once, on `DatasetVersionAdded`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, Table, select, update

from evaledger.domain.events import DatasetCreated, DatasetItem, DatasetVersionAdded
from evaledger.projections import encoding
from evaledger.projections.decode import DecodedBatch
from evaledger.projections.tables import DATASETS_PROJECTION, dataset_versions, datasets

_TOPICS = frozenset({DatasetCreated, DatasetVersionAdded})


def _utc(dt: datetime) -> str:
    """ISO text in UTC (text order is time order in every database)."""
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


class DatasetsProjection:
    """Folds dataset events into `datasets_v1` and `datasets_v1_versions` (from state dicts)."""

    name = DATASETS_PROJECTION
    tables: Sequence[Table] = (datasets, dataset_versions)

    def reset(self) -> None:
        """Nothing cached."""

    def process(self, conn: Connection, batch: DecodedBatch) -> None:
        """Insert a dataset's row at creation, a version's row when it is added."""
        for position, decoded in batch:
            if decoded.cls not in _TOPICS:
                continue
            event = decoded.event
            if isinstance(event, DatasetCreated):
                conn.execute(
                    datasets.insert().values(
                        dataset_id=decoded.oid,
                        project=event.project,
                        name=event.name,
                        description=event.description,
                        created_at=_utc(event.timestamp),
                        created_by=event.actor,
                        latest_version=0,
                        position=position,
                    )
                )
            elif isinstance(event, DatasetVersionAdded):
                conn.execute(
                    dataset_versions.insert().values(
                        dataset_id=decoded.oid,
                        version=event.version,
                        content_hash=event.content_hash,
                        item_count=len(event.items),
                        items=encoding.dumps([i.model_dump(mode="json") for i in event.items]),
                        source=event.source,
                        added_at=_utc(event.timestamp),
                        added_by=event.actor,
                        position=position,
                    )
                )
                conn.execute(
                    update(datasets)
                    .where(datasets.c.dataset_id == decoded.oid)
                    .values(latest_version=event.version, position=position)
                )


# -- queries (read-only) ---------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetRow:
    """One dataset of a project as listed."""

    name: str
    description: str | None
    created_at: str
    created_by: str
    latest_version: int
    latest_hash: str | None
    item_count: int


@dataclass(frozen=True)
class VersionRow:
    """One version of a dataset (its items when asked for)."""

    name: str
    version: int
    content_hash: str
    item_count: int
    source: str | None
    added_at: str
    added_by: str
    items: tuple[DatasetItem, ...] = ()


def list_datasets(engine: Engine, project: str) -> list[DatasetRow]:
    """A project's datasets by name, each with its latest version's hash and size."""
    d, v = datasets.c, dataset_versions.c
    query = (
        select(
            d.name,
            d.description,
            d.created_at,
            d.created_by,
            d.latest_version,
            v.content_hash,
            v.item_count,
        )
        .select_from(
            datasets.outerjoin(
                dataset_versions,
                (v.dataset_id == d.dataset_id) & (v.version == d.latest_version),
            )
        )
        .where(d.project == project)
        .order_by(d.name)
    )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return [
        DatasetRow(
            r.name,
            r.description,
            r.created_at,
            r.created_by,
            r.latest_version,
            r.content_hash,
            r.item_count or 0,
        )
        for r in rows
    ]


def _dataset_key(conn: Connection, project: str, name: str) -> tuple[str, int] | None:
    row = conn.execute(
        select(datasets.c.dataset_id, datasets.c.latest_version).where(
            datasets.c.project == project, datasets.c.name == name
        )
    ).first()
    return None if row is None else (row.dataset_id, row.latest_version)


def dataset_exists(engine: Engine, project: str, name: str) -> bool:
    """Whether the project has a dataset of this name."""
    with engine.connect() as conn:
        return _dataset_key(conn, project, name) is not None


def dataset_versions_of(engine: Engine, project: str, name: str) -> list[VersionRow] | None:
    """Every version of a dataset, oldest first, without items (None: no such dataset)."""
    v = dataset_versions.c
    with engine.connect() as conn:
        key = _dataset_key(conn, project, name)
        if key is None:
            return None
        rows = conn.execute(
            select(v.version, v.content_hash, v.item_count, v.source, v.added_at, v.added_by)
            .where(v.dataset_id == key[0])
            .order_by(v.version)
        ).all()
    return [
        VersionRow(name, r.version, r.content_hash, r.item_count, r.source, r.added_at, r.added_by)
        for r in rows
    ]


def dataset_version(
    engine: Engine, project: str, name: str, version: int | None
) -> VersionRow | None:
    """One version with its items (`version` None: the latest); None when there is none."""
    v = dataset_versions.c
    with engine.connect() as conn:
        key = _dataset_key(conn, project, name)
        if key is None:
            return None
        wanted = key[1] if version is None else version
        row = conn.execute(
            select(dataset_versions).where(v.dataset_id == key[0], v.version == wanted)
        ).first()
    if row is None:
        return None
    items: list[dict[str, Any]] = encoding.loads(row.items)
    return VersionRow(
        name,
        row.version,
        row.content_hash,
        row.item_count,
        row.source,
        row.added_at,
        row.added_by,
        tuple(DatasetItem.model_validate(i) for i in items),
    )
