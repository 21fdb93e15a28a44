"""CaseFacts: the compact, scoring-relevant view of one case, folded from its events.

Scores are never stored facts: every score is `score_case(facts, spec)`. Keeping the facts
compact (no prompts, replies or justifications; those stay in the events) is what makes a
rescore of a 10,000-case run a matter of milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar
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
        _MESSAGE(role=Role.ASSISTANT, latency_ms=latency, tokens=None, cost_usd=None, metrics={})
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


# ---------------------------------------------------------------------------------------------
# Lean folds (replay): the same facts from the stored state dicts, without pydantic validation.
# The stored events were validated when written; these read only the fields the facts keep and
# build the facts from trusted values (converted to the types validation would give: UUIDs,
# enums, floats), so the facts, their rows and their scores are exactly the full fold's.
# Topics without a lean fold here go through `apply_fact` on the full event.

_set = object.__setattr__
M = TypeVar("M", bound=BaseModel)


def _trusted(cls: type[M]) -> Callable[..., M]:
    """A constructor of `cls` from trusted values of EVERY field (see test_lean_decode.py).

    What `model_construct` does, without its per-field loop: that loop calls each missing
    field's default factory through `FieldInfo.get_default`, which (pydantic 2.14) inspects the
    factory's signature on every call; even with every field given it cost more than the fold.
    """
    new = cls.__new__

    def make(**values: Any) -> M:
        m = new(cls)
        _set(m, "__dict__", values)
        _set(m, "__pydantic_fields_set__", set(values))
        _set(m, "__pydantic_extra__", None)
        _set(m, "__pydantic_private__", None)
        return m

    return make


_OUTCOME = _trusted(OutcomeFact)
_METRIC = _trusted(MetricFact)
_VERDICT = _trusted(VerdictFact)
_MESSAGE = _trusted(MessageFact)
_CHECK = _trusted(CheckFact)
_FACTS = _trusted(CaseFacts)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _lean_outcomes(
    results: Sequence[dict[str, Any]], declared: dict[str, Severity]
) -> list[OutcomeFact]:
    construct = _OUTCOME
    out = []
    for r in results:
        statement = r["statement"]
        severity = r.get("severity")
        out.append(
            construct(
                statement=statement,
                passed=r["passed"],
                severity=Severity(severity)
                if severity
                else declared.get(statement, Severity.BLOCKER),
            )
        )
    return out


def _lean_metrics(scores: Sequence[dict[str, Any]]) -> list[MetricFact]:
    construct = _METRIC
    return [
        construct(
            metric=m["metric"],
            score=m.get("score"),
            passed=m.get("passed"),
            failure_code=m.get("failure_code") or None,
            turns=list(m.get("turns") or ()),
        )
        for m in scores
    ]


def _tokens(usage: dict[str, Any] | None) -> int | None:
    if usage is None:
        return None
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def opened_facts_data(
    oid: str, version: int, data: dict[str, Any], agent_provider: str | None = None
) -> CaseFacts:
    """`opened_facts` from a CaseOpened state dict."""
    tc = data["test_case"]
    key = tc["key"]
    outcomes = []
    for o in tc.get("expected_outcomes") or ():
        if isinstance(o, str):  # as TestCaseSnapshot's validator reads a bare statement
            o = {"statement": o}
        outcomes.append(
            _OUTCOME(
                statement=o["statement"],
                passed=False,
                severity=Severity(o.get("severity", Severity.BLOCKER)),
            )
        )
    return _FACTS(
        case_id=UUID(oid),
        run_id=UUID(data["run_id"]),
        test_case_key=key,
        test_id=tc.get("test_id") or key,
        name=tc.get("name"),
        repetition=data["repetition"],
        variant=data.get("variant", ""),
        configuration=tc.get("configuration"),
        persona=tc.get("persona"),
        scenario=tc.get("scenario"),
        category=tc.get("category"),
        tags=list(tc.get("tags") or ()),
        weight=float(tc.get("weight", 1.0)),
        evaluation_method=tc.get("evaluation_method"),
        expected_outcomes=outcomes,
        has_transcript=False,
        turn_count=0,
        messages=[],
        prompt_tokens=0,
        completion_tokens=0,
        cost_usd=None,
        duration_ms=None,
        errored=False,
        error_message=None,
        error_kind=None,
        canceled=False,
        verdicts=[],
        outcome_evaluations=[],
        claims=[],
        checks=[],
        agent_provider=agent_provider,
        last_version=version,
        named_scores={},
    )


def _transcript(facts: CaseFacts, data: dict[str, Any]) -> None:
    construct = _MESSAGE
    turns = data["turns"]
    facts.has_transcript = True
    facts.turn_count = len(turns)
    messages = []
    for t in turns:
        metrics = t.get("metrics")
        messages.append(
            construct(
                role=Role(t["role"]),
                latency_ms=_float(t.get("latency_ms")),
                tokens=_tokens(t.get("usage")),
                cost_usd=_float(t.get("cost_usd")),
                metrics={k: float(v) for k, v in metrics.items()} if metrics else {},
            )
        )
    facts.messages = messages
    usage = data.get("usage")
    if usage is not None:
        facts.prompt_tokens = int(usage.get("prompt_tokens", 0))
        facts.completion_tokens = int(usage.get("completion_tokens", 0))
    facts.cost_usd = _float(data.get("cost_usd"))
    facts.duration_ms = _float(data.get("duration_ms"))


def _verdict(facts: CaseFacts, data: dict[str, Any], declared: dict[str, Severity]) -> None:
    judge = data["judge"]
    facts.verdicts.append(
        _VERDICT(
            verdict_id=UUID(data["verdict_id"]),
            position=len(facts.verdicts),
            judge_kind=judge.get("kind", "llm"),
            judge_provider=judge.get("provider"),
            judge_model=judge.get("model"),
            parse_status=ParseStatus(data.get("parse_status", ParseStatus.PARSED)),
            error=data.get("error"),
            metric_scores=_lean_metrics(data.get("metric_scores") or ()),
            expected_outcomes=_lean_outcomes(data.get("expected_outcomes") or (), declared),
            invalidated=False,
            overridden=False,
            forced_passed=None,
            override_reasons=[],
            latency_ms=_float(data.get("latency_ms")),
            cost_usd=_float(data.get("cost_usd")),
            tokens=_tokens(data.get("usage")) or 0,
        )
    )


LEAN_FACT_TOPICS: frozenset[type[DomainEvent]] = frozenset(
    {
        TranscriptRecorded,
        JudgeVerdictRecorded,
        OutcomeEvaluated,
        ClaimsVerified,
        StructuralCheckRecorded,
        ExecutionErrored,
    }
)
"""Case events `apply_fact_data` folds from their state dict (the rest need the full event)."""


def apply_fact_data(
    facts: CaseFacts, cls: type[DomainEvent], version: int, data: dict[str, Any]
) -> None:
    """`apply_fact` of an event of a `LEAN_FACT_TOPICS` class, from its state dict, in place."""
    if cls is TranscriptRecorded:
        _transcript(facts, data)
    elif cls is JudgeVerdictRecorded:
        _verdict(facts, data, {o.statement: o.severity for o in facts.expected_outcomes})
    elif cls is OutcomeEvaluated:
        declared = {o.statement: o.severity for o in facts.expected_outcomes}
        facts.outcome_evaluations.append(_lean_outcomes(data["results"], declared))
    elif cls is ClaimsVerified:
        facts.claims.extend(ClaimSupport(c["support"]) for c in data["claims"])
    elif cls is StructuralCheckRecorded:
        facts.checks.append(_CHECK(check=data["check"], status=CheckStatus(data["status"])))
    elif cls is ExecutionErrored:
        facts.errored = True
        facts.error_message = data["message"]
        facts.error_kind = data.get("kind")
    else:
        raise ValueError(f"no lean fold for {cls.__name__}")
    facts.last_version = version
