"""Statistics a skeptic accepts (issue 37): significance of a comparison, noise, planning.

Use cases over the read models; they write nothing. The rules are pure, in
`scoring/clustered.py`, `scoring/comparison/adjust.py`, `scoring/comparison/significance.py`
and `scoring/power.py`.

- `compare_significance`: a comparison report with its `significance` filled in: every metric's
  clustered difference, the family's p-values corrected (Holm by default), held against a noise
  floor when one is given.
- `measure_noise`: `evaledger noise RUN_A RUN_B [...]`: A/A runs' per-metric spread, noise
  floor and minimum detectable difference, and the variance split of runs with repetitions and
  a judge panel.
- `noise_floor_of_file`: the noise floors a saved `evaledger noise --json` holds.
- `plan_runs`: `evaledger plan`: cases (and repetitions) needed, and the MDE of a run's size.
- `gate_within_noise`: the gate's failed checks a noise floor forgives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson
from pydantic import Field

from evaledger.domain.errors import StateError, ValidationError
from evaledger.domain.model import StrictModel
from evaledger.domain.spec import ScoringSpec
from evaledger.scoring.comparison.adjust import CORRECTIONS, DEFAULT_CORRECTION, Correction
from evaledger.scoring.comparison.significance import (
    AVG_SCORE,
    PASS_RATE,
    ComparisonSignificance,
    Samples,
    execution_samples,
    sample_rows,
    significance,
)
from evaledger.scoring.power import (
    DEFAULT_POWER,
    IccEstimate,
    MetricNoise,
    Plan,
    SizeMde,
    VarianceSplit,
    Verdict,
    detectable_difference,
    icc_oneway,
    metric_noise,
    plan_sample_size,
    variance_split,
)
from evaledger.scoring.stats import DEFAULT_ALPHA

if TYPE_CHECKING:
    from evaledger.application.compare import ComparisonReport
    from evaledger.application.grades import GateResult
    from evaledger.application.ports import Services
    from evaledger.scoring.comparison import Comparison, RunComparison

__all__ = [
    "CORRECTIONS",
    "Correction",
    "NoiseFloor",
    "NoiseReport",
    "PlanReport",
    "compare_significance",
    "gate_within_noise",
    "measure_noise",
    "noise_floor_of_file",
    "noise_floor_of_runs",
    "plan_runs",
    "reasons_within_noise",
    "run_variance_split",
    "significance_between",
    "significance_of",
]

MAX_NOISE_FILE_BYTES = 1_000_000
"""A noise floor file larger than this is refused (it holds a few numbers per metric)."""
MAX_NOISE_RUNS = 50
"""Runs `noise` reads at most."""


@dataclass(frozen=True)
class NoiseFloor:
    """Per metric the difference below which a change is within noise, and where it came from."""

    floors: Mapping[str, float]
    source: str


class NoiseReport(StrictModel):
    """What A/A runs say about a setup's noise."""

    run_ids: list[str]
    alpha: float
    power: float
    metrics: list[MetricNoise]
    variance_split: list[VarianceSplit] = Field(
        default_factory=list, description="Runs with repetitions and/or a judge panel only."
    )
    reading: str


class PlanReport(StrictModel):
    """`evaledger plan`: the size needed, and what sizes detect."""

    plan: Plan
    icc: IccEstimate | None = Field(default=None, description="Estimated from the runs given.")
    sizes: list[SizeMde] = Field(description="The MDE of the runs given (or of the plan).")
    reading: str


def _scores(
    services: Services, run_id: UUID, spec: ScoringSpec | None = None
) -> list[dict[str, Any]]:
    """A run's case scores as the plain rows the statistics read (under `spec`, when given)."""
    if spec is None:
        return services.reads.case_score_rows(run_id)
    return sample_rows(services.reads.summary_under(run_id, spec)[1])


def compare_significance(
    services: Services,
    report: ComparisonReport,
    *,
    correction: Correction = DEFAULT_CORRECTION,
    alpha: float = DEFAULT_ALPHA,
    noise: NoiseFloor | None = None,
    spec: ScoringSpec | None = None,
) -> ComparisonReport:
    """The report with its comparison's `significance` (a copy; the cached one is untouched)."""
    if correction not in CORRECTIONS:
        raise ValidationError(
            f"correction: must be one of {', '.join(CORRECTIONS)}", field="correction"
        )
    floors = None if noise is None else noise.floors
    source = None if noise is None else noise.source

    def compute() -> bytes:
        found = significance(
            _scores(services, report.baseline_id, spec),
            _scores(services, report.candidate_id, spec),
            correction=correction,
            alpha=alpha,
            noise_floors=floors,
            noise_floor_source=source,
        )
        return found.model_dump_json().encode()

    # Computed once per pair of runs as they stand (and these options), then read (issue 32).
    parts = ("significance", spec.spec_id if spec else None, correction, alpha, floors, source)
    body = services.reports.pair_answer(report.baseline_id, report.candidate_id, parts, compute)
    found = ComparisonSignificance.model_validate_json(body)
    return replace(report, significance=found)


def significance_between(
    services: Services,
    baseline_id: UUID,
    candidate_id: UUID,
    *,
    correction: Correction = DEFAULT_CORRECTION,
    noise: NoiseFloor | None = None,
) -> ComparisonSignificance:
    """Two stored runs' per-metric significance under their own specs."""
    return significance(
        _scores(services, baseline_id),
        _scores(services, candidate_id),
        correction=correction,
        noise_floors=None if noise is None else noise.floors,
        noise_floor_source=None if noise is None else noise.source,
    )


def significance_of(report: ComparisonReport) -> ComparisonSignificance:
    """The significance `compare_significance` put in the report."""
    found = report.significance
    if found is None:
        raise StateError("the comparison has no significance yet (compare_significance)")
    return found


def reasons_within_noise(result: RunComparison | Comparison, noise: NoiseFloor) -> list[str]:
    """The threshold verdict's reasons whose metric moved less than its noise floor.

    The reported deltas are held against the floors: ``pass_rate_delta`` (a fraction) against
    ``pass_rate``'s, ``avg_score_delta`` (points) against ``avg_score``'s. Latency has no noise
    floor and is never forgiven.
    """
    deltas = {
        PASS_RATE: result.aggregate.pass_rate_delta,
        AVG_SCORE: result.aggregate.avg_score_delta,
    }
    out = []
    for reason in result.verdict.reasons:
        metric = next((m for m in (PASS_RATE, AVG_SCORE) if reason.startswith(m + " ")), None)
        floor = None if metric is None else noise.floors.get(metric)
        delta = None if metric is None else deltas.get(metric)
        if floor is not None and delta is not None and abs(delta) < floor:
            out.append(reason)
    return out


def noise_floor_of_file(path: str | Path) -> NoiseFloor:
    """The floors of a saved `evaledger noise --json` (exit 2 naming what is wrong)."""
    where = Path(path)
    try:
        size = where.stat().st_size
        if size > MAX_NOISE_FILE_BYTES:
            raise ValidationError(
                f"noise_floor: {where} is {size} bytes; a noise file is at most "
                f"{MAX_NOISE_FILE_BYTES}",
                field="noise_floor",
            )
        data = orjson.loads(where.read_bytes())
    except OSError as e:
        raise ValidationError(
            f"noise_floor: cannot read {where}: {e.strerror}", field="noise_floor"
        ) from None
    except orjson.JSONDecodeError as e:
        raise ValidationError(
            f"noise_floor: {where} is not JSON: {e}", field="noise_floor"
        ) from None
    return NoiseFloor(floors=_floors(data, str(where)), source=f"file {where.name}")


def _floors(data: Any, where: str) -> dict[str, float]:
    metrics = data.get("metrics") if isinstance(data, dict) else None
    if not isinstance(metrics, list):
        raise ValidationError(
            f"noise_floor: {where} has no metrics list (save `evaledger noise --json`)",
            field="noise_floor.metrics",
        )
    out: dict[str, float] = {}
    for i, item in enumerate(metrics):
        name = item.get("metric") if isinstance(item, dict) else None
        floor = item.get("noise_floor") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise ValidationError(
                f"noise_floor: metrics[{i}].metric must be a name", field=f"metrics[{i}].metric"
            )
        if floor is None:
            continue
        if (
            isinstance(floor, bool)
            or not isinstance(floor, int | float)
            or not (math.isfinite(floor) and floor >= 0)
        ):
            raise ValidationError(
                f"noise_floor: metrics[{i}].noise_floor must be a number >= 0, got {floor!r}",
                field=f"metrics[{i}].noise_floor",
            )
        out[name] = float(floor)
    return out


def measure_noise(
    services: Services,
    run_ids: Sequence[UUID],
    *,
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
) -> NoiseReport:
    """The noise of a setup from A/A runs (same agent version and suite; 2 or more).

    One run with repetitions is taken as one A/A run per repetition index.
    """
    _check_levels(alpha, power)
    if not run_ids:
        raise ValidationError("runs: give two or more runs of one setup (A/A)", field="runs")
    if len(run_ids) > MAX_NOISE_RUNS:
        raise ValidationError(f"runs: at most {MAX_NOISE_RUNS} runs", field="runs")
    if len(set(run_ids)) != len(run_ids):
        raise ValidationError("runs: a run is given twice", field="runs")
    rows = [services.reads.get_run(r) for r in run_ids]
    setups = {
        (r.project, r.agent.get("name"), r.agent.get("version"), r.suite.get("name")) for r in rows
    }
    if len(setups) != 1:
        raise ValidationError(
            "runs: an A/A measure needs runs of one agent version and suite in one project; "
            f"got {len(setups)} setups",
            field="runs",
        )
    if len(run_ids) == 1:
        samples = _repetition_samples(_scores(services, run_ids[0]))
    else:
        index: dict[str, int] = {}  # one code per test case across the runs: they are paired
        samples = [execution_samples(_scores(services, r), index)[0] for r in run_ids]
    names = [PASS_RATE, AVG_SCORE]
    names += sorted({n for s in samples for n in s} - {PASS_RATE, AVG_SCORE})
    metrics = [
        metric_noise(n, [s[n] for s in samples], alpha=alpha, power=power)
        for n in names
        if all(n in s for s in samples)
    ]
    splits = run_variance_split(services, run_ids)
    head = next((m for m in metrics if m.metric == PASS_RATE), metrics[0] if metrics else None)
    reading = "no metric is measured in every run"
    if head is not None and head.noise_floor is not None and head.mde is not None:
        reading = noise_reading(head.metric, head.noise_floor, head.mde, alpha, power)
    return NoiseReport(
        run_ids=[str(r) for r in run_ids],
        alpha=alpha,
        power=power,
        metrics=metrics,
        variance_split=splits,
        reading=reading,
    )


def _repetition_samples(scores: Sequence[Mapping[str, Any]]) -> list[Samples]:
    """One run's repetitions as A/A runs: every repetition index is a run of its own.

    Each repetition is an independent execution of the same agent on the same suite, so the
    run's first repetitions against its second ones are an A/A pair (on the cases repeated).
    """
    by_repetition: dict[int, list[Mapping[str, Any]]] = {}
    for score in scores:
        by_repetition.setdefault(score["repetition"], []).append(score)
    if len(by_repetition) < 2:
        raise ValidationError(
            "runs: one run measures noise only with repetitions; give two or more A/A runs",
            field="runs",
        )
    index: dict[str, int] = {}
    return [execution_samples(by_repetition[r], index)[0] for r in sorted(by_repetition)]


def noise_floor_of_runs(
    services: Services, run_ids: Sequence[UUID], alpha: float = DEFAULT_ALPHA
) -> NoiseFloor:
    """The noise floors measured on A/A runs (as `measure_noise`)."""
    report = measure_noise(services, run_ids, alpha=alpha)
    return NoiseFloor(
        floors={m.metric: m.noise_floor for m in report.metrics if m.noise_floor is not None},
        source=f"{len(run_ids)} A/A runs",
    )


def run_variance_split(services: Services, run_ids: Sequence[UUID]) -> list[VarianceSplit]:
    """Per metric the variance split of the runs' judge verdicts (repetitions and a panel)."""
    rows: dict[str, list[Verdict]] = {}
    for run_id in run_ids:
        for facts in services.reads.scoring_facts(run_id):
            if facts.canceled or facts.errored:
                continue
            case = facts.test_id or facts.test_case_key
            for verdict in facts.verdicts:
                if verdict.invalidated or verdict.error is not None:
                    continue
                for m in verdict.metric_scores:
                    value = (1.0 if m.passed else 0.0) if m.passed is not None else m.score
                    if value is not None:
                        rows.setdefault(m.metric, []).append((case, facts.case_id, float(value)))
    out = []
    for metric in sorted(rows):
        split = variance_split(metric, rows[metric])
        if split.agent is not None or split.judge is not None:
            out.append(split)
    return out


def noise_reading(metric: str, floor: float, mde: float, alpha: float, power: float) -> str:
    """The one-line reading of a metric's noise floor and MDE (a rate in points)."""
    scale = 100.0 if metric == PASS_RATE else 1.0
    found = (
        "no change of the rate is found reliably at this size (its MDE exceeds 100 points)"
        if metric == PASS_RATE and mde > 1
        else f"a change of {mde * scale:.1f} is found with {100 * power:.0f} % power"
    )
    return (
        f"{metric}: A/A runs differ by up to {floor * scale:.1f} points by chance "
        f"({100 * (1 - alpha):.0f} %); {found}"
    )


def plan_runs(
    services: Services | None,
    metric: str,
    baseline: float,
    mde: float,
    *,
    repetitions: int = 1,
    icc_runs: Sequence[UUID] = (),
    icc: float | None = None,
    sd: float | None = None,
    size_runs: Sequence[UUID] = (),
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
) -> PlanReport:
    """Cases (and repetitions) needed for ``mde``; the MDE of the ``size_runs``' sizes."""
    _check_levels(alpha, power)
    if services is None and (icc_runs or size_runs):
        raise ValueError("plan_runs: runs to read need the services")
    estimate = None
    if icc_runs and services is not None:
        values: list[float] = []
        clusters: list[int] = []
        index: dict[str, int] = {}  # a test case's executions in every run are one group
        for run_id in icc_runs:
            sample = execution_samples(_scores(services, run_id), index)[0].get(metric)
            if sample is None:
                raise ValidationError(f"metric: run {run_id} has no {metric!r}", field="metric")
            values += sample[0].tolist()
            clusters += sample[1].tolist()
        estimate = icc_oneway(values, clusters)
        if estimate.icc is None:
            raise ValidationError(
                "icc: the runs give no test case two executions (repetitions or 2+ runs)",
                field="icc",
            )
        icc = estimate.icc
    try:
        plan = plan_sample_size(
            metric, baseline, mde, alpha=alpha, power=power, repetitions=repetitions,
            icc=icc or 0.0, sd=sd,
        )  # fmt: skip
        sizes = [
            detectable_difference(
                metric,
                baseline,
                cases,
                alpha=alpha,
                power=power,
                repetitions=reps,
                icc=icc or 0.0,
                sd=sd,
            )
            for cases, reps in (_sizes(services, size_runs) if services else [])
        ]
    except ValueError as e:
        field = str(e).split(":", 1)[0]
        raise ValidationError(str(e), field=field) from None
    return PlanReport(plan=plan, icc=estimate, sizes=sizes, reading=_plan_reading(plan, sizes))


def _sizes(services: Services, run_ids: Sequence[UUID]) -> list[tuple[int, int]]:
    out = []
    for run_id in run_ids:
        agg = services.reads.summary(run_id).aggregate
        cases = agg.unique_test_case_count
        reps = max(1, round(agg.total_executions / cases)) if cases else 1
        out.append((cases, reps))
    return out


def _plan_reading(plan: Plan, sizes: Sequence[SizeMde]) -> str:
    scale = 100.0 if plan.metric == PASS_RATE and plan.baseline <= 1 else 1.0
    unit = " points" if scale == 100.0 else ""
    if plan.cases_needed is None:
        text = (
            f"{plan.metric}: a change of {plan.mde * scale:g}{unit} needs more cases than any run"
        )
    else:
        text = (
            f"{plan.metric}: {plan.cases_needed} test cases × {plan.repetitions} repetition(s) "
            f"find a change of {plan.mde * scale:g}{unit} with {100 * plan.power:.0f} % power "
            f"at α = {plan.alpha:g}"
        )
    for size in sizes:
        if size.mde is not None:
            text += (
                f"; a run of {size.cases} cases × {size.repetitions} detects "
                f"{size.mde * scale:.1f}{unit}"
            )
    return text


def gate_within_noise(gate: GateResult, noise: NoiseFloor) -> list[str]:
    """The gate's failed checks whose shortfall is below the noise floor of their metric.

    ``pass_rate`` (`--min-pass-rate`) and the cases threshold (a percentage) are held against
    the pass rate's floor, the metrics threshold against the average score's; a source metric
    (`--min SCORER/METRIC`) against ``scorer:SCORER/METRIC``'s when the noise file has one.
    """
    agg = gate.aggregate
    shortfalls: dict[str, tuple[float | None, float | None]] = {
        "metrics_passed": (
            _short(agg.metrics_pass_threshold, agg.weighted_metrics_score_pct),
            noise.floors.get(AVG_SCORE),
        ),
        "cases_passed": (
            _short(agg.cases_pass_threshold, agg.cases_pass_rate_pct),
            _times(noise.floors.get(PASS_RATE), 100.0),
        ),
    }
    for check in gate.checks:
        floor = noise.floors.get(PASS_RATE if check.name == PASS_RATE else "scorer:" + check.name)
        shortfalls[check.name] = (check.minimum - check.value, floor)
    out = []
    for name in gate.failed:
        short, floor = shortfalls.get(name, (None, None))
        if short is not None and floor is not None and short < floor:
            out.append(name)
    return out


def _short(minimum: float | None, value: float | None) -> float | None:
    return None if minimum is None or value is None else minimum - value


def _times(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _check_levels(alpha: float, power: float) -> None:
    if not 0 < alpha < 1:
        raise ValidationError(f"alpha: must be in (0, 1), got {alpha}", field="alpha")
    if not 0.5 < power < 1:
        raise ValidationError(f"power: must be in (0.5, 1), got {power}", field="power")
