"""A run's one headline (issue 30): the figure every view leads with, and the pass rate beside it.

The headline metric is the source's primary metric where the run has one — its first scorer's
first metric, as Inspect's viewer and promptfoo's show it — else, for a run judged on the
Connexity rubric, its weighted metrics score. Beside it the ledger's pass rate with the rule
that decides a case. `runs`, `show`, their `--json`, the web's runs list, run page and compare
header all print `run_headline`'s strings, so a run reads the same everywhere.
"""

from __future__ import annotations

from pydantic import Field

from evaledger.domain.model import StrictModel
from evaledger.domain.spec import Gate, ScoringSpec
from evaledger.scoring.models import RunAggregate
from evaledger.scoring.scorer_metrics import figure_text

WEIGHTED_SCORE = "weighted_metrics_score_pct"
"""The aggregate field a run without source scorers leads with (0-100, the rubric's)."""
WEIGHTED_SCORE_LABEL = "weighted score"
NO_FIGURE = "—"


class Headline(StrictModel):
    """What a run leads with: one metric, and the ledger's pass rate with its rule."""

    metric: str | None = Field(
        description='`SCORER/METRIC` of the source\'s primary metric, "weighted_metrics_score_pct" '
        "for a rubric-judged run, or null when the run has neither."
    )
    label: str | None = Field(description="The metric as printed (null without one).")
    value: float | None = Field(description="The metric's figure (null: not computed).")
    value_text: str = Field(description='The figure as printed ("0.6250", "74.80", or "—").')
    text: str = Field(description='The metric and its figure as every view prints them, or "—".')
    pass_rate: float | None = Field(
        description="The aggregate's pass_rate, null only when no case passed or failed."
    )
    pass_rate_text: str = Field(description='The pass rate as printed ("40.0%", or "—").')
    passed: int
    failed: int
    executions: int
    rule: str = Field(description="When a case passes, in short (the pass rate's rule).")
    rule_detail: str | None = Field(
        default=None, description="The source's own words for its pass rule, when it has them."
    )
    summary: str = Field(description="One line: the metric, then the pass rate, counts and rule.")


def metric_text(value: float | None, *, source: bool) -> str:
    """A headline figure as printed: a source metric as the source rounds it, the score to 2 dp."""
    if value is None:
        return NO_FIGURE
    return figure_text(value) if source else f"{value:.2f}"


def pass_rule(spec: ScoringSpec) -> str:
    """When a case of a run under `spec` passes, in short (`scoring.decide` is the rule)."""
    if spec.score_gates:
        return " and ".join(f"{g.score} {g.op} {g.value:g}" for g in spec.score_gates)
    if spec.gate is Gate.BLOCKERS:
        return "every blocker outcome passes"
    return f"every expected outcome passes, else overall_score >= {spec.pass_threshold:g}"


def rule_detail(spec: ScoringSpec) -> str | None:
    """The source scorers' own words for their pass rule (Inspect: how a value reads)."""
    rules = sorted({s.passes_when for s in spec.scorers if s.passes_when})
    return "; ".join(rules) or None


def headline_metric(spec: ScoringSpec) -> str | None:
    """The `SCORER/METRIC` a source leads with: its first scorer's first metric.

    Inspect's viewer and promptfoo's both show that one first; None without source scorers.
    """
    for scorer in spec.scorers:
        if scorer.metrics:
            return f"{scorer.name}/{scorer.metrics[0]}"
    return None


def run_headline(spec: ScoringSpec, aggregate: RunAggregate) -> Headline:
    """The run's headline under `spec` (the run's own, or the spec a comparison used)."""
    source = headline_metric(spec)
    metric: str | None
    label: str | None
    value: float | None
    if source is not None:
        metric, label = source, source
        value = aggregate.scorer_metrics.get(source)
    elif not spec.scorers and aggregate.weighted_metrics_score_pct is not None:
        metric, label = WEIGHTED_SCORE, WEIGHTED_SCORE_LABEL
        value = aggregate.weighted_metrics_score_pct
    else:
        metric = label = value = None
    # "—" for a run with no decided case, read from the counts: the aggregate's pass_rate keeps
    # the seed's meaning (0.0 for an empty or all-errored run) and is not this view's to change.
    rate = aggregate.pass_rate if aggregate.decided else None
    figure = metric_text(value, source=source is not None)
    text = NO_FIGURE if label is None else f"{label} {figure}"
    rate_text = NO_FIGURE if rate is None else f"{100 * rate:.1f}%"
    rule = pass_rule(spec)
    line = f"pass rate {rate_text} ({aggregate.passed_count} of {aggregate.total_executions} cases"
    line += f"; passes when {rule})"
    return Headline(
        metric=metric,
        label=label,
        value=value,
        value_text=figure,
        text=text,
        pass_rate=rate,
        pass_rate_text=rate_text,
        passed=aggregate.passed_count,
        failed=aggregate.failed_count,
        executions=aggregate.total_executions,
        rule=rule,
        rule_detail=rule_detail(spec),
        summary=line if label is None else f"{text} · {line}",
    )
