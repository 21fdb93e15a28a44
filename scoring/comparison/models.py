"""The comparison's input and result models (Connexity `GET /runs/compare` field names)."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from pydantic import Field

from evaledger.domain.events import AgentSnapshot
from evaledger.domain.model import StrictModel
from evaledger.domain.spec import ComparisonThresholds, ScoringSpec
from evaledger.scoring.comparison.significance import ComparisonSignificance
from evaledger.scoring.models import CaseScore, RunAggregate
from evaledger.scoring.named import NamedScoreComparison
from evaledger.scoring.stats import PairedStatistics


def _empty(value: Any) -> bool:
    # Variant fields are left out when empty: comparisons of runs without variants keep their
    # exact shape.
    return not value


CaseStatus = Literal["regression", "improvement", "unchanged", "error"]
MetricStatus = Literal["regression", "improvement", "unchanged", "pass→fail", "fail→pass"]


# ---------------------------------------------------------------------------------------------
# Input


class ComparedRun(StrictModel):
    """One side of a comparison: a run's snapshot, its scored cases and its aggregate.

    ``cases`` and ``aggregate`` are expected to be scored under the same spec (the run's own or
    a replay spec); the comparison only re-reduces repetitions.
    """

    run_id: UUID | str
    status: str = Field(description="Run status; the API only compares completed runs.")
    suite_name: str
    suite_version: int | str | None = None
    agent: AgentSnapshot
    config: dict[str, Any] = Field(default_factory=dict, description="The run config as given.")
    judge: dict[str, Any] = Field(
        default_factory=dict, description="provider / model / pass_threshold / metrics."
    )
    spec: ScoringSpec
    cases: list[CaseScore] = Field(default_factory=list)
    aggregate: RunAggregate


class CompareThresholds(StrictModel):
    """Per-request threshold overrides; None takes the spec's `comparison` value."""

    max_pass_rate_drop: float | None = Field(default=None, ge=0, description="Fraction (0.0).")
    max_avg_score_drop: float | None = Field(default=None, ge=0, description="Points (5.0).")
    max_latency_increase_pct: float | None = Field(
        default=None, ge=0, description="Fraction (0.2 = 20%)."
    )
    case_score_delta: float | None = Field(default=None, ge=0, description="Points (5.0).")

    def resolve(self, defaults: ComparisonThresholds) -> ComparisonThresholds:
        """Return the thresholds in effect: these overrides over ``defaults``."""
        overrides = self.model_dump(exclude_none=True)
        return defaults.model_copy(update=overrides)


# ---------------------------------------------------------------------------------------------
# Output (Connexity RunComparison field names)


class MetricDelta(StrictModel):
    """One metric of one matched test case, baseline vs candidate."""

    metric: str
    is_binary: bool
    baseline_score: float | None = Field(default=None, description="Scored: mean 0-5.")
    candidate_score: float | None = None
    delta: float | None = Field(default=None, description="Scored only; None for binary.")
    baseline_label: str | None = None
    candidate_label: str | None = None
    status: MetricStatus


class MetricAggregateDelta(StrictModel):
    """One metric over the matched test cases (scored: mean 0-5; binary: fraction passing)."""

    metric: str
    is_binary: bool
    baseline_avg: float | None = None
    candidate_avg: float | None = None
    delta: float | None = None


class RepetitionCounts(StrictModel):
    """How many executions each side had for a test case."""

    baseline: int
    candidate: int


class TestCaseComparison(StrictModel):
    """One matched test case, repetitions reduced on both sides."""

    __test__ = False
    test_case_key: str
    variant: str = Field(
        default="",
        exclude_if=_empty,
        description="The variant compared (promptfoo: `provider | prompt`), as `variant_label` "
        "reads it; each test case × variant is a row of its own. Left out when empty.",
    )
    status: CaseStatus
    baseline_passed: bool | None = None
    candidate_passed: bool | None = None
    baseline_score: float | None = None
    candidate_score: float | None = None
    score_delta: float | None = Field(
        default=None,
        description="candidate - baseline, 4 dp; |score_delta| > case_score_delta (strict) "
        "classifies a case whose pass/fail did not flip.",
    )
    baseline_latency_ms: float | None = Field(
        default=None,
        description="Mean over the test case's repetitions that did not error of each one's p50 "
        "assistant-turn latency (int(median) of its turns); None without such a repetition.",
    )
    candidate_latency_ms: float | None = Field(
        default=None, description="As baseline_latency_ms, for the candidate."
    )
    latency_delta_ms: float | None = Field(
        default=None, description="candidate_latency_ms - baseline_latency_ms, 4 dp."
    )
    metric_deltas: list[MetricDelta] = Field(default_factory=list)
    baseline_flaky: bool = False
    candidate_flaky: bool = False
    repetitions: RepetitionCounts


class VariantDelta(StrictModel):
    """One variant (promptfoo provider × prompt) of both runs: its pass rates and case classes."""

    variant: str = Field(description="The variant's label (`variant_label`).")
    baseline_pass_rate: float | None = Field(
        default=None, description="The run pass rate's rule over this variant's executions."
    )
    candidate_pass_rate: float | None = None
    pass_rate_delta: float | None = Field(default=None, description="Fraction, 4 dp.")
    baseline_executions: int = 0
    candidate_executions: int = 0
    total_regressions: int = 0
    total_improvements: int = 0
    total_unchanged: int = 0
    total_errors: int = 0


class AggregateComparison(StrictModel):
    """Run-level deltas (candidate - baseline, rounded 4 dp) and case status counts."""

    baseline_metrics: RunAggregate
    candidate_metrics: RunAggregate
    pass_rate_delta: float = Field(
        description="Fraction, 4 dp; the verdict compares -pass_rate_delta > max_pass_rate_drop "
        "(errored cases are in each side's pass-rate denominator)."
    )
    avg_score_delta: float | None = Field(
        default=None,
        description="weighted_metrics_score_pct delta, points, 4 dp; the verdict compares "
        "-avg_score_delta > max_avg_score_drop.",
    )
    latency_avg_delta_ms: float | None = Field(
        default=None,
        description="latency_avg_ms delta, 4 dp: run latency is the mean of per-case p50s over "
        "cases that did not error.",
    )
    latency_avg_increase_pct: float | None = Field(
        default=None,
        description="(candidate - baseline) / baseline latency_avg_ms as a fraction, 4 dp; the "
        "verdict compares it > max_latency_increase_pct. None when a side has no latency or "
        "the baseline's is 0.",
    )
    latency_p95_delta_ms: float | None = Field(
        default=None, description="latency_p95_ms delta (over per-case p50s), 4 dp."
    )
    cost_delta_usd: float | None = Field(
        default=None,
        description="Agent cost only: total_cost_usd delta (every case, errored ones included), "
        "4 dp; judge calls are judge_cost_delta_usd. None when a side carries no cost data.",
    )
    judge_cost_delta_usd: float | None = Field(
        default=None,
        description="judge_cost_usd delta (every judge call, invalidated ones included), 4 dp; "
        "None when neither side paid for a judge call.",
    )
    total_regressions: int = 0
    total_improvements: int = 0
    total_unchanged: int = 0
    total_errors: int = 0
    per_metric_aggregate_deltas: list[MetricAggregateDelta] = Field(default_factory=list)
    per_variant: list[VariantDelta] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="Per variant (promptfoo provider × prompt): pass rates and case classes; "
        "left out when neither run has variants.",
    )


class FieldChange(StrictModel):
    """One changed field with its old and new value."""

    field: str
    old_value: Any = None
    new_value: Any = None


class PromptDiff(StrictModel):
    """The agent system prompt, baseline vs candidate."""

    changed: bool = True
    unified_diff: str
    change_ratio: float = Field(description="0.0 = identical, 1.0 = completely different.")
    added_line_count: int = 0
    removed_line_count: int = 0


class ToolDiff(StrictModel):
    """Tools offered to the agent, compared by name."""

    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list, description="Description or parameters.")
    modified: list[FieldChange] = Field(
        default_factory=list, description="`<tool>.description` / `<tool>.parameters` changes."
    )


class RunConfigDiff(StrictModel):
    """Structured diff of the two runs' snapshotted configuration."""

    baseline_agent_version: str | None = None
    candidate_agent_version: str | None = None
    agent_name_changed: FieldChange | None = None
    agent_version_changed: FieldChange | None = None
    prompt_diff: PromptDiff | None = None
    tool_diff: ToolDiff | None = None
    model_changed: FieldChange | None = None
    provider_changed: FieldChange | None = None
    judge_provider_changed: FieldChange | None = None
    judge_model_changed: FieldChange | None = None
    judge_pass_threshold_changed: FieldChange | None = None
    judge_metrics_changed: FieldChange | None = None
    suite_changed: FieldChange | None = None
    suite_version_changed: FieldChange | None = None
    config_changes: list[FieldChange] = Field(
        default_factory=list, description="Flattened dotted paths of the run configs."
    )


class RegressionVerdict(StrictModel):
    """The suite-level threshold verdict."""

    regression_detected: bool
    reasons: list[str] = Field(default_factory=list)
    thresholds_used: ComparisonThresholds


class Comparability(StrictModel):
    """Issue 35: what makes two runs' comparison less than like for like, and what it covered.

    Present in a comparison only when there is something to say: the runs ran different
    dataset versions (or one ran none), their graders differ, or cached cases were left out.
    """

    baseline_dataset: str | None = Field(description="The baseline's dataset version, if any.")
    candidate_dataset: str | None = Field(description="The candidate's dataset version, if any.")
    restricted: bool = Field(
        description="Only the items common to both runs (present in both, unchanged between "
        "the versions) were compared; false with --allow-different-datasets."
    )
    common_items: int = Field(description="Test case keys compared (common to both runs).")
    baseline_only_items: list[str] = Field(
        description="Keys only the baseline ran (sorted; the first 1000)."
    )
    baseline_only_count: int
    candidate_only_items: list[str] = Field(
        description="Keys only the candidate ran (sorted; the first 1000)."
    )
    candidate_only_count: int
    changed_items: list[str] = Field(
        description="Keys both ran whose item changed between the two versions (sorted; the "
        "first 1000): left out when restricted."
    )
    changed_count: int
    grader_differences: list[FieldChange] = Field(
        default_factory=list,
        description="What differs between the runs' graders (judge model, judge template hash, "
        "rubric, scorer version): each side's values, sorted. A warning: items are not "
        "restricted for it.",
    )
    cached_items: list[str] = Field(
        default_factory=list,
        description="Keys with a case served from a cache in either run (sorted; the first 1000).",
    )
    baseline_cached: int = Field(default=0, description="The baseline's keys with a cached case.")
    candidate_cached: int = Field(default=0, description="The candidate's keys with a cached case.")
    excluded_cached: bool = Field(
        default=False, description="Those keys were left out of both runs (--exclude-cached)."
    )
    warnings: list[str] = Field(description="What a reader must know, one sentence each.")


class RunComparison(StrictModel):
    """Baseline vs candidate: aggregate deltas, per-case statuses, config diff, verdicts."""

    baseline_run_id: str
    candidate_run_id: str
    baseline_agent_version: str | None = None
    candidate_agent_version: str | None = None
    aggregate: AggregateComparison
    test_case_comparisons: list[TestCaseComparison]
    baseline_only_test_cases: list[str]
    candidate_only_test_cases: list[str]
    config_diff: RunConfigDiff
    verdict: RegressionVerdict
    statistics: PairedStatistics
    warnings: list[str] = Field(default_factory=list)
    named_scores: list[NamedScoreComparison] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="Peer named scores: mean delta and paired statistics (left out if none).",
    )
    significance: ComparisonSignificance | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Issue 37: every metric's clustered difference, p-values corrected for "
        "multiple comparisons, the noise floor; added by compare (left out when absent).",
    )
    comparability: Comparability | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Issue 35: the comparability guard (dataset versions, graders, cached "
        "cases) and what the comparison was restricted to (left out when nothing to say).",
    )
