"""Lean rescoring of a whole run: what `score_case` + `summarize_run` decide, without the models.

A rescore needs, per case, only the decision (status, pass, overall score) and what the run
aggregate reads. `RunInputs` holds the spec-independent part of every case, built once per state
of the run's cases (`ReadModels` keeps it in memory); `rescore_run` applies a spec to it with
plain tuples and dict lookups. `scoring.score_case` stays the definition: a case with more than
one active verdict is scored by it, and tests prove both paths equal on varied facts and specs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from evaledger.domain.events import ParseStatus
from evaledger.domain.metrics import ScoreType
from evaledger.domain.spec import Gate, JudgeErrorPolicy, ScoringSpec, Severity
from evaledger.projections.facts import CaseFacts, MetricFact, VerdictFact
from evaledger.projections.models import CaseStatus, Coverage, RunAggregate
from evaledger.projections.named_scores import named_score_means, score_gate
from evaledger.projections.scoring import (
    MAX_SCORE,
    P95_MIN_SAMPLES,
    _observations,
    _outcome_results,
    score_case,
)
from evaledger.projections.stats import percentile

__all__ = ["Rescored", "RunInputs", "rescore_run"]

_PASSED, _FAILED = CaseStatus.PASSED.value, CaseStatus.FAILED.value
_ERRORED, _CANCELED = CaseStatus.ERRORED.value, CaseStatus.CANCELED.value
_UNSCORED, _PENDING = CaseStatus.UNSCORED.value, CaseStatus.PENDING.value


@dataclass(frozen=True, slots=True)
class _Outcomes:
    """What the gate reads of a case's outcome results (the results themselves)."""

    any: bool
    all_passed: bool
    blockers: bool
    blockers_passed: bool


@dataclass(frozen=True, slots=True)
class _Verdict:
    """The one active verdict of a case, as scoring reads it."""

    broken: bool
    """An error verdict under every spec: an error was recorded or its reply did not parse."""
    row: tuple[Any, ...]
    """By the run's metric index j (the judge's first answer per metric): at j the clamped 0-5
    score or None, at K + j the pass/fail or None (K metrics in the index)."""
    scored: int
    """Bit j set: metric j has a score."""
    passing: int
    """Bit j set: metric j has a pass/fail."""
    forced: bool | None
    """A human override forcing pass/fail."""


@dataclass(frozen=True, slots=True)
class _Case:
    """One case's spec-independent scoring inputs."""

    fixed: tuple[str, bool | None] | None
    """Errored, canceled or not run yet: (status, passed) under every spec, never scored."""
    facts: CaseFacts | None
    """Kept only for a case with several active verdicts: `score_case` itself scores it."""
    named: dict[str, float]
    turns: bool
    verdict: _Verdict | None
    self_judged: bool
    when_valid: _Outcomes
    """Outcome results when the verdict is valid (its expected outcomes count)."""
    when_error: _Outcomes
    """Outcome results without a valid verdict."""


def _outcomes(facts: CaseFacts, verdict: VerdictFact | None) -> _Outcomes:
    combined = list(verdict.expected_outcomes) if verdict is not None else []
    results = _outcome_results(facts, combined)
    blockers = [o.passed for o in results if o.severity is Severity.BLOCKER]
    return _Outcomes(bool(results), all(o.passed for o in results), bool(blockers), all(blockers))


def _lean_verdict(verdict: VerdictFact, index: dict[str, int]) -> _Verdict:
    first: dict[str, MetricFact] = {}
    for m in verdict.metric_scores:
        first.setdefault(m.metric, m)  # the judge's first answer counts (as `_metric_facts`)
    k = len(index)
    row: list[Any] = [None] * (2 * k)
    scored = passing = 0
    for name, f in first.items():
        j = index[name]
        if f.score is not None:
            row[j] = max(0, min(MAX_SCORE, int(f.score)))
            scored |= 1 << j
        if f.passed is not None:
            row[k + j] = f.passed
            passing |= 1 << j
    return _Verdict(
        broken=verdict.error is not None or verdict.parse_status is not ParseStatus.PARSED,
        row=tuple(row),
        scored=scored,
        passing=passing,
        forced=verdict.forced_passed,
    )


def _lean_case(facts: CaseFacts, index: dict[str, int]) -> _Case:
    active = [v for v in facts.verdicts if not v.invalidated]
    fixed: tuple[str, bool | None] | None = None
    if facts.errored:
        fixed = (_ERRORED, False)
    elif facts.canceled:
        fixed = (_CANCELED, None)
    elif not (
        facts.has_transcript
        or facts.verdicts
        or facts.outcome_evaluations
        or facts.claims
        or facts.checks
        or facts.named_scores
    ):
        fixed = (_PENDING, None)  # not run yet: nothing a spec could score
    one = active[0] if len(active) == 1 else None
    agent = facts.agent_provider
    return _Case(
        fixed=fixed,
        facts=facts if fixed is None and len(active) > 1 else None,
        named=dict(facts.named_scores),
        turns=facts.turn_count > 0,
        verdict=_lean_verdict(one, index) if one is not None else None,
        self_judged=fixed is None
        and one is not None
        and agent is not None
        and one.judge_provider == agent,
        when_valid=_outcomes(facts, one),
        when_error=_outcomes(facts, None),
    )


class RunInputs:
    """Everything a rescore of one run needs that no spec changes, in opening order.

    Built once from the run's scoring facts and its stored own-spec decisions; the aggregate's
    spec-independent figures (latency, tokens, cost, named scores, errors, cancels) are summed
    here, once, by the same expressions as `summarize_run`.
    """

    def __init__(
        self, facts: Sequence[CaseFacts], old: dict[str, tuple[float | None, bool | None, str]]
    ) -> None:
        self.metrics: dict[str, int] = {}
        """The run's metric index: every metric a verdict reports, in order of appearance."""
        for f in facts:
            for v in f.verdicts:
                for m in v.metric_scores:
                    self.metrics.setdefault(m.metric, len(self.metrics))
        self.cases = [_lean_case(f, self.metrics) for f in facts]
        self.case_ids = [str(f.case_id) for f in facts]
        self.keys = [(f.test_case_key, f.repetition) for f in facts]
        self.old = old
        """case id → (overall_score, passed, status) under the run's own spec, as stored."""
        observed = [_observations(f) for f in facts]
        latencies = [
            float(o["latency_p50_ms"])
            for o, f in zip(observed, facts, strict=True)
            if o["latency_p50_ms"] is not None and not f.errored
        ]
        prompt = sum(o["prompt_tokens"] for o in observed)
        completion = sum(o["completion_tokens"] for o in observed)
        self.errored = sum(f.errored for f in facts)
        self.canceled = sum(f.canceled and not f.errored for f in facts)
        self.constant: dict[str, Any] = {
            "unique_test_case_count": len({f.test_case_key for f in facts}),
            "total_executions": len(facts),
            "error_count": self.errored,
            "canceled_count": self.canceled,
            "latency_p50_ms": percentile(latencies, 50) if latencies else None,
            "latency_p95_ms": (
                percentile(latencies, 95) if len(latencies) >= P95_MIN_SAMPLES else None
            ),
            "latency_max_ms": max(latencies) if latencies else None,
            "latency_avg_ms": statistics.fmean(latencies) if latencies else None,
            "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_tokens": prompt + completion,
            "total_cost_usd": sum(o["cost_usd"] for o in observed if o["cost_usd"] is not None),
            "judge_cost_usd": sum(o["judge_cost_usd"] for o in observed),
            "named_score_means": named_score_means(facts),  # type: ignore[arg-type]
        }


def _at(table: tuple[float, ...], value: int) -> float:
    return table[value]


def _getter(at: list[int]) -> Callable[[tuple[Any, ...]], Sequence[Any]]:
    """Values of a verdict row at `at`, always as a sequence (itemgetter of one is a scalar)."""
    if len(at) == 1:
        (j,) = at
        return lambda row: (row[j],)
    if not at:
        return lambda row: ()
    return itemgetter(*at)


@dataclass(frozen=True, slots=True)
class Rescored:
    """A run under a spec: its case decisions and its aggregate.

    `decisions`: per case in opening order (status, passed, overall_score); `aggregate` equals
    `summarize_run` of the case scores.
    """

    decisions: list[tuple[str, bool | None, float | None]]
    aggregate: RunAggregate


def rescore_run(inputs: RunInputs, spec: ScoringSpec) -> Rescored | None:
    """Every case's decision and the run aggregate under `spec`.

    None if the lean path does not apply (a spec selecting no metric or one twice): the caller then
    takes the reference path.
    """
    names = [m.metric for m in spec.metrics]
    if not names or len(set(names)) != len(names):
        return None
    scored_type = [m.score_type is ScoreType.SCORED for m in spec.metrics]
    index, k = inputs.metrics, len(inputs.metrics)
    # A metric no verdict of the run reports makes every verdict an error verdict.
    known = all(n in index for n in names)
    need_score = need_pass = 0
    at: list[int] = []
    # Contribution of each metric per score (scored) or per pass (binary): 100 × score/5 × weight,
    # the same float operations as `_combine_metric`, looked up by the verdict's row value.
    tables: list[tuple[float, ...]] = []
    for m, scored in zip(spec.metrics, scored_type, strict=True):
        j = index.get(m.metric, 0)
        if scored:
            need_score |= 1 << j
            at.append(j)
            tables.append(tuple(100 * float(s) / MAX_SCORE * m.weight for s in range(6)))
        else:
            need_pass |= 1 << j
            at.append(k + j)
            tables.append(
                (100 * 0.0 / MAX_SCORE * m.weight, 100 * MAX_SCORE / MAX_SCORE * m.weight)
            )
    values = _getter(at)
    score_zero = spec.judge_errors is JudgeErrorPolicy.SCORE_ZERO
    gates = bool(spec.score_gates)
    blockers_gate = spec.gate is Gate.BLOCKERS
    threshold = spec.pass_threshold

    metric_scores: dict[str, list[float]] = {n: [] for n in names}
    metric_passes: dict[str, list[bool]] = {n: [] for n in names}
    valid_rows: list[tuple[Any, ...]] = []
    decisions: list[tuple[str, bool | None, float | None]] = []
    overall_scored: list[float] = []
    passed_count = failed_count = unscored = pending = self_judged = 0
    for c in inputs.cases:
        overall: float | None = None
        passed: bool | None
        if c.fixed is not None:
            status, passed = c.fixed
        elif c.facts is not None:
            s = score_case(c.facts, spec)
            status, passed, overall = s.status.value, s.passed, s.overall_score
            self_judged += s.self_judged
            if s.scored and overall is not None:
                for r in s.metric_scores:
                    if r.score is not None and r.metric in metric_scores:
                        metric_scores[r.metric].append(r.score)
                        metric_passes[r.metric].append(r.passed is True)
        else:
            v = c.verdict
            valid = (
                known
                and v is not None
                and not v.broken
                and v.scored & need_score == need_score
                and v.passing & need_pass == need_pass
            )
            if valid:
                assert v is not None
                overall = round(sum(map(_at, tables, values(v.row))), 2)
                valid_rows.append(v.row)
            elif v is not None and c.turns and score_zero:
                overall = 0.0  # the error verdict counts as 0.0 (judge_errors: score_zero)
            gated = score_gate(c.named, spec) if gates and c.named else None
            if gated is not None:
                status, passed = (_PASSED if gated[0] else _FAILED), gated[0]
            elif not c.turns:
                status, passed = _FAILED, False
            elif v is None and not c.when_error.any:
                status, passed = _PENDING, None
            else:
                if v is not None and not valid:
                    status, passed = (_FAILED, False) if score_zero else (_UNSCORED, None)
                else:
                    o = c.when_valid if v is not None else c.when_error
                    if blockers_gate:
                        passed = o.blockers_passed if o.blockers else True
                    elif o.any:
                        passed = o.all_passed
                    else:
                        assert overall is not None
                        passed = overall >= threshold
                    status = _PASSED if passed else _FAILED
                if v is not None and v.forced is not None:
                    status, passed = (_PASSED if v.forced else _FAILED), v.forced
            self_judged += c.self_judged
        decisions.append((status, passed, overall))
        if passed is True:
            passed_count += 1
        elif passed is False and status != _ERRORED:
            failed_count += 1
        if overall is not None:
            overall_scored.append(overall)
        if status == _UNSCORED:
            unscored += 1
        elif status == _PENDING:
            pending += 1

    means: dict[str, float] = {}
    for name, j, scored in zip(names, at, scored_type, strict=True):
        if scored:
            # fmean is fsum / n: the exact sum of the 0-5 integers equals that of their floats.
            column: list[Any] = [row[j] for row in valid_rows] + metric_scores[name]
            if column:
                means[name] = statistics.fmean(column)
        else:
            passes = [row[j] for row in valid_rows] + metric_passes[name]
            if passes:
                means[name] = sum(passes) / len(passes)
    total = len(inputs.cases)
    metrics_pct = statistics.fmean(overall_scored) if overall_scored else None
    cases_pct = 100 * passed_count / total if total else None
    aggregate = RunAggregate(
        **inputs.constant,
        passed_count=passed_count,
        failed_count=failed_count,
        pass_rate=passed_count / total if total else 0.0,
        avg_overall_score=metrics_pct,
        weighted_metrics_score_pct=metrics_pct,
        metrics_pass_threshold=spec.metrics_pass_threshold,
        metrics_passed=None if metrics_pct is None else metrics_pct >= spec.metrics_pass_threshold,
        cases_pass_rate_pct=cases_pct,
        cases_pass_threshold=spec.cases_pass_threshold,
        cases_passed=None if cases_pct is None else cases_pct >= spec.cases_pass_threshold,
        per_metric_means=means,
        coverage=Coverage(
            scored=len(overall_scored),
            unscored=unscored,
            errored=inputs.errored,
            pending=pending,
            canceled=inputs.canceled,
        ),
        self_judged_count=self_judged,
    )
    return Rescored(decisions, aggregate)
