"""The reference comparison: the per-case pydantic implementation of `compare_results` as it was
before the columnar fast path (main 417ff71), kept as the oracle the fast path is proven against
(tests/scoring/test_comparison_fast.py). It shares only the helpers the fast path did not rewrite
(per-case classification rule, verdict, config diff, cost, thresholds); the matching, per-case
rows with their per-metric deltas (one case at a time; the engine builds them per metric column
since issue 32), counts, per-metric means, warnings and statistics inputs are computed here
independently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter

from evaledger.domain.metrics import SCORE_LABELS
from evaledger.domain.spec import ComparisonThresholds, ScoringSpec
from evaledger.domain.types import variant_label
from evaledger.scoring.comparison import (
    AggregateComparison,
    ComparedRun,
    CompareThresholds,
    MetricAggregateDelta,
    RunComparison,
    TestCaseComparison,
    classify_case,
    config_diff,
)
from evaledger.scoring.comparison.rules import (
    _binary_value,
    _delta,
    _keys_text,
    _mean,
    _metric_types,
    _run_cost,
    _self_judged,
    _verdict,
)
from evaledger.scoring.models import TestCaseResult
from evaledger.scoring.named import compare_named_scores
from evaledger.scoring.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    PairedCase,
    paired_statistics,
)

_CASES = TypeAdapter(list[TestCaseComparison])
_PAIRS = TypeAdapter(list[PairedCase])


def _label(value: float | None) -> str | None:
    if value is None or not (float(value).is_integer() and 0 <= value <= 5):
        return None
    return SCORE_LABELS[int(value)]


def case_metric_deltas(
    base: TestCaseResult, cand: TestCaseResult, types: Mapping[str, bool]
) -> list[dict[str, Any]]:
    """Per metric of a matched test case, one case at a time (the engine builds them per metric
    column): both sides' scores and labels, delta, status."""
    names = list(types)
    extra = (set(base.metric_scores) | set(cand.metric_scores) | set(base.metric_passed)) | set(
        cand.metric_passed
    )
    names += sorted(extra - set(types))
    out: list[dict[str, Any]] = []
    for name in names:
        binary = types.get(name, name in base.metric_passed or name in cand.metric_passed)
        if binary:
            bp, cp = _binary_value(base, name), _binary_value(cand, name)
            if bp is None and cp is None:
                continue
            status = "unchanged"
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
                "baseline_label": _label(bs),
                "candidate_label": _label(cs),
                "status": status,
            }
        )
    return out


def _compare_case(
    base: TestCaseResult,
    cand: TestCaseResult,
    thresholds: ComparisonThresholds,
    types: Mapping[str, bool],
    metric_deltas: bool = True,
) -> dict[str, Any]:
    return {
        "test_case_key": base.test_case_key,
        **({"variant": variant_label(base.variant)} if base.variant else {}),
        "status": classify_case(base, cand, thresholds.case_score_delta),
        "baseline_passed": base.passed,
        "candidate_passed": cand.passed,
        "baseline_score": base.score,
        "candidate_score": cand.score,
        "score_delta": _delta(base.score, cand.score),
        "baseline_latency_ms": base.latency_p50_ms,
        "candidate_latency_ms": cand.latency_p50_ms,
        "latency_delta_ms": _delta(base.latency_p50_ms, cand.latency_p50_ms),
        "metric_deltas": case_metric_deltas(base, cand, types) if metric_deltas else [],
        "baseline_flaky": base.flaky,
        "candidate_flaky": cand.flaky,
        "repetitions": {"baseline": base.repetitions, "candidate": cand.repetitions},
    }


def _aggregate_metric_deltas(
    matched: Sequence[tuple[TestCaseResult, TestCaseResult]], types: Mapping[str, bool]
) -> list[MetricAggregateDelta]:
    names = list(types)
    seen = set(names)
    for base, cand in matched:
        for r in (base, cand):
            for name in sorted(set(r.metric_scores) | set(r.metric_passed)):
                if name not in seen:
                    seen.add(name)
                    names.append(name)
    out: list[MetricAggregateDelta] = []
    for name in names:
        binary = types.get(name)
        if binary is None:
            binary = any(name in r.metric_passed for pair in matched for r in pair)
        sides: list[float | None] = []
        for idx in (0, 1):
            if binary:
                flags = [_binary_value(pair[idx], name) for pair in matched]
                sides.append(_mean(1.0 if f else 0.0 for f in flags if f is not None))
            else:
                sides.append(
                    _mean(
                        pair[idx].metric_scores[name]
                        for pair in matched
                        if name in pair[idx].metric_scores
                    )
                )
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


def _warnings(
    baseline: ComparedRun,
    candidate: ComparedRun,
    comparisons: Sequence[TestCaseComparison],
    spec: ScoringSpec | None,
) -> list[str]:
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
    # The source's reported figures are one eval's measures, not its scoring rules.
    rules = [
        {
            **r.spec.model_dump(mode="json"),
            "scorers": [
                {k: v for k, v in s.items() if k != "reported"}
                for s in r.spec.model_dump(mode="json").get("scorers", [])
            ],
        }
        for r in (baseline, candidate)
    ]
    if spec is None and rules[0] != rules[1]:
        out.append(
            "runs are scored under different specs "
            f"({baseline.spec.spec_id} vs {candidate.spec.spec_id})"
        )
    for side, run in (("baseline", baseline), ("candidate", candidate)):
        n = _self_judged(run)
        if n:
            out.append(f"{side} has {n} self-judged case(s): judge provider = agent provider")
    for side in ("baseline", "candidate"):
        flaky = [
            c.test_case_key
            for c in comparisons
            if (c.baseline_flaky if side == "baseline" else c.candidate_flaky)
        ]
        if flaky:
            out.append(
                f"{len(flaky)} flaky test case(s) in {side} (repetitions disagree): "
                + _keys_text(flaky)
            )
    return out


def reference_compare_results(
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
    """`compare_results` as it was: one pydantic-validated dict per case."""
    effective = thresholds or CompareThresholds()
    used = effective.resolve((spec or candidate.spec).comparison)
    types = _metric_types([spec] if spec is not None else [candidate.spec, baseline.spec])
    base_by_key = {r.test_case_key: r for r in baseline_results}
    cand_by_key = {r.test_case_key: r for r in candidate_results}
    matched_keys = sorted(base_by_key.keys() & cand_by_key.keys())
    matched = [(base_by_key[k], cand_by_key[k]) for k in matched_keys]
    comparisons = _CASES.validate_python(
        [_compare_case(b, c, used, types, metric_deltas) for b, c in matched]
    )
    counts = {
        s: sum(1 for c in comparisons if c.status == s)
        for s in ("regression", "improvement", "unchanged", "error")
    }
    ba, ca = baseline.aggregate, candidate.aggregate
    aggregate = AggregateComparison(
        baseline_metrics=ba,
        candidate_metrics=ca,
        pass_rate_delta=round(ca.pass_rate - ba.pass_rate, 4),
        avg_score_delta=_delta(ba.weighted_metrics_score_pct, ca.weighted_metrics_score_pct),
        latency_avg_delta_ms=_delta(ba.latency_avg_ms, ca.latency_avg_ms),
        latency_avg_increase_pct=(
            None
            if ba.latency_avg_ms is None or ca.latency_avg_ms is None or ba.latency_avg_ms == 0
            else round((ca.latency_avg_ms - ba.latency_avg_ms) / ba.latency_avg_ms, 4)
        ),
        latency_p95_delta_ms=_delta(ba.latency_p95_ms, ca.latency_p95_ms),
        cost_delta_usd=_delta(_run_cost(baseline), _run_cost(candidate)),
        judge_cost_delta_usd=(
            _delta(ba.judge_cost_usd, ca.judge_cost_usd)
            if ba.judge_cost_usd or ca.judge_cost_usd
            else None
        ),
        total_regressions=counts["regression"],
        total_improvements=counts["improvement"],
        total_unchanged=counts["unchanged"],
        total_errors=counts["error"],
        per_metric_aggregate_deltas=_aggregate_metric_deltas(matched, types),
    )
    warnings = _warnings(baseline, candidate, comparisons, spec)
    verdict = _verdict(aggregate, used, warnings)
    pairs = _PAIRS.validate_python(
        [
            {
                "baseline_passed": c.baseline_passed,
                "candidate_passed": c.candidate_passed,
                "baseline_score": c.baseline_score,
                "candidate_score": c.candidate_score,
            }
            for c in comparisons
            if c.status != "error"
        ]
    )
    return RunComparison(
        baseline_run_id=str(baseline.run_id),
        candidate_run_id=str(candidate.run_id),
        baseline_agent_version=baseline.agent.version,
        candidate_agent_version=candidate.agent.version,
        aggregate=aggregate,
        test_case_comparisons=comparisons,
        baseline_only_test_cases=sorted(base_by_key.keys() - cand_by_key.keys()),
        candidate_only_test_cases=sorted(cand_by_key.keys() - base_by_key.keys()),
        config_diff=config_diff(baseline, candidate),
        verdict=verdict,
        statistics=paired_statistics(pairs, resamples=resamples, seed=seed),
        warnings=warnings,
        named_scores=compare_named_scores(
            baseline_results, candidate_results, resamples=resamples, seed=seed
        ),
    )
