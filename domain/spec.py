"""Run config (what users write) and ScoringSpec (the resolved policy scores derive under)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Literal

import orjson
from pydantic import Field

from evaledger.domain.errors import ValidationError
from evaledger.domain.metrics import (
    BUILTIN_BY_NAME,
    DEFAULT_METRIC_NAMES,
    MetricDefinition,
    ScoreType,
)
from evaledger.domain.model import FrozenModel
from evaledger.domain.types import JsonObject


class Gate(StrEnum):
    """How a case's pass/fail is decided."""

    OUTCOMES_THEN_SCORE = "outcomes_then_score"
    """Expected-outcome results decide when present; otherwise overall_score >= pass_threshold."""
    BLOCKERS = "blockers"
    """The case passes iff every blocker outcome passes (no blockers: passes)."""


class JudgeErrorPolicy(StrEnum):
    """What a judge error verdict counts as."""

    SCORE_ZERO = "score_zero"
    """Reference behaviour: a 0.0 verdict that enters the run's metric mean and fails the case."""
    UNSCORED = "unscored"
    """Left out of means and pass/fail; counted in the run's unscored bucket."""


class PanelPolicy(StrEnum):
    """How several verdicts of one case are combined."""

    FIRST = "first"
    MEAN = "mean"
    MEDIAN = "median"
    MAJORITY = "majority"
    STRICT_MAJORITY = "strict_majority"


class ScoreReducer(StrEnum):
    """One score per test case from its repetitions."""

    MEAN = "mean"
    MEDIAN = "median"
    MIN = "min"
    MAX = "max"


class PassReducer(StrEnum):
    """One pass/fail per test case from its repetitions."""

    ALL = "all"
    ANY = "any"
    MAJORITY = "majority"
    AT_LEAST_K = "at_least_k"


class Severity(StrEnum):
    """Weight class of an expected outcome (Voxli assertions)."""

    BLOCKER = "blocker"
    MEDIUM = "medium"
    LOW = "low"


class MetricSelection(FrozenModel):
    """One metric chosen for a run, with an optional weight override."""

    metric: str = Field(description="Metric id from the catalogue.")
    weight: float | None = Field(default=None, description="Explicit weight; default if absent.")


class JudgeConfig(FrozenModel):
    """The judge part of a run config (Connexity JudgeConfig)."""

    metrics: list[MetricSelection] | None = Field(
        default=None, description="Selected metrics; null or empty means the 8 defaults."
    )
    pass_threshold: float = Field(
        default=75.0, ge=0, le=100, description="Fallback case gate on overall_score (0-100)."
    )
    provider: str | None = Field(default=None, description="Judge LLM provider override.")
    model: str | None = Field(default=None, description="Judge LLM model override.")
    temperature: float | None = Field(default=None, ge=0, description="Judge sampling temperature.")


class SeverityWeights(FrozenModel):
    """Weights of outcome severities in the assertion score."""

    blocker: float = Field(default=4.0, ge=0, description="Weight of a blocker outcome.")
    medium: float = Field(default=2.0, ge=0, description="Weight of a medium outcome.")
    low: float = Field(default=1.0, ge=0, description="Weight of a low outcome.")

    def of(self, severity: Severity) -> float:
        """Weight of one severity."""
        return float(getattr(self, severity.value))


class Reducers(FrozenModel):
    """How repetitions of one test case reduce to one value."""

    score: ScoreReducer = Field(default=ScoreReducer.MEAN, description="Score reducer.")
    passed: PassReducer = Field(default=PassReducer.ALL, description="Pass reducer.")
    k: int = Field(default=1, ge=1, description="k of at_least_k, pass@k and pass^k.")


class ComparisonThresholds(FrozenModel):
    """Run-to-run regression thresholds (Connexity compare defaults)."""

    max_pass_rate_drop: float = Field(default=0.0, ge=0, description="Fraction, 0.0 = strict.")
    max_avg_score_drop: float = Field(default=5.0, ge=0, description="Points on 0-100.")
    max_latency_increase_pct: float = Field(default=0.2, ge=0, description="Fraction, 0.2 = 20%.")
    case_score_delta: float = Field(default=5.0, ge=0, description="Per-case score delta, points.")


class ScoreGate(FrozenModel):
    """A case gate on a peer's named score, e.g. pass iff `accuracy >= 0.8`."""

    score: str = Field(min_length=1, description="Named score (its name as the peer gave it).")
    op: Literal[">=", ">", "<=", "<", "=="] = Field(default=">=", description="Comparison.")
    value: float = Field(description="Threshold on the score's numeric reading.")

    def holds(self, number: float) -> bool:
        """Whether a score's numeric reading passes this gate."""
        return {
            ">=": number >= self.value,
            ">": number > self.value,
            "<=": number <= self.value,
            "<": number < self.value,
            "==": number == self.value,
        }[self.op]

    def __str__(self) -> str:
        return f"{self.score} {self.op} {self.value:g}"


def _empty(value: Any) -> bool:
    return not value


GROUP_TAG_SEPARATOR = "="
"""A case's group under a grouped metric is its tag `KEY=VALUE` (Inspect: the sample's metadata)."""


def group_tag(key: str, value: Any) -> str:
    """The case tag naming its group under `key`: `category=math` (the value as Inspect's str)."""
    return f"{key}{GROUP_TAG_SEPARATOR}{value}"


class GroupedMetric(FrozenModel):
    """A metric reported per group of cases (Inspect's `grouped(metric, group_key, ...)`).

    A case's group is the value of `group_key` in its source's metadata, kept on the case as
    the tag `KEY=VALUE` (`group_tag`). The metric is reported once per group, named by
    `name_template`, and once over all of them under `all_label` (`all`: over every sample,
    or the mean of the groups' values; null: not reported).
    """

    metric: str = Field(min_length=1, description="The metric applied to each group.")
    group_key: str = Field(min_length=1, description="The metadata key that groups the cases.")
    all: Literal["samples", "groups"] | None = Field(
        default="samples", description="How the `all_label` figure is made; null: none is."
    )
    all_label: str = Field(default="all", description="The name of the figure over all groups.")
    name_template: str = Field(
        default="{group_name}",
        description="Each group's figure's name; `{group_name}` is the group.",
    )

    def group_of(self, tags: Sequence[str]) -> str | None:
        """The case's group from its tags; None when it has none (the figure is not recomputed)."""
        prefix = group_tag(self.group_key, "")
        return next((t.removeprefix(prefix) for t in tags if t.startswith(prefix)), None)

    def name(self, group: str) -> str:
        """A group's figure's name, as Inspect names it."""
        return self.name_template.format(group_name=group)


class ScorerInfo(FrozenModel):
    """A source's own scorer as its run declared it (issue 18): what it reads, what it reports.

    The ledger recomputes each listed metric from the per-case values with the source's
    semantics (`scoring.scorer_metrics`); `reported` keeps the figures the source itself wrote,
    so a mismatch is shown, never hidden.
    """

    name: str = Field(min_length=1, description="The scorer's name in `SCORER/METRIC` keys.")
    score: str = Field(min_length=1, description="The named score it reads (`scorer/key`).")
    semantics: Literal["inspect", "promptfoo", "tau-bench", "lm-eval", "openai-evals"] = Field(
        description="Whose definition of the metrics applies."
    )
    value_type: Literal["binary", "ordinal", "continuous", "dict", "unknown"] = Field(
        default="unknown", description="Binary, ordinal (C/P/I), continuous or dict-valued."
    )
    metrics: tuple[str, ...] = Field(default=(), description="Metric names the source reports.")
    reducer: str | None = Field(default=None, description="Epoch reducer (Inspect; None: mean).")
    reported: dict[str, float] = Field(
        default_factory=dict, description="Each metric's figure as the source reported it."
    )
    passes_when: str | None = Field(default=None, description="When a case passes, in words.")
    variant: str | None = Field(
        default=None, description="Only the cases of this variant (promptfoo: per prompt)."
    )
    # Dumped only when set: scorers stored before grouped metrics were kept keep their bytes.
    grouped: tuple[GroupedMetric, ...] = Field(
        default=(),
        exclude_if=_empty,
        description="Its metrics reported per group of cases (Inspect's `grouped()`).",
    )


class PolicyFields(FrozenModel):
    """Scoring policy beyond the Connexity config; shared by RunConfig and ScoringSpec."""

    gate: Gate = Field(default=Gate.OUTCOMES_THEN_SCORE, description="Case gate policy.")
    severity_weights: SeverityWeights = Field(default_factory=SeverityWeights)
    judge_errors: JudgeErrorPolicy = Field(default=JudgeErrorPolicy.SCORE_ZERO)
    panel: PanelPolicy = Field(default=PanelPolicy.FIRST, description="Judge panel policy.")
    reducers: Reducers = Field(default_factory=Reducers)
    comparison: ComparisonThresholds = Field(default_factory=ComparisonThresholds)
    grading: JsonObject | None = Field(
        default=None, description="Optional grading section (categories, tests, minimums)."
    )
    # Dumped only when set: specs and run snapshots written before score gates existed keep
    # their bytes and their spec ids.
    score_gates: tuple[ScoreGate, ...] = Field(
        default=(),
        exclude_if=_empty,
        description="Gates on named scores; when set, a case passes iff all of them hold.",
    )
    # Dumped only when set, as score gates are (issue 18: imported runs' own scorers).
    scorers: tuple[ScorerInfo, ...] = Field(
        default=(),
        exclude_if=_empty,
        description="The source's scorers; their metrics are recomputed as the source does.",
    )


class RunConfig(PolicyFields):
    """A run's config as users write it (the bundle's `config`, or a spec file)."""

    metrics_pass_threshold: float = Field(default=80.0, ge=0, le=100)
    cases_pass_threshold: float = Field(default=100.0, ge=0, le=100)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)


class ResolvedMetric(FrozenModel):
    """A selected metric with its weight renormalised over the selection."""

    metric: str
    weight: float = Field(description="Normalised weight; the selection sums to 1.")
    raw_weight: float = Field(description="Weight before normalisation.")
    score_type: ScoreType


class ScoringSpec(PolicyFields):
    """The fully resolved scoring policy. Its content hash is its id."""

    metrics: tuple[ResolvedMetric, ...]
    pass_threshold: float = Field(ge=0, le=100)
    metrics_pass_threshold: float = Field(ge=0, le=100)
    cases_pass_threshold: float = Field(ge=0, le=100)

    @property
    def spec_id(self) -> str:
        """Content hash of the spec: equal specs share an id."""
        digest = hashlib.sha256(
            orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
        ).hexdigest()
        return f"spec-{digest[:16]}"


def same_rules(a: ScoringSpec, b: ScoringSpec) -> bool:
    """Whether two specs score alike: equal but for the figures their sources reported.

    A scorer's `reported` figures are what one eval measured, not how it is scored: two
    promptfoo or Inspect evals of one config differ there and nowhere else.
    """
    if a.spec_id == b.spec_id:
        return True

    def rules(spec: ScoringSpec) -> str:
        unreported = tuple(s.model_copy(update={"reported": {}}) for s in spec.scorers)
        return spec.model_copy(update={"scorers": unreported}).spec_id

    return rules(a) == rules(b)


def keep_source_scorers(spec: ScoringSpec, own: ScoringSpec) -> ScoringSpec:
    """A spec given for a run (rescore, compare --spec) over what the run brought from its source.

    An imported run's scorers stay, and so do its score gates unless the spec sets its own:
    a spec file about rubric metrics must not leave an Inspect run's cases all pending.
    """
    changes: dict[str, Any] = {}
    if own.scorers and not spec.scorers:
        changes["scorers"] = own.scorers
    if own.score_gates and not spec.score_gates:
        changes["score_gates"] = own.score_gates
    return spec.model_copy(update=changes) if changes else spec


def resolve_spec(
    config: RunConfig, catalogue: Mapping[str, MetricDefinition] = BUILTIN_BY_NAME
) -> ScoringSpec:
    """Resolve a run config into a ScoringSpec (Connexity weight resolution)."""
    selections = config.judge.metrics
    raw: list[tuple[str, float, ScoreType]] = []
    if not selections:
        for name in DEFAULT_METRIC_NAMES:
            d = catalogue[name]
            raw.append((name, d.default_weight, d.score_type))
    else:
        seen: set[str] = set()
        for i, sel in enumerate(selections):
            where = f"config.judge.metrics[{i}]"
            definition = catalogue.get(sel.metric)
            if definition is None:
                raise ValidationError(
                    f"{where}.metric: unknown metric {sel.metric!r}", field=f"{where}.metric"
                )
            if sel.metric in seen:
                raise ValidationError(
                    f"{where}.metric: {sel.metric!r} is selected twice", field=f"{where}.metric"
                )
            seen.add(sel.metric)
            if sel.weight is None and definition.default_weight == 0:
                raise ValidationError(
                    f"{where}.weight: {sel.metric!r} has no default weight; give an explicit one",
                    field=f"{where}.weight",
                )
            weight = definition.default_weight if sel.weight is None else sel.weight
            if weight < 0:
                raise ValidationError(
                    f"{where}.weight: must be >= 0, got {weight}", field=f"{where}.weight"
                )
            raw.append((sel.metric, weight, definition.score_type))
    total = sum(w for _, w, _ in raw)
    if total <= 0:
        raise ValidationError(
            "config.judge.metrics: the weights sum to 0", field="config.judge.metrics"
        )
    policy = config.model_dump(include=set(PolicyFields.model_fields), round_trip=True)
    return ScoringSpec(
        metrics=tuple(
            ResolvedMetric(metric=name, weight=w / total, raw_weight=w, score_type=t)
            for name, w, t in raw
        ),
        pass_threshold=config.judge.pass_threshold,
        metrics_pass_threshold=config.metrics_pass_threshold,
        cases_pass_threshold=config.cases_pass_threshold,
        **policy,
    )
