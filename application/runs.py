"""Runs: import, create, record case by case, close, baselines, rescore; the spec resolution.

Every entry point that writes a run calls these: the routes (`api/routes/runs.py`,
`api/routes/imports.py`), the CLI (`evaledger import`, `rescore`), the Python client's local
backend (and through it the pytest plugin and the Inspect hook). The domain's commands enforce
the invariants; a refused input raises the domain's typed error and stores nothing.

`resolve_spec` is **the one place** a scoring spec is resolved from a run config for a run or a
project: over the project's metric catalogue as the read models hold it (built-in metrics then
the project's custom ones). The rule itself is `domain.spec.resolve_spec`, which the ledger also
applies when it snapshots a run's spec at creation (its invariant, over its own catalogue).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from evaledger.application.ports import Services
from evaledger.domain.errors import NotFoundError
from evaledger.domain.spec import RunConfig, ScoringSpec
from evaledger.domain.spec import resolve_spec as resolve_config
from evaledger.projections.queries import Rescoring
from evaledger.projections.rescore_store import store_rescore

if TYPE_CHECKING:
    from datetime import datetime

    from evaledger.domain.bundle import BundleCase, BundleRun, RunBundle
    from evaledger.domain.ledger import Context, Written
    from evaledger.importers.base import Format

Progress = Callable[[int, int], None]
"""Called with (cases done, cases in all) as an import goes."""


@dataclass(frozen=True)
class RunImported:
    """What importing one run wrote."""

    run_id: UUID
    run_key: str
    position: int
    """Log position; wait for it to read your writes."""
    events: int
    """Events written (0 when the run was imported before)."""
    cases: int
    """Cases in the run."""
    new_cases: int
    """Cases that were not in the ledger before."""


@dataclass(frozen=True)
class FileImported:
    """One run written by an import of files: where it came from, as what, and what it wrote."""

    file: str
    """The (first) file the run came from, as given."""
    format: Format
    """The format it was read as."""
    run: RunImported


# -- the scoring spec ------------------------------------------------------------------------


def resolve_spec(services: Services, config: RunConfig, project: str = "default") -> ScoringSpec:
    """The scoring spec of `config` in `project`: its metrics resolved over the catalogue.

    A metric the catalogue lacks, one selected twice or weights summing to 0 are a
    ValidationError naming the field.
    """
    catalogue = {m.name: m for m in services.reads.available_metrics(project)}
    return resolve_config(config, catalogue)


# -- import -----------------------------------------------------------------------------------


def import_run(services: Services, bundle: RunBundle, ctx: Context) -> RunImported:
    """Import a run bundle atomically (one transaction); importing it again writes nothing."""
    r = services.ledger.import_bundle(bundle, ctx)
    return RunImported(r.run_id, r.run_key, r.position, r.events, r.cases, r.new_cases)


def import_files(
    services: Services,
    paths: Sequence[str | Path],
    ctx: Context,
    *,
    from_format: str = "auto",
    run_key: str | None = None,
    project: str | None = None,
    progress: Progress | None = None,
) -> list[FileImported]:
    """Import run bundles and peer result files (Inspect, promptfoo, tau-bench, Connexity).

    Every file is opened (its format detected, its run header checked) before anything is
    written, so a bad file among several stores nothing; each run is then written streamed
    (`importers.load.import_all`: its cases read, checked and built once, written once all were
    built). The same file twice writes nothing.
    """
    # `evaledger rescore` and the CLI's parser import this module without them.
    # lazy: the peer formats' readers (ijson, Inspect's log) and the ledger, only to import
    from evaledger.importers.load import import_all, open_imports

    imports = open_imports(paths, from_format, run_key=run_key, project=project)
    return [
        FileImported(
            d.source.sources[0],
            d.source.format,
            RunImported(
                d.result.run_id,
                d.result.run_key,
                d.result.position,
                d.result.events,
                d.result.cases,
                d.result.new_cases,
            ),
        )
        for d in import_all(services.ledger, imports, ctx, progress)
    ]


# -- a run recorded case by case -------------------------------------------------------------


def create_run(services: Services, run: BundleRun, ctx: Context) -> Written:
    """Create a run with its resolved spec snapshot (idempotent for the same body)."""
    return services.ledger.create_run(run, ctx)


def start_run(services: Services, run_id: UUID, ctx: Context) -> Written:
    """Mark the run as running."""
    return services.ledger.start_run(run_id, ctx)


def record_case(services: Services, run_id: UUID, case: BundleCase, ctx: Context) -> Written:
    """Open a case with whatever facts it already has (idempotent for the same body)."""
    return services.ledger.open_case(run_id, case, ctx)


def record_cases(
    services: Services, run_id: UUID, cases: Sequence[BundleCase], ctx: Context
) -> Written:
    """Open many cases in one transaction; the written ids are the run's and the cases'."""
    return services.ledger.ingest_cases(run_id, cases, ctx)


def complete_run(
    services: Services, run_id: UUID, ctx: Context, completed_at: datetime | None = None
) -> Written:
    """Complete the run and seal it over its cases."""
    return services.ledger.complete_run(run_id, ctx, completed_at)


def cancel_run(
    services: Services, run_id: UUID, ctx: Context, reason: str | None = None
) -> Written:
    """Cancel the run, with an optional reason."""
    return services.ledger.cancel_run(run_id, ctx, reason)


def fail_run(services: Services, run_id: UUID, ctx: Context, reason: str) -> Written:
    """Mark the run failed as a whole (its harness crashed), with why."""
    return services.ledger.fail_run(run_id, ctx, reason)


def find_run_id(services: Services, project: str, run_key: str) -> UUID | None:
    """The id of the run `run_key` of `project` as the ledger holds it, or None."""
    run = services.ledger.find_run(project, run_key)
    return None if run is None else run.id


def recorded_run(services: Services, run_id: UUID) -> RunBundle | None:
    """The run as recorded so far, exported from its events (a run bundle), or None."""
    # lazy: the export walks the event classes; only a resumed recording asks for it.
    from evaledger.domain.export import export_bundle

    try:
        return export_bundle(services.ledger, run_id)
    except NotFoundError:
        return None


# -- baselines --------------------------------------------------------------------------------


def approve_baseline(
    services: Services, run_id: UUID, ctx: Context, reason: str | None = None
) -> Written:
    """Approve the run as its (agent, suite) baseline (admin, with a reason)."""
    return services.ledger.approve_baseline(run_id, ctx, reason)


def revoke_baseline(
    services: Services, run_id: UUID, ctx: Context, reason: str | None = None
) -> Written:
    """Revoke the run's baseline approval (admin, with a reason)."""
    return services.ledger.revoke_baseline(run_id, ctx, reason)


# -- rescore ----------------------------------------------------------------------------------


def rescore_run(services: Services, run_id: UUID, config: RunConfig) -> Rescoring:
    """Replay the run under another config: no judge call, no event.

    The config is resolved over the run's project's catalogue (`resolve_spec`); the result is
    stored beside the run's own scores (`rescore_under`). Reads what the read models hold:
    sync them first to read your writes.
    """
    run = services.reads.get_run(run_id)
    return rescore_under(services, run_id, resolve_spec(services, config, run.project))


def rescore_under(services: Services, run_id: UUID, spec: ScoringSpec) -> Rescoring:
    """Replay the run under a resolved spec and keep the result (and the inputs it built).

    The rescore is read from the read models (`ReadModels.rescore`, which writes nothing);
    the writer of the projections' rescore tables stores it (`rescores_v1`: a later compare
    or the web report can name its spec id).
    """
    rescoring = services.reads.rescore(run_id, spec)
    store_rescore(services.reads.engine, rescoring)
    return rescoring
