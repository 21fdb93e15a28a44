"""Run-to-run comparison (DESIGN §5; Connexity `GET /runs/compare` field names, and beyond).

Pure functions, no I/O. `compare_runs` reduces each run's repetitions per test case with the
spec's reducers (`projections.scoring.reduce_repetitions`, never "last row wins"), matches test
cases by key, classifies every matched case, diffs the aggregates and the run configs, decides the
suite verdict against the thresholds, and adds paired statistics (`projections.stats`) beside
that verdict. `render_markdown` turns the result into a compact PR comment.

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

import difflib
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Literal, NamedTuple
from uuid import UUID

import numpy as np
import numpy.typing as npt
import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from evaledger.domain.events import AgentSnapshot, ToolSpec
from evaledger.domain.metrics import SCORE_LABELS, ScoreType
from evaledger.domain.spec import ComparisonThresholds, ScoringSpec
from evaledger.scoring.case import reduce_repetitions
from evaledger.scoring.models import CaseScore, RunAggregate, TestCaseResult
from evaledger.scoring.named import NamedScoreComparison, compare_named_scores
from evaledger.scoring.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    PairedStatistics,
    paired_statistics_of,
)

_MODEL = ConfigDict(extra="forbid", allow_inf_nan=False)
_DP = 4
"""Deltas are reported, and compared with thresholds, rounded to this many decimals."""
MAX_MARKDOWN_CASES = 20
"""Regressed cases listed in the markdown comment at most."""

CaseStatus = Literal["regression", "improvement", "unchanged", "error"]
MetricStatus = Literal["regression", "improvement", "unchanged", "pass→fail", "fail→pass"]


# ---------------------------------------------------------------------------------------------
# Input


class ComparedRun(BaseModel):
    """One side of a comparison: a run's snapshot, its scored cases and its aggregate.

    ``cases`` and ``aggregate`` are expected to be scored under the same spec (the run's own or
    a replay spec); the comparison only re-reduces repetitions.
    """

    model_config = _MODEL

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


class CompareThresholds(BaseModel):
    """Per-request threshold overrides; None takes the spec's `comparison` value."""

    model_config = _MODEL

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


class MetricDelta(BaseModel):
    """One metric of one matched test case, baseline vs candidate."""

    model_config = _MODEL

    metric: str
    is_binary: bool
    baseline_score: float | None = Field(default=None, description="Scored: mean 0-5.")
    candidate_score: float | None = None
    delta: float | None = Field(default=None, description="Scored only; None for binary.")
    baseline_label: str | None = None
    candidate_label: str | None = None
    status: MetricStatus


class MetricAggregateDelta(BaseModel):
    """One metric over the matched test cases (scored: mean 0-5; binary: fraction passing)."""

    model_config = _MODEL

    metric: str
    is_binary: bool
    baseline_avg: float | None = None
    candidate_avg: float | None = None
    delta: float | None = None


class RepetitionCounts(BaseModel):
    """How many executions each side had for a test case."""

    model_config = _MODEL

    baseline: int
    candidate: int


class TestCaseComparison(BaseModel):
    """One matched test case, repetitions reduced on both sides."""

    __test__ = False
    model_config = _MODEL

    test_case_key: str
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


class AggregateComparison(BaseModel):
    """Run-level deltas (candidate - baseline, rounded 4 dp) and case status counts."""

    model_config = _MODEL

    baseline_metrics: RunAggregate
    candidate_metrics: RunAggregate
    pass_rate_delta: float = Field(
        description="Fraction, 4 dp; the verdict compares -pass_rate_delta > max_pass_rate_drop."
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


class FieldChange(BaseModel):
    """One changed field with its old and new value."""

    model_config = _MODEL

    field: str
    old_value: Any = None
    new_value: Any = None


class PromptDiff(BaseModel):
    """The agent system prompt, baseline vs candidate."""

    model_config = _MODEL

    changed: bool = True
    unified_diff: str
    change_ratio: float = Field(description="0.0 = identical, 1.0 = completely different.")
    added_line_count: int = 0
    removed_line_count: int = 0


class ToolDiff(BaseModel):
    """Tools offered to the agent, compared by name."""

    model_config = _MODEL

    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list, description="Description or parameters.")
    modified: list[FieldChange] = Field(
        default_factory=list, description="`<tool>.description` / `<tool>.parameters` changes."
    )


class RunConfigDiff(BaseModel):
    """Structured diff of the two runs' snapshotted configuration."""

    model_config = _MODEL

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


class RegressionVerdict(BaseModel):
    """The suite-level threshold verdict."""

    model_config = _MODEL

    regression_detected: bool
    reasons: list[str] = Field(default_factory=list)
    thresholds_used: ComparisonThresholds


class RunComparison(BaseModel):
    """Baseline vs candidate: aggregate deltas, per-case statuses, config diff, verdicts."""

    model_config = _MODEL

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


# ---------------------------------------------------------------------------------------------
# Helpers


def _delta(baseline: float | None, candidate: float | None, dp: int = _DP) -> float | None:
    if baseline is None or candidate is None:
        return None
    return round(candidate - baseline, dp)


def _fixed(value: float, min_dp: int, max_dp: int = _DP) -> str:
    """Up to ``max_dp`` decimals, trailing zeros dropped down to ``min_dp`` (0.9 → "0.90")."""
    text = f"{value:.{max_dp}f}"
    whole, _, decimals = text.partition(".")
    decimals = decimals.rstrip("0").ljust(min_dp, "0")
    text = f"{whole}.{decimals}" if decimals else whole
    return text.lstrip("-") if float(text) == 0 else text  # no "-0"


def _pct(fraction: float) -> str:
    """A 4 dp fraction as an exact percentage (0.2001 → "20.01%")."""
    return f"{_fixed(fraction * 100, 0, _DP - 2)}%"


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return math.fsum(items) / len(items) if items else None


def _score_label(value: float | None, binary: bool) -> str | None:
    if value is None:
        return None
    if binary:
        return "pass" if value >= 5 else "fail"
    if float(value).is_integer() and 0 <= value <= 5:
        return SCORE_LABELS[int(value)]
    return None


def _metric_types(specs: Iterable[ScoringSpec]) -> dict[str, bool]:
    """Metric name → is_binary, in spec order (first spec first)."""
    types: dict[str, bool] = {}
    for spec in specs:
        for m in spec.metrics:
            types.setdefault(m.metric, m.score_type is ScoreType.BINARY)
    return types


def _binary_value(result: TestCaseResult, metric: str) -> bool | None:
    if metric in result.metric_passed:
        return result.metric_passed[metric]
    score = result.metric_scores.get(metric)
    return None if score is None else score >= 5


def _metric_deltas(
    base: TestCaseResult, cand: TestCaseResult, types: Mapping[str, bool]
) -> list[dict[str, Any]]:
    names = list(types)
    extra = (set(base.metric_scores) | set(cand.metric_scores) | set(base.metric_passed)) | set(
        cand.metric_passed
    )
    names += sorted(extra - set(types))
    # Plain dicts, validated once per comparison by _CASES (a model per metric per case costs
    # seconds on a 5,000-case comparison).
    out: list[dict[str, Any]] = []
    for name in names:
        binary = types.get(name, name in base.metric_passed or name in cand.metric_passed)
        if binary:
            bp, cp = _binary_value(base, name), _binary_value(cand, name)
            if bp is None and cp is None:
                continue
            status: MetricStatus = "unchanged"
            if bp is True and cp is False:
                status = "pass→fail"
            elif bp is False and cp is True:
                status = "fail→pass"
            out.append(
                {
                    "metric": name,
                    "is_binary": True,
                    "baseline_score": None if bp is None else (5.0 if bp else 0.0),
                    "candidate_score": None if cp is None else (5.0 if cp else 0.0),
                    "delta": None,
                    "baseline_label": None if bp is None else ("pass" if bp else "fail"),
                    "candidate_label": None if cp is None else ("pass" if cp else "fail"),
                    "status": status,
                }
            )
            continue
        bs, cs = base.metric_scores.get(name), cand.metric_scores.get(name)
        if bs is None and cs is None:
            continue
        delta = _delta(bs, cs)
        status = "unchanged"
        if delta is not None:
            status = "regression" if delta < 0 else "improvement" if delta > 0 else "unchanged"
        out.append(
            {
                "metric": name,
                "is_binary": False,
                "baseline_score": bs,
                "candidate_score": cs,
                "delta": delta,
                "baseline_label": _score_label(bs, False),
                "candidate_label": _score_label(cs, False),
                "status": status,
            }
        )
    return out


def classify_case(
    baseline: TestCaseResult, candidate: TestCaseResult, case_score_delta: float = 5.0
) -> CaseStatus:
    """DESIGN §5 per-case rule; the first that matches wins.

    Either side errored → ``error``; pass flipped → ``regression`` / ``improvement``; both scored
    and ``|Δ score| > case_score_delta`` (strict, on the 4 dp delta the comparison reports) →
    ``regression`` / ``improvement``; else ``unchanged``.
    """
    if baseline.errored or candidate.errored:
        return "error"
    if baseline.passed is True and candidate.passed is False:
        return "regression"
    if baseline.passed is False and candidate.passed is True:
        return "improvement"
    delta = _delta(baseline.score, candidate.score)
    if delta is not None and abs(delta) > case_score_delta:
        return "regression" if delta < 0 else "improvement"
    return "unchanged"


def _compare_case(
    base: TestCaseResult,
    cand: TestCaseResult,
    thresholds: ComparisonThresholds,
    types: Mapping[str, bool],
    metric_deltas: bool = True,
) -> dict[str, Any]:
    return {
        "test_case_key": base.test_case_key,
        "status": classify_case(base, cand, thresholds.case_score_delta),
        "baseline_passed": base.passed,
        "candidate_passed": cand.passed,
        "baseline_score": base.score,
        "candidate_score": cand.score,
        "score_delta": _delta(base.score, cand.score),
        "baseline_latency_ms": base.latency_p50_ms,
        "candidate_latency_ms": cand.latency_p50_ms,
        "latency_delta_ms": _delta(base.latency_p50_ms, cand.latency_p50_ms),
        "metric_deltas": _metric_deltas(base, cand, types) if metric_deltas else [],
        "baseline_flaky": base.flaky,
        "candidate_flaky": cand.flaky,
        "repetitions": {"baseline": base.repetitions, "candidate": cand.repetitions},
    }


_CASES = TypeAdapter(list[TestCaseComparison])


def _run_cost(run: ComparedRun) -> float | None:
    """Return the run's total cost, or None when it carries no cost data at all."""
    has_case_cost = any(c.cost_usd is not None for c in run.cases)
    if has_case_cost or run.aggregate.total_cost_usd != 0:
        return run.aggregate.total_cost_usd
    return None


def _change(name: str, old: Any, new: Any) -> FieldChange | None:
    return None if old == new else FieldChange(field=name, old_value=old, new_value=new)


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts → dotted paths; lists, scalars and empty dicts are leaves."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        path = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            out.update(_flatten(item, f"{path}."))
        else:
            out[path] = item
    return out


def prompt_diff(baseline: str | None, candidate: str | None) -> PromptDiff | None:
    """Unified diff of two system prompts ("baseline" → "candidate"); None when identical."""
    old, new = baseline or "", candidate or ""
    if old == new:
        return None
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), fromfile="baseline", tofile="candidate", lineterm=""
        )
    )
    body = lines[2:]
    added = sum(1 for line in body if line.startswith("+"))
    removed = sum(1 for line in body if line.startswith("-"))
    ratio = difflib.SequenceMatcher(None, old, new, autojunk=False).ratio()
    return PromptDiff(
        unified_diff="\n".join(lines) + "\n",
        change_ratio=round(1 - ratio, 4),
        added_line_count=added,
        removed_line_count=removed,
    )


def tool_diff(baseline: Sequence[ToolSpec], candidate: Sequence[ToolSpec]) -> ToolDiff | None:
    """Tools added, removed and changed (description or parameters) by name; None if equal."""
    old = {t.name: t for t in baseline}
    new = {t.name: t for t in candidate}
    diff = ToolDiff(added=sorted(new.keys() - old.keys()), removed=sorted(old.keys() - new.keys()))
    for name in sorted(old.keys() & new.keys()):
        before, after = old[name], new[name]
        changes = [
            _change(f"{name}.description", before.description, after.description),
            _change(f"{name}.parameters", before.parameters, after.parameters),
        ]
        found = [c for c in changes if c is not None]
        if found:
            diff.changed.append(name)
            diff.modified.extend(found)
    if not (diff.added or diff.removed or diff.changed):
        return None
    return diff


def config_diff(baseline: ComparedRun, candidate: ComparedRun) -> RunConfigDiff:
    """Structured diff of agent, prompt, tools, judge, suite and run config of two runs."""
    ba, ca = baseline.agent, candidate.agent
    bj, cj = baseline.judge, candidate.judge
    bflat, cflat = _flatten(baseline.config), _flatten(candidate.config)
    config_changes = [
        FieldChange(field=path, old_value=bflat.get(path), new_value=cflat.get(path))
        for path in sorted(bflat.keys() | cflat.keys())
        if (path in bflat) != (path in cflat) or bflat.get(path) != cflat.get(path)
    ]
    return RunConfigDiff(
        baseline_agent_version=ba.version,
        candidate_agent_version=ca.version,
        agent_name_changed=_change("agent.name", ba.name, ca.name),
        agent_version_changed=_change("agent.version", ba.version, ca.version),
        prompt_diff=prompt_diff(ba.system_prompt, ca.system_prompt),
        tool_diff=tool_diff(ba.tools, ca.tools),
        model_changed=_change("agent.model", ba.model, ca.model),
        provider_changed=_change("agent.provider", ba.provider, ca.provider),
        judge_provider_changed=_change("judge.provider", bj.get("provider"), cj.get("provider")),
        judge_model_changed=_change("judge.model", bj.get("model"), cj.get("model")),
        judge_pass_threshold_changed=_change(
            "judge.pass_threshold", bj.get("pass_threshold"), cj.get("pass_threshold")
        ),
        judge_metrics_changed=_change("judge.metrics", bj.get("metrics"), cj.get("metrics")),
        suite_changed=_change("suite.name", baseline.suite_name, candidate.suite_name),
        suite_version_changed=_change(
            "suite.version", baseline.suite_version, candidate.suite_version
        ),
        config_changes=config_changes,
    )


def _verdict(
    agg: AggregateComparison, thresholds: ComparisonThresholds, warnings: list[str]
) -> RegressionVerdict:
    """Hold the reported (rounded) deltas against the thresholds; reasons quote those deltas."""
    reasons: list[str] = []
    base, cand = agg.baseline_metrics, agg.candidate_metrics
    drop = -agg.pass_rate_delta
    if drop > thresholds.max_pass_rate_drop:
        reasons.append(
            f"pass_rate dropped {_pct(drop)} "
            f"({_fixed(base.pass_rate, 2)} → {_fixed(cand.pass_rate, 2)})"
        )
    bs, cs = base.weighted_metrics_score_pct, cand.weighted_metrics_score_pct
    score_delta = agg.avg_score_delta
    if (
        bs is not None
        and cs is not None
        and score_delta is not None
        and -score_delta > thresholds.max_avg_score_drop
    ):
        reasons.append(
            f"avg_score dropped {_fixed(-score_delta, 1)}pt ({_fixed(bs, 1)} → {_fixed(cs, 1)})"
        )
    bl, cl = base.latency_avg_ms, cand.latency_avg_ms
    if bl is None or cl is None:
        missing = " and ".join(
            side for side, v in (("baseline", bl), ("candidate", cl)) if v is None
        )
        warnings.append(f"latency check skipped: no latency data in {missing}")
    elif bl == 0:
        warnings.append("latency check skipped: baseline latency_avg_ms is 0")
    elif (
        agg.latency_avg_increase_pct is not None
        and agg.latency_avg_increase_pct > thresholds.max_latency_increase_pct
    ):
        reasons.append(
            f"avg_latency increased {_pct(agg.latency_avg_increase_pct)} ({bl:.0f}ms → {cl:.0f}ms)"
        )
    return RegressionVerdict(
        regression_detected=bool(reasons), reasons=reasons, thresholds_used=thresholds
    )


def _self_judged(run: ComparedRun) -> int:
    return sum(1 for c in run.cases if c.self_judged) or run.aggregate.self_judged_count


def _keys_text(keys: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f", … (+{len(keys) - limit} more)" if len(keys) > limit else "")


def _warnings(baseline: ComparedRun, candidate: ComparedRun, spec: ScoringSpec | None) -> list[str]:
    """Every warning but the flaky test cases (`_flaky_warning`, from the matched cases)."""
    out: list[str] = []
    for side, run in (("baseline", baseline), ("candidate", candidate)):
        if run.status != "completed":
            out.append(f"{side} run is {run.status!r}, not completed")
    if baseline.suite_name != candidate.suite_name:
        out.append(
            f"runs use different suites: {baseline.suite_name!r} vs {candidate.suite_name!r}"
        )
    elif baseline.suite_version != candidate.suite_version:
        out.append(
            f"runs use different versions of suite {baseline.suite_name!r}: "
            f"{baseline.suite_version} vs {candidate.suite_version}"
        )
    if spec is None and baseline.spec.spec_id != candidate.spec.spec_id:
        out.append(
            "runs are scored under different specs "
            f"({baseline.spec.spec_id} vs {candidate.spec.spec_id})"
        )
    for side, run in (("baseline", baseline), ("candidate", candidate)):
        n = _self_judged(run)
        if n:
            out.append(f"{side} has {n} self-judged case(s): judge provider = agent provider")
    return out


# ---------------------------------------------------------------------------------------------
# Public API


class RunColumns:
    """One side's reduced test cases as columns sorted by key, built once per run summary.

    A comparison reads these lists instead of a model per case; a side keeps them (and the
    per-metric values it has needed) for every comparison it takes part in. Duplicate keys: the
    last result wins, as in a dict by key.
    """

    __slots__ = (
        "_lock",
        "_metrics",
        "arrays",
        "errored",
        "flaky",
        "has_named",
        "index",
        "keys",
        "latency",
        "names",
        "passed",
        "repetitions",
        "results",
        "score",
        "source",
    )

    def __init__(self, results: Sequence[TestCaseResult]) -> None:
        by_key = {r.test_case_key: r for r in results}
        self.source = results
        self.keys = sorted(by_key)
        rows = [by_key[k] for k in self.keys]
        self.results = rows
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.score = [r.score for r in rows]
        self.passed = [r.passed for r in rows]
        self.errored = [r.errored for r in rows]
        self.latency = [r.latency_p50_ms for r in rows]
        self.flaky = [r.flaky for r in rows]
        self.repetitions = [r.repetitions for r in rows]
        self.arrays = _Arrays(
            score=np.array([_NAN if v is None else v for v in self.score], dtype=np.float64),
            latency=np.array([_NAN if v is None else v for v in self.latency], dtype=np.float64),
            passed=np.array([-1 if v is None else int(v) for v in self.passed], dtype=np.int8),
            errored=np.array(self.errored, dtype=np.bool_),
            flaky=np.array(self.flaky, dtype=np.bool_),
        )
        names: set[str] = set()
        for r in rows:
            names.update(r.metric_scores)
            names.update(r.metric_passed)
        self.names = names
        self.has_named = any(r.named_scores for r in results)
        self._metrics: dict[tuple[str, bool], tuple[list[float | None], float | None]] = {}
        self._lock = threading.Lock()

    def metric(self, name: str, binary: bool) -> tuple[list[float | None], float | None]:
        """Per case (key order) the metric's value, None where missing, and their mean.

        Binary: 1.0 / 0.0 (`metric_passed`, else score >= 5); scored: the 0-5 mean score.
        """
        found = self._metrics.get((name, binary))
        if found is None:
            if binary:
                flags = [_binary_value(r, name) for r in self.results]
                values = [None if f is None else (1.0 if f else 0.0) for f in flags]
            else:
                values = [r.metric_scores.get(name) for r in self.results]
            found = (values, _mean(v for v in values if v is not None))
            with self._lock:
                self._metrics[name, binary] = found
        return found


def _take(values: list[Any], idx: list[int] | None) -> list[Any]:
    """``values`` at ``idx`` (None: all of them, in order)."""
    if idx is None:
        return values
    if len(idx) == 1:
        return [values[idx[0]]]
    return list(itemgetter(*idx)(values)) if idx else []


def _round4(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``round(v, 4)`` of each value, exactly as Python rounds (NaN stays NaN), vectorised.

    ``rint(v * 1e4) / 1e4`` is Python's result whenever ``v * 1e4`` is the integer N that the
    exact decimal rounding picks: the division is then correctly rounded like Python's parse of
    the 4-decimal string. The product is off the exact value by at most half an ulp (< 1.2e-7
    below 2**30), so N can only differ within that distance of a half: such values (and larger
    ones) are rounded by Python itself.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # NaN; inf past 1.8e304: Python's
        scaled = values * 1e4
        out: npt.NDArray[np.float64] = np.rint(scaled) / 1e4
        near_half = np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6
        risky = near_half | (np.abs(scaled) >= 2.0**30)
    for i in np.flatnonzero(risky).tolist():
        out[i] = round(float(values[i]), _DP)
    return out


def _optional(values: npt.NDArray[np.float64]) -> list[float | None]:
    """The values as Python floats, None for NaN."""
    return [None if v != v else v for v in values.tolist()]


class _Arrays(NamedTuple):
    """A side's columns as arrays: NaN for a missing score or latency, -1 for undecided."""

    score: npt.NDArray[np.float64]
    latency: npt.NDArray[np.float64]
    passed: npt.NDArray[np.int8]
    errored: npt.NDArray[np.bool_]
    flaky: npt.NDArray[np.bool_]

    def take(self, idx: list[int] | None) -> _Arrays:
        """These arrays at ``idx`` (None: all)."""
        if idx is None:
            return self
        at = np.array(idx, dtype=np.intp)
        return _Arrays(
            self.score[at], self.latency[at], self.passed[at], self.errored[at], self.flaky[at]
        )


_NAN = float("nan")
_STATUSES = np.array(["regression", "improvement", "unchanged", "error"], dtype=object)
_REGRESSION, _IMPROVEMENT, _UNCHANGED, _ERROR = range(4)


def _per_metric_means(
    base: RunColumns,
    cand: RunColumns,
    bidx: list[int] | None,
    cidx: list[int] | None,
    types: Mapping[str, bool],
) -> list[MetricAggregateDelta]:
    """Each metric's mean on each side over the matched test cases, and the delta."""
    names = list(types)
    matched: list[tuple[TestCaseResult, TestCaseResult]] | None = None
    if (base.names | cand.names) - types.keys():
        # Metrics outside the spec: listed in the order matched cases first show them.
        matched = list(zip(_take(base.results, bidx), _take(cand.results, cidx), strict=True))
        seen = set(names)
        for pair in matched:
            for r in pair:
                for name in sorted(set(r.metric_scores) | set(r.metric_passed)):
                    if name not in seen:
                        seen.add(name)
                        names.append(name)
    out: list[MetricAggregateDelta] = []
    for name in names:
        binary = types.get(name)
        if binary is None:
            assert matched is not None  # a name outside the spec was found in a matched case
            binary = any(name in r.metric_passed for pair in matched for r in pair)
        sides: list[float | None] = []
        for columns, idx in ((base, bidx), (cand, cidx)):
            values, mean = columns.metric(name, binary)
            if idx is not None:
                mean = _mean(v for v in _take(values, idx) if v is not None)
            sides.append(mean)
        b, c = sides
        if b is None and c is None:
            continue
        out.append(
            MetricAggregateDelta(
                metric=name,
                is_binary=binary,
                baseline_avg=None if b is None else round(b, 4),
                candidate_avg=None if c is None else round(c, 4),
                delta=_delta(b, c),
            )
        )
    return out


def _flaky_warning(side: str, keys: list[str], flaky: npt.NDArray[np.bool_]) -> str | None:
    found = [keys[i] for i in np.flatnonzero(flaky).tolist()]
    if not found:
        return None
    return f"{len(found)} flaky test case(s) in {side} (repetitions disagree): " + _keys_text(found)


class _CaseColumns(NamedTuple):
    """The matched test cases' output fields, one list each, in key order."""

    keys: list[str]
    statuses: list[CaseStatus]
    baseline_passed: list[bool | None]
    candidate_passed: list[bool | None]
    baseline_score: list[float | None]
    candidate_score: list[float | None]
    score_delta: list[float | None]
    baseline_latency_ms: list[float | None]
    candidate_latency_ms: list[float | None]
    latency_delta_ms: list[float | None]
    baseline_flaky: list[bool]
    candidate_flaky: list[bool]
    baseline_repetitions: list[int]
    candidate_repetitions: list[int]


class Comparison:
    """A comparison computed from two runs' columns: small parts as models, cases as columns.

    `json` encodes it with only the requested page of cases turned into rows; `model`
    validates the whole `RunComparison` (once, on demand).
    """

    __slots__ = ("_model", "cases", "head", "metric_pairs", "named_scores", "tail", "types")

    def __init__(
        self,
        head: dict[str, Any],
        cases: _CaseColumns,
        tail: dict[str, Any],
        named_scores: list[NamedScoreComparison],
        metric_pairs: list[tuple[TestCaseResult, TestCaseResult]] | None = None,
        types: Mapping[str, bool] | None = None,
    ) -> None:
        self.head = head
        self.cases = cases
        self.tail = tail
        self.named_scores = named_scores
        self.metric_pairs = metric_pairs
        self.types = types or {}
        self._model: RunComparison | None = None

    def rows(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """The test case comparisons ``[start:end]`` as plain dicts (TestCaseComparison's)."""
        window = slice(start, end)
        columns = self.cases if (start, end) == (0, None) else [c[window] for c in self.cases]
        rows = [
            {
                "test_case_key": k,
                "status": st,
                "baseline_passed": b_pass,
                "candidate_passed": c_pass,
                "baseline_score": b_score,
                "candidate_score": c_score,
                "score_delta": sd,
                "baseline_latency_ms": b_lat,
                "candidate_latency_ms": c_lat,
                "latency_delta_ms": ld,
                "metric_deltas": [],
                "baseline_flaky": b_flaky,
                "candidate_flaky": c_flaky,
                "repetitions": {"baseline": b_reps, "candidate": c_reps},
            }
            for k, st, b_pass, c_pass, b_score, c_score, sd, b_lat, c_lat, ld, b_flaky, c_flaky,
            b_reps, c_reps in zip(*columns, strict=True)
        ]  # fmt: skip
        if self.metric_pairs is not None:
            pairs = self.metric_pairs[window]
            for row, (b_res, c_res) in zip(rows, pairs, strict=True):
                row["metric_deltas"] = _metric_deltas(b_res, c_res, self.types)
        return rows

    def _fields(self, rows: Any) -> dict[str, Any]:
        return {**self.head, "test_case_comparisons": rows, **self.tail}

    @property
    def model(self) -> RunComparison:
        """The whole comparison as a validated `RunComparison`."""
        if self._model is None:
            self._model = RunComparison(
                **self._fields(_CASES.validate_python(self.rows())),
                named_scores=self.named_scores,
            )
        return self._model

    def json(self, case_offset: int = 0, case_limit: int | None = None) -> bytes:
        """The comparison as JSON (what `RunComparison` serialises to), cases paged."""
        end = None if case_limit is None else case_offset + case_limit
        body = {
            k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v
            for k, v in self._fields(self.rows(case_offset, end)).items()
        }
        if self.named_scores:
            body["named_scores"] = [n.model_dump(mode="json") for n in self.named_scores]
        return orjson.dumps(body)


def compare_columns(
    baseline: ComparedRun,
    candidate: ComparedRun,
    base: RunColumns,
    cand: RunColumns,
    thresholds: CompareThresholds | None = None,
    spec: ScoringSpec | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    metric_deltas: bool = True,
) -> Comparison:
    """`compare_results` over both sides' columns (see there); the fast core of every compare."""
    effective = thresholds or CompareThresholds()
    used = effective.resolve((spec or candidate.spec).comparison)
    types = _metric_types([spec] if spec is not None else [candidate.spec, baseline.spec])
    bidx: list[int] | None
    cidx: list[int] | None
    if base.keys == cand.keys:
        keys, bidx, cidx = base.keys, None, None
        baseline_only: list[str] = []
        candidate_only: list[str] = []
    else:
        keys = [k for k in base.keys if k in cand.index]
        bidx = [base.index[k] for k in keys]
        cidx = [cand.index[k] for k in keys]
        baseline_only = [k for k in base.keys if k not in cand.index]
        candidate_only = [k for k in cand.keys if k not in base.index]
        if len(keys) == len(base.keys):
            bidx = None
        if len(keys) == len(cand.keys):
            cidx = None
    bp, cp = _take(base.passed, bidx), _take(cand.passed, cidx)
    bs, cs = _take(base.score, bidx), _take(cand.score, cidx)
    bl, cl = _take(base.latency, bidx), _take(cand.latency, cidx)
    bf, cf = _take(base.flaky, bidx), _take(cand.flaky, cidx)
    br, cr = _take(base.repetitions, bidx), _take(cand.repetitions, cidx)
    b_arr, c_arr = base.arrays.take(bidx), cand.arrays.take(cidx)
    raw = c_arr.score - b_arr.score  # NaN where a side has no score
    rounded = _round4(raw)
    score_deltas = _optional(rounded)
    latency_deltas = _optional(_round4(c_arr.latency - b_arr.latency))

    # classify_case, vectorised; later rules win: |rounded delta| > case_score_delta, pass
    # flips, errors.
    errored = b_arr.errored | c_arr.errored
    down = (b_arr.passed == 1) & (c_arr.passed == 0)
    up = (b_arr.passed == 0) & (c_arr.passed == 1)
    code = np.full(len(keys), _UNCHANGED, dtype=np.intp)
    with np.errstate(invalid="ignore"):
        big = np.abs(rounded) > used.case_score_delta
        code[big & (rounded < 0)] = _REGRESSION
        code[big & (rounded > 0)] = _IMPROVEMENT
    code[up] = _IMPROVEMENT
    code[down] = _REGRESSION
    code[errored] = _ERROR
    statuses: list[CaseStatus] = _STATUSES[code].tolist()
    counts = np.bincount(code, minlength=4).tolist()
    # The statistics pair non-error cases: flips where both sides decided, score deltas
    # (unrounded) where both sides scored.
    b_flips = int(np.count_nonzero(down & ~errored))
    c_flips = int(np.count_nonzero(up & ~errored))
    deltas = raw[~errored & ~np.isnan(raw)].tolist()

    cases = _CaseColumns(
        keys, statuses, bp, cp, bs, cs, score_deltas, bl, cl, latency_deltas, bf, cf, br, cr
    )
    metric_pairs = None
    if metric_deltas:
        metric_pairs = list(zip(_take(base.results, bidx), _take(cand.results, cidx), strict=True))

    ba, ca = baseline.aggregate, candidate.aggregate
    aggregate = AggregateComparison(
        baseline_metrics=ba,
        candidate_metrics=ca,
        pass_rate_delta=round(ca.pass_rate - ba.pass_rate, _DP),
        avg_score_delta=_delta(ba.weighted_metrics_score_pct, ca.weighted_metrics_score_pct),
        latency_avg_delta_ms=_delta(ba.latency_avg_ms, ca.latency_avg_ms),
        latency_avg_increase_pct=(
            None
            if ba.latency_avg_ms is None or ca.latency_avg_ms is None or ba.latency_avg_ms == 0
            else round((ca.latency_avg_ms - ba.latency_avg_ms) / ba.latency_avg_ms, _DP)
        ),
        latency_p95_delta_ms=_delta(ba.latency_p95_ms, ca.latency_p95_ms),
        cost_delta_usd=_delta(_run_cost(baseline), _run_cost(candidate)),
        judge_cost_delta_usd=(
            _delta(ba.judge_cost_usd, ca.judge_cost_usd)
            if ba.judge_cost_usd or ca.judge_cost_usd
            else None
        ),
        total_regressions=counts[_REGRESSION],
        total_improvements=counts[_IMPROVEMENT],
        total_unchanged=counts[_UNCHANGED],
        total_errors=counts[_ERROR],
        per_metric_aggregate_deltas=_per_metric_means(base, cand, bidx, cidx, types),
    )
    warnings = _warnings(baseline, candidate, spec)
    for side, flaky in (("baseline", b_arr.flaky), ("candidate", c_arr.flaky)):
        text = _flaky_warning(side, keys, flaky)
        if text is not None:
            warnings.append(text)
    verdict = _verdict(aggregate, used, warnings)
    named: list[NamedScoreComparison] = []
    if base.has_named or cand.has_named:
        named = compare_named_scores(base.source, cand.source, resamples=resamples, seed=seed)
    return Comparison(
        head={
            "baseline_run_id": str(baseline.run_id),
            "candidate_run_id": str(candidate.run_id),
            "baseline_agent_version": baseline.agent.version,
            "candidate_agent_version": candidate.agent.version,
            "aggregate": aggregate,
        },
        cases=cases,
        tail={
            "baseline_only_test_cases": baseline_only,
            "candidate_only_test_cases": candidate_only,
            "config_diff": config_diff(baseline, candidate),
            "verdict": verdict,
            "statistics": paired_statistics_of(
                b_flips, c_flips, deltas, resamples=resamples, seed=seed
            ),
            "warnings": warnings,
        },
        named_scores=named,
        metric_pairs=metric_pairs,
        types=types,
    )


def compare_results(
    baseline: ComparedRun,
    candidate: ComparedRun,
    baseline_results: Sequence[TestCaseResult],
    candidate_results: Sequence[TestCaseResult],
    thresholds: CompareThresholds | None = None,
    spec: ScoringSpec | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    metric_deltas: bool = True,
) -> RunComparison:
    """Compare two runs whose repetitions are already reduced to one result per test case.

    ``spec`` (or the candidate's own spec) supplies the default thresholds, overridden by
    ``thresholds``. `compare_runs` is the usual entry point; this is its reduced-input core.
    ``metric_deltas=False`` leaves each case's per-metric deltas out (most of the payload and
    of the time on a large run; the per-metric aggregate deltas stay).
    """
    return compare_columns(
        baseline,
        candidate,
        RunColumns(baseline_results),
        RunColumns(candidate_results),
        thresholds,
        spec,
        resamples=resamples,
        seed=seed,
        metric_deltas=metric_deltas,
    ).model


def compare_runs(
    baseline: ComparedRun,
    candidate: ComparedRun,
    thresholds: CompareThresholds | None = None,
    spec: ScoringSpec | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> RunComparison:
    """Compare a candidate run against a baseline run (DESIGN §5).

    Repetitions are reduced per test case with `reduce_repetitions` under ``spec`` when given,
    else under each run's own spec (never "last row wins"); test cases are matched by key.
    Thresholds are ``thresholds`` overrides over the ``comparison`` section of ``spec`` (or the
    candidate's spec). ``resamples`` and ``seed`` drive the bootstrap of the statistics.
    """
    baseline_results = reduce_repetitions(baseline.cases, spec or baseline.spec)
    candidate_results = reduce_repetitions(candidate.cases, spec or candidate.spec)
    return compare_results(
        baseline,
        candidate,
        baseline_results,
        candidate_results,
        thresholds,
        spec,
        resamples=resamples,
        seed=seed,
    )


# ---------------------------------------------------------------------------------------------
# Markdown


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fmt(value: float | None, fmt: str, suffix: str = "", signed: bool = False) -> str:
    if value is None:
        return "—"
    spec = f"+{fmt}" if signed else fmt
    return f"{value:{spec}}{suffix}"


def _score_cell(value: float | None) -> str:
    return "—" if value is None else _fixed(value, 1)


def _signed(text: str) -> str:
    """Prefix a formatted non-negative number with "+" (zero included, like format's "+")."""
    return text if text.startswith(("-", "—")) else f"+{text}"


def _case_side(passed: bool | None, score: float | None) -> str:
    verdict = "pass" if passed is True else "fail" if passed is False else "—"
    return verdict if score is None else f"{verdict} {score:.1f}"


def _config_summary(diff: RunConfigDiff) -> list[str]:
    """Short phrases naming what changed between the two runs' configuration."""
    parts: list[str] = []
    if diff.prompt_diff is not None:
        pd = diff.prompt_diff
        parts.append(f"system prompt (+{pd.added_line_count}/-{pd.removed_line_count} lines)")
    if diff.tool_diff is not None:
        td = diff.tool_diff
        names = [f"+{n}" for n in td.added] + [f"-{n}" for n in td.removed]
        names += [f"~{n}" for n in td.changed]
        parts.append(f"tools ({', '.join(names)})")
    for change in (
        diff.agent_name_changed,
        diff.agent_version_changed,
        diff.provider_changed,
        diff.model_changed,
        diff.judge_provider_changed,
        diff.judge_model_changed,
        diff.judge_pass_threshold_changed,
        diff.suite_changed,
        diff.suite_version_changed,
    ):
        if change is not None:
            parts.append(f"{change.field} {change.old_value} → {change.new_value}")
    if diff.judge_metrics_changed is not None:
        parts.append("judge.metrics")
    if diff.config_changes:
        parts.append("config: " + _keys_text([c.field for c in diff.config_changes], limit=5))
    return parts


def render_markdown(
    comparison: RunComparison,
    max_cases: int = MAX_MARKDOWN_CASES,
    gate_failures: Sequence[str] = (),
) -> str:
    """Render a compact PR comment: verdict, reasons, delta table, statistics, regressed cases.

    `gate_failures` names the candidate's own failed thresholds (metrics_passed, cases_passed)
    when the caller fails on them too, so the heading agrees with the exit code.
    """
    c = comparison
    agg = c.aggregate
    ba, ca = agg.baseline_metrics, agg.candidate_metrics
    lines: list[str] = []
    if c.verdict.regression_detected:
        lines.append("### ❌ Regression detected")
    elif gate_failures:
        lines.append("### ❌ No regression, but the candidate fails its own thresholds")
    else:
        lines.append("### ✅ No regression")
    lines.append(f"Baseline `{c.baseline_run_id}` → candidate `{c.candidate_run_id}`")
    lines.append("")
    reasons = [*c.verdict.reasons, *(f"candidate fails its own {g}" for g in gate_failures)]
    lines.extend(f"- {reason}" for reason in reasons)
    if reasons:
        lines.append("")
    # Δ cells show the compared 4 dp deltas in full, so they never contradict a reason above.
    pr_delta = f"{_fixed(agg.pass_rate_delta * 100, 1, _DP - 2)}pt"
    score_delta = _score_cell(agg.avg_score_delta)
    lines += [
        "| | Baseline | Candidate | Δ |",
        "|---|---:|---:|---:|",
        f"| Pass rate | {_fixed(ba.pass_rate * 100, 1, _DP - 2)}% "
        f"| {_fixed(ca.pass_rate * 100, 1, _DP - 2)}% | {_signed(pr_delta)} |",
        f"| Avg score | {_score_cell(ba.weighted_metrics_score_pct)} "
        f"| {_score_cell(ca.weighted_metrics_score_pct)} | {_signed(score_delta)} |",
        f"| Latency avg | {_fmt(ba.latency_avg_ms, '.0f', 'ms')} "
        f"| {_fmt(ca.latency_avg_ms, '.0f', 'ms')} "
        f"| {_fmt(agg.latency_avg_delta_ms, '.0f', 'ms', signed=True)} |",
    ]
    if ba.latency_p95_ms is not None or ca.latency_p95_ms is not None:
        lines.append(
            f"| Latency p95 | {_fmt(ba.latency_p95_ms, '.0f', 'ms')} "
            f"| {_fmt(ca.latency_p95_ms, '.0f', 'ms')} "
            f"| {_fmt(agg.latency_p95_delta_ms, '.0f', 'ms', signed=True)} |"
        )
    if agg.cost_delta_usd is not None:
        lines.append(
            f"| Cost | ${ba.total_cost_usd:.4f} | ${ca.total_cost_usd:.4f} "
            f"| {agg.cost_delta_usd:+.4f} USD |"
        )
    lines.append("")
    lines.append(
        f"Cases: {agg.total_regressions} regressed · {agg.total_improvements} improved · "
        f"{agg.total_unchanged} unchanged · {agg.total_errors} errors"
        + (
            f" · {len(c.baseline_only_test_cases)} baseline-only"
            if c.baseline_only_test_cases
            else ""
        )
        + (
            f" · {len(c.candidate_only_test_cases)} candidate-only"
            if c.candidate_only_test_cases
            else ""
        )
    )
    changes = _config_summary(c.config_diff)
    if changes:
        lines.append("Changes: " + _md("; ".join(changes)))
    st = c.statistics
    ci = st.score_delta_ci95
    ci_text = (
        f"score Δ 95% CI [{ci.low:+.2f}, {ci.high:+.2f}] (n={ci.n})"
        if ci.low is not None and ci.high is not None
        else f"score Δ CI n/a (n={ci.n})"
    )
    lines.append(
        f"Statistics: McNemar b={st.mcnemar.b} c={st.mcnemar.c} p={st.mcnemar.p_value:.4g} · "
        f"{ci_text} · **{st.verdict}**"
    )
    regressed = [t for t in c.test_case_comparisons if t.status == "regression"]
    if regressed:
        lines += [
            "",
            f"**Regressed cases ({len(regressed)})**",
            "",
            "| Test case | Baseline | Candidate | Δ score |",
            "|---|---|---|---:|",
        ]
        for t in regressed[:max_cases]:
            lines.append(
                f"| `{_md(t.test_case_key)}` | {_case_side(t.baseline_passed, t.baseline_score)} "
                f"| {_case_side(t.candidate_passed, t.candidate_score)} "
                f"| {_fmt(t.score_delta, '.1f', signed=True)} |"
            )
        if len(regressed) > max_cases:
            lines.append(f"\n…and {len(regressed) - max_cases} more")
    if c.warnings:
        lines.append("")
        lines.extend(f"> ⚠️ {_md(w)}" for w in c.warnings)
    return "\n".join(lines) + "\n"
