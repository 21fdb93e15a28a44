"""Result models of the scoring projections: case scores and run aggregates (seed field names)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any
from uuid import UUID

from pydantic import Field, model_validator

from evaledger.domain.model import StrictModel


def _empty(value: Any) -> bool:
    # Named-score fields are left out of dumps when empty: rows and responses of runs without
    # named scores keep their exact shape.
    return not value


class CaseStatus(StrEnum):
    """Where a case stands under a spec."""

    PASSED = "passed"
    FAILED = "failed"
    ERRORED = "errored"
    """Execution error: failed and errored."""
    CANCELED = "canceled"
    """Canceled before it ran: neither passed nor failed."""
    UNSCORED = "unscored"
    """Only judge error verdicts under `judge_errors: unscored`: no score, no pass/fail."""
    PENDING = "pending"
    """Not run yet or still running (nothing but its opening recorded), or run but not judged
    yet (no verdict, outcome or check): never failed, never in failed_count."""
    SKIPPED = "skipped"
    """Not an execution (ExecutionSkipped: a skipped or xfailed test): neither passed nor failed,
    out of total_executions and the pass rate's denominator, counted in skipped_count."""


class GateRule(StrEnum):
    """Which rule decided the case's pass/fail."""

    EXPECTED_OUTCOMES = "expected_outcomes"
    SCORE_THRESHOLD = "score_threshold"
    BLOCKERS = "blockers"
    NO_TRANSCRIPT = "no_transcript"
    EXECUTION_ERROR = "execution_error"
    JUDGE_ERROR = "judge_error"
    OVERRIDE = "override"
    CANCELED = "canceled"
    SKIPPED = "skipped"
    """Not an execution (a skipped or xfailed test)."""
    SCORE_GATE = "score_gate"
    """The spec's gates on named scores decided (e.g. accuracy >= 0.8)."""
    NONE = "none"


class MetricResult(StrictModel):
    """One metric of a case under a spec."""

    metric: str
    score: float | None = Field(description="0-5 (binary: 5 pass, 0 fail); panel-combined.")
    passed: bool | None = Field(default=None, description="Binary metrics only.")
    label: str | None = None
    weight: float = Field(description="Normalised weight in the spec.")
    contribution: float = Field(description="100 × score/5 × weight, points of overall_score.")
    failure_code: str | None = None
    turns: list[int] = Field(default_factory=list)


class OutcomeView(StrictModel):
    """One expected-outcome result as it entered the gate."""

    statement: str
    passed: bool
    severity: str


class CaseScore(StrictModel):
    """One case scored under one spec."""

    case_id: UUID
    run_id: UUID
    test_case_key: str
    test_id: str
    repetition: int
    variant: str = ""
    status: CaseStatus
    overall_score: float | None = Field(description="0-100, rounded to 2 dp; None if unscored.")
    passed: bool | None = Field(description="None when canceled, unscored or pending.")
    errored: bool
    canceled: bool = False
    judge_error: bool = Field(default=False, description="The verdict used is an error verdict.")
    judge_error_message: str | None = None
    scored: bool = Field(description="Counts in the metric mean (has a verdict score).")
    gate: GateRule
    gate_reason: str
    metric_scores: list[MetricResult] = Field(default_factory=list)
    outcome_results: list[OutcomeView] = Field(default_factory=list)
    assertion_score: float | None = Field(default=None, description="Voxli weighted outcomes.")
    blockers_passed: bool | None = None
    verdict_ids: list[UUID] = Field(default_factory=list, description="Verdicts that counted.")
    self_judged: bool = False
    latency_p50_ms: int | None = Field(
        default=None, description="int(median) of this case's assistant-turn latencies."
    )
    latency_p95_ms: float | None = Field(
        default=None,
        description="95th percentile (linear, projections.stats.percentile) of its "
        "assistant-turn latencies with >= 20 turns, else their max.",
    )
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = Field(
        default=None, description="The agent's cost of this execution (judge calls apart)."
    )
    claims_total: int = 0
    claims_supported: int = 0
    hallucinations: int = Field(default=0, description="unsupported + contradicted claims.")
    checks_passed: int = 0
    checks_failed: int = 0
    checks_inconclusive: int = 0
    judge_cost_usd: float = Field(
        default=0.0, description="Cost of every judge call of the case, invalidated ones included."
    )
    named_scores: dict[str, float] = Field(
        default_factory=dict,
        exclude_if=_empty,
        description="Peer named scores, numeric readings (grade C=1 P=0.5 I=0; boolean 1/0).",
    )
    groups: dict[str, str] = Field(
        default_factory=dict,
        exclude_if=_empty,
        description="Its group under each grouped metric of the source's scorers (group key → "
        "group, from its `KEY=VALUE` tag); empty when the run has none.",
    )


class Coverage(StrictModel):
    """How many executions fall in each bucket."""

    scored: int = 0
    unscored: int = 0
    errored: int = 0
    pending: int = 0
    canceled: int = 0


class RunAggregate(StrictModel):
    """Connexity AggregateMetrics plus coverage; unrounded values."""

    @model_validator(mode="before")
    @classmethod
    def _seed_pass_rate(cls, data: Any) -> Any:
        """Read a summary stored while a run with no case decided had a null pass rate.

        Sessions before issue 29 stored `pass_rate` (and `cases_pass_rate_pct`) null for such a
        run; its counts give the seed's figures back (0.0 for an all-errored run).
        """
        if isinstance(data, dict) and data.get("pass_rate", 0.0) is None:
            total = data.get("total_executions") or 0
            passed = data.get("passed_count") or 0
            data = {**data, "pass_rate": passed / total if total else 0.0}
            if total and data.get("cases_pass_rate_pct") is None:
                data["cases_pass_rate_pct"] = 100 * passed / total
        return data

    @property
    def decided(self) -> bool:
        """Some case passed or failed; a display may print "—" for a run where none did.

        A view from the counts for displays (issue 29): `pass_rate` keeps the seed's 0.0.
        """
        return self.passed_count > 0 or self.failed_count > 0

    unique_test_case_count: int
    total_executions: int = Field(
        description="Every case, whatever its status, but the ones that were not an execution "
        "(skipped_count)."
    )
    passed_count: int
    failed_count: int = Field(
        description="Cases that failed; errored cases are in error_count, pending ones in "
        "coverage.pending, never here."
    )
    error_count: int
    canceled_count: int = 0
    skipped_count: int = Field(
        default=0,
        description="Cases that were not an execution (a skipped or xfailed test, status "
        "skipped): shown apart, outside total_executions and the pass rate's denominator.",
    )
    pass_rate: float = Field(
        description="passed_count / total_executions (errored, canceled and pending stay in "
        "the denominator: an all-errored run is 0.0); 0.0 with no executions "
        "(scoring.case.pass_rate_figures)."
    )
    latency_p50_ms: float | None = Field(
        default=None,
        description="Median over the per-case p50 assistant-turn latencies (not over every "
        "message, unlike a rollup's response_time) of the cases that did not error.",
    )
    latency_p95_ms: float | None = Field(
        default=None,
        description="95th percentile (linear, projections.stats.percentile) over the per-case "
        "p50s of the cases that did not error; needs >= 20 such cases, else None.",
    )
    latency_max_ms: float | None = Field(
        default=None, description="Largest per-case p50 of the cases that did not error."
    )
    latency_avg_ms: float | None = Field(
        default=None,
        description="Mean of the per-case p50s of the cases that did not error (an errored "
        "case's partial transcript is left out: a crash or timeout is an error, not a slow "
        "answer). The latency a comparison holds against max_latency_increase_pct.",
    )
    total_prompt_tokens: int = Field(default=0, description="Every case, errored ones included.")
    total_completion_tokens: int = Field(
        default=0, description="Every case, errored ones included."
    )
    total_tokens: int = 0
    total_cost_usd: float = Field(
        default=0.0,
        description="The agent's cost: every case's cost_usd, errored ones included (the agent "
        "spent it); judge calls are not in it (judge_cost_usd). What cost_delta_usd compares.",
    )
    judge_cost_usd: float = Field(
        default=0.0,
        description="Cost of every judge call, invalidated ones included; apart from "
        "total_cost_usd (the reference reports agent + judge as one figure).",
    )
    avg_overall_score: float | None = None
    weighted_metrics_score_pct: float | None = None
    metrics_pass_threshold: float
    metrics_passed: bool | None = None
    cases_pass_rate_pct: float | None = Field(
        default=None,
        description="passed_count / total_executions × 100; null with no executions.",
    )
    cases_pass_threshold: float
    cases_passed: bool | None = None
    per_metric_means: dict[str, float] = Field(
        default_factory=dict, description="Scored: mean 0-5; binary: fraction passing."
    )
    coverage: Coverage = Field(default_factory=Coverage)
    self_judged_count: int = 0
    named_score_means: dict[str, float] = Field(
        default_factory=dict, exclude_if=_empty, description="Mean of each peer named score."
    )
    scorer_metrics: dict[str, float] = Field(
        default_factory=dict,
        exclude_if=_empty,
        description='The source\'s own metrics, "SCORER/METRIC" → figure, recomputed with its '
        "semantics (scoring.scorer_metrics).",
    )
    scorer_metrics_mismatched: dict[str, float] = Field(
        default_factory=dict,
        exclude_if=_empty,
        description="Figures the source reported that the recomputation does not reproduce.",
    )
    pass_hat_k: dict[str, float] = Field(
        default_factory=dict,
        exclude_if=_empty,
        description='pass^k by k ("1", "2", ...) where test cases have repetitions.',
    )


class TestCaseResult(StrictModel):
    """One test case's repetitions reduced to one value by the spec's reducers."""

    __test__ = False
    test_case_key: str
    variant: str = Field(
        default="",
        exclude_if=_empty,
        description="The variant (configuration / persona, joined by U+001F) whose repetitions "
        "these are; a test case has one result per variant. Left out when empty.",
    )
    repetitions: int = Field(description="How many executions (cases) the key has.")
    case_ids: list[UUID]
    score: float | None = Field(description="Score reducer over scored repetitions; None if none.")
    passed: bool | None = Field(description="Pass reducer over decided repetitions; None if none.")
    errored: bool = Field(description="Every repetition errored (the comparison's `error`).")
    any_errored: bool = False
    passes: int = 0
    decided: int = Field(default=0, description="Repetitions with a pass/fail.")
    failures: int = Field(
        default=0,
        exclude_if=_empty,
        description="Repetitions that failed (an errored one is not failed); left out when 0.",
    )
    flaky: bool = Field(default=False, description="Decided repetitions disagree on pass/fail.")
    pass_at_k: float | None = None
    pass_hat_k: float | None = None
    latency_p50_ms: float | None = Field(
        default=None,
        description="Mean of the per-case p50s of the repetitions that did not error.",
    )
    metric_scores: dict[str, float] = Field(
        default_factory=dict, description="Per metric mean over scored repetitions (0-5)."
    )
    metric_passed: dict[str, bool] = Field(
        default_factory=dict, description="Binary metrics: reduced with the pass reducer."
    )
    cost_usd: float | None = Field(
        default=None, description="Mean agent cost per repetition that reports one."
    )
    named_scores: dict[str, float] = Field(
        default_factory=dict, exclude_if=_empty, description="Named scores, repetitions averaged."
    )


class VariantFigures(StrictModel):
    """One variant of a run (promptfoo's provider × prompt): its own pass rate.

    The pass rate is the run pass rate's rule (`scoring.case.pass_rate_figures`) over the
    variant's executions only; a run's headline `pass_rate` stays over every execution.
    """

    variant: str = Field(description="Configuration / persona, joined by U+001F ('' for none).")
    label: str = Field(description="The variant as people read it (`variant_label`).")
    test_case_count: int = Field(description="Test cases that have this variant.")
    executions: int = Field(description="Its cases, every repetition and status.")
    passed_count: int
    failed_count: int = Field(description="Failed executions; errored ones are not failed.")
    pass_rate: float | None = Field(
        description="passed_count / executions; null while none passed or failed."
    )
