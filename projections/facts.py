"""CaseFacts: the compact, scoring-relevant view of one case, folded from its events.

Scores are never stored facts: every score is `score_case(facts, spec)`. Keeping the facts
compact (no prompts, replies or justifications; those stay in the events) is what makes a
rescore of a 10,000-case run a matter of milliseconds.
"""

from __future__ import annotations

from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from evaledger.domain.events import (
    CaseOpened,
    CheckStatus,
    ClaimSupport,
    ClaimsVerified,
    DomainEvent,
    ExecutionCanceled,
    ExecutionErrored,
    JudgeVerdictRecorded,
    NamedScoresRecorded,
    OutcomeEvaluated,
    OutcomeResult,
    ParseStatus,
    Role,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.spec import Severity

_MODEL = ConfigDict(extra="forbid", allow_inf_nan=False)


class OutcomeFact(BaseModel):
    """One judged expected outcome."""

    model_config = _MODEL

    statement: str
    passed: bool
    severity: Severity = Field(description="From the result, else the test case, else blocker.")


class MetricFact(BaseModel):
    """One metric of a verdict (justification left in the event)."""

    model_config = _MODEL

    metric: str
    score: int | None = None
    passed: bool | None = None
    failure_code: str | None = None
    turns: list[int] = Field(default_factory=list)


class VerdictFact(BaseModel):
    """One judge verdict, with the human corrections applied to it."""

    model_config = _MODEL

    verdict_id: UUID
    position: int = Field(description="Order of recording within the case (0-based).")
    judge_kind: str = "llm"
    judge_provider: str | None = None
    judge_model: str | None = None
    parse_status: ParseStatus = ParseStatus.PARSED
    error: str | None = None
    metric_scores: list[MetricFact] = Field(default_factory=list)
    expected_outcomes: list[OutcomeFact] = Field(default_factory=list)
    invalidated: bool = False
    overridden: bool = False
    forced_passed: bool | None = Field(default=None, description="Override forcing pass/fail.")
    override_reasons: list[str] = Field(default_factory=list)
    latency_ms: float | None = None
    cost_usd: float | None = None
    tokens: int = 0


class MessageFact(BaseModel):
    """Per-message numbers for rollups (every message counts)."""

    model_config = _MODEL

    role: Role
    latency_ms: float | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)


class CheckFact(BaseModel):
    """A structural check result."""

    model_config = _MODEL

    check: str
    status: CheckStatus


class CaseFacts(BaseModel):
    """Everything scoring, summaries, rollups, grading and comparison need about one case."""

    model_config = _MODEL

    case_id: UUID
    run_id: UUID
    test_case_key: str
    test_id: str
    name: str | None = None
    repetition: int = 0
    variant: str = ""
    configuration: str | None = None
    persona: str | None = None
    scenario: str | None = None
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    weight: float = 1.0
    evaluation_method: str | None = None
    expected_outcomes: list[OutcomeFact] = Field(
        default_factory=list, description="The test case's outcomes (passed=False placeholder)."
    )
    has_transcript: bool = False
    turn_count: int = 0
    messages: list[MessageFact] = Field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    duration_ms: float | None = None
    errored: bool = False
    error_message: str | None = None
    error_kind: str | None = None
    canceled: bool = False
    verdicts: list[VerdictFact] = Field(default_factory=list)
    outcome_evaluations: list[list[OutcomeFact]] = Field(default_factory=list)
    claims: list[ClaimSupport] = Field(default_factory=list)
    checks: list[CheckFact] = Field(default_factory=list)
    agent_provider: str | None = Field(default=None, description="For self-judging flags.")
    last_version: int = 0
    named_scores: dict[str, float] = Field(
        default_factory=dict, description="Peer named scores by name (latest), numeric readings."
    )

    @property
    def assistant_latencies(self) -> list[float]:
        """Latency of every assistant turn that has one."""
        return [
            m.latency_ms
            for m in self.messages
            if m.role is Role.ASSISTANT and m.latency_ms is not None
        ]


def scoring_view(facts: CaseFacts) -> CaseFacts:
    """The facts `score_case` reads: per-message rows cut to the assistant latencies.

    A 10-14 turn case's messages (role, usage, cost, custom metrics) are most of its facts;
    scoring only uses the assistant turns' latencies, so the `scoring` column keeps just those
    and a rescore decodes a fraction of the bytes. Rollups read the full `facts` column.
    """
    compact = [
        MessageFact(role=Role.ASSISTANT, latency_ms=latency)
        for latency in facts.assistant_latencies
    ]
    return facts.model_copy(update={"messages": compact})


def _outcomes(results: list[OutcomeResult], declared: dict[str, Severity]) -> list[OutcomeFact]:
    return [
        OutcomeFact(
            statement=r.statement,
            passed=r.passed,
            severity=r.severity or declared.get(r.statement, Severity.BLOCKER),
        )
        for r in results
    ]


def opened_facts(event: CaseOpened, agent_provider: str | None = None) -> CaseFacts:
    """The facts of a case that was just opened."""
    tc = event.test_case
    return CaseFacts(
        case_id=event.originator_id,
        run_id=event.run_id,
        test_case_key=tc.key,
        test_id=tc.test_id or tc.key,
        name=tc.name,
        repetition=event.repetition,
        variant=event.variant,
        configuration=tc.configuration,
        persona=tc.persona,
        scenario=tc.scenario,
        category=tc.category,
        tags=list(tc.tags),
        weight=tc.weight,
        evaluation_method=tc.evaluation_method,
        expected_outcomes=[
            OutcomeFact(statement=o.statement, passed=False, severity=o.severity)
            for o in tc.expected_outcomes
        ],
        agent_provider=agent_provider,
        last_version=event.originator_version,
    )


def apply_fact(facts: CaseFacts, event: DomainEvent) -> None:
    """Fold one case event (after CaseOpened) into the facts, in place."""
    declared = {o.statement: o.severity for o in facts.expected_outcomes}
    if isinstance(event, TranscriptRecorded):
        facts.has_transcript = True
        facts.turn_count = len(event.turns)
        facts.messages = [
            MessageFact(
                role=t.role,
                latency_ms=t.latency_ms,
                tokens=(t.usage.prompt_tokens + t.usage.completion_tokens) if t.usage else None,
                cost_usd=t.cost_usd,
                metrics=dict(t.metrics),
            )
            for t in event.turns
        ]
        if event.usage is not None:
            facts.prompt_tokens = event.usage.prompt_tokens
            facts.completion_tokens = event.usage.completion_tokens
        facts.cost_usd = event.cost_usd
        facts.duration_ms = event.duration_ms
    elif isinstance(event, ExecutionErrored):
        facts.errored = True
        facts.error_message = event.message
        facts.error_kind = event.kind
    elif isinstance(event, ExecutionCanceled):
        facts.canceled = True
    elif isinstance(event, JudgeVerdictRecorded):
        facts.verdicts.append(
            VerdictFact(
                verdict_id=event.verdict_id,
                position=len(facts.verdicts),
                judge_kind=event.judge.kind,
                judge_provider=event.judge.provider,
                judge_model=event.judge.model,
                parse_status=event.parse_status,
                error=event.error,
                metric_scores=[
                    MetricFact(
                        metric=m.metric,
                        score=m.score,
                        passed=m.passed,
                        failure_code=m.failure_code or None,
                        turns=list(m.turns),
                    )
                    for m in event.metric_scores
                ],
                expected_outcomes=_outcomes(event.expected_outcomes, declared),
                latency_ms=event.latency_ms,
                cost_usd=event.cost_usd,
                tokens=(event.usage.prompt_tokens + event.usage.completion_tokens)
                if event.usage
                else 0,
            )
        )
    elif isinstance(event, NamedScoresRecorded):
        # Labels have no numeric reading; they stay in the event.
        facts.named_scores.update((s.name, s.number) for s in event.scores if s.number is not None)
    elif isinstance(event, OutcomeEvaluated):
        facts.outcome_evaluations.append(_outcomes(event.results, declared))
    elif isinstance(event, ClaimsVerified):
        facts.claims.extend(c.support for c in event.claims)
    elif isinstance(event, StructuralCheckRecorded):
        facts.checks.append(CheckFact(check=event.check, status=event.status))
    elif isinstance(event, VerdictOverridden | VerdictInvalidated):
        for v in facts.verdicts:
            if v.verdict_id != event.verdict_id:
                continue
            v.override_reasons.append(event.reason)
            if isinstance(event, VerdictInvalidated):
                v.invalidated = True
                continue
            v.overridden = True
            if event.metric_scores is not None:
                v.metric_scores = [
                    MetricFact(
                        metric=m.metric,
                        score=m.score,
                        passed=m.passed,
                        failure_code=m.failure_code or None,
                        turns=list(m.turns),
                    )
                    for m in event.metric_scores
                ]
                v.error = None
                v.parse_status = ParseStatus.PARSED
            if event.expected_outcomes is not None:
                v.expected_outcomes = _outcomes(event.expected_outcomes, declared)
            if event.passed is not None:
                v.forced_passed = event.passed
    facts.last_version = event.originator_version
