"""The comparison as a compact Markdown PR comment (`evaledger compare --markdown`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evaledger.scoring.comparison.models import AggregateComparison, RunComparison, RunConfigDiff
from evaledger.scoring.comparison.rules import DELTA_DP, fixed, keys_text
from evaledger.scoring.comparison.significance import significance_markdown

MAX_MARKDOWN_CASES = 20
"""Regressed cases listed in the markdown comment at most."""


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fmt(value: float | None, fmt: str, suffix: str = "", signed: bool = False) -> str:
    if value is None:
        return "—"
    spec = f"+{fmt}" if signed else fmt
    return f"{value:{spec}}{suffix}"


def _score_cell(value: float | None) -> str:
    return "—" if value is None else fixed(value, 1)


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
        parts.append("config: " + keys_text([c.field for c in diff.config_changes], limit=5))
    return parts


def render_markdown(
    comparison: RunComparison,
    max_cases: int = MAX_MARKDOWN_CASES,
    gate_failures: Sequence[str] = (),
    headlines: Mapping[str, str] | None = None,
) -> str:
    """Render a compact PR comment: verdict, reasons, delta table, statistics, regressed cases.

    `gate_failures` names the candidate's own failed thresholds (metrics_passed, cases_passed)
    when the caller fails on them too, so the heading agrees with the exit code. `headlines`:
    each side's headline summary (`Headline.summary`), as `compare` prints it.
    """
    c = comparison
    lines = _heading(c, gate_failures)
    if headlines:
        lines += [f"- {side}: {_md(text)}" for side, text in headlines.items()] + [""]
    lines += _delta_table(c.aggregate)
    lines += _source_rows(c.aggregate)
    lines.append("")
    lines.append(_cases_line(c))
    lines += _variant_rows(c.aggregate)
    changes = _config_summary(c.config_diff)
    if changes:
        lines.append("Changes: " + _md("; ".join(changes)))
    lines.append(_statistics_line(c))
    if c.significance is not None:
        lines += significance_markdown(c.significance)
    lines += _regressed_cases(c, max_cases)
    lines += _named_scores(c)
    guarded = c.comparability.warnings if c.comparability is not None else []
    if c.warnings or guarded:
        lines.append("")
        lines.extend(f"> ⚠️ {_md(w)}" for w in [*guarded, *c.warnings])
    return "\n".join(lines) + "\n"


SourceDelta = tuple[str, float | None, float | None, float | None]
"""A source metric (`SCORER/METRIC`): its baseline and candidate values and the delta."""


def source_metric_deltas(agg: AggregateComparison) -> list[SourceDelta]:
    """Every source metric either run reports, by name: values and candidate − baseline."""
    ba, ca = agg.baseline_metrics.scorer_metrics, agg.candidate_metrics.scorer_metrics
    rows: list[SourceDelta] = []
    for name in sorted(ba.keys() | ca.keys()):
        b, c = ba.get(name), ca.get(name)
        rows.append((name, b, c, None if b is None or c is None else c - b))
    return rows


def _source_rows(agg: AggregateComparison) -> list[str]:
    """Rows of the delta table for the runs' source metrics (issue 18: `SCORER/METRIC`)."""
    rows = []
    for name, b, c, delta in source_metric_deltas(agg):
        rows.append(
            f"| {_md(name)} | {_fmt(b, '.4f', '')} | {_fmt(c, '.4f', '')} "
            f"| {_fmt(delta, '.4f', '', signed=True)} |"
        )
    return rows


def _named_scores(c: RunComparison) -> list[str]:
    """Each named score's means, delta and paired interval (repetitions averaged first)."""
    if not c.named_scores:
        return []
    lines = [
        "",
        "| Named score | Baseline | Candidate | Δ | paired 95% CI | verdict |",
        "|---|---:|---:|---:|---|---|",
    ]
    for n in c.named_scores:
        ci = n.paired
        interval = "—" if ci.low is None or ci.high is None else f"[{ci.low:+.4f}, {ci.high:+.4f}]"
        lines.append(
            f"| {_md(n.name)} | {_fmt(n.baseline_mean, '.4f', '')} "
            f"| {_fmt(n.candidate_mean, '.4f', '')} | {_fmt(n.mean_delta, '.4f', '', signed=True)} "
            f"| {interval} (n={ci.n}) | {n.verdict.replace('_', ' ')} |"
        )
    return lines


def _heading(c: RunComparison, gate_failures: Sequence[str]) -> list[str]:
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
    return lines


def _delta_table(agg: AggregateComparison) -> list[str]:
    ba, ca = agg.baseline_metrics, agg.candidate_metrics
    # Δ cells show the compared 4 dp deltas in full, so they never contradict a reason above.
    pr_delta = f"{fixed(agg.pass_rate_delta * 100, 1, DELTA_DP - 2)}pt"
    score_delta = _score_cell(agg.avg_score_delta)
    lines = [
        "| | Baseline | Candidate | Δ |",
        "|---|---:|---:|---:|",
        f"| Pass rate | {fixed(ba.pass_rate * 100, 1, DELTA_DP - 2)}% "
        f"| {fixed(ca.pass_rate * 100, 1, DELTA_DP - 2)}% | {_signed(pr_delta)} |",
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
    return lines


def _variant_rows(agg: AggregateComparison) -> list[str]:
    """Each variant's pass rates and case classes (promptfoo's providers × prompts)."""
    if not agg.per_variant:
        return []
    lines = [
        "",
        "| Variant | Baseline | Candidate | Δ | regressed | improved | unchanged | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def pct(rate: float | None, suffix: str) -> str:
        return "—" if rate is None else f"{fixed(rate * 100, 1, DELTA_DP - 2)}{suffix}"

    for v in agg.per_variant:
        lines.append(
            f"| {_md(v.variant)} | {pct(v.baseline_pass_rate, '%')} "
            f"| {pct(v.candidate_pass_rate, '%')} | {_signed(pct(v.pass_rate_delta, 'pt'))} "
            f"| {v.total_regressions} | {v.total_improvements} | {v.total_unchanged} "
            f"| {v.total_errors} |"
        )
    return lines


def _cases_line(c: RunComparison) -> str:
    agg = c.aggregate
    return (
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


def _statistics_line(c: RunComparison) -> str:
    st = c.statistics
    ci = st.score_delta_ci95
    ci_text = (
        f"score Δ 95% CI [{ci.low:+.2f}, {ci.high:+.2f}] (n={ci.n})"
        if ci.low is not None and ci.high is not None
        else f"score Δ CI n/a (n={ci.n})"
    )
    return (
        f"Statistics: McNemar b={st.mcnemar.b} c={st.mcnemar.c} p={st.mcnemar.p_value:.4g} · "
        f"{ci_text} · **{st.verdict}**"
    )


def _regressed_cases(c: RunComparison, max_cases: int) -> list[str]:
    regressed = [t for t in c.test_case_comparisons if t.status == "regression"]
    if not regressed:
        return []
    lines = [
        "",
        f"**Regressed cases ({len(regressed)})**",
        "",
        "| Test case | Baseline | Candidate | Δ score |",
        "|---|---|---|---:|",
    ]
    for t in regressed[:max_cases]:
        lines.append(
            f"| `{_md(t.test_case_key)}`"
            + (f" ({_md(t.variant)})" if t.variant else "")
            + f" | {_case_side(t.baseline_passed, t.baseline_score)} "
            f"| {_case_side(t.candidate_passed, t.candidate_score)} "
            f"| {_fmt(t.score_delta, '.1f', signed=True)} |"
        )
    if len(regressed) > max_cases:
        lines.append(f"\n…and {len(regressed) - max_cases} more")
    return lines
