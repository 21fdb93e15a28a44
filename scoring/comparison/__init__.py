"""Run-to-run comparison (DESIGN §5; Connexity `GET /runs/compare` field names, and beyond).

Pure functions, no I/O. `compare_runs` reduces each run's repetitions per test case with the
spec's reducers (`scoring.case.reduce_repetitions`, never "last row wins"), matches test
cases by key, classifies every matched case, diffs the aggregates and the run configs, decides the
suite verdict against the thresholds, and adds paired statistics (`scoring.stats`) beside
that verdict. `render_markdown` turns the result into a compact PR comment.

The package: `models` (inputs and results), `rules` (per-case and suite rules), `config_diff`,
`engine` (the columnar core every compare goes through) and `markdown`.

Decisions where the rules are silent:

- Thresholds: per-request overrides, else the `comparison` section of the spec in effect (the
  `spec` argument when given, else the candidate's own spec).
- The verdict uses the numbers it reports: every threshold is compared (strict `>`) with the
  rounded delta the output shows (4 dp: ``pass_rate_delta``, ``avg_score_delta``,
  ``latency_avg_increase_pct``, a case's ``score_delta``), and each reason quotes that number, so
  a reason never contradicts the delta beside it. Rounding also absorbs float noise such as
  ``(600 - 500) / 500``.
- Cost: ``cost_delta_usd`` compares the agent's cost only (``total_cost_usd``, errored cases
  included); judge calls are ``judge_cost_delta_usd``, so re-judging a run never reads as an
  agent cost regression.
- Latency: run latency is ``latency_avg_ms``, the mean of per-case p50s over cases that did not
  error (one crash or timeout must not trip the latency threshold); a test case's latency is the
  mean of its non-errored repetitions' p50s.
- Pass flips need both sides decided (passed not None); an undecided side never flips.
- Per-metric aggregate deltas: each side's mean over the matched test cases for which that side
  has the metric (scored: mean 0-5; binary: fraction passing).
- Scored per-metric case status: regression / improvement / unchanged by the sign of the delta;
  binary: ``pass→fail`` / ``fail→pass`` / ``unchanged``. A metric on one side only is
  ``unchanged`` with no delta.
- Cost delta: None when a side carries no cost data at all (no case has ``cost_usd`` and the
  aggregate total is 0).
- Statistics pair the reduced values of matched cases whose status is not ``error``.
"""

from __future__ import annotations

from evaledger.scoring.comparison.config_diff import config_diff, prompt_diff, tool_diff
from evaledger.scoring.comparison.engine import (
    Comparison,
    RunColumns,
    compare_columns,
    compare_results,
    compare_runs,
)
from evaledger.scoring.comparison.markdown import (
    MAX_MARKDOWN_CASES,
    render_markdown,
    source_metric_deltas,
)
from evaledger.scoring.comparison.models import (
    AggregateComparison,
    CaseStatus,
    ComparedRun,
    CompareThresholds,
    FieldChange,
    MetricAggregateDelta,
    MetricDelta,
    MetricStatus,
    PromptDiff,
    RegressionVerdict,
    RepetitionCounts,
    RunComparison,
    RunConfigDiff,
    TestCaseComparison,
    ToolDiff,
)
from evaledger.scoring.comparison.rules import classify_case

__all__ = [
    "MAX_MARKDOWN_CASES",
    "AggregateComparison",
    "CaseStatus",
    "CompareThresholds",
    "ComparedRun",
    "Comparison",
    "FieldChange",
    "MetricAggregateDelta",
    "MetricDelta",
    "MetricStatus",
    "PromptDiff",
    "RegressionVerdict",
    "RepetitionCounts",
    "RunColumns",
    "RunComparison",
    "RunConfigDiff",
    "TestCaseComparison",
    "ToolDiff",
    "classify_case",
    "compare_columns",
    "compare_results",
    "compare_runs",
    "config_diff",
    "prompt_diff",
    "render_markdown",
    "source_metric_deltas",
    "tool_diff",
]
