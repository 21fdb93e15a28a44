"""Online evaluators in the ledger: a project's rules (`OnlineRules`), and a rule's day (`RuleDay`).

The rules of a project are one aggregate so that a name is unique and stays one rule's (its
sampling is a function of the name): adding a name twice, or disabling a rule twice, is refused.
What a rule did with each sampled trace is recorded on its day's aggregate, whose cost is
what the daily budget is held against. `OnlineRuleCommands` are the ledger's commands on both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any
from uuid import UUID, uuid5

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.errors import ConflictError, NotFoundError, StateError
from evaledger.domain.events.base import DomainEvent
from evaledger.domain.events.rule import (
    OnlineCaseJudged,
    OnlineCaseSkipped,
    OnlineRuleAdded,
    OnlineRuleDisabled,
)
from evaledger.domain.writes import Context, LedgerStore


def rules_id_for(project: str) -> UUID:
    """Id of a project's OnlineRules aggregate."""
    return uuid5(NAMESPACE, f"online-rules\x1f{project}")


def rule_day_id_for(project: str, rule: str, day: date | str) -> UUID:
    """Id of one rule's day, a date or `YYYY-MM-DD` (its judged and skipped traces, its cost)."""
    return uuid5(NAMESPACE, f"online-rule-day\x1f{project}\x1f{rule}\x1f{day}")


@dataclass(frozen=True)
class OnlineRule:
    """A rule as its events made it."""

    added: OnlineRuleAdded
    disabled: OnlineRuleDisabled | None = None

    @property
    def name(self) -> str:
        """The rule's name."""
        return self.added.name

    @property
    def enabled(self) -> bool:
        """Whether it samples new traces."""
        return self.disabled is None


class OnlineRules(Aggregate):
    """The online evaluators of one project, in the order they were added."""

    rules: dict[str, OnlineRule]

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.rules = {}

    def add(self, fields: Mapping[str, Any], meta: Meta) -> tuple[OnlineRuleAdded, bool]:
        """Add a rule: (its event, whether it is new).

        The same rule sent again is not added twice (a retry); a name is one rule's for good,
        so another rule under a used name is a ConflictError.
        """
        name = str(fields["name"])
        found = self.rules.get(name)
        if found is not None:
            same = all(getattr(found.added, k) == v for k, v in fields.items())
            if same and found.enabled:
                return found.added, False
            state = "enabled" if found.enabled else "disabled"
            raise ConflictError(f"name: a rule {name!r} exists already ({state}); choose another")
        return self._trigger(OnlineRuleAdded, meta, **fields), True

    def disable(self, name: str, reason: str | None, meta: Meta) -> OnlineRuleDisabled:
        """Disable an enabled rule."""
        rule = self.rules.get(name)
        if rule is None:
            raise NotFoundError(f"no online rule {name!r}")
        if not rule.enabled:
            raise StateError(f"online rule {name!r} is disabled already")
        return self._trigger(OnlineRuleDisabled, meta, name=name, reason=reason)

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, OnlineRuleAdded):
            self.rules[event.name] = OnlineRule(event)
        elif isinstance(event, OnlineRuleDisabled):
            self.rules[event.name] = OnlineRule(self.rules[event.name].added, event)


class RuleDay(Aggregate):
    """What one rule did on one UTC day: the cases it judged (and their cost) or skipped."""

    cost_usd: float
    judged: set[UUID]
    skipped: set[UUID]

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.cost_usd = 0.0
        self.judged = set()
        self.skipped = set()

    def done(self, case_id: UUID) -> bool:
        """Whether the case was judged or skipped by the rule this day."""
        return case_id in self.judged or case_id in self.skipped

    def record_judged(self, fields: Mapping[str, Any], meta: Meta) -> None:
        """Record a case judged (once)."""
        if not self.done(fields["case_id"]):
            self._trigger(OnlineCaseJudged, meta, **fields)

    def record_skipped(self, fields: Mapping[str, Any], meta: Meta) -> None:
        """Record a case skipped (once)."""
        if not self.done(fields["case_id"]):
            self._trigger(OnlineCaseSkipped, meta, **fields)

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, OnlineCaseJudged):
            self.judged.add(event.case_id)
            self.cost_usd += event.cost_usd
        elif isinstance(event, OnlineCaseSkipped):
            self.skipped.add(event.case_id)


class OnlineRuleCommands(LedgerStore):
    """Add, disable and read a project's online rules; record what a rule did with a trace."""

    def online_rules(self, project: str) -> list[OnlineRule]:
        """A project's rules, in the order they were added."""
        found = self._find(OnlineRules, rules_id_for(project))
        return list(found.rules.values()) if found is not None else []

    def add_online_rule(
        self, fields: Mapping[str, Any], ctx: Context
    ) -> tuple[OnlineRuleAdded, bool]:
        """Record a new rule of `fields["project"]` (fields as `OnlineRuleAdded`'s); new or not."""
        project = str(fields["project"])
        ctx.check_project(project, "project")

        def command() -> tuple[OnlineRuleAdded, bool]:
            agg_id = rules_id_for(project)
            rules = self._find(OnlineRules, agg_id) or OnlineRules(agg_id)
            event = rules.add(fields, self._meta(ctx))
            self._save(rules, project=project)
            return event

        return self._retrying(command)

    def disable_online_rule(
        self, project: str, name: str, reason: str | None, ctx: Context
    ) -> OnlineRuleDisabled:
        """Disable a project's rule (NotFoundError: no such rule)."""
        ctx.check_project(project, "project")

        def command() -> OnlineRuleDisabled:
            agg_id = rules_id_for(project)
            rules = self._find(OnlineRules, agg_id) or OnlineRules(agg_id)
            event = rules.disable(name, reason, self._meta(ctx))
            self._save(rules, project=project)
            return event

        return self._retrying(command)

    def rule_day(self, project: str, rule: str, day: date) -> RuleDay:
        """A rule's day (empty when it did nothing that day)."""
        agg_id = rule_day_id_for(project, rule, day)
        return self._find(RuleDay, agg_id) or RuleDay(agg_id)

    def record_online_outcome(
        self, project: str, judged: bool, fields: Mapping[str, Any], ctx: Context
    ) -> int:
        """Record a case judged or skipped by a rule on its day (once per case); the position."""
        agg_id = rule_day_id_for(project, str(fields["rule"]), fields["day"])

        def command() -> int:
            day = self._find(RuleDay, agg_id) or RuleDay(agg_id)
            if judged:
                day.record_judged(fields, self._meta(ctx))
            else:
                day.record_skipped(fields, self._meta(ctx))
            return self._save(day, project=project)[0]

        return self._retrying(command)

    def rules_of(self, projects: Sequence[str]) -> dict[str, list[OnlineRule]]:
        """The enabled rules of each project (projects without any are left out)."""
        found = {p: [r for r in self.online_rules(p) if r.enabled] for p in projects}
        return {p: rules for p, rules in found.items() if rules}
