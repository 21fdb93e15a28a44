"""The read use cases that judge a whole run: gate, grade, rollup and judge agreement.

Each reads the read models and the reports (`projections/reports.py`) and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from evaledger.projections.reports import require_closed
from evaledger.projections.votes import agreement_report
from evaledger.scoring.agreement import AgreementReport
from evaledger.scoring.grading import Grade, GradingSpec
from evaledger.scoring.models import RunAggregate
from evaledger.scoring.rollups import Rollup
from evaledger.scoring.scorer_metrics import GateCheck, gate_checks

if TYPE_CHECKING:
    from evaledger.application.ports import Services

THRESHOLD_FIELDS = ("metrics_passed", "cases_passed")
"""The aggregate's own pass/fail fields: a `False` in either fails the run's thresholds."""


@dataclass(frozen=True)
class GateResult:
    """A run's gate: its aggregate, the checks asked for, which failed and whether any was set."""

    run_id: UUID
    aggregate: RunAggregate
    checks: list[GateCheck]
    configured: bool
    """The run's spec set a threshold (or a check was asked for)."""
    thresholds_configured: bool
    """The run's own spec set a metrics or cases threshold."""
    failed: list[str]

    @property
    def passed(self) -> bool:
        """No threshold and no check failed."""
        return not self.failed


def gate_run(
    services: Services,
    run_id: UUID,
    minimums: Mapping[str, float] | None = None,
    min_pass_rate: float | None = None,
) -> GateResult:
    """The run's own thresholds plus minimums on source metrics and the pass rate.

    An open (incomplete) run is refused.
    """
    require_closed(services.reads.get_run(run_id))
    agg = services.reads.summary(run_id).aggregate
    checks = gate_checks(agg, dict(minimums or {}), min_pass_rate)
    configured = [n for n in THRESHOLD_FIELDS if getattr(agg, n) is not None]
    failed = [n for n in THRESHOLD_FIELDS if getattr(agg, n) is False]
    failed += [c.name for c in checks if not c.passed]
    return GateResult(
        run_id=run_id,
        aggregate=agg,
        checks=list(checks),
        configured=bool(configured or checks),
        thresholds_configured=bool(configured),
        failed=failed,
    )


def grading_for(
    services: Services, run_id: UUID, preset: str | None, min_score: float | None
) -> GradingSpec:
    """The grading spec: a preset, else the run spec's `grading` section."""
    return services.reports.grading_for(run_id, preset, min_score)


def has_grading_section(services: Services, run_id: UUID) -> bool:
    """Whether the run's own spec holds a grading section."""
    return bool(services.reads.run_spec(run_id).grading)


def grade_run(
    services: Services,
    run_id: UUID,
    grading: GradingSpec | None = None,
    *,
    preset: str | None = None,
    min_score: float | None = None,
    strategic_only: bool = False,
) -> Grade:
    """The run graded (iFixAi rules) under `grading`, else a preset or its spec's section."""
    if grading is None:
        grading = services.reports.grading_for(run_id, preset, min_score)
    return services.reports.grade(run_id, grading, strategic_only=strategic_only)


def rollup_runs(
    services: Services,
    run_ids: Sequence[UUID],
    rows: Sequence[str],
    columns: Sequence[str],
    metrics: Sequence[str] = (),
) -> Rollup:
    """A Voxli pivot of one or several runs; `metrics` declare custom per-message metrics."""
    return services.reports.rollup(run_ids, rows, columns, metrics)


def run_agreement(services: Services, run_id: UUID) -> AgreementReport:
    """The run's judge agreement figures, once the projections have caught up."""
    services.sync()
    spec = services.reads.run_spec(run_id)
    return agreement_report(services.reads.engine, run_id, spec, services.reads.facts(run_id))
