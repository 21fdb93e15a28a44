"""Runs: create, list, get, lifecycle, cases of a run, bundles, rescore, baselines."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Query
from fastapi.responses import Response
from pydantic import Field

from evaledger.api.deps import ContextDep, ProjectDep, ServicesDep, SyncedDep
from evaledger.api.responses import OrjsonResponse, created, replayed
from evaledger.api.schemas import (
    BatchWritten,
    BundleImported,
    CasePage,
    CompleteBody,
    FailBody,
    ReasonBody,
    Rescored,
    RunDetail,
    RunPage,
    Written,
)
from evaledger.application import calibration, exports, reports, runs, transcripts
from evaledger.application.case_filters import CaseFilter, FlagFilter, LabelFilter, filter_cases
from evaledger.application.export_formats import EXPORT_FORMATS, MEDIA_TYPES, ExportFormat
from evaledger.domain.aggregates import RunStatus
from evaledger.domain.bundle import BundleCase, BundleRun, RunBundle
from evaledger.domain.export import bundle_to_json
from evaledger.domain.model import StrictModel
from evaledger.domain.spec import RunConfig
from evaledger.domain.types import MAX_INDEX, QueryInstant
from evaledger.projections.queries import LABEL_PATTERN, RunFilter, RunRow
from evaledger.scoring.calibration import DEFAULT_MIN_KAPPA, gate_refusals
from evaledger.scoring.models import CaseStatus

router = APIRouter(tags=["runs"])


@router.post("/runs", status_code=201, responses=replayed(Written))
def create_run(
    run: BundleRun, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Create a run with its config snapshot (idempotent for the same body)."""
    written = Written.of(runs.create_run(services, run, ctx))
    created(response, f"/runs/{written.id}", written.events)
    return written


@router.get("/runs")
def list_runs(
    services: SyncedDep,
    project: ProjectDep,
    key: Annotated[str | None, Query(description="The run key (unique in a project).")] = None,
    suite: str | None = None,
    agent: str | None = None,
    status: RunStatus | None = None,
    label: Annotated[str | None, Query(description="key=value", pattern=LABEL_PATTERN)] = None,
    created_from: QueryInstant | None = None,
    created_to: QueryInstant | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_INDEX)] = 0,
) -> RunPage:
    """Runs, newest first, filtered and paginated."""
    f = RunFilter(
        project=project,
        key=key,
        suite=suite,
        agent=agent,
        status=status.value if status else None,
        label=label,
        created_from=created_from,
        created_to=created_to,
        limit=limit,
        offset=offset,
    )
    listed = reports.list_runs(services, f)
    rows, total = listed.rows, listed.total
    return RunPage(data=rows, count=len(rows), total=total, limit=limit, offset=offset)


@router.get("/runs/baseline")
def get_baseline(services: SyncedDep, project: ProjectDep, agent: str, suite: str) -> RunRow:
    """The approved baseline run of (agent, suite) in a project."""
    return reports.baseline_run(services, agent, suite, project or "default")


@router.get("/runs/{run_id}")
def get_run(run_id: UUID, services: SyncedDep) -> RunDetail:
    """A run: its config snapshot and its aggregate under its own spec."""
    run = reports.get_run(services, run_id)
    summary = reports.run_summary(services, run_id)
    return RunDetail(**dict(run), aggregate=summary.aggregate)


class JudgeGateOut(StrictModel):
    """One judge at one template hash of a run's counted verdicts, and the calibration gate."""

    judge: str = Field(description="provider:model")
    template_hash: str | None = Field(description="The verdicts' judge template hash.")
    calibrated: bool = Field(description="A calibration at this template hash and model.")
    kappa: float | None = Field(description="Its Cohen's κ (null: none, or undefined).")
    kappa_low: float | None = Field(description="The κ's 95 % interval, low end.")
    kappa_high: float | None = Field(description="The κ's 95 % interval, high end.")
    n: int | None = Field(description="Pairs the calibration compared.")
    gold: str | None = Field(description="The gold set it was made on (NAME@V).")
    calibrated_at: list[str] = Field(description="Every template hash the judge is calibrated at.")
    accepted: bool = Field(description="`gate --require-calibrated --min-kappa K` accepts it.")


class CalibrationGateOut(StrictModel):
    """GET /runs/{id}/calibration: the calibration gate of a run (issue 35)."""

    run_id: UUID
    min_kappa: float
    accepted: bool = Field(description="Every row accepted: the run may gate.")
    judges: list[JudgeGateOut]
    refusals: list[str] = Field(description="What `gate --require-calibrated` prints.")


@router.get("/runs/{run_id}/calibration")
def get_calibration_gate(
    run_id: UUID,
    services: SyncedDep,
    min_kappa: Annotated[
        float, Query(ge=-1, le=1, description="The least κ accepted.")
    ] = DEFAULT_MIN_KAPPA,
) -> CalibrationGateOut:
    """The calibration gate of a run: each judge and template hash of its verdicts (issue 35).

    Whether it has a calibration at that template hash and model, its κ with interval and n,
    and whether `gate --require-calibrated --min-kappa K` accepts it (the same rule).
    """
    reports.get_run(services, run_id)  # 404 first
    gates = calibration.calibration_gate_of(services, run_id, min_kappa)
    return CalibrationGateOut(
        run_id=run_id,
        min_kappa=min_kappa,
        accepted=all(g.accepted for g in gates),
        judges=[
            JudgeGateOut(
                judge=g.judge,
                template_hash=g.template_hash,
                calibrated=g.calibration is not None,
                kappa=None if g.calibration is None else g.calibration.kappa,
                kappa_low=None if g.calibration is None else g.calibration.kappa_low,
                kappa_high=None if g.calibration is None else g.calibration.kappa_high,
                n=None if g.calibration is None else g.calibration.n,
                gold=None if g.calibration is None else g.calibration.gold,
                calibrated_at=list(g.calibrated_at),
                accepted=g.accepted,
            )
            for g in gates
        ],
        refusals=gate_refusals(gates, min_kappa),
    )


Bound = Annotated[float | None, Query(allow_inf_nan=False, description="Inclusive bound.")]


@router.get("/runs/{run_id}/cases")
def list_run_cases(
    run_id: UUID,
    services: SyncedDep,
    status: Annotated[CaseStatus | None, Query(description="Only cases of this status.")] = None,
    min_score: Bound = None,
    max_score: Bound = None,
    min_latency_ms: Bound = None,
    max_latency_ms: Bound = None,
    metric: Annotated[
        str | None, Query(max_length=200, description="Only cases scored on this metric.")
    ] = None,
    metric_min: Bound = None,
    metric_max: Bound = None,
    label: Annotated[LabelFilter | None, Query(description="A reviewer's label or none.")] = None,
    flag: Annotated[FlagFilter | None, Query(description="A standing flag or none.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> CasePage:
    """A page of the run's cases scored under the run's own spec, in opening order, filtered."""
    state = status.value if status else None
    f = CaseFilter(
        status=state,
        min_score=min_score,
        max_score=max_score,
        min_latency_ms=min_latency_ms,
        max_latency_ms=max_latency_ms,
        metric=metric,
        metric_min=metric_min,
        metric_max=metric_max,
        label=label,
        flag=flag,
    )
    if f != CaseFilter(status=state):
        page = filter_cases(services, run_id, f, limit, offset)
    else:
        page = reports.list_cases(services, run_id, state, limit, offset)
    return CasePage(
        data=page.rows, count=len(page.rows), total=page.total, limit=limit, offset=offset
    )


@router.post("/runs/{run_id}/start")
def start_run(run_id: UUID, services: ServicesDep, ctx: ContextDep) -> Written:
    """Mark the run as running."""
    return Written.of(runs.start_run(services, run_id, ctx))


@router.post("/runs/{run_id}/complete")
def complete_run(
    run_id: UUID, services: ServicesDep, ctx: ContextDep, body: CompleteBody | None = None
) -> Written:
    """Complete the run and seal it."""
    return Written.of(runs.complete_run(services, run_id, ctx, body.completed_at if body else None))


@router.post("/runs/{run_id}/cancel")
def cancel_run(
    run_id: UUID, services: ServicesDep, ctx: ContextDep, body: ReasonBody | None = None
) -> Written:
    """Cancel the run."""
    return Written.of(runs.cancel_run(services, run_id, ctx, body.reason if body else None))


@router.post("/runs/{run_id}/fail")
def fail_run(run_id: UUID, services: ServicesDep, ctx: ContextDep, body: FailBody) -> Written:
    """Mark the run failed as a whole (its harness crashed), with why."""
    return Written.of(runs.fail_run(services, run_id, ctx, body.reason))


@router.post("/runs/{run_id}/cases", status_code=201, responses=replayed(Written))
def open_case(
    run_id: UUID, case: BundleCase, services: ServicesDep, ctx: ContextDep, response: Response
) -> Written:
    """Open a case (with whatever facts it already has); idempotent for the same body."""
    written = Written.of(runs.record_case(services, run_id, case, ctx))
    created(response, f"/cases/{written.id}", written.events)
    return written


@router.post("/runs/{run_id}/cases/batch", status_code=201, responses=replayed(BatchWritten))
def open_cases(
    run_id: UUID,
    cases: list[BundleCase],
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
) -> BatchWritten:
    """Open many cases in one transaction."""
    w = runs.record_cases(services, run_id, cases, ctx)
    ids = [i for i in w.ids if i != run_id]
    created(response, f"/runs/{run_id}/cases", w.events)
    return BatchWritten(case_ids=ids, position=w.position, events=w.events)


@router.post("/bundles", status_code=201, responses=replayed(BundleImported))
def import_bundle(
    bundle: RunBundle, services: ServicesDep, ctx: ContextDep, response: Response
) -> BundleImported:
    """Import a run bundle atomically; importing it again writes nothing."""
    r = runs.import_run(services, bundle, ctx)
    created(response, f"/runs/{r.run_id}", r.events)
    return BundleImported(
        run_id=r.run_id,
        run_key=r.run_key,
        position=r.position,
        events=r.events,
        cases=r.cases,
        new_cases=r.new_cases,
    )


@router.get(
    "/runs/{run_id}/bundle",
    response_model=None,
    responses={200: {"model": RunBundle, "description": "The run as a run bundle"}},
)
def export_run(run_id: UUID, services: ServicesDep) -> Response:
    """The run exported as a run bundle."""
    return OrjsonResponse(bundle_to_json(transcripts.export_run(services, run_id)))


@router.get(
    "/runs/{run_id}/export",
    response_model=None,
    responses={
        200: {
            "model": RunBundle,
            "description": "The run in the format asked: a run bundle (JSON, the default), or "
            "its cases as CSV, Parquet, JUnit XML or JSON lines (an attachment)",
            "content": {
                MEDIA_TYPES[f]: {
                    "schema": {"type": "string", **({"format": "binary"} if f == "parquet" else {})}
                }
                for f in EXPORT_FORMATS
                if f != "bundle"
            },
        }
    },
)
def export_run_as(
    run_id: UUID,
    services: SyncedDep,
    format: Annotated[
        ExportFormat,
        Query(description="bundle (the default), csv, parquet, junit or jsonl."),
    ] = "bundle",
) -> Response:
    """The run exported: a run bundle, or its cases with scores, status and named scores."""
    exported = exports.export_run_file(services, run_id, format)
    return Response(
        exported.content,
        media_type=exported.media_type,
        headers={"Content-Disposition": f'attachment; filename="{exported.filename}"'},
    )


@router.post("/runs/{run_id}/rescore")
def rescore_run(
    run_id: UUID,
    services: SyncedDep,
    config: Annotated[RunConfig, Body(description="A run config plus policy fields.")],
) -> Rescored:
    """Replay the run under another spec: old and new side by side, no judge call, no event."""
    return Rescored.model_validate(runs.rescore_run(services, run_id, config).to_json())


@router.post("/runs/{run_id}/baseline")
def approve_baseline(
    run_id: UUID, services: ServicesDep, ctx: ContextDep, body: ReasonBody | None = None
) -> Written:
    """Approve the run as its (agent, suite) baseline."""
    return Written.of(runs.approve_baseline(services, run_id, ctx, body.reason if body else None))


@router.delete("/runs/{run_id}/baseline")
def revoke_baseline(
    run_id: UUID, services: ServicesDep, ctx: ContextDep, reason: str | None = None
) -> Written:
    """Revoke the run's baseline approval."""
    return Written.of(runs.revoke_baseline(services, run_id, ctx, reason))
