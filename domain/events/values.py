"""The value objects events carry (frozen, like the events themselves)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from evaledger.domain.model import FrozenModel
from evaledger.domain.spec import Severity
from evaledger.domain.types import Amount, Count, JsonObject, SignedAmount


class Value(FrozenModel):
    """Base of the value objects events carry."""


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


class ScoreLabel(Value):
    """A reviewer's reading of one of the case's named scores (its scorer's verdict, relabelled)."""

    score: str = Field(min_length=1, description="The named score, as the case records it.")
    value: float = Field(
        allow_inf_nan=False, description="The reviewer's reading (binary scores: 1 pass, 0 fail)."
    )


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
