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

import orjson

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

__all__ = ["INPUTS_FORMAT", "Rescored", "RunInputs", "rescore_run"]

_PASSED, _FAILED = CaseStatus.PASSED.value, CaseStatus.FAILED.value
_ERRORED, _CANCELED = CaseStatus.ERRORED.value, CaseStatus.CANCELED.value
_UNSCORED, _PENDING = CaseStatus.UNSCORED.value, CaseStatus.PENDING.value


INPUTS_FORMAT = "evaledger.rescore-inputs/1"
"""Version of `RunInputs.to_bytes`: bump it whenever this module or the scoring rules change what
the inputs hold, so that inputs stored by older code are rebuilt instead of read."""

_Outcomes = tuple[bool, bool, bool, bool]
"""What the gate reads of a case's outcome results: any, all passed, any blocker, every blocker
passed."""

_Verdict = tuple[bool, list[Any], int, int, bool | None]
"""The one active verdict of a case, as scoring reads it:

- broken: an error verdict under every spec (an error was recorded or its reply did not parse);
- row: by the run's metric index j (the judge's first answer per metric), at j the clamped 0-5
  score or None, at K + j the pass/fail or None (K metrics in the index);
- scored, passing: bit j set when metric j has a score, a pass/fail;
- forced: a human override forcing pass/fail.
"""

_Case = tuple[
    str | None,
    bool | None,
    int | None,
    dict[str, float],
    bool,
    _Verdict | None,
    bool,
    _Outcomes,
    _Outcomes,
]
"""One case's spec-independent scoring inputs (plain data: stored as JSON, unpacked in the loop):

- fixed status, fixed passed: errored, canceled or not run yet (never scored), else None;
- complex: index in `RunInputs.complex` of a case with several active verdicts (`score_case`
  itself scores it), else None;
- named scores; whether the transcript has turns; the active verdict (`_Verdict`) or None;
- self-judged; the outcome results when the verdict is valid and when no verdict is valid.
"""


def _outcomes(facts: CaseFacts, verdict: VerdictFact | None) -> _Outcomes:
    combined = list(verdict.expected_outcomes) if verdict is not None else []
    results = _outcome_results(facts, combined)
    blockers = [o.passed for o in results if o.severity is Severity.BLOCKER]
    return (bool(results), all(o.passed for o in results), bool(blockers), all(blockers))


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
    broken = verdict.error is not None or verdict.parse_status is not ParseStatus.PARSED
    return (broken, row, scored, passing, verdict.forced_passed)


def _lean_case(facts: CaseFacts, index: dict[str, int], complex_cases: list[CaseFacts]) -> _Case:
    active = [v for v in facts.verdicts if not v.invalidated]
    fixed: str | None = None
    fixed_passed: bool | None = None
    if facts.errored:
        fixed, fixed_passed = _ERRORED, False
    elif facts.canceled:
        fixed = _CANCELED
    elif not (
        facts.has_transcript
        or facts.verdicts
        or facts.outcome_evaluations
        or facts.claims
        or facts.checks
        or facts.named_scores
    ):
        fixed = _PENDING  # not run yet: nothing a spec could score
    complex_at: int | None = None
    if fixed is None and len(active) > 1:
        complex_at = len(complex_cases)
        complex_cases.append(facts)
    one = active[0] if len(active) == 1 else None
    agent = facts.agent_provider
    return (
        fixed,
        fixed_passed,
        complex_at,
        dict(facts.named_scores),
        facts.turn_count > 0,
        _lean_verdict(one, index) if one is not None else None,
        fixed is None and one is not None and agent is not None and one.judge_provider == agent,
        _outcomes(facts, one),
        _outcomes(facts, None),
    )


class RunInputs:
    """Everything a rescore of one run needs that no spec changes, in opening order.

    Built once from the run's scoring facts and its stored own-spec decisions; the aggregate's
    spec-independent figures (latency, tokens, cost, named scores, errors, cancels) are summed
    here, once, by the same expressions as `summarize_run`. Plain data throughout, so that it
    stores as one compact JSON document (`to_bytes` / `from_bytes`).
    """

    metrics: dict[str, int]
    """The run's metric index: every metric a verdict reports, in order of appearance."""
    cases: list[_Case]
    complex: list[CaseFacts]
    case_ids: list[str]
    keys: list[tuple[str, int]]
    """(test_case_key, repetition) per case."""
    old: dict[str, tuple[float | None, bool | None, str]]
    """case id → (overall_score, passed, status) under the run's own spec, as stored."""
    errored: int
    canceled: int
    constant: dict[str, Any]
    """The spec-independent fields of the run aggregate."""

    @classmethod
    def build(
        cls, facts: Sequence[CaseFacts], old: dict[str, tuple[float | None, bool | None, str]]
    ) -> RunInputs:
        """The inputs of a run from its cases' scoring facts and stored own-spec decisions."""
        self = cls()
        self.metrics = {}
        for f in facts:
            for v in f.verdicts:
                for m in v.metric_scores:
                    self.metrics.setdefault(m.metric, len(self.metrics))
        self.complex = []
        self.cases = [_lean_case(f, self.metrics, self.complex) for f in facts]
        self.case_ids = [str(f.case_id) for f in facts]
        self.keys = [(f.test_case_key, f.repetition) for f in facts]
        self.old = old
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
        self.constant = {
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
        return self

    def to_bytes(self) -> bytes:
        """One JSON document (orjson keeps every float exact, ints and bools apart)."""
        return orjson.dumps(
            {
                "format": INPUTS_FORMAT,
                "metrics": list(self.metrics),
                "cases": self.cases,
                "complex": [f.model_dump(mode="json") for f in self.complex],
                "case_ids": self.case_ids,
                "keys": self.keys,
                "old": [[k, *v] for k, v in self.old.items()],
                "errored": self.errored,
                "canceled": self.canceled,
                "constant": self.constant,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> RunInputs | None:
        """Inputs stored by `to_bytes`; None when another format stored them."""
        doc = orjson.loads(data)
        if doc.get("format") != INPUTS_FORMAT:
            return None
        self = cls()
        self.metrics = {name: j for j, name in enumerate(doc["metrics"])}
        self.cases = doc["cases"]
        self.complex = [CaseFacts.model_validate(f) for f in doc["complex"]]
        self.case_ids = doc["case_ids"]
        self.keys = doc["keys"]
        self.old = {k: (overall, passed, status) for k, overall, passed, status in doc["old"]}
        self.errored = doc["errored"]
        self.canceled = doc["canceled"]
        self.constant = doc["constant"]
        return self


def _at(table: tuple[float, ...], value: int) -> float:
    return table[value]


def _getter(at: list[int]) -> Callable[[list[Any]], Sequence[Any]]:
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
    valid_rows: list[list[Any]] = []
    decisions: list[tuple[str, bool | None, float | None]] = []
    overall_scored: list[float] = []
    passed_count = failed_count = unscored = pending = self_judged = 0
    for (
        fixed,
        fixed_passed,
        complex_at,
        named,
        turns,
        v,
        judged_self,
        valid_o,
        error_o,
    ) in inputs.cases:
        overall: float | None = None
        passed: bool | None
        if fixed is not None:
            status, passed = fixed, fixed_passed
        elif complex_at is not None:
            s = score_case(inputs.complex[complex_at], spec)
            status, passed, overall = s.status.value, s.passed, s.overall_score
            self_judged += s.self_judged
            if s.scored and overall is not None:
                for r in s.metric_scores:
                    if r.score is not None and r.metric in metric_scores:
                        metric_scores[r.metric].append(r.score)
                        metric_passes[r.metric].append(r.passed is True)
        else:
            valid = False
            forced: bool | None = None
            if v is not None:
                broken, row, has_score, has_pass, forced = v
                valid = (
                    known
                    and not broken
                    and has_score & need_score == need_score
                    and has_pass & need_pass == need_pass
                )
                if valid:
                    overall = round(sum(map(_at, tables, values(row))), 2)
                    valid_rows.append(row)
                elif turns and score_zero:
                    overall = 0.0  # the error verdict counts as 0.0 (judge_errors: score_zero)
            gated = score_gate(named, spec) if gates and named else None
            if gated is not None:
                status, passed = (_PASSED if gated[0] else _FAILED), gated[0]
            elif not turns:
                status, passed = _FAILED, False
            elif v is None and not error_o[0]:
                status, passed = _PENDING, None
            else:
                if v is not None and not valid:
                    status, passed = (_FAILED, False) if score_zero else (_UNSCORED, None)
                else:
                    any_outcome, all_passed, blockers, blockers_passed = (
                        valid_o if v is not None else error_o
                    )
                    if blockers_gate:
                        passed = blockers_passed if blockers else True
                    elif any_outcome:
                        passed = all_passed
                    else:
                        assert overall is not None
                        passed = overall >= threshold
                    status = _PASSED if passed else _FAILED
                if forced is not None:
                    status, passed = (_PASSED if forced else _FAILED), forced
            self_judged += judged_self
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
