"""Run-level scoring (DESIGN §3.2): a run's aggregate from what its cases are and decided.

A run aggregate has two parts. `RunFigures` is what no spec changes — counts, latency, tokens,
cost, named-score means — built by one definition (`RunFigures.of`) from one `CaseUsage` per
case; the reference path (`summarize_run`, over case scores) and the columnar rescore
(`scoring.rescore`, over scoring facts, its figures stored with its inputs) both build it so.
The rest follows from the cases' decisions under a spec (`decided_figures`: pass rate,
thresholds, coverage), from the metric results (`per_metric_means`) and from the source's
scorers. `RunFigures.aggregate` joins them into the `RunAggregate`, for both paths.

Case-level scoring (`score_case`, repetitions) is `scoring.case`, which builds on this module.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, Protocol

from evaledger.domain.metrics import ScoreType
from evaledger.domain.spec import ScoringSpec
from evaledger.domain.types import variant_label
from evaledger.scoring.exact import run_mean
from evaledger.scoring.means import mean
from evaledger.scoring.models import (
    CaseScore,
    CaseStatus,
    Coverage,
    MetricResult,
    RunAggregate,
    TestCaseResult,
    VariantFigures,
)
from evaledger.scoring.named import named_score_means
from evaledger.scoring.scorer_metrics import pass_hat_k, reported_mismatches, scorer_metrics
from evaledger.scoring.stats import percentile

__all__ = [
    "P95_MIN_SAMPLES",
    "CaseUsage",
    "RunFigures",
    "decided_figures",
    "latency_samples",
    "pass_rate_figures",
    "per_metric_means",
    "summarize_run",
    "threshold_passed",
    "variant_figures",
]

P95_MIN_SAMPLES = 20
"""Below this many samples a 95th percentile is meaningless (Connexity): max / None instead."""


class Latency(Protocol):
    """What the latency figures read of a case (a `CaseScore` or a `CaseUsage`)."""

    @property
    def latency_p50_ms(self) -> int | None: ...
    @property
    def errored(self) -> bool: ...


def latency_samples(cases: Iterable[Latency]) -> list[float]:
    """Per-case p50 latencies that feed run and per-test-case latency: errored cases left out.

    A crash or timeout is reported as an error, not as a slow answer.
    """
    return [
        float(c.latency_p50_ms) for c in cases if c.latency_p50_ms is not None and not c.errored
    ]


class CaseUsage(NamedTuple):
    """What a run's spec-independent figures read of one case, whatever its status.

    Built from a case score (`of_score`) or from the case's scoring facts
    (`scoring.case.case_usage`): the same values either way.
    """

    test_case_key: str
    skipped: bool
    """Not an execution: status skipped (a skipped or xfailed test that did not also error)."""
    errored: bool
    canceled: bool
    latency_p50_ms: int | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    judge_cost_usd: float
    named_scores: Mapping[str, float]

    @classmethod
    def of_score(cls, s: CaseScore) -> CaseUsage:
        """A scored case's usage (its status says whether it was an execution)."""
        return cls(
            s.test_case_key,
            s.status is CaseStatus.SKIPPED,
            s.errored,
            s.canceled,
            s.latency_p50_ms,
            s.prompt_tokens,
            s.completion_tokens,
            s.cost_usd,
            s.judge_cost_usd,
            s.named_scores,
        )


@dataclass(frozen=True, slots=True)
class RunFigures:
    """The run aggregate's spec-independent figures (the `RunAggregate` fields of the same name).

    Values are unrounded. A case that was not an execution (a skipped or xfailed test) is only
    counted in `skipped_count` and `unique_test_case_count`, and out of every other figure
    (issue 30). Latency figures are over the per-case p50s of the executions that did not error;
    tokens and cost add up every execution, errored ones included (the agent spent them).
    Percentiles are `scoring.stats.percentile`; p95 needs `P95_MIN_SAMPLES` cases.
    """

    unique_test_case_count: int
    total_executions: int
    error_count: int
    canceled_count: int
    """Executions canceled and not errored (status canceled): also `coverage.canceled`."""
    skipped_count: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_max_ms: float | None
    latency_avg_ms: float | None
    total_prompt_tokens: int
    total_completion_tokens: int
    total_tokens: int
    total_cost_usd: float
    judge_cost_usd: float
    named_score_means: dict[str, float]

    @classmethod
    def of(cls, cases: Iterable[CaseUsage]) -> RunFigures:
        """The one definition of a run's spec-independent figures, from its cases in order."""
        everything = cases if isinstance(cases, list) else list(cases)
        executions = [c for c in everything if not c.skipped]
        latencies = latency_samples(executions)
        prompt = sum(c.prompt_tokens for c in executions)
        completion = sum(c.completion_tokens for c in executions)
        return cls(
            unique_test_case_count=len({c.test_case_key for c in everything}),
            total_executions=len(executions),
            error_count=sum(c.errored for c in executions),
            canceled_count=sum(c.canceled and not c.errored for c in executions),
            skipped_count=len(everything) - len(executions),
            latency_p50_ms=percentile(latencies, 50) if latencies else None,
            latency_p95_ms=(
                percentile(latencies, 95) if len(latencies) >= P95_MIN_SAMPLES else None
            ),
            latency_max_ms=max(latencies) if latencies else None,
            latency_avg_ms=mean(latencies),
            total_prompt_tokens=prompt,
            total_completion_tokens=completion,
            total_tokens=prompt + completion,
            # Summed in case order from 0, as the figures always were (not fsum): same bits.
            total_cost_usd=sum(c.cost_usd for c in executions if c.cost_usd is not None),
            judge_cost_usd=sum(c.judge_cost_usd for c in executions),
            named_score_means=named_score_means(executions),
        )

    def to_dict(self) -> dict[str, Any]:
        """The figures by field name (plain data: the rescore inputs store them as JSON)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunFigures:
        """Figures stored by `to_dict`."""
        return cls(**data)

    def aggregate(
        self,
        spec: ScoringSpec,
        decisions: Iterable[tuple[float | None, bool | None, str, int]],
        *,
        per_metric_means: dict[str, float],
        self_judged_count: int,
        source: Mapping[str, Any] | None = None,
    ) -> RunAggregate:
        """The run aggregate under `spec`: these figures with what the decisions make of them.

        `decisions` as `decided_figures` reads them; `source`: the source's scorer figures
        (`source_metrics`), none for a run without source scorers.
        """
        decided = decided_figures(decisions, spec)
        return RunAggregate(
            **self.to_dict(),
            **decided["fields"],
            per_metric_means=per_metric_means,
            coverage=Coverage(
                scored=decided["scored"],
                unscored=decided["unscored"],
                errored=self.error_count,
                pending=decided["pending"],
                canceled=self.canceled_count,
            ),
            self_judged_count=self_judged_count,
            **(source or {}),
        )


def summarize_run(scores: Sequence[CaseScore], spec: ScoringSpec) -> RunAggregate:
    """Connexity AggregateMetrics of one run's case scores plus coverage (DESIGN §3.2).

    Values are unrounded. Canceled, errored and pending cases stay in the pass-rate denominator;
    pending ones are never failed. A case that was not an execution (status skipped: a skipped or
    xfailed test) is only counted in `skipped_count`. The spec-independent figures are
    `RunFigures` (latency, tokens, cost: see there).
    """
    figures = RunFigures.of([CaseUsage.of_score(s) for s in scores])
    # A case that was not an execution is out of every spec-dependent figure too (issue 30).
    executions = [s for s in scores if s.status is not CaseStatus.SKIPPED]
    return figures.aggregate(
        spec,
        [(s.overall_score if s.scored else None, s.passed, s.status.value, 1) for s in executions],
        per_metric_means=per_metric_means(
            [s for s in executions if s.scored and s.overall_score is not None], spec
        ),
        self_judged_count=sum(s.self_judged for s in executions),
        source=source_metrics(executions, spec),
    )


def pass_rate_figures(
    passed: int, total: int, spec: ScoringSpec
) -> tuple[float, float | None, bool | None]:
    """A run's pass rate (fraction), its cases pass rate (%) and the cases threshold's verdict.

    The seed's figures (DESIGN §3.2), kept whatever else is shown: the pass rate is passed /
    every execution (errored, canceled and pending cases stay in the denominator: an
    all-errored run is 0.0); no executions → pass rate 0.0, cases pass rate and flag null.
    A display may print "—" for a run with no case decided (`RunAggregate.decided`, from the
    counts): the fields keep these values (issue 29).
    """
    if total == 0:
        return 0.0, None, None
    pct = 100 * passed / total
    return passed / total, pct, threshold_passed(pct, spec.cases_pass_threshold, spec)


def decided_figures(
    decisions: Iterable[tuple[float | None, bool | None, str, int]], spec: ScoringSpec
) -> dict[str, Any]:
    """What the run aggregate makes of its cases' decisions under `spec` (`summarize_run`).

    `decisions`: (overall_score of a scored case else None, passed, status value, how many cases
    were so decided). Returns the aggregate's spec-dependent `fields`, and the `scored`,
    `unscored` and `pending` counts of its coverage. The columnar rescore passes each distinct
    decision once, with its count.
    """
    total = passed = failed = unscored = pending = 0
    overall_scores: list[float] = []
    for overall, passed_, status, count in decisions:
        if status == _SKIPPED_VALUE:
            continue  # not an execution: out of every count here (skipped_count has it)
        total += count
        if passed_ is True:
            passed += count
        elif passed_ is False and status != _ERRORED_VALUE:
            failed += count  # an errored case is not a failed one
        if overall is not None:
            overall_scores.extend([overall] * count)
        if status == _UNSCORED_VALUE:
            unscored += count
        elif status == _PENDING_VALUE:
            pending += count
    metrics_pct = run_mean(overall_scores)
    pass_rate, cases_pct, cases_passed = pass_rate_figures(passed, total, spec)
    fields = {
        "passed_count": passed,
        "failed_count": failed,
        "pass_rate": pass_rate,
        "avg_overall_score": metrics_pct,
        "weighted_metrics_score_pct": metrics_pct,
        "metrics_pass_threshold": spec.metrics_pass_threshold,
        "metrics_passed": threshold_passed(metrics_pct, spec.metrics_pass_threshold, spec),
        "cases_pass_rate_pct": cases_pct,
        "cases_pass_threshold": spec.cases_pass_threshold,
        "cases_passed": cases_passed,
    }
    return {
        "fields": fields,
        "scored": len(overall_scores),
        "unscored": unscored,
        "pending": pending,
    }


_ERRORED_VALUE = CaseStatus.ERRORED.value
_UNSCORED_VALUE = CaseStatus.UNSCORED.value
_PENDING_VALUE = CaseStatus.PENDING.value
_SKIPPED_VALUE = CaseStatus.SKIPPED.value


def threshold_passed(pct: float | None, threshold: float, spec: ScoringSpec) -> bool | None:
    """A run threshold's verdict; None when there is no figure or the threshold does not apply.

    A run that brings its source's scorers (an import) is judged by what the source or the
    user configured, not by Connexity's thresholds it never chose (issue 18).
    """
    if pct is None or spec.scorers:
        return None
    return pct >= threshold


def source_metrics(scores: Sequence[CaseScore], spec: ScoringSpec) -> dict[str, Any]:
    """The source's metrics, its reported figures that differ, and pass^k (issue 18)."""
    computed = scorer_metrics(scores, spec.scorers)
    return {
        "scorer_metrics": computed,
        "scorer_metrics_mismatched": reported_mismatches(computed, spec.scorers),
        # Native runs keep pass^k per test case (TestCaseResult); the run figure is the
        # source's (tau-bench reports it), so it is given where the run has source scorers.
        "pass_hat_k": pass_hat_k(scores) if spec.scorers else {},
    }


def per_metric_means(scores: Sequence[CaseScore], spec: ScoringSpec) -> dict[str, float]:
    """Scored metrics: mean 0-5; binary: fraction passing. Over the cases that have the metric."""
    # One pass over the cases for all metrics (same selection as `case.metric_results`).
    by_metric: dict[str, list[MetricResult]] = {m.metric: [] for m in spec.metrics}
    for s in scores:
        for m in s.metric_scores:
            found = by_metric.get(m.metric)
            if found is not None and m.score is not None:
                found.append(m)
    means: dict[str, float] = {}
    for selected in spec.metrics:
        results = by_metric[selected.metric]
        if results and selected.score_type is ScoreType.BINARY:
            means[selected.metric] = sum(m.passed is True for m in results) / len(results)
        elif results:
            means[selected.metric] = statistics.fmean(m.score or 0.0 for m in results)
    return means


def variant_figures(results: Sequence[TestCaseResult], spec: ScoringSpec) -> list[VariantFigures]:
    """Each variant's executions and pass rate (sorted by variant), from the reduced results.

    [] unless some test case has several variants (promptfoo's providers × prompts in one run):
    a variant that is only its test case's attribute (one provider, a persona per test) is no
    breakdown of the run, whose headline is then the run's own.
    """
    if len(results) == len({r.test_case_key for r in results}):
        return []
    totals: dict[str, list[int]] = {}
    for r in results:
        t = totals.setdefault(r.variant, [0, 0, 0, 0])
        t[0] += 1
        t[1] += r.repetitions
        t[2] += r.passes
        t[3] += r.failures
    out = []
    for variant in sorted(totals):
        tests, executions, passed, failed = totals[variant]
        out.append(
            VariantFigures(
                variant=variant,
                label=variant_label(variant),
                test_case_count=tests,
                executions=executions,
                passed_count=passed,
                failed_count=failed,
                pass_rate=pass_rate_figures(passed, executions, spec)[0],
            )
        )
    return out
