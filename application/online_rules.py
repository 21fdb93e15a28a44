"""Online evaluators (issue 33): rules as recorded configuration; sampled traces judged.

- `add_online_rule`, `list_online_rules`, `disable_online_rule` (`evaledger online rule ...`,
  `/projects/{project}/online/rules`): a rule is events (`OnlineRuleAdded`, `OnlineRuleDisabled`)
  with their author, so who changed it and when is in the log.
- `dispatch_online_rules`: when a completion pass records traces as cases, each enabled rule of
  the case's project whose filter matches and whose sample draws the trace
  (`scoring/online_rules.py`) gives one judgment: queued on the durable queue on PostgreSQL
  (`evaledger worker` runs it), run at once in this process on SQLite.
- `judge_online_case`: one judgment, with the judge runner of offline runs (its verdicts are
  the case's own events); the rule's daily budget is checked first: once the day's recorded
  cost reaches it, the trace is recorded as skipped, not judged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field

from evaledger.application.ports import Services
from evaledger.domain.errors import EvaledgerError, ValidationError
from evaledger.domain.events import ExpectedOutcome, TokenScope
from evaledger.domain.ledger import Context
from evaledger.domain.model import FrozenModel
from evaledger.domain.online_rules import OnlineRule
from evaledger.judging.providers import JudgeRef, cost_usd, environment, load_prices
from evaledger.judging.rubric import JudgeRubric, check_rubric
from evaledger.judging.runner import JudgeOptions, plan, run_plan
from evaledger.scoring.online_rules import (
    canonical_where,
    check_rule_name,
    check_sample,
    matches,
    parse_where,
    sampled,
)

log = logging.getLogger(__name__)

MAX_OUTCOMES = 20
MAX_OUTCOME_CHARS = 2_000
MAX_REASON_CHARS = 500


# -- configuration -----------------------------------------------------------------------------


class OnlineRuleInput(FrozenModel):
    """A new online evaluator (the HTTP body; `evaledger online rule add`'s options)."""

    name: str = Field(description="Unique in the project, for good: lowercase, digits, . _ -.")
    sample: float = Field(description="Share of matching traces judged, 0 to 1 (by trace id).")
    where: str = Field(
        default="",
        description="Filter: key=value joined by 'and'; keys agent, version, model, service, "
        "attribute.NAME (root span or resource). Empty: every trace.",
    )
    judge: str = Field(description="PROVIDER:MODEL of the judge (openai, anthropic, replay).")
    rubrics: list[JudgeRubric] = Field(
        default_factory=list, description="Judge rubrics as data (evaledger.rubric/1)."
    )
    outcomes: list[str] = Field(
        default_factory=list, description="Expected outcomes the judge checks on every trace."
    )
    max_cost_per_day_usd: float | None = Field(
        default=None, description="Daily budget (USD): past it, sampled traces are skipped."
    )
    allow_self_judge: bool = Field(
        default=False, description="Allow a judge of the agent's own vendor (flagged)."
    )


class OnlineRuleOut(BaseModel):
    """An online evaluator as recorded: its configuration and who changed it, when."""

    project: str
    name: str
    enabled: bool
    sample: float
    where: str = Field(description="The filter in canonical form; empty: every trace.")
    judge: str
    rubric_metrics: list[str] = Field(description="Metrics its rubrics judge (empty: the spec's).")
    outcomes: list[str]
    max_cost_per_day_usd: float | None
    allow_self_judge: bool
    added_by: str
    added_at: datetime
    disabled_by: str | None = None
    disabled_at: datetime | None = None
    disabled_reason: str | None = None

    @classmethod
    def of(cls, rule: OnlineRule) -> OnlineRuleOut:
        """The rule as the API and `rule list --json` show it."""
        a, d = rule.added, rule.disabled
        return cls(
            project=a.project,
            name=a.name,
            enabled=rule.enabled,
            sample=a.sample,
            where=a.where,
            judge=a.judge,
            rubric_metrics=[str(r.get("metric")) for r in a.rubrics],
            outcomes=list(a.outcomes),
            max_cost_per_day_usd=a.max_cost_per_day_usd,
            allow_self_judge=a.allow_self_judge,
            added_by=a.actor,
            added_at=a.timestamp,
            disabled_by=d.actor if d else None,
            disabled_at=d.timestamp if d else None,
            disabled_reason=d.reason if d else None,
        )


class OnlineRulePage(BaseModel):
    """A project's online evaluators, in the order they were added."""

    data: list[OnlineRuleOut]
    count: int


def _check_outcomes(outcomes: Sequence[str]) -> list[str]:
    if len(outcomes) > MAX_OUTCOMES:
        raise ValidationError(f"outcome: at most {MAX_OUTCOMES}", field="outcome")
    for text in outcomes:
        if not text.strip() or len(text) > MAX_OUTCOME_CHARS:
            raise ValidationError(
                f"outcome: 1 to {MAX_OUTCOME_CHARS} characters, not blank", field="outcome"
            )
    return [o.strip() for o in outcomes]


@dataclass(frozen=True)
class RuleAdded:
    """A rule added, or found as it was sent (a retry adds nothing)."""

    rule: OnlineRuleOut
    created: bool


def add_online_rule(
    services: Services, project: str, rule: OnlineRuleInput, ctx: Context
) -> RuleAdded:
    """Record a new rule of `project`; every field is checked first (nothing stored on error).

    Needs the admin scope (a rule spends money on judge calls). The same rule sent again is
    found, not added; another rule under a used name (even a disabled one's) is a ConflictError.
    """
    ctx.check_project(project, "project")
    ctx.check_admin("adding an online rule")
    check_rule_name(rule.name)
    check_sample(rule.sample)
    JudgeRef.parse(rule.judge)
    cap = rule.max_cost_per_day_usd
    if cap is not None and not 0 < cap <= 1e9:
        raise ValidationError(
            f"max_cost_per_day: more than 0 USD, got {cap}", field="max_cost_per_day"
        )
    metrics = [r.metric for r in rule.rubrics]
    if len(set(metrics)) != len(metrics):
        raise ValidationError("rubric: a metric has two rubrics", field="rubric")
    catalogue = services.ledger.catalogue(project)
    for r in rule.rubrics:
        if r.metric not in catalogue:
            raise ValidationError(
                f"rubric: unknown metric {r.metric!r} in project {project!r}", field="rubric"
            )
        check_rubric(catalogue[r.metric], r)
    added, new = services.ledger.add_online_rule(
        {
            "project": project,
            "name": rule.name,
            "sample": rule.sample,
            "where": canonical_where(rule.where),
            "judge": rule.judge.strip(),
            "rubrics": [r.model_dump(mode="json") for r in rule.rubrics],
            "outcomes": _check_outcomes(rule.outcomes),
            "max_cost_per_day_usd": cap,
            "allow_self_judge": rule.allow_self_judge,
        },
        ctx,
    )
    return RuleAdded(OnlineRuleOut.of(OnlineRule(added)), new)


def list_online_rules(services: Services, project: str, ctx: Context) -> OnlineRulePage:
    """The project's rules, enabled and disabled, in the order they were added."""
    ctx.check_project(project, "project")
    rules = [OnlineRuleOut.of(r) for r in services.ledger.online_rules(project)]
    return OnlineRulePage(data=rules, count=len(rules))


def disable_online_rule(
    services: Services, project: str, name: str, reason: str | None, ctx: Context
) -> OnlineRuleOut:
    """Disable a rule: it samples no more traces; what it judged stays recorded."""
    ctx.check_project(project, "project")
    ctx.check_admin("disabling an online rule")
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        raise ValidationError(f"reason: at most {MAX_REASON_CHARS} characters", field="reason")
    services.ledger.disable_online_rule(project, name, reason, ctx)
    found = {r.name: r for r in services.ledger.online_rules(project)}
    return OnlineRuleOut.of(found[name])


# -- sampling and judging ----------------------------------------------------------------------


@dataclass(frozen=True)
class OnlineCase:
    """A trace just recorded as a case, with what a rule's filter reads of it."""

    project: str
    run_id: UUID
    case_id: UUID
    trace_id: str
    facts: Mapping[str, str]
    """agent, version, model, service and `attribute.NAME` (root span, then resource)."""


@dataclass(frozen=True)
class OnlineJudgment:
    """One rule to apply to one case (a durable job's arguments on PostgreSQL)."""

    project: str
    rule: str
    run_id: UUID
    case_id: UUID
    trace_id: str

    def as_payload(self) -> dict[str, str]:
        """The job's arguments (JSON)."""
        return {k: str(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> OnlineJudgment:
        """A job's arguments read back."""
        return cls(
            project=str(payload["project"]),
            rule=str(payload["rule"]),
            run_id=UUID(str(payload["run_id"])),
            case_id=UUID(str(payload["case_id"])),
            trace_id=str(payload["trace_id"]),
        )


@dataclass(frozen=True)
class OnlineOutcome:
    """What one judgment did: judged (verdicts, cost) or skipped (why)."""

    judgment: OnlineJudgment
    judged: bool
    verdicts: int = 0
    cost_usd: float = 0.0
    reason: str | None = None


def select_judgments(
    rules: Mapping[str, Sequence[OnlineRule]], cases: Sequence[OnlineCase]
) -> list[OnlineJudgment]:
    """The (rule, case) pairs to judge: enabled rules whose filter matches and sample draws."""
    found = []
    for case in cases:
        for rule in rules.get(case.project, ()):
            added = rule.added
            if not rule.enabled or not matches(parse_where(added.where), case.facts):
                continue
            if sampled(added.name, case.trace_id, added.sample):
                found.append(
                    OnlineJudgment(
                        case.project, added.name, case.run_id, case.case_id, case.trace_id
                    )
                )
    return found


def dispatch_online_rules(
    services: Services, cases: Sequence[OnlineCase], env: Mapping[str, str] | None = None
) -> list[OnlineJudgment]:
    """Queue (PostgreSQL) or run now (SQLite) the judgments the enabled rules take of `cases`.

    Called by each completion pass with the cases it recorded; a trace is recorded once, so
    its judgments are dispatched once.
    """
    if not cases:
        return []
    rules = services.ledger.rules_of(sorted({c.project for c in cases}))
    judgments = select_judgments(rules, cases)
    queue = services.job_queue
    for judgment in judgments:
        try:
            if queue is not None:
                queue.enqueue_online(judgment.as_payload())
            else:
                judge_online_case(services, judgment, env)
        except Exception:  # one rule's failure never stops the completion pass
            log.exception("online rule %s on case %s failed", judgment.rule, judgment.case_id)
    return judgments


def rule_actor(rule: str) -> str:
    """Who records an online rule's verdicts."""
    return f"online-rule:{rule}"


def judge_online_case(
    services: Services, judgment: OnlineJudgment, env: Mapping[str, str] | None = None
) -> OnlineOutcome:
    """Apply one rule to one case, once: judge it, or record why not (budget, disabled, plan).

    A retried job finds its case recorded on the rule's day and does nothing again.
    """
    env = environment() if env is None else env
    ledger = services.ledger
    day = ledger.clock().date()
    rule_day = ledger.rule_day(judgment.project, judgment.rule, day)
    if rule_day.done(judgment.case_id):
        return OnlineOutcome(judgment, judged=judgment.case_id in rule_day.judged)
    ctx = Context(actor=rule_actor(judgment.rule), project=judgment.project, scope=TokenScope.WRITE)
    rule = {r.name: r for r in ledger.online_rules(judgment.project)}.get(judgment.rule)
    why = _why_not(rule, rule_day.cost_usd, load_prices(env))
    if why is None and rule is not None:
        try:
            outcome = _judge(services, judgment, rule, env, ctx)
        except EvaledgerError as e:  # the plan refused (a key, a pairing, a metric): say so
            why = f"not judged: {e.detail}"
        else:
            fields = _fields(judgment, day)
            fields.update(verdicts=outcome.verdicts, cost_usd=outcome.cost_usd)
            ledger.record_online_outcome(judgment.project, True, fields, ctx)
            return outcome
    reason = (why or "not judged")[:MAX_REASON_CHARS]
    ledger.record_online_outcome(
        judgment.project, False, {**_fields(judgment, day), "reason": reason}, ctx
    )
    return OnlineOutcome(judgment, judged=False, reason=reason)


def _fields(judgment: OnlineJudgment, day: date) -> dict[str, Any]:
    return {
        "rule": judgment.rule,
        "day": day.isoformat(),
        "run_id": judgment.run_id,
        "case_id": judgment.case_id,
        "trace_id": judgment.trace_id,
    }


def _why_not(
    rule: OnlineRule | None, spent: float, prices: Mapping[str, tuple[float, float]]
) -> str | None:
    """Why a rule judges no more today (None: it judges)."""
    if rule is None:
        return "no such rule"
    if not rule.enabled:
        return "the rule was disabled before the trace was judged"
    cap = rule.added.max_cost_per_day_usd
    if cap is None:
        return None
    ref = JudgeRef.parse(rule.added.judge)
    if ref.provider != "replay" and cost_usd(prices, ref.model, 0, 0) is None:
        return f"budget: {ref.label} has no price, so the daily budget cannot be held"
    if spent >= cap:
        return f"budget: the day's cost {spent:.6f} USD reached max_cost_per_day {cap:g} USD"
    return None


def _judge(
    services: Services,
    judgment: OnlineJudgment,
    rule: OnlineRule,
    env: Mapping[str, str],
    ctx: Context,
) -> OnlineOutcome:
    """One judging pass over one case with the rule's judge, rubrics and outcomes."""
    added = rule.added
    rubrics = tuple(JudgeRubric.model_validate(r) for r in added.rubrics)
    options = JudgeOptions(
        judges=(added.judge,),
        metrics=tuple(r.metric for r in rubrics),
        rubrics=rubrics,
        case_ids=(judgment.case_id,),
        concurrency=1,
        allow_self_judge=added.allow_self_judge,
    )
    key = f"online-rule:{added.name}"
    if key in services.ledger.get_case(judgment.case_id).idempotency:
        # An earlier attempt recorded the verdicts and stopped before its outcome: not again.
        return OnlineOutcome(judgment, True)
    planned = plan(services.ledger, judgment.run_id, options, env)
    if not planned.cases:
        raise ValidationError("the case has no transcript to judge", field="case")
    if added.outcomes:
        wanted = [ExpectedOutcome(statement=s) for s in added.outcomes]
        planned.cases = [
            dataclasses.replace(
                c,
                subject=dataclasses.replace(
                    c.subject,
                    test_case=c.subject.test_case.model_copy(
                        update={
                            "expected_outcomes": [*c.subject.test_case.expected_outcomes, *wanted]
                        }
                    ),
                ),
            )
            for c in planned.cases
        ]
    keyed = dataclasses.replace(ctx, idempotency_key=key)
    report = run_plan(services.ledger, planned, keyed)
    return OnlineOutcome(judgment, True, report.verdicts, report.cost_usd)
