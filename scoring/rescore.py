"""Lean rescoring of a whole run: what `score_case` + `summarize_run` decide, without the models.

A rescore needs, per case, only the decision (status, pass, overall score) and what the run
aggregate reads. `RunInputs` holds the spec-independent part of every case, built once per state
of the run's cases (`ReadModels` keeps it in memory); `rescore_run` applies a spec to it with
plain tuples and dict lookups. `scoring.score_case` stays the definition: a case with more than
one active verdict is scored by it, and tests prove both paths equal on varied facts and specs.
"""

from __future__ import annotations

import functools
import hashlib
import math
import statistics
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from evaledger.domain.events import ParseStatus
from evaledger.domain.metrics import ScoreType
from evaledger.domain.spec import Gate, JudgeErrorPolicy, ScoringSpec, Severity
from evaledger.scoring import case as scoring
from evaledger.scoring import facts as facts_module
from evaledger.scoring import named as named_module
from evaledger.scoring import stats
from evaledger.scoring.case import (
    MAX_SCORE,
    P95_MIN_SAMPLES,
    _observations,
    _outcome_results,
    score_case,
)
from evaledger.scoring.facts import CaseFacts, MetricFact, VerdictFact
from evaledger.scoring.models import CaseStatus, Coverage, RunAggregate
from evaledger.scoring.named import named_score_means, score_gate
from evaledger.scoring.stats import percentile

__all__ = ["INPUTS_FORMAT", "Rescored", "RunInputs", "rescore_run"]

_lookup = dict.__getitem__  # table[value] without a Python-level call per metric
_PASSED, _FAILED = CaseStatus.PASSED.value, CaseStatus.FAILED.value
_ERRORED, _CANCELED = CaseStatus.ERRORED.value, CaseStatus.CANCELED.value
_UNSCORED, _PENDING = CaseStatus.UNSCORED.value, CaseStatus.PENDING.value


def _code_digest() -> str:
    """Digest of the code that decides what the inputs hold (this module and the scoring rules).

    Part of INPUTS_FORMAT, so that inputs stored by other code are rebuilt, never read, even when
    nobody remembered to bump the format. Without the sources: a token of this process.
    """
    digest = hashlib.sha256()
    try:
        for module in (sys.modules[__name__], scoring, facts_module, named_module, stats):
            digest.update(Path(module.__file__ or "").read_bytes())
    except OSError:
        return uuid.uuid4().hex[:12]
    return digest.hexdigest()[:12]


INPUTS_FORMAT = f"evaledger.rescore-inputs/2+{_code_digest()}"
"""Version of `RunInputs.to_bytes` and of the code that built them (see `_code_digest`)."""

_Case = tuple[
    str | None,
    bool | None,
    int | None,
    dict[str, float] | None,
    bool,
    bool | None,
    str,
    int,
    int,
    bool | None,
    bool,
    int,
]
"""One case's spec-independent scoring inputs, plain data (stored as JSON, unpacked in the loop):

- fixed status, fixed passed: errored, canceled or not run yet (never scored), else None;
- complex: index in `RunInputs.complex` of a case with several active verdicts (`score_case`
  itself scores it), else None;
- its named scores (None: none); whether its transcript has turns;
- broken: None without an active verdict, else whether the verdict is an error verdict under
  every spec (an error was recorded or its reply did not parse);
- row: the verdict's metrics by the run's metric index j (the judge's first answer counts): at j
  the clamped score "0"-"5", at K + j the pass "t" / fail "f", "-" when absent (K metrics);
- scored, passing: bit j set when metric j has a score, a pass/fail;
- forced: a human override forcing pass/fail, else None;
- self-judged;
- outcome bits: what the gate reads of the case's outcome results (any, all passed, any blocker,
  every blocker passed: bits 0-3 with the verdict's outcomes, 4-7 without a valid verdict).
"""

_ANY, _ALL, _BLOCKERS, _BLOCKERS_PASSED = 1, 2, 4, 8
_WITHOUT_VERDICT = 4
"""Shift of the outcome bits without a valid verdict."""


def _outcome_bits(facts: CaseFacts, verdict: VerdictFact | None) -> int:
    combined = list(verdict.expected_outcomes) if verdict is not None else []
    results = _outcome_results(facts, combined)
    blockers = [o.passed for o in results if o.severity is Severity.BLOCKER]
    return (
        (_ANY if results else 0)
        | (_ALL if all(o.passed for o in results) else 0)
        | (_BLOCKERS if blockers else 0)
        | (_BLOCKERS_PASSED if all(blockers) else 0)
    )


def _row(verdict: VerdictFact, index: dict[str, int]) -> tuple[str, int, int]:
    first: dict[str, MetricFact] = {}
    for m in verdict.metric_scores:
        first.setdefault(m.metric, m)  # the judge's first answer counts (as `_metric_facts`)
    k = len(index)
    row = ["-"] * (2 * k)
    scored = passing = 0
    for name, f in first.items():
        j = index[name]
        if f.score is not None:
            row[j] = str(max(0, min(MAX_SCORE, int(f.score))))
            scored |= 1 << j
        if f.passed is not None:
            row[k + j] = "t" if f.passed else "f"
            passing |= 1 << j
    return "".join(row), scored, passing


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
    broken: bool | None = None
    row, scored, passing = "", 0, 0
    if one is not None:
        broken = one.error is not None or one.parse_status is not ParseStatus.PARSED
        row, scored, passing = _row(one, index)
    agent = facts.agent_provider
    return (
        fixed,
        fixed_passed,
        complex_at,
        dict(facts.named_scores) or None,
        facts.turn_count > 0,
        broken,
        row,
        scored,
        passing,
        one.forced_passed if one is not None else None,
        fixed is None and one is not None and agent is not None and one.judge_provider == agent,
        _outcome_bits(facts, one) | _outcome_bits(facts, None) << _WITHOUT_VERDICT,
    )


_COLUMNS = (
    "metrics",
    "cases",
    "case_ids",
    "test_case_keys",
    "repetitions",
    "old_overall",
    "old_passed",
    "old_status",
    "errored",
    "canceled",
    "constant",
)


class RunInputs:
    """Everything a rescore of one run needs that no spec changes, in opening order.

    Built once from the run's scoring facts and its stored own-spec decisions; the aggregate's
    spec-independent figures (latency, tokens, cost, named scores, errors, cancels) are summed
    here, once, by the same expressions as `summarize_run`. Plain data throughout, so that it
    stores as one compact JSON document (`to_bytes` / `from_bytes`, no per-case decoding).
    """

    metrics: list[str]
    """The run's metric index: every metric a verdict reports, in order of appearance."""
    cases: list[_Case]
    complex: list[CaseFacts]
    case_ids: list[str]
    test_case_keys: list[str]
    repetitions: list[int]
    old_overall: list[float | None]
    """Per case: overall_score under the run's own spec, as stored."""
    old_passed: list[bool | None]
    old_status: list[str | None]
    """Per case: status under the run's own spec, as stored (None: no stored row)."""
    errored: int
    canceled: int
    constant: dict[str, Any]
    """The spec-independent fields of the run aggregate."""

    @classmethod
    def build(
        cls, facts: Sequence[CaseFacts], old: dict[str, tuple[float | None, bool | None, str]]
    ) -> RunInputs:
        """The inputs of a run from its cases' scoring facts and stored own-spec decisions.

        `old`: case id → (overall_score, passed, status) under the run's own spec.
        """
        self = cls()
        index: dict[str, int] = {}
        for f in facts:
            for v in f.verdicts:
                for m in v.metric_scores:
                    index.setdefault(m.metric, len(index))
        self.metrics = list(index)
        self.complex = []
        self.cases = [_lean_case(f, index, self.complex) for f in facts]
        self.case_ids = [str(f.case_id) for f in facts]
        self.test_case_keys = [f.test_case_key for f in facts]
        self.repetitions = [f.repetition for f in facts]
        stored = [old.get(case_id, (None, None, None)) for case_id in self.case_ids]
        self.old_overall = [o[0] for o in stored]
        self.old_passed = [o[1] for o in stored]
        self.old_status = [o[2] for o in stored]
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

    @functools.cached_property
    def sound_rows(self) -> int:
        """How many cases are scored by their one verdict, which is not broken."""
        return len(self._sound)

    @functools.cached_property
    def row_counts(self) -> list[Counter[str]]:
        """Per row position, how often each character occurs over those verdicts."""
        sound = self._sound
        return [Counter(map(itemgetter(p), sound)) for p in range(2 * len(self.metrics))]

    @property
    def _sound(self) -> list[str]:
        return [c[6] for c in self.cases if c[0] is None and c[2] is None and c[5] is False]

    @functools.cached_property
    def old(self) -> list[tuple[float | None, bool | None, str | None]]:
        """Per case (overall_score, passed, status) under the run's own spec, as stored."""
        return list(zip(self.old_overall, self.old_passed, self.old_status, strict=True))

    def to_bytes(self) -> bytes:
        """One JSON document (orjson keeps every float exact, ints and bools apart)."""
        doc = {name: getattr(self, name) for name in _COLUMNS}
        doc["format"] = INPUTS_FORMAT
        doc["complex"] = [f.model_dump(mode="json") for f in self.complex]
        return orjson.dumps(doc)

    @classmethod
    def from_bytes(cls, data: bytes) -> RunInputs | None:
        """Inputs stored by `to_bytes`; None when another format stored them."""
        doc = orjson.loads(data)
        if doc.get("format") != INPUTS_FORMAT:
            return None
        self = cls()
        for name in _COLUMNS:
            setattr(self, name, doc[name])
        self.complex = [CaseFacts.model_validate(f) for f in doc["complex"]]
        return self


def _getter(at: list[int]) -> Callable[[str], Sequence[str]]:
    """Characters of a verdict row at `at`, always a sequence (itemgetter of one is a scalar)."""
    if len(at) == 1:
        (j,) = at
        return lambda row: (row[j],)
    return itemgetter(*at)


@dataclass(frozen=True, slots=True)
class Rescored:
    """A run under a spec: its case decisions and its aggregate.

    `decisions`: per case in opening order (overall_score, passed, status); `aggregate` equals
    `summarize_run` of the case scores.
    """

    decisions: list[tuple[float | None, bool | None, str]]
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
    index = {name: j for j, name in enumerate(inputs.metrics)}
    k = len(index)
    # A metric no verdict of the run reports makes every verdict an error verdict.
    known = all(n in index for n in names)
    need_score = need_pass = 0
    at: list[int] = []
    # Contribution of each metric by the verdict's row character: 100 × score/5 × weight, the
    # same float operations as `_combine_metric` (a binary pass counts 5, a fail 0.0).
    tables: list[dict[str, float]] = []
    for m, scored in zip(spec.metrics, scored_type, strict=True):
        j = index.get(m.metric, 0)
        if scored:
            need_score |= 1 << j
            at.append(j)
            tables.append({str(s): 100 * float(s) / MAX_SCORE * m.weight for s in range(6)})
        else:
            need_pass |= 1 << j
            at.append(k + j)
            tables.append(
                {
                    "f": 100 * 0.0 / MAX_SCORE * m.weight,
                    "t": 100 * MAX_SCORE / MAX_SCORE * m.weight,
                }
            )
    values = _getter(at)
    score_zero = spec.judge_errors is JudgeErrorPolicy.SCORE_ZERO
    gates = bool(spec.score_gates)
    blockers_gate = spec.gate is Gate.BLOCKERS
    threshold = spec.pass_threshold

    # Metric results of the cases `score_case` scored (several active verdicts).
    extra_scores: dict[str, list[float]] = {n: [] for n in names}
    extra_passes: dict[str, list[bool]] = {n: [] for n in names}
    # Rows of sound verdicts (not error verdicts under every spec) this spec finds invalid.
    invalid_rows: list[str] = []
    decisions: list[tuple[float | None, bool | None, str]] = []
    overall_scored: list[float] = []
    passed_count = failed_count = unscored = pending = self_judged = 0
    for (
        fixed,
        fixed_passed,
        complex_at,
        named,
        turns,
        broken,
        row,
        has_score,
        has_pass,
        forced,
        judged_self,
        outcomes,
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
                    if r.score is not None and r.metric in extra_scores:
                        extra_scores[r.metric].append(r.score)
                        extra_passes[r.metric].append(r.passed is True)
        else:
            valid = (
                broken is False
                and known
                and has_score & need_score == need_score
                and has_pass & need_pass == need_pass
            )
            if valid:
                overall = round(sum(map(_lookup, tables, values(row))), 2)
            else:
                if broken is False:
                    invalid_rows.append(row)
                if broken is not None and turns and score_zero:
                    overall = 0.0  # the error verdict counts as 0.0 (judge_errors: score_zero)
            gated = score_gate(named, spec) if gates and named else None
            if gated is not None:
                status, passed = (_PASSED if gated[0] else _FAILED), gated[0]
            elif not turns:
                status, passed = _FAILED, False
            elif broken is None and not outcomes >> _WITHOUT_VERDICT & _ANY:
                status, passed = _PENDING, None
            else:
                if broken is not None and not valid:
                    status, passed = (_FAILED, False) if score_zero else (_UNSCORED, None)
                else:
                    bits = outcomes if broken is not None else outcomes >> _WITHOUT_VERDICT
                    if blockers_gate:
                        passed = bool(bits & _BLOCKERS_PASSED) if bits & _BLOCKERS else True
                    elif bits & _ANY:
                        passed = bool(bits & _ALL)
                    else:
                        assert overall is not None
                        passed = overall >= threshold
                    status = _PASSED if passed else _FAILED
                if forced is not None:
                    status, passed = (_PASSED if forced else _FAILED), forced
            self_judged += judged_self
        decisions.append((overall, passed, status))
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

    # Metric means over the valid verdicts: the run's per-position character counts over its
    # sound verdicts (spec-independent), less those of the rows this spec finds invalid.
    counts, sound = inputs.row_counts, inputs.sound_rows
    n_valid = sound - len(invalid_rows) if known else 0
    means: dict[str, float] = {}
    for name, j, scored in zip(names, at, scored_type, strict=True):
        found = Counter(counts[j]) if known else Counter()
        if known and invalid_rows:
            found.subtract(row[j] for row in invalid_rows)
        if scored:
            n = n_valid + len(extra_scores[name])
            if n:
                # fmean is fsum / n, and fsum is exact: the integer sum of the 0-5 scores
                # stands in for the sum of their floats.
                exact = sum(d * found[str(d)] for d in range(1, MAX_SCORE + 1))
                means[name] = math.fsum([exact, *extra_scores[name]]) / n
        else:
            n = n_valid + len(extra_passes[name])
            if n:
                means[name] = (found["t"] + sum(extra_passes[name])) / n
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
