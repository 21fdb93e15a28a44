"""The commands of versioned datasets (the Dataset aggregate), on the store's write unit.

`Ledger` (`ledger.py`) inherits them. Reads of datasets go through their projection
(`projections/datasets.py`); `get_dataset` (the aggregate) is for the commands and the audit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from evaledger.domain.datasets import Dataset, dataset_id_for
from evaledger.domain.errors import NotFoundError, ValidationError
from evaledger.domain.events.dataset import DatasetItem, DatasetRef
from evaledger.domain.events.run import RunCreated
from evaledger.domain.types import MAX_KEY_CHARS
from evaledger.domain.writes import Context, LedgerStore, Written


@dataclass(frozen=True)
class VersionWritten:
    """What `add_dataset_version` did: the version (new, or the identical latest one)."""

    version: int
    content_hash: str
    items: int
    created: bool
    """False when the content was identical to the latest version (nothing written)."""
    position: int


def check_dataset_name(name: str) -> str:
    """A dataset name: 1 to 200 characters, no '@' (it separates NAME@VERSION), no control."""
    if not name or len(name) > MAX_KEY_CHARS:
        raise ValidationError(f"name must be 1 to {MAX_KEY_CHARS} characters", field="name")
    if "@" in name or "/" in name or any(ord(c) < 32 or c == "\x7f" for c in name):
        raise ValidationError(
            f"name {name!r} may not hold '@', '/' or control characters", field="name"
        )
    return name


class DatasetCommands(LedgerStore):
    """Create datasets and add their versions."""

    def create_dataset(
        self, project: str, name: str, description: str | None, ctx: Context
    ) -> tuple[Written, bool]:
        """Create a named dataset in a project; (what was written, whether it is new).

        Idempotent: the same name and description again writes nothing; another description
        under a taken name is a conflict (409).
        """
        ctx.check_project(project, f"project {project!r}")
        check_dataset_name(name)

        def command() -> tuple[Written, bool]:
            agg_id = dataset_id_for(project, name)
            dataset = self._find(Dataset, agg_id) or Dataset(agg_id)
            if not dataset.create(project, name, description, self._meta(ctx)):
                return Written((dataset.id,), self.position(), 0), False
            position, n = self._save(dataset, project=project)
            return Written((dataset.id,), position, n), True

        return self._retrying(command)

    def add_dataset_version(
        self,
        project: str,
        name: str,
        items: Sequence[DatasetItem],
        source: str | None,
        ctx: Context,
    ) -> VersionWritten:
        """Add a version of a dataset's items (none when identical to the latest version)."""
        ctx.check_project(project, f"dataset {name!r}")

        def command() -> VersionWritten:
            dataset = self._find(Dataset, dataset_id_for(project, name))
            if dataset is None or dataset.created is None:
                raise NotFoundError(f"no dataset {name!r} (create it first)")
            event, created = dataset.add_version(items, source, self._meta(ctx))
            position = self._save(dataset, project=project)[0] if created else self.position()
            return VersionWritten(
                event.version, event.content_hash, len(event.items), created, position
            )

        return self._retrying(command)

    def resolve_ref(self, project: str, ref: DatasetRef) -> DatasetRef:
        """A run's dataset reference with its version and hash (DESIGN §18).

        A ledger dataset's version gives its hash (a different hash given is refused); `name`
        alone is its latest version. A reference the project has no dataset for is kept as
        given when it has its hash (a source's own dataset), refused otherwise.
        """
        cache: dict[tuple[str, str, int | None], tuple[int, str] | None]
        cache = self.__dict__.setdefault("_dataset_refs", {})
        key = (project, ref.name, ref.version)
        if key not in cache or ref.version is None:
            dataset = self.get_dataset(project, ref.name)
            versions = [] if dataset is None else dataset.versions
            wanted = [v for v in versions if ref.version in (None, v.version)][-1:]
            cache[key] = (wanted[0].version, wanted[0].content_hash) if wanted else None
            if len(cache) > 10_000:
                cache.clear()
        found = cache[key]
        if found is None:
            if ref.hash is not None:
                return ref
            at = "" if ref.version is None else f" version {ref.version}"
            raise ValidationError(
                f"run.dataset: project {project!r} has no dataset {ref.name!r}{at}",
                field="run.dataset",
            )
        version, digest = found
        if ref.hash is not None and ref.hash != digest:
            raise ValidationError(
                f"run.dataset.hash: {ref.name}@{version} has the hash {digest}, not {ref.hash}",
                field="run.dataset.hash",
            )
        return ref.model_copy(update={"version": version, "hash": digest})

    def run_dataset(self, run_id: UUID) -> DatasetRef | None:
        """The dataset version a run ran, from its first event only (None: none recorded)."""
        stored = list(self.app.recorder.select_events(run_id, lte=1))
        if not stored:
            raise NotFoundError(f"no run {run_id}")
        first = self.decode(stored[0])
        return first.dataset if isinstance(first, RunCreated) else None

    def get_dataset(self, project: str, name: str) -> Dataset | None:
        """The Dataset aggregate (for commands and the audit; reads use the projection)."""
        return self._find(Dataset, dataset_id_for(project, name))
