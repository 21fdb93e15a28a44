"""CaseFacts: the compact, scoring-relevant view of one case, the rules' input.

Scores are never stored facts: every score is `score_case(facts, spec)`. Keeping the facts
compact (no prompts, replies or justifications; those stay in the events) is what makes a
rescore of a 10,000-case run a matter of milliseconds. The facts are folded from a case's
events by `projections/fold.py`.
"""

from __future__ import annotations

from uuid import UUID

from pydantic import Field

from evaledger.domain.events import CheckStatus, ClaimSupport, ParseStatus, Role
from evaledger.domain.model import StrictModel
from evaledger.domain.spec import Severity


class OutcomeFact(StrictModel):
    """One judged expected outcome."""

    statement: str
    passed: bool
    severity: Severity = Field(description="From the result, else the test case, else blocker.")


class MetricFact(StrictModel):
    """One metric of a verdict (justification left in the event)."""

    metric: str
    score: int | None = None
    passed: bool | None = None
    failure_code: str | None = None
    turns: list[int] = Field(default_factory=list)


class VerdictFact(StrictModel):
    """One judge verdict, with the human corrections applied to it."""

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
    template_hash: str | None = Field(
        default=None, description="The judge prompt template's hash (what a calibration is at)."
    )
    judge_version: str | None = Field(default=None, description="The judge's (scorer's) version.")


class MessageFact(StrictModel):
    """Per-message numbers for rollups (every message counts)."""

    role: Role
    latency_ms: float | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)


class CheckFact(StrictModel):
    """A structural check result."""

    check: str
    status: CheckStatus


class CaseFacts(StrictModel):
    """Everything scoring, summaries, rollups, grading and comparison need about one case."""

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
    skipped: str | None = Field(
        default=None,
        description="Not an execution (ExecutionSkipped): skipped, xfailed or xpassed.",
    )
    verdicts: list[VerdictFact] = Field(default_factory=list)
    outcome_evaluations: list[list[OutcomeFact]] = Field(default_factory=list)
    claims: list[ClaimSupport] = Field(default_factory=list)
    checks: list[CheckFact] = Field(default_factory=list)
    agent_provider: str | None = Field(default=None, description="For self-judging flags.")
    cached: bool = Field(
        default=False, description="The transcript was served from a cache (CaseOpened.cached)."
    )
    last_version: int = 0
    named_scores: dict[str, float] = Field(
        default_factory=dict, description="Peer named scores by name (latest), numeric readings."
    )
    score_overrides: dict[str, str] = Field(
        default_factory=dict,
        description="Named scores a human overrode (ScoreOverridden), with the latest reason.",
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
    scoring only uses the assistant turns' latencies, so a run's rescore inputs keep just those
    of the cases they hold whole (`scoring.rescore.RunInputs.complex`). Every field is given.
    """
    compact = [
        MessageFact.model_construct(
            role=Role.ASSISTANT, latency_ms=latency, tokens=None, cost_usd=None, metrics={}
        )
        for latency in facts.assistant_latencies
    ]
    return facts.model_copy(update={"messages": compact})
