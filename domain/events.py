"""The event catalogue (DESIGN §2): immutable, versioned facts with explicit stable topics.

Every event is a frozen pydantic model. Its topic is `evaledger.<aggregate>.<name>/v<class_version>`
and never depends on the Python module it lives in, so moving code never breaks replay.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import Enum, StrEnum
from functools import cache
from typing import Any, ClassVar, Literal, Self
from uuid import UUID

import orjson
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from evaledger.domain.metrics import MetricDefinition
from evaledger.domain.spec import RunConfig, ScoringSpec, Severity
from evaledger.domain.types import Amount, Count, JsonObject, SignedAmount

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
GENESIS_HASH = "0" * 64


class Value(BaseModel):
    """Base of the value objects events carry."""

    model_config = _FROZEN


# ---------------------------------------------------------------------------------------------
# Value objects


class ToolSpec(Value):
    """A tool the agent can call."""

    name: str = Field(min_length=1, description="Tool name.")
    description: str | None = Field(default=None, description="What the tool does.")
    parameters: JsonObject = Field(default_factory=dict, description="JSON Schema of args.")


class AgentSnapshot(Value):
    """The agent under test, as it was when the run was created."""

    name: str = Field(min_length=1, description="Agent name.")
    version: str | None = Field(default=None, description="Agent version.")
    provider: str | None = Field(default=None, description="LLM provider of the agent.")
    model: str | None = Field(default=None, description="LLM model of the agent.")
    system_prompt: str | None = Field(default=None, description="System prompt, verbatim.")
    tools: list[ToolSpec] = Field(default_factory=list, description="Tools offered to the agent.")


class SuiteRef(Value):
    """The test suite a run executes."""

    name: str = Field(min_length=1, description="Suite name.")
    version: int | str | None = Field(default=None, description="Suite version.")


class ExpectedOutcome(Value):
    """One expected-outcome statement of a test case."""

    statement: str = Field(min_length=1, description="What must be true of the conversation.")
    severity: Severity = Field(default=Severity.BLOCKER, description="blocker, medium or low.")


class TestCaseSnapshot(Value):
    """The test case exactly as it was executed."""

    __test__: ClassVar[bool] = False

    key: str = Field(min_length=1, description="Stable test case key, unique in the suite.")
    name: str | None = Field(default=None, description="Human name.")
    test_id: str | None = Field(default=None, description="Grading test id; defaults to key.")
    expected_outcomes: list[ExpectedOutcome] = Field(default_factory=list)
    evaluation_criteria_override: str | None = Field(default=None)
    tags: list[str] = Field(default_factory=list)
    category: str | None = Field(default=None, description="Grading category, or null.")
    weight: Amount = Field(default=1.0, description="Weight of the case in its test.")
    persona: str | None = Field(default=None, description="Persona / personality of the user.")
    configuration: str | None = Field(default=None, description="Configuration label.")
    evaluation_method: str | None = Field(
        default=None, description="structural, judge or atomic_claims."
    )
    scenario: str | None = Field(default=None, description="Scenario label for rollups.")

    @field_validator("expected_outcomes", mode="before")
    @classmethod
    def _outcomes_from_strings(cls, value: Any) -> Any:
        # The bundle (and Connexity) allow a bare statement for a blocker outcome.
        if isinstance(value, list):
            return [{"statement": v} if isinstance(v, str) else v for v in value]
        return value


class ToolCall(Value):
    """A tool call made by the agent in one turn."""

    id: str | None = Field(default=None, description="Call id the tool result refers to.")
    name: str = Field(min_length=1, description="Tool name.")
    arguments: JsonObject = Field(default_factory=dict, description="Call arguments.")


class Usage(Value):
    """Token usage."""

    prompt_tokens: Count = 0
    completion_tokens: Count = 0


class Role(StrEnum):
    """Who spoke a turn."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class Turn(Value):
    """One message of a conversation."""

    role: Role
    content: str | None = Field(default=None, description="Text of the message.")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = Field(default=None, description="Call a tool message answers.")
    latency_ms: Amount | None = Field(default=None, description="Time to produce the turn.")
    usage: Usage | None = Field(default=None, description="Tokens of this turn.")
    cost_usd: Amount | None = Field(default=None, description="Cost of this turn.")
    metrics: dict[str, SignedAmount] = Field(
        default_factory=dict, description="Custom per-message metrics (name → value)."
    )


class MetricScore(Value):
    """A judge's score of one metric."""

    metric: str = Field(min_length=1, description="Metric id from the catalogue.")
    score: StrictInt | None = Field(default=None, ge=0, le=5, description="0-5 for scored.")
    passed: StrictBool | None = Field(default=None, description="pass/fail for binary metrics.")
    justification: str | None = Field(default=None)
    failure_code: str | None = Field(default=None, description="snake_case failure mode.")
    turns: list[StrictInt] = Field(default_factory=list, description="Turn indices of the issue.")


class OutcomeResult(Value):
    """The judged result of one expected outcome."""

    statement: str = Field(min_length=1)
    passed: StrictBool
    severity: Severity | None = Field(default=None, description="Defaults to the test case's.")
    justification: str | None = None


class JudgeIdentity(Value):
    """Which judge produced a verdict."""

    kind: Literal["llm", "human", "structural"] = "llm"
    provider: str | None = None
    model: str | None = None
    version: str | None = None
    temperature: float | None = None
    params: JsonObject = Field(default_factory=dict)


class ParseStatus(StrEnum):
    """How the judge's raw reply was parsed."""

    PARSED = "parsed"
    UNPARSEABLE = "unparseable"
    MISSING_METRICS = "missing_metrics"
    PROVIDER_ERROR = "provider_error"


class ClaimSupport(StrEnum):
    """FActScore-style support of one atomic claim."""

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    CONTRADICTED = "contradicted"


class Claim(Value):
    """One atomic claim of the agent's answer."""

    claim: str = Field(min_length=1)
    support: ClaimSupport
    source: str | None = None


class ScoreScale(StrEnum):
    """The scale a peer's named score is on (it keeps its own scale, never forced onto 0-5)."""

    FRACTION = "fraction"
    """A number in 0..1 (accuracy-like)."""
    GRADE = "grade"
    """A letter grade: C (correct), P (partial), I (incorrect), N (no answer), as Inspect."""
    BOOLEAN = "boolean"
    """true / false."""
    NUMBER = "number"
    """Any other number (a reward, a count, a raw score)."""
    LABEL = "label"
    """Free text with no numeric reading."""


GRADE_VALUES: dict[str, float] = {"C": 1.0, "P": 0.5, "I": 0.0, "N": 0.0}
"""Numeric reading of letter grades (Inspect's `value_to_float`)."""


class NamedScore(Value):
    """A peer's score that is not a 0-5 rubric metric: its name, raw value and scale."""

    name: str = Field(min_length=1, description="Score name as the peer calls it.")
    value: StrictBool | float | str = Field(description="The raw value, as the peer recorded it.")
    scale: ScoreScale = Field(description="fraction, grade, boolean, number or label.")

    @model_validator(mode="after")
    def _value_fits_scale(self) -> NamedScore:
        v, scale = self.value, self.scale
        ok = {
            ScoreScale.FRACTION: isinstance(v, float) and 0.0 <= v <= 1.0,
            ScoreScale.GRADE: isinstance(v, str) and v in GRADE_VALUES,
            ScoreScale.BOOLEAN: isinstance(v, bool),
            ScoreScale.NUMBER: isinstance(v, float),
            ScoreScale.LABEL: isinstance(v, str),
        }[scale]
        if not ok:
            raise ValueError(f"value: {v!r} is not a {scale.value} score")
        return self

    @property
    def number(self) -> float | None:
        """The value as a number (grades C=1, P=0.5, I=N=0; booleans 1/0); None for labels."""
        v = self.value
        if isinstance(v, bool):
            return 1.0 if v else 0.0
        if isinstance(v, float):
            return v
        return GRADE_VALUES.get(v) if self.scale is ScoreScale.GRADE else None


class CheckStatus(StrEnum):
    """Result of a structural check."""

    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"


# ---------------------------------------------------------------------------------------------
# Events


class DomainEvent(BaseModel):
    """Base of every stored event: who, when, idempotency, and the hash chain."""

    model_config = _FROZEN

    topic_name: ClassVar[str] = ""
    class_version: ClassVar[int] = 1
    added_fields: ClassVar[frozenset[str]] = frozenset()
    """Optional fields added to this class version after it shipped. They are stored only when
    they differ from their default, so events recorded before keep their exact stored bytes (and
    hashes); decoding an old event gives them their default."""

    originator_id: UUID = Field(description="Aggregate id.")
    originator_version: int = Field(ge=1, description="Position in the aggregate, from 1.")
    timestamp: AwareDatetime = Field(description="When it was recorded (UTC).")
    actor: str = Field(min_length=1, description="Who recorded it (user or token id).")
    idempotency_key: str | None = Field(default=None, description="Client idempotency key.")
    request_digest: str | None = Field(default=None, description="Digest of the request body.")
    prev_hash: str = Field(description="Hash of the previous event of the aggregate.")

    _hash: str | None = PrivateAttr(default=None)
    _state: bytes | None = PrivateAttr(default=None)

    @classmethod
    def topic(cls) -> str:
        """The stable topic this class is stored under."""
        return f"{cls.topic_name}/v{cls.class_version}"

    def state(self) -> dict[str, Any]:
        """The stored state: every field but the aggregate id and version.

        Added fields still at their default are left out (see `added_fields`).
        """
        state = self.model_dump(exclude={"originator_id", "originator_version"})
        for name, default in _added_defaults(type(self)).items():
            if state[name] == default:
                del state[name]
        return state

    @classmethod
    def trusted(cls, values: Mapping[str, Any]) -> Self:
        """An event from values that already have its fields' types: no second validation.

        For values taken from a validated model whose fields have the same types as the
        event's (a bundle case's `Turn`s, `MetricScore`s, datetimes...): pydantic's validation
        of the same objects again was a fifth of a large import. Fields not given take their
        defaults; a missing required field or an unknown one is refused, as validation would.
        """
        template, names, required, factories = _field_specs(cls)
        if not names.issuperset(values):
            raise TypeError(f"{cls.__name__}: unknown fields {sorted(set(values) - names)}")
        if not required <= values.keys():
            raise TypeError(f"{cls.__name__}: missing fields {sorted(required - values.keys())}")
        data = {**template, **values}  # the template's order: every field, in order
        for name, factory in factories:
            if name not in values:
                if factory is list or factory is dict:
                    data[name] = factory()
                else:
                    info = cls.model_fields[name]
                    data[name] = info.get_default(call_default_factory=True, validated_data=data)
        event = cls.__new__(cls)
        object.__setattr__(event, "__dict__", data)
        object.__setattr__(event, "__pydantic_fields_set__", set(values))
        object.__setattr__(event, "__pydantic_extra__", None)
        object.__setattr__(event, "__pydantic_private__", {"_hash": None, "_state": None})
        return event

    def encode_with(self, dumped: Mapping[str, Any]) -> None:
        """Encode the stored state once from nested values the caller already dumped.

        `dumped` maps field names to their python-mode dump (`model_dump()` of the same value
        objects, e.g. taken from the dump of the bundle case the event is built from); every
        other field must hold a plain value (str, number, bool, None, UUID, datetime, enum),
        which a python-mode dump leaves as it is. The bytes equal `encode_state(self)`; a field
        that is neither leaves the state to `stored_state()`'s own encoding.
        """
        values = self.__dict__
        state: dict[str, Any] = {}
        for name in _stored_fields(type(self)):
            if name in dumped:
                state[name] = dumped[name]
                continue
            value = values[name]
            if type(value) not in _PLAIN and not isinstance(value, Enum):
                return
            state[name] = value
        for name, default in _added_defaults(type(self)).items():
            if state[name] == default:
                del state[name]
        private = self.__pydantic_private__
        assert private is not None
        private["_state"] = orjson.dumps(state)

    def __eq__(self, other: object) -> bool:
        # Field values only: the cached hash (a private attribute) must not make two equal
        # events unequal.
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self), self.originator_id, self.originator_version))

    # The two caches below are read through `__pydantic_private__` directly: pydantic's
    # `__getattr__` for a private attribute (a `hasattr` on its descriptor each time) cost about
    # a tenth of a large import at ~10 reads per event.

    def stored_state(self) -> bytes:
        """The canonical stored bytes of the state, encoded once (hashing and storing share it)."""
        private = self.__pydantic_private__
        assert private is not None
        state: bytes | None = private.get("_state")
        if state is None:
            state = private["_state"] = encode_state(self)
        return state

    def hash(self) -> str:
        """Hash of this event as stored (set by the mapper when read back, else computed)."""
        private = self.__pydantic_private__
        assert private is not None
        digest: str | None = private.get("_hash")
        if digest is None:
            digest = private["_hash"] = stored_hash(type(self).topic(), self.stored_state())
        return digest


class RunEvent(DomainEvent):
    """An event of a Run aggregate."""


class CaseEvent(DomainEvent):
    """An event of a Case aggregate."""


class RunCreated(RunEvent):
    """A run was created with its fully resolved config snapshot."""

    topic_name: ClassVar[str] = "evaledger.run.created"

    run_key: str = Field(min_length=1, description="Client key, unique in the project.")
    project: str = Field(default="default", min_length=1)
    name: str | None = None
    suite: SuiteRef
    agent: AgentSnapshot
    labels: dict[str, str] = Field(default_factory=dict, description="git sha, trigger, ...")
    config: RunConfig = Field(description="The config as given.")
    spec: ScoringSpec = Field(description="The resolved scoring spec snapshot.")
    created_at: AwareDatetime = Field(description="When the run was created at its source.")


class RunStarted(RunEvent):
    """The run started executing cases."""

    topic_name: ClassVar[str] = "evaledger.run.started"


class CasesAttached(RunEvent):
    """Cases were opened for the run (their ids), so the run can be sealed and listed."""

    topic_name: ClassVar[str] = "evaledger.run.cases_attached"

    case_ids: list[UUID]


class RunCompleted(RunEvent):
    """The run completed; the seal is a digest over its cases' last event hashes."""

    topic_name: ClassVar[str] = "evaledger.run.completed"

    completed_at: AwareDatetime
    seal: str
    case_count: int


class RunCanceled(RunEvent):
    """The run was canceled."""

    topic_name: ClassVar[str] = "evaledger.run.canceled"

    reason: str | None = None


class RunFailed(RunEvent):
    """The run failed as a whole (harness crash...)."""

    topic_name: ClassVar[str] = "evaledger.run.failed"

    reason: str


class BaselineApproved(RunEvent):
    """The run was approved as the baseline of its (agent, suite)."""

    topic_name: ClassVar[str] = "evaledger.run.baseline_approved"

    agent: str
    suite: str
    reason: str | None = None


class BaselineRevoked(RunEvent):
    """The run's baseline approval was revoked."""

    topic_name: ClassVar[str] = "evaledger.run.baseline_revoked"

    agent: str
    suite: str
    reason: str | None = None


class CaseOpened(CaseEvent):
    """A case (test case x repetition x variant) was opened in a run."""

    topic_name: ClassVar[str] = "evaledger.case.opened"

    run_id: UUID
    test_case: TestCaseSnapshot
    repetition: int = Field(ge=0)
    variant: str = Field(default="", description="Configuration/personality label.")


class TranscriptRecorded(CaseEvent):
    """The conversation of the case was recorded."""

    topic_name: ClassVar[str] = "evaledger.case.transcript_recorded"

    turns: list[Turn]
    usage: Usage | None = None
    cost_usd: Amount | None = None
    started_at: AwareDatetime | None = None
    ended_at: AwareDatetime | None = None
    duration_ms: Amount | None = None


class ExecutionErrored(CaseEvent):
    """The agent or the harness failed: a system error, not a judge failure."""

    topic_name: ClassVar[str] = "evaledger.case.execution_errored"

    message: str
    kind: str | None = None


class ExecutionCanceled(CaseEvent):
    """The case was canceled before or while running."""

    topic_name: ClassVar[str] = "evaledger.case.execution_canceled"

    reason: str | None = None


class JudgeVerdictRecorded(CaseEvent):
    """One judge call: identity, prompt, raw reply verbatim, parsed scores; or an error."""

    topic_name: ClassVar[str] = "evaledger.case.judge_verdict_recorded"
    added_fields: ClassVar[frozenset[str]] = frozenset({"panel_id", "self_judged"})

    verdict_id: UUID
    judge: JudgeIdentity
    template_id: str | None = None
    template_hash: str | None = None
    prompt: str | None = Field(default=None, description="Rendered judge prompt, verbatim.")
    raw_output: str | None = Field(default=None, description="The judge's reply, verbatim.")
    parse_status: ParseStatus = ParseStatus.PARSED
    metric_scores: list[MetricScore] = Field(default_factory=list)
    expected_outcomes: list[OutcomeResult] = Field(default_factory=list)
    latency_ms: Amount | None = None
    usage: Usage | None = None
    cost_usd: Amount | None = None
    error: str | None = Field(default=None, description="Why the verdict is an error verdict.")
    panel_id: UUID | None = Field(
        default=None, description="Shared by the votes of one panel (one judging pass, ≥2 judges)."
    )
    self_judged: bool = Field(
        default=False, description="The judge's vendor is the agent's (asked for explicitly)."
    )


class OutcomeEvaluated(CaseEvent):
    """Expected outcomes / assertions were evaluated outside a metric verdict."""

    topic_name: ClassVar[str] = "evaledger.case.outcome_evaluated"

    results: list[OutcomeResult]
    judge: JudgeIdentity | None = None


class ClaimsVerified(CaseEvent):
    """The answer was decomposed into atomic claims and each was checked."""

    topic_name: ClassVar[str] = "evaledger.case.claims_verified"
    added_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "mode",
            "template_id",
            "template_hash",
            "prompt",
            "raw_output",
            "error",
            "latency_ms",
            "usage",
            "cost_usd",
        }
    )

    claims: list[Claim]
    judge: JudgeIdentity | None = None
    mode: Literal["grounding", "attribution"] | None = Field(
        default=None, description="grounding: against the case's sources; attribution: per claim."
    )
    template_id: str | None = Field(default=None, description="Claim-check prompt template.")
    template_hash: str | None = Field(default=None, description="Content hash of the template.")
    prompt: str | None = Field(default=None, description="Rendered claim-check prompt.")
    raw_output: str | None = Field(default=None, description="The judge's reply, verbatim.")
    error: str | None = Field(
        default=None, description="Extraction error (no claims, unparseable) or empty answer."
    )
    latency_ms: float | None = Field(default=None, ge=0)
    usage: Usage | None = None
    cost_usd: float | None = Field(default=None, ge=0)


class StructuralCheckRecorded(CaseEvent):
    """A structural (non-LLM) check ran; inconclusive when its hook is missing."""

    topic_name: ClassVar[str] = "evaledger.case.structural_check_recorded"

    check: str = Field(min_length=1, description="Check / hook name.")
    status: CheckStatus
    evidence: str | None = None


class VerdictOverridden(CaseEvent):
    """A human corrected a verdict; the original stays in the history."""

    topic_name: ClassVar[str] = "evaledger.case.verdict_overridden"

    verdict_id: UUID
    metric_scores: list[MetricScore] | None = None
    expected_outcomes: list[OutcomeResult] | None = None
    passed: StrictBool | None = Field(default=None, description="Forced case pass/fail.")
    reason: str = Field(min_length=1)


class VerdictInvalidated(CaseEvent):
    """A human ruled a verdict out; it no longer counts, and stays in the history."""

    topic_name: ClassVar[str] = "evaledger.case.verdict_invalidated"

    verdict_id: UUID
    reason: str = Field(min_length=1)


class NamedScoresRecorded(CaseEvent):
    """A peer scorer's result (Inspect scorer, promptfoo grading, a reward).

    Named scores on their own scales, with the grader's answer, explanation, prompt and reply
    where it has them.
    """

    topic_name: ClassVar[str] = "evaledger.case.named_scores_recorded"

    scorer: str = Field(min_length=1, description="Who scored: the peer's scorer or grader name.")
    scores: list[NamedScore] = Field(min_length=1, description="The named scores it gave.")
    answer: str | None = Field(default=None, description="The answer the scorer extracted.")
    explanation: str | None = Field(default=None, description="The scorer's explanation.")
    prompt: str | None = Field(default=None, description="The grader's prompt, verbatim.")
    raw_output: str | None = Field(default=None, description="The grader's reply, verbatim.")
    grader: JudgeIdentity | None = Field(default=None, description="Model grader, if any.")
    metadata: JsonObject = Field(default_factory=dict, description="Everything else it kept.")
    usage: Usage | None = None
    cost_usd: float | None = Field(default=None, ge=0)


class CatalogueEvent(DomainEvent):
    """An event of a project's metric catalogue."""


class MetricRegistered(CatalogueEvent):
    """A custom metric was added to the project's catalogue."""

    topic_name: ClassVar[str] = "evaledger.catalogue.metric_registered"

    project: str = Field(min_length=1, description="Project whose catalogue this is.")
    definition: MetricDefinition


class IdempotencyKeyUsed(DomainEvent):
    """A client idempotency key was used to create something (a run, cases).

    Creation has no aggregate to remember the key on yet, so the key gets its own tiny
    aggregate, saved in the same transaction as what it created.
    """

    topic_name: ClassVar[str] = "evaledger.idempotency.key_used"

    scope: str = Field(min_length=1, description="The command the key was sent to.")
    result_ids: list[UUID] = Field(description="What the command created.")


class TokenScope(StrEnum):
    """What an API token may do; each scope includes the ones before it."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        """0 read, 1 write, 2 admin."""
        return list(TokenScope).index(self)

    def allows(self, needed: TokenScope) -> bool:
        """True when this scope includes `needed`."""
        return self.rank >= needed.rank


class TokenEvent(DomainEvent):
    """An event of an API token (tokens are facts too: who issued or revoked them, when)."""


class TokenIssued(TokenEvent):
    """An API token was issued for one project and scope; only its secret's hash is kept."""

    topic_name: ClassVar[str] = "evaledger.token.issued"

    token_id: str = Field(min_length=1, description="Public id, the part before the secret.")
    project: str = Field(min_length=1, description="The only project the token can touch.")
    scope: TokenScope = Field(description="read, write or admin.")
    name: str = Field(min_length=1, description="Whom the token stands for (its principal).")
    secret_sha256: str = Field(description="SHA-256 of the secret, hex.")


class TokenRevoked(TokenEvent):
    """An API token was revoked; it authenticates nothing from now on."""

    topic_name: ClassVar[str] = "evaledger.token.revoked"

    reason: str | None = None


EVENT_CLASSES: tuple[type[DomainEvent], ...] = (
    RunCreated,
    RunStarted,
    CasesAttached,
    RunCompleted,
    RunCanceled,
    RunFailed,
    BaselineApproved,
    BaselineRevoked,
    CaseOpened,
    TranscriptRecorded,
    ExecutionErrored,
    ExecutionCanceled,
    JudgeVerdictRecorded,
    OutcomeEvaluated,
    ClaimsVerified,
    StructuralCheckRecorded,
    VerdictOverridden,
    VerdictInvalidated,
    MetricRegistered,
    IdempotencyKeyUsed,
    TokenIssued,
    TokenRevoked,
    NamedScoresRecorded,
)
BY_TOPIC_NAME: dict[str, type[DomainEvent]] = {c.topic_name: c for c in EVENT_CLASSES}


def split_topic(topic: str) -> tuple[str, int]:
    """`evaledger.case.opened/v2` → (`evaledger.case.opened`, 2)."""
    name, _, version = topic.rpartition("/v")
    return name, int(version)


_PLAIN: frozenset[type] = frozenset({str, int, float, bool, type(None), UUID, datetime})
"""Types a python-mode dump returns unchanged (enums too)."""


@cache
def _stored_fields(cls: type[DomainEvent]) -> tuple[str, ...]:
    """The fields of the stored state, in the order `model_dump` gives them."""
    return tuple(n for n in cls.model_fields if n not in ("originator_id", "originator_version"))


@cache
def _field_specs(
    cls: type[DomainEvent],
) -> tuple[dict[str, Any], frozenset[str], frozenset[str], tuple[tuple[str, Any], ...]]:
    """What `trusted` needs of a class's fields, computed once.

    A template of every field in order with its default (None for those without one), the
    names, the required ones, and (name, factory) of those with a default factory.
    """
    fields = cls.model_fields
    template = {
        name: None if info.is_required() or info.default_factory is not None else info.default
        for name, info in fields.items()
    }
    required = frozenset(name for name, info in fields.items() if info.is_required())
    factories = tuple(
        (name, info.default_factory)
        for name, info in fields.items()
        if info.default_factory is not None
    )
    return template, frozenset(fields), required, factories


@cache
def _added_defaults(cls: type[DomainEvent]) -> dict[str, Any]:
    """Default of each added field (left out of the state when a value equals it)."""
    return {
        name: cls.model_fields[name].get_default(call_default_factory=True)
        for name in sorted(cls.added_fields)
    }


def encode_state(event: DomainEvent) -> bytes:
    """Canonical stored bytes of an event's state."""
    return orjson.dumps(event.state())


def stored_hash(topic: str, state: bytes) -> str:
    """Hash of one stored event (topic + state bytes), the link of the chain."""
    h = hashlib.sha256(topic.encode() + b"\n")
    h.update(state)  # not concatenated: no copy of the state
    return h.hexdigest()


def request_digest(body: Any) -> str:
    """Digest of a request body, for idempotent re-sends."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


CASE_DIGEST_V2 = "v2:"
"""Prefix of a bundle case's digest computed by `case_digest` (unprefixed: `request_digest` of
its JSON-mode dump, what cases recorded before it carry)."""


def case_digest(dumped: Any) -> str:
    """Digest (v2) of a bundle case from its python-mode dump, which its events' states share.

    v1 was `request_digest(case.model_dump(mode="json"))`: a second, JSON-mode dump of the whole
    case. Both sort keys, so equal content gives equal digests whatever the input's key order.
    """
    data = orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS)
    return CASE_DIGEST_V2 + hashlib.sha256(data).hexdigest()


def same_case_digest(stored: str | None, digest: str, v1: Callable[[], Any]) -> bool:
    """Whether a recorded case's digest matches a case whose v2 digest is `digest`.

    A case recorded before v2 carries a v1 digest: `v1()` gives the JSON-mode dump to compare it
    with (only computed then).
    """
    if stored is None:
        return False
    if stored.startswith(CASE_DIGEST_V2):
        return stored == digest
    return stored == request_digest(v1())
