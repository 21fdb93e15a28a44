"""The comparison's rules per case and per suite: case status, metric deltas, verdict, warnings.

Also the number formatting the verdict's reasons and the Markdown share, so that a reason never
contradicts the delta beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evaledger.domain.metrics import SCORE_LABELS, ScoreType
from evaledger.domain.spec import ComparisonThresholds, ScoringSpec, same_rules
from evaledger.domain.types import variant_label
from evaledger.scoring.comparison.models import (
    AggregateComparison,
    CaseStatus,
    ComparedRun,
    MetricStatus,
    RegressionVerdict,
)
from evaledger.scoring.means import mean
from evaledger.scoring.models import TestCaseResult

DELTA_DP = 4
"""Deltas are reported, and compared with thresholds, rounded to this many decimals."""

# ---------------------------------------------------------------------------------------------
# Helpers


def round_delta(
    baseline: float | None, candidate: float | None, dp: int = DELTA_DP
) -> float | None:
    """Candidate - baseline rounded to `dp` decimals; None when either is missing."""
    if baseline is None or candidate is None:
        return None
    return round(candidate - baseline, dp)


def fixed(value: float, min_dp: int, max_dp: int = DELTA_DP) -> str:
    """Up to ``max_dp`` decimals, trailing zeros dropped down to ``min_dp`` (0.9 → "0.90")."""
    text = f"{value:.{max_dp}f}"
    whole, _, decimals = text.partition(".")
    decimals = decimals.rstrip("0").ljust(min_dp, "0")
    text = f"{whole}.{decimals}" if decimals else whole
    return text.lstrip("-") if float(text) == 0 else text  # no "-0"


def _pct(fraction: float) -> str:
    """A 4 dp fraction as an exact percentage (0.2001 → "20.01%")."""
    return f"{fixed(fraction * 100, 0, DELTA_DP - 2)}%"


def _score_label(value: float | None, binary: bool) -> str | None:
    if value is None:
        return None
    if binary:
        return "pass" if value >= 5 else "fail"
    if float(value).is_integer() and 0 <= value <= 5:
        return SCORE_LABELS[int(value)]
    return None


def metric_types(specs: Iterable[ScoringSpec]) -> dict[str, bool]:
    """Metric name → is_binary, in spec order (first spec first)."""
    types: dict[str, bool] = {}
    for spec in specs:
        for m in spec.metrics:
            types.setdefault(m.metric, m.score_type is ScoreType.BINARY)
    return types


def binary_value(result: TestCaseResult, metric: str) -> bool | None:
    """A binary metric's pass of a test case: its reduced pass, else its score read 5 = pass."""
    if metric in result.metric_passed:
        return result.metric_passed[metric]
    score = result.metric_scores.get(metric)
    return None if score is None else score >= 5


def metric_delta(
    name: str, binary: bool, base: float | bool | None, cand: float | bool | None
) -> dict[str, Any] | None:
    """One metric of a matched test case: both sides' scores and labels, delta, status (a dict).

    Binary: ``base`` / ``cand`` are the passes (`binary_value`), read as 5.0 / 0.0; scored: the
    0-5 means. None when neither side has the metric. Plain dicts: the comparison validates them
    once (a model per metric per case costs seconds on a 5,000-case comparison).
    """
    if base is None and cand is None:
        return None
    if binary:
        status: MetricStatus = "unchanged"
        if base is True and cand is False:
            status = "pass→fail"
        elif base is False and cand is True:
            status = "fail→pass"
        return {
            "metric": name,
            "is_binary": True,
            "baseline_score": None if base is None else (5.0 if base else 0.0),
            "candidate_score": None if cand is None else (5.0 if cand else 0.0),
            "delta": None,
            "baseline_label": None if base is None else ("pass" if base else "fail"),
            "candidate_label": None if cand is None else ("pass" if cand else "fail"),
            "status": status,
        }
    delta = round_delta(base, cand)
    status = "unchanged"
    if delta is not None:
        status = "regression" if delta < 0 else "improvement" if delta > 0 else "unchanged"
    return {
        "metric": name,
        "is_binary": False,
        "baseline_score": base,
        "candidate_score": cand,
        "delta": delta,
        "baseline_label": _score_label(base, False),
        "candidate_label": _score_label(cand, False),
        "status": status,
    }


def extra_metric_deltas(
    base: TestCaseResult, cand: TestCaseResult, types: Mapping[str, bool]
) -> list[dict[str, Any]]:
    """`metric_delta` of the metrics a matched test case has outside `types`, sorted by name.

    Such a metric is binary when either side has a pass for it (`metric_passed`).
    """
    names = set(base.metric_scores) | set(cand.metric_scores) | set(base.metric_passed)
    names |= set(cand.metric_passed)
    out = []
    for name in sorted(names - types.keys()):
        binary = name in base.metric_passed or name in cand.metric_passed
        if binary:
            found = metric_delta(name, True, binary_value(base, name), binary_value(cand, name))
        else:
            found = metric_delta(
                name, False, base.metric_scores.get(name), cand.metric_scores.get(name)
            )
        if found is not None:
            out.append(found)
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
    delta = round_delta(baseline.score, candidate.score)
    if delta is not None and abs(delta) > case_score_delta:
        return "regression" if delta < 0 else "improvement"
    return "unchanged"


def run_cost(run: ComparedRun) -> float | None:
    """Return the run's total cost, or None when it carries no cost data at all."""
    has_case_cost = any(c.cost_usd is not None for c in run.cases)
    if has_case_cost or run.aggregate.total_cost_usd != 0:
        return run.aggregate.total_cost_usd
    return None


def regression_verdict(
    agg: AggregateComparison, thresholds: ComparisonThresholds, warnings: list[str]
) -> RegressionVerdict:
    """Hold the reported (rounded) deltas against the thresholds; reasons quote those deltas."""
    reasons: list[str] = []
    base, cand = agg.baseline_metrics, agg.candidate_metrics
    # The seed's rule and message: errored cases count in the denominator (an all-errored
    # candidate drops to 0.0), so a lost pass rate reads as the drop it is.
    if -agg.pass_rate_delta > thresholds.max_pass_rate_drop:
        reasons.append(
            f"pass_rate dropped {_pct(-agg.pass_rate_delta)} "
            f"({fixed(base.pass_rate, 2)} → {fixed(cand.pass_rate, 2)})"
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
            f"avg_score dropped {fixed(-score_delta, 1)}pt ({fixed(bs, 1)} → {fixed(cs, 1)})"
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


def case_label(key: str, variant: str = "") -> str:
    """A test case × variant as people read it: `key`, or `key [provider | prompt]`."""
    return f"{key} [{variant_label(variant)}]" if variant else key


KEYS_SHOWN = 10
"""How many test case keys a reason or warning quotes (`keys_text`)."""


def keys_text(keys: Sequence[str], limit: int = KEYS_SHOWN, total: int | None = None) -> str:
    """Test case keys as a reason quotes them: the first `limit`, then how many more.

    `total`: how many keys there are, when `keys` holds only the first ones (≥ `limit`).
    """
    count = len(keys) if total is None else total
    shown = ", ".join(keys[:limit])
    return shown + (f", … (+{count - limit} more)" if count > limit else "")


def comparison_warnings(
    baseline: ComparedRun, candidate: ComparedRun, spec: ScoringSpec | None
) -> list[str]:
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
    if spec is None and not same_rules(baseline.spec, candidate.spec):
        out.append(
            "runs are scored under different specs "
            f"({baseline.spec.spec_id} vs {candidate.spec.spec_id})"
        )
    for side, run in (("baseline", baseline), ("candidate", candidate)):
        n = _self_judged(run)
        if n:
            out.append(f"{side} has {n} self-judged case(s): judge provider = agent provider")
    return out


# The comparison oracle (tests/oracles/comparison.py) reads these by their former private names.
_binary_value, _delta, _keys_text, _mean = binary_value, round_delta, keys_text, mean
_metric_types, _run_cost, _verdict = metric_types, run_cost, regression_verdict
