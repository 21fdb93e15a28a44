"""The events of online evaluators: rules added and disabled, and what each did to a trace.

A project's rules are one aggregate (`OnlineRules`): who added or disabled a rule, and when, is
in its log, and a name is one rule's for good. What a rule did with a sampled trace (judged it,
at what cost; or skipped it, why) is recorded per rule and UTC day (`RuleDay`): the day's cost
is what the rule's daily budget is held against.
"""

from __future__ import annotations

from typing import ClassVar
from uuid import UUID

from pydantic import Field

from evaledger.domain.events.base import DomainEvent
from evaledger.domain.types import Amount, Count, JsonObject


class OnlineRuleEvent(DomainEvent):
    """An event of a project's online evaluators (its rules, or one rule's day)."""


class OnlineRuleAdded(OnlineRuleEvent):
    """An online evaluator was added: which traces it samples and how it judges them."""

    topic_name: ClassVar[str] = "evaledger.rule.added"

    project: str = Field(min_length=1, description="The project whose traces the rule judges.")
    name: str = Field(min_length=1, max_length=80, description="The rule's name (its identity).")
    sample: float = Field(ge=0, le=1, description="Share of matching traces judged (by trace id).")
    where: str = Field(
        max_length=1000,
        description="The filter in canonical form (`key=value` joined by ` and `); empty: all.",
    )
    judge: str = Field(min_length=3, description="The judge, PROVIDER:MODEL.")
    rubrics: list[JsonObject] = Field(
        default_factory=list,
        description="Judge rubrics as data (format evaledger.rubric/1), as given when added.",
    )
    outcomes: list[str] = Field(
        default_factory=list, description="Expected outcomes the judge checks on every trace."
    )
    max_cost_per_day_usd: Amount | None = Field(
        default=None, description="Daily budget (USD); past it, sampled traces are skipped."
    )
    allow_self_judge: bool = Field(
        default=False, description="The judge may be of the agent's own vendor (flagged)."
    )


class OnlineRuleDisabled(OnlineRuleEvent):
    """An online evaluator was disabled: it samples no more traces (its history stays)."""

    topic_name: ClassVar[str] = "evaledger.rule.disabled"

    name: str = Field(min_length=1, max_length=80, description="The rule disabled.")
    reason: str | None = Field(default=None, description="Why, if given.")


class OnlineCaseJudged(OnlineRuleEvent):
    """A rule judged a sampled trace's case (its verdicts are the case's own events)."""

    topic_name: ClassVar[str] = "evaledger.rule.case_judged"

    rule: str = Field(min_length=1, description="The rule.")
    day: str = Field(
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="The UTC day the judging was recorded, YYYY-MM-DD (the budget's day).",
    )
    run_id: UUID = Field(description="The online run of the case.")
    case_id: UUID = Field(description="The case judged.")
    trace_id: str = Field(min_length=1, description="The OTLP trace id (the case's key).")
    verdicts: Count = Field(description="Verdicts recorded, error verdicts included.")
    cost_usd: Amount = Field(description="Cost of the judge calls (USD; 0 when unpriced).")


class OnlineCaseSkipped(OnlineRuleEvent):
    """A rule sampled a trace but did not judge it (its daily budget was spent)."""

    topic_name: ClassVar[str] = "evaledger.rule.case_skipped"

    rule: str = Field(min_length=1, description="The rule.")
    day: str = Field(
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="The UTC day of the decision, YYYY-MM-DD (the budget's day).",
    )
    run_id: UUID = Field(description="The online run of the case.")
    case_id: UUID = Field(description="The case not judged.")
    trace_id: str = Field(min_length=1, description="The OTLP trace id (the case's key).")
    reason: str = Field(min_length=1, description="Why: the day's cost and the budget.")
