"""Comparison, rollups, grades and explanations."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, BackgroundTasks, Query
from fastapi.responses import Response

from evaledger.api.audit import explain
from evaledger.api.deps import SyncedDep
from evaledger.api.schemas import Explanation
from evaledger.application.compare import compare_runs_json
from evaledger.application.compare_many import compare_many
from evaledger.application.grades import grade_run as grade
from evaledger.application.grades import rollup_runs
from evaledger.application.reports import project_of, spec_from_query
from evaledger.scoring.comparison import CompareThresholds, RunComparison
from evaledger.scoring.comparison.many import MAX_COMPARED_RUNS, ManyRunComparison
from evaledger.scoring.grading import Grade
from evaledger.scoring.rollups import Rollup

router = APIRouter(tags=["reports"])


@router.get(
    "/runs/compare",
    response_model=None,
    responses={200: {"model": RunComparison, "description": "The comparison"}},
)
def compare_runs(
    services: SyncedDep,
    background: BackgroundTasks,
    baseline_run_id: UUID,
    candidate_run_id: UUID,
    max_pass_rate_drop: Annotated[
        float | None, Query(ge=0, allow_inf_nan=False, description="Fraction, 0.0")
    ] = None,
    max_avg_score_drop: Annotated[
        float | None, Query(ge=0, allow_inf_nan=False, description="Points, 5.0")
    ] = None,
    max_latency_increase_pct: Annotated[
        float | None, Query(ge=0, allow_inf_nan=False, description="Fraction, 0.2")
    ] = None,
    case_score_delta: Annotated[
        float | None, Query(ge=0, allow_inf_nan=False, description="Points, 5.0")
    ] = None,
    spec: Annotated[str | None, Query(description="Run config JSON or a stored spec id")] = None,
    metric_deltas: Annotated[
        bool, Query(description="Include each case's per-metric deltas (large on big runs)")
    ] = False,
    case_offset: Annotated[
        int,
        Query(ge=0, le=2**31, description="First test case comparison returned (sorted by key)"),
    ] = 0,
    case_limit: Annotated[
        int | None,
        Query(ge=0, le=2**31, description="Test case comparisons returned at most (all)"),
    ] = None,
    allow_different_datasets: Annotated[
        bool,
        Query(
            description="Runs of two dataset versions: compare every case (false: only the "
            "items common to both); `comparability` says which"
        ),
    ] = False,
    exclude_cached: Annotated[
        bool,
        Query(description="Leave out of both runs the test cases served from a cache"),
    ] = False,
) -> Response:
    """Compare two completed runs: per-case statuses, deltas, config diff, verdict, statistics.

    Totals, verdict and statistics always cover every matched case; `case_offset` /
    `case_limit` page the `test_case_comparisons` list, and each case's `metric_deltas` stay
    empty unless `metric_deltas=true`. Runs of two dataset versions are compared over their
    common items unless `allow_different_datasets=true`; `comparability` names the versions
    and the items left out (issue 35).
    """
    thresholds = CompareThresholds(
        max_pass_rate_drop=max_pass_rate_drop,
        max_avg_score_drop=max_avg_score_drop,
        max_latency_increase_pct=max_latency_increase_pct,
        case_score_delta=case_score_delta,
    )
    body = compare_runs_json(
        services,
        baseline_run_id,
        candidate_run_id,
        thresholds,
        spec,
        metric_deltas=metric_deltas,
        case_offset=case_offset,
        case_limit=case_limit,
        allow_different_datasets=allow_different_datasets,
        exclude_cached=exclude_cached,
        later=background.add_task,  # a new answer is shared with the other processes once sent
    )
    return Response(content=body, media_type="application/json")


@router.get("/runs/compare/many", response_model=ManyRunComparison)
def compare_many_runs(
    services: SyncedDep,
    baseline_run_id: Annotated[UUID, Query(description="The base run")],
    candidate_run_id: Annotated[
        list[UUID],
        Query(max_length=MAX_COMPARED_RUNS - 1, description="Each candidate (repeat the name)"),
    ],
    correction: Annotated[
        Literal["none", "holm", "bh"],
        Query(description="Multiple-comparison correction over every candidate's metrics"),
    ] = "holm",
    max_pass_rate_drop: Annotated[
        float | None, Query(ge=0, allow_inf_nan=False, description="Fraction, 0.0")
    ] = None,
    max_avg_score_drop: Annotated[
        float | None, Query(ge=0, allow_inf_nan=False, description="Points, 5.0")
    ] = None,
    max_latency_increase_pct: Annotated[
        float | None, Query(ge=0, allow_inf_nan=False, description="Fraction, 0.2")
    ] = None,
    case_score_delta: Annotated[
        float | None, Query(ge=0, allow_inf_nan=False, description="Points, 5.0")
    ] = None,
) -> ManyRunComparison:
    """A base run against several candidates: a row per test case, a column per run.

    Each candidate's verdict, deltas and cells are its pairwise comparison with the base
    (`GET /runs/compare`); the candidates' p-values are corrected together, as one family.
    """
    thresholds = CompareThresholds(
        max_pass_rate_drop=max_pass_rate_drop,
        max_avg_score_drop=max_avg_score_drop,
        max_latency_increase_pct=max_latency_increase_pct,
        case_score_delta=case_score_delta,
    )
    return compare_many(
        services,
        baseline_run_id,
        candidate_run_id,
        thresholds,
        correction=correction,
        field="candidate_run_id",
    )


@router.get("/rollups")
def get_rollup(
    services: SyncedDep,
    run_id: Annotated[list[UUID], Query(description="One or several runs")],
    rows: Annotated[str, Query(description="configuration, personality, agent, run")] = (
        "configuration"
    ),
    columns: Annotated[str, Query(description="test, tag, scenario (comma-separated)")] = "test",
    metric: Annotated[
        list[str] | None,
        Query(description="Custom per-message metric: name[:unit[:avg,min,max,p50,p95…]]"),
    ] = None,
) -> Rollup:
    """A pivot of results, every summary recomputed from the underlying results."""
    return rollup_runs(services, run_id, _split(rows), _split(columns), metric or [])


@router.get("/runs/{run_id}/grade")
def grade_run(
    run_id: UUID,
    services: SyncedDep,
    preset: str | None = None,
    min_score: Annotated[float | None, Query(ge=0, le=1)] = None,
    strategic: bool = False,
) -> Grade:
    """The run's governance grade (iFixAi rules) under a preset or its spec's grading section."""
    return grade(services, run_id, preset=preset, min_score=min_score, strategic_only=strategic)


@router.get("/cases/{case_id}/explain")
def explain_case(
    case_id: UUID,
    services: SyncedDep,
    spec: Annotated[str | None, Query(description="Run config JSON or a stored spec id")] = None,
) -> Explanation:
    """From judge prompt and raw reply to parsed scores, weights, overall, gate and aggregate."""
    project = project_of(services, case_id) or "default"
    return Explanation.model_validate(
        explain(services, case_id, spec_from_query(services, spec, project))
    )


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]
