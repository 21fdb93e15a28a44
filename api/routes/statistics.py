"""Statistics a skeptic accepts (issue 37): a comparison's corrected significance, noise, plan.

Every run named here (`baseline_run_id`, `candidate_run_id`, `run_id`, `noise_run_id`) is
checked against the token's project by `AUTH` (`api/deps.py`).
"""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Query

from evaledger.api.deps import SyncedDep
from evaledger.application import statistics
from evaledger.application.compare import compare_report
from evaledger.scoring.comparison.significance import ComparisonSignificance

router = APIRouter(tags=["statistics"])

Runs = Annotated[list[UUID], Query(max_length=statistics.MAX_NOISE_RUNS)]


@router.get("/statistics/significance", response_model=ComparisonSignificance)
def get_significance(
    services: SyncedDep,
    baseline_run_id: UUID,
    candidate_run_id: UUID,
    correction: Annotated[
        Literal["none", "holm", "bh"], Query(description="Multiple-comparison correction")
    ] = "holm",
    noise_run_id: Annotated[
        list[UUID] | None,
        Query(max_length=statistics.MAX_NOISE_RUNS, description="A/A runs: the noise floor"),
    ] = None,
) -> ComparisonSignificance:
    """Every metric's clustered difference, the p-values corrected, against the noise floor."""
    report = compare_report(services, baseline_run_id, candidate_run_id)
    noise = statistics.noise_floor_of_runs(services, noise_run_id) if noise_run_id else None
    return statistics.significance_of(
        statistics.compare_significance(services, report, correction=correction, noise=noise)
    )


@router.get("/statistics/noise", response_model=statistics.NoiseReport)
def get_noise(
    services: SyncedDep,
    run_id: Runs,
    alpha: Annotated[float, Query(gt=0, lt=1)] = 0.05,
    power: Annotated[float, Query(gt=0.5, lt=1)] = 0.8,
) -> statistics.NoiseReport:
    """A/A runs' per-metric spread, noise floor and MDE, and the variance split."""
    return statistics.measure_noise(services, run_id, alpha=alpha, power=power)


@router.get("/statistics/plan", response_model=statistics.PlanReport)
def get_plan(
    services: SyncedDep,
    baseline: Annotated[float, Query(allow_inf_nan=False, description="Expected value")],
    mde: Annotated[float, Query(gt=0, allow_inf_nan=False, description="Difference to find")],
    metric: str = "pass_rate",
    repetitions: Annotated[int, Query(ge=1, le=1000)] = 1,
    icc: Annotated[float | None, Query(ge=0, lt=1)] = None,
    sd: Annotated[float | None, Query(gt=0, allow_inf_nan=False)] = None,
    run_id: Annotated[
        list[UUID] | None,
        Query(max_length=statistics.MAX_NOISE_RUNS, description="Runs: their sizes' MDE"),
    ] = None,
    icc_from_runs: Annotated[bool, Query(description="Estimate the ICC from run_id")] = False,
    alpha: Annotated[float, Query(gt=0, lt=1)] = 0.05,
    power: Annotated[float, Query(gt=0.5, lt=1)] = 0.8,
) -> statistics.PlanReport:
    """Test cases (and repetitions) needed to detect `mde`; the MDE of the runs' sizes."""
    runs = run_id or []
    return statistics.plan_runs(
        services,
        metric,
        baseline,
        mde,
        repetitions=repetitions,
        icc_runs=runs if icc_from_runs else [],
        icc=icc,
        sd=sd,
        size_runs=runs,
        alpha=alpha,
        power=power,
    )
