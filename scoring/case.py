"""Scoring math (DESIGN §3.1-3.2): pure functions from CaseFacts and a ScoringSpec to scores.

Projections and what-if replays share these functions, so a rescore under another spec is only
`score_case` over the same facts: no I/O, no clock, no judge call.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from evaledger.domain.events import CheckStatus, ClaimSupport, ParseStatus
from evaledger.domain.metrics import ScoreType, score_label
from evaledger.domain.spec import (
    PanelPolicy,
    PassReducer,
    ResolvedMetric,
    ScoreReducer,
    ScoringSpec,
    Severity,
)
from evaledger.scoring.decide import Evidence, Signals, decide, explain, outcome_bits, recorded
from evaledger.scoring.facts import CaseFacts, MetricFact, OutcomeFact, VerdictFact
from evaledger.scoring.means import mean
from evaledger.scoring.models import (
    CaseScore,
    GateRule,
    MetricResult,
    OutcomeView,
    RunAggregate,
    TestCaseResult,
)
from evaledger.scoring.named import named_score_means

# The run-level names are `scoring.run`'s; imported here by the names callers (the read models,
# the web, the tests) and the API's field descriptions know them by in this module.
from evaledger.scoring.run import (
    P95_MIN_SAMPLES,
    CaseUsage,
    latency_samples,
    pass_rate_figures,
    summarize_run,
    threshold_passed,
    variant_figures,
)
from evaledger.scoring.scorer_metrics import case_groups
from evaledger.scoring.stats import percentile

__all__ = [
    "P95_MIN_SAMPLES",
    "case_usage",
    "latest_checks",
    "outcome_results",
    "pass_rate_figures",
    "reduce_repetitions",
    "score_case",
    "score_run",
    "summarize_run",
    "threshold_passed",
    "variant_figures",
]

MAX_SCORE = 5
"""Top of the 0-5 metric scale; a binary pass counts as this score, a fail as 0."""
JUDGE_ERROR_PREFIX = "Judge evaluation failed: "

_PARSE_FAILURES: dict[ParseStatus, str] = {
    ParseStatus.UNPARSEABLE: "unparseable reply",
    ParseStatus.MISSING_METRICS: "missing metric block",
    ParseStatus.PROVIDER_ERROR: "provider error",
}


# ---------------------------------------------------------------------------------------------
# Case level


@dataclass(frozen=True)
class _Panel:
    """What the judge verdicts of one case amount to under the spec's panel policy."""

    counted: list[VerdictFact]
    """Verdicts that count: the valid ones the policy uses, or the error verdicts if none is."""
    metrics: list[MetricResult]
    overall: float | None
    outcomes: list[OutcomeFact]
    error: str | None
    """'Judge evaluation failed: …' when verdicts are active but none of them is valid."""


def score_case(facts: CaseFacts, spec: ScoringSpec) -> CaseScore:
    """Score one case under a spec (DESIGN §3.1); `scoring.decide` states the rules.

    A case is *not run yet* while nothing but its opening is recorded (no transcript, verdict,
    outcome, claim or check): it is pending, never failed. "No transcript" means no turns: a
    recorded transcript with zero turns fails the case (not errored) even when it carries usage or
    cost, and even when a verdict came with it.
    """
    panel = _judge_panel(facts, spec)
    outcomes = outcome_results(facts, panel.outcomes)
    # Overrides are ordered with their verdicts; the latest verdict's correction wins.
    forced = next((v for v in reversed(panel.counted) if v.forced_passed is not None), None)
    signals = Signals(
        errored=facts.errored,
        canceled=facts.canceled,
        recorded=recorded(facts),
        has_turns=facts.turn_count > 0,
        named_scores=facts.named_scores,
        judged=bool(panel.counted),
        judge_error=panel.error is not None,
        outcomes=outcome_bits(outcomes),
        panel_overall=panel.overall,
        forced=forced.forced_passed if forced is not None else None,
        skipped=facts.skipped is not None,
    )
    decision = decide(signals, spec)
    evidence = Evidence(
        has_transcript=facts.has_transcript,
        error_message=facts.error_message,
        judge_error=panel.error,
        outcomes=outcomes,
        override_reason=(
            forced.override_reasons[-1] if forced is not None and forced.override_reasons else None
        ),
        score_overrides=facts.score_overrides,
        skipped=facts.skipped,
    )
    if decision.gate in _EXECUTION_RULES:
        # An execution that errored or was canceled is not judged: its verdicts show nowhere.
        panel, outcomes = _NO_PANEL, []
    assertion_score, blockers_passed = _assertions(outcomes, spec)
    agent = facts.agent_provider
    return CaseScore(
        case_id=facts.case_id,
        run_id=facts.run_id,
        test_case_key=facts.test_case_key,
        test_id=facts.test_id,
        repetition=facts.repetition,
        variant=facts.variant,
        status=decision.status,
        overall_score=decision.overall,
        passed=decision.passed,
        errored=facts.errored,
        canceled=facts.canceled,
        judge_error=panel.error is not None,
        judge_error_message=panel.error,
        scored=decision.overall is not None,
        gate=decision.gate,
        gate_reason=explain(decision, signals, spec, evidence),
        metric_scores=panel.metrics,
        outcome_results=[
            OutcomeView(statement=o.statement, passed=o.passed, severity=o.severity.value)
            for o in outcomes
        ],
        assertion_score=assertion_score,
        blockers_passed=blockers_passed,
        verdict_ids=[v.verdict_id for v in panel.counted],
        self_judged=agent is not None and any(v.judge_provider == agent for v in panel.counted),
        named_scores=dict(facts.named_scores),
        groups=case_groups(facts.tags, spec.scorers),
        **_observations(facts),
    )


_EXECUTION_RULES = (GateRule.EXECUTION_ERROR, GateRule.CANCELED, GateRule.SKIPPED)
_NO_PANEL = _Panel(counted=[], metrics=[], overall=None, outcomes=[], error=None)


def _observations(facts: CaseFacts) -> dict[str, Any]:
    """Numbers observed on the case whatever its status (latency, usage, claims, checks)."""
    used = case_usage(facts)
    statuses = latest_checks(facts)
    return {
        "latency_p50_ms": used.latency_p50_ms,
        "prompt_tokens": used.prompt_tokens,
        "completion_tokens": used.completion_tokens,
        "cost_usd": used.cost_usd,
        "judge_cost_usd": used.judge_cost_usd,
        "latency_p95_ms": _case_p95(facts.assistant_latencies),
        "claims_total": len(facts.claims),
        "claims_supported": facts.claims.count(ClaimSupport.SUPPORTED),
        "hallucinations": facts.claims.count(ClaimSupport.UNSUPPORTED)
        + facts.claims.count(ClaimSupport.CONTRADICTED),
        "checks_passed": sum(s is CheckStatus.PASSED for s in statuses.values()),
        "checks_failed": sum(s is CheckStatus.FAILED for s in statuses.values()),
        "checks_inconclusive": sum(s is CheckStatus.INCONCLUSIVE for s in statuses.values()),
    }


def case_usage(facts: CaseFacts) -> CaseUsage:
    """What the run's figures read of a case whatever its status: p50 latency, tokens, costs.

    The same values as `CaseUsage.of_score` of the case's score (under any spec): the case's
    score carries them (`_observations`), and it is skipped exactly when `decide` says so (an
    execution error comes first).
    """
    latencies = facts.assistant_latencies
    return CaseUsage(
        test_case_key=facts.test_case_key,
        skipped=facts.skipped is not None and not facts.errored,
        errored=facts.errored,
        canceled=facts.canceled,
        latency_p50_ms=int(percentile(latencies, 50)) if latencies else None,
        prompt_tokens=facts.prompt_tokens,
        completion_tokens=facts.completion_tokens,
        cost_usd=facts.cost_usd,
        # Every judge call was paid for, even the ones later invalidated.
        judge_cost_usd=sum(v.cost_usd for v in facts.verdicts if v.cost_usd is not None),
        named_scores=facts.named_scores,
    )


def _case_p95(latencies: list[float]) -> float | None:
    if not latencies:
        return None
    if len(latencies) >= P95_MIN_SAMPLES:
        return percentile(latencies, 95)
    return max(latencies)


def latest_checks(facts: CaseFacts) -> dict[str, CheckStatus]:
    """Each structural check's latest status (a re-run hook supersedes its earlier result)."""
    return {c.check: c.status for c in facts.checks}


def _judge_panel(facts: CaseFacts, spec: ScoringSpec) -> _Panel:
    active = sorted((v for v in facts.verdicts if not v.invalidated), key=lambda v: v.position)
    problems = {v.verdict_id: _verdict_error(v, spec) for v in active}
    valid = [v for v in active if problems[v.verdict_id] is None]
    use_one = spec.panel is PanelPolicy.FIRST
    if not valid:
        if not active:
            return _Panel(counted=[], metrics=[], overall=None, outcomes=[], error=None)
        counted = active[:1] if use_one else active
        problem = problems[counted[0].verdict_id] or ""
        return _Panel(
            counted=counted,
            metrics=[],
            overall=None,
            outcomes=[],
            error=JUDGE_ERROR_PREFIX + problem.removeprefix(JUDGE_ERROR_PREFIX),
        )
    counted = valid[:1] if use_one else valid
    # Each counted verdict's metric map, built once for all the spec's metrics.
    maps = [_metric_facts(v) for v in counted]
    metrics = [_combine_metric(m, maps, spec.panel) for m in spec.metrics]
    return _Panel(
        counted=counted,
        metrics=metrics,
        overall=round(sum(m.contribution for m in metrics), 2),
        outcomes=_combine_outcomes(counted, spec.panel),
        error=None,
    )


def _verdict_error(verdict: VerdictFact, spec: ScoringSpec) -> str | None:
    """Why a verdict is an error verdict, or None when it is valid under the spec."""
    if verdict.error is not None:
        return verdict.error
    if verdict.parse_status is not ParseStatus.PARSED:
        return _PARSE_FAILURES.get(verdict.parse_status, verdict.parse_status.value)
    by_metric = _metric_facts(verdict)
    for selected in spec.metrics:
        fact = by_metric.get(selected.metric)
        if fact is None:
            return f"missing metric {selected.metric}"
        if selected.score_type is ScoreType.BINARY and fact.passed is None:
            return f"metric {selected.metric} has no pass/fail"
        if selected.score_type is ScoreType.SCORED and fact.score is None:
            return f"metric {selected.metric} has no score"
    return None


def _metric_facts(verdict: VerdictFact) -> dict[str, MetricFact]:
    facts: dict[str, MetricFact] = {}
    for m in verdict.metric_scores:
        facts.setdefault(m.metric, m)  # a metric reported twice: the judge's first answer counts
    return facts


METRIC_RESULTS_CACHED = 4096
"""Distinct metric results kept (`_combine_metric`); past it, forgotten all at once."""
_METRIC_RESULTS: dict[tuple[Any, ...], MetricResult] = {}


def _combine_metric(
    selected: ResolvedMetric, verdicts: list[dict[str, MetricFact]], panel: PanelPolicy
) -> MetricResult:
    """One selected metric's result over the counted verdicts' answers.

    A pure function of the metric (name, type, weight), the panel policy and each counted
    verdict's answer: a run's cases repeat a few dozen such combinations, so each distinct one
    is built (and validated) once and its result shared (results are never changed in place).
    """
    facts = [v[selected.metric] for v in verdicts]
    key = (
        selected.metric,
        selected.score_type,
        selected.weight,
        panel,
        *[(f.score, f.passed, f.failure_code, *f.turns) for f in facts],
    )
    found = _METRIC_RESULTS.get(key)
    if found is None:
        found = _metric_result(selected, facts, panel)
        if len(_METRIC_RESULTS) >= METRIC_RESULTS_CACHED:
            _METRIC_RESULTS.clear()
        _METRIC_RESULTS[key] = found
    return found


def _metric_result(
    selected: ResolvedMetric, facts: list[MetricFact], panel: PanelPolicy
) -> MetricResult:
    passed: bool | None = None
    if selected.score_type is ScoreType.BINARY:
        score, passed = _combine_binary([bool(f.passed) for f in facts], panel)
        label = score_label(MAX_SCORE if passed else 0, ScoreType.BINARY)
    else:
        # Judge scores are integers 0-5; clamp in case a custom importer slipped past validation.
        score = _combine_scored([max(0, min(MAX_SCORE, int(f.score or 0))) for f in facts], panel)
        label = score_label(int(score), ScoreType.SCORED)
    diagnosed = next((f for f in facts if f.failure_code or f.turns), facts[0])
    return MetricResult(
        metric=selected.metric,
        score=score,
        passed=passed,
        label=label,
        weight=selected.weight,
        contribution=100 * score / MAX_SCORE * selected.weight,
        failure_code=diagnosed.failure_code or None,
        turns=list(diagnosed.turns),
    )


def _combine_scored(votes: list[int], panel: PanelPolicy) -> float:
    if panel is PanelPolicy.FIRST:
        return float(votes[0])
    if panel is PanelPolicy.MEAN:
        return statistics.fmean(votes)
    if panel is PanelPolicy.MEDIAN:
        return float(statistics.median(votes))
    if panel is PanelPolicy.MAJORITY:
        counts = Counter(votes)
        top = max(counts.values())
        # A tie resolves to the lower (more pessimistic) score.
        return float(min(v for v, c in counts.items() if c == top))
    # strict_majority: the best score that more than half of the panel grants (at least).
    return float(
        max(s for s in range(MAX_SCORE + 1) if 2 * sum(v >= s for v in votes) > len(votes))
    )


def _combine_binary(votes: list[bool], panel: PanelPolicy) -> tuple[float, bool]:
    """Score (0-5) and pass of a binary metric across a panel; ties fail."""
    if panel is PanelPolicy.FIRST:
        return (MAX_SCORE if votes[0] else 0.0), votes[0]
    passed = 2 * sum(votes) > len(votes)
    points = [MAX_SCORE if v else 0 for v in votes]
    # mean and median keep the panel's averaged points in the weighted sum; the vote decides pass.
    if panel is PanelPolicy.MEAN:
        return statistics.fmean(points), passed
    if panel is PanelPolicy.MEDIAN:
        return float(statistics.median(points)), passed
    return (MAX_SCORE if passed else 0.0), passed


def _by_occurrence(outcomes: Iterable[OutcomeFact]) -> dict[tuple[str, int], OutcomeFact]:
    """Key each result by (statement, n-th time the statement appears in this list).

    Two results with the same statement are two results: keying by the statement alone would keep
    only the last, so a failing outcome could vanish and the case pass.
    """
    seen: Counter[str] = Counter()
    keyed: dict[tuple[str, int], OutcomeFact] = {}
    for o in outcomes:
        keyed[(o.statement, seen[o.statement])] = o
        seen[o.statement] += 1
    return keyed


def _combine_outcomes(verdicts: list[VerdictFact], panel: PanelPolicy) -> list[OutcomeFact]:
    if panel is PanelPolicy.FIRST:
        return list(verdicts[0].expected_outcomes)
    votes: dict[tuple[str, int], list[OutcomeFact]] = {}
    for verdict in verdicts:
        for key, outcome in _by_occurrence(verdict.expected_outcomes).items():
            votes.setdefault(key, []).append(outcome)
    return [
        OutcomeFact(
            statement=statement,
            # Per result majority; a tie fails, like every other panel tie.
            passed=2 * sum(o.passed for o in results) > len(results),
            severity=results[0].severity,
        )
        for (statement, _), results in votes.items()
    ]


def outcome_results(facts: CaseFacts, combined: list[OutcomeFact]) -> list[OutcomeFact]:
    """The case's outcome results: the panel's (`combined`), later evaluations, then checks."""
    results = _by_occurrence(combined)
    for evaluation in facts.outcome_evaluations:
        # A later evaluation supersedes the earlier result at the same (statement, occurrence).
        results.update(_by_occurrence(evaluation))
    for check, status in latest_checks(facts).items():
        # An inconclusive check (missing hook) is skipped, never failed.
        if status is not CheckStatus.INCONCLUSIVE:
            results[(f"check:{check}", 0)] = OutcomeFact(
                statement=f"check:{check}",
                passed=status is CheckStatus.PASSED,
                severity=Severity.BLOCKER,
            )
    return list(results.values())


def _assertions(outcomes: list[OutcomeFact], spec: ScoringSpec) -> tuple[float | None, bool | None]:
    """Voxli assertion score (severity-weighted % passed) and whether every blocker passed."""
    if not outcomes:
        return None, None
    weights = spec.severity_weights
    total = sum(weights.of(o.severity) for o in outcomes)
    earned = sum(weights.of(o.severity) for o in outcomes if o.passed)
    score = 100 * earned / total if total > 0 else None
    return score, all(o.passed for o in outcomes if o.severity is Severity.BLOCKER)


# ---------------------------------------------------------------------------------------------
# A run's cases


def score_run(
    facts: Iterable[CaseFacts], spec: ScoringSpec
) -> tuple[list[CaseScore], RunAggregate]:
    """Score every case of a run and summarise them, under one spec."""
    scores = [score_case(f, spec) for f in facts]
    return scores, summarize_run(scores, spec)


# ---------------------------------------------------------------------------------------------
# Repetitions


def reduce_repetitions(scores: Sequence[CaseScore], spec: ScoringSpec) -> list[TestCaseResult]:
    """One result per test case key and variant (sorted) from its repetitions, by the reducers.

    A variant (promptfoo's provider × prompt, a configuration or persona) is a result of its
    own: two providers that disagree are two results, never one flaky test; only repetitions
    of one variant reduce together. pass@k is the chance that at least one of k repetitions
    drawn without replacement passes, pass^k the chance that all k pass (tau-bench); both need
    at least k decided repetitions.
    """
    groups: dict[tuple[str, str], list[CaseScore]] = {}
    for s in scores:
        groups.setdefault((s.test_case_key, s.variant), []).append(s)
    reducers = spec.reducers
    results: list[TestCaseResult] = []
    for key, variant in sorted(groups):
        reps = sorted(groups[key, variant], key=lambda s: s.repetition)
        scored = [s for s in reps if s.scored and s.overall_score is not None]
        decided = [s.passed for s in reps if s.passed is not None]
        n, c, k = len(decided), sum(decided), reducers.k
        latencies = latency_samples(reps)
        costs = [s.cost_usd for s in reps if s.cost_usd is not None]
        results.append(
            TestCaseResult(
                test_case_key=key,
                variant=variant,
                repetitions=len(reps),
                case_ids=[s.case_id for s in reps],
                score=_reduce_score(
                    [s.overall_score for s in scored if s.overall_score is not None],
                    reducers.score,
                ),
                passed=_reduce_passed(decided, reducers.passed, k),
                errored=all(s.errored for s in reps),
                any_errored=any(s.errored for s in reps),
                passes=c,
                decided=n,
                failures=sum(s.passed is False and not s.errored for s in reps),
                flaky=0 < c < n,
                pass_at_k=None if n < k else 1 - math.comb(n - c, k) / math.comb(n, k),
                pass_hat_k=None if n < k else math.comb(c, k) / math.comb(n, k),
                latency_p50_ms=mean(latencies),
                metric_scores=_rep_metric_means(scored, spec),
                metric_passed=_rep_metric_passed(scored, spec),
                # Per repetition, so test cases with different repetition counts compare.
                cost_usd=mean(costs),
                named_scores=named_score_means(reps),
            )
        )
    return results


def _reduce_score(values: list[float], reducer: ScoreReducer) -> float | None:
    if not values:
        return None
    if reducer is ScoreReducer.MEAN:
        return statistics.fmean(values)
    if reducer is ScoreReducer.MEDIAN:
        return float(statistics.median(values))
    if reducer is ScoreReducer.MIN:
        return min(values)
    return max(values)


def _reduce_passed(votes: list[bool], reducer: PassReducer, k: int) -> bool | None:
    if not votes:
        return None
    if reducer is PassReducer.ALL:
        return all(votes)
    if reducer is PassReducer.ANY:
        return any(votes)
    if reducer is PassReducer.MAJORITY:
        return 2 * sum(votes) > len(votes)  # a tie is not a majority
    return sum(votes) >= k


def _rep_metric_means(scored: list[CaseScore], spec: ScoringSpec) -> dict[str, float]:
    means: dict[str, float] = {}
    for selected in spec.metrics:
        found = mean([m.score or 0.0 for m in metric_results(scored, selected.metric)])
        if found is not None:
            means[selected.metric] = found
    return means


def _rep_metric_passed(scored: list[CaseScore], spec: ScoringSpec) -> dict[str, bool]:
    reduced: dict[str, bool] = {}
    for selected in spec.metrics:
        if selected.score_type is not ScoreType.BINARY:
            continue
        votes = [m.passed for m in metric_results(scored, selected.metric) if m.passed is not None]
        value = _reduce_passed(votes, spec.reducers.passed, spec.reducers.k)
        if value is not None:
            reduced[selected.metric] = value
    return reduced


def metric_results(scores: Sequence[CaseScore], metric: str) -> list[MetricResult]:
    """One metric's results across cases (judge error verdicts have none, so they are skipped)."""
    return [
        m for s in scores for m in s.metric_scores if m.metric == metric and m.score is not None
    ]
