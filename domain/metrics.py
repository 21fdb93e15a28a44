"""The metric catalogue: the 9 built-in judge metrics of the Connexity criteria, with rubrics."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from evaledger.domain.model import FrozenModel


class Tier(StrEnum):
    """What a metric looks at."""

    EXECUTION = "execution"
    KNOWLEDGE = "knowledge"
    PROCESS = "process"
    DELIVERY = "delivery"


class ScoreType(StrEnum):
    """A scored metric takes integers 0-5; a binary one takes pass/fail (5 or 0)."""

    SCORED = "scored"
    BINARY = "binary"


class MetricDefinition(FrozenModel):
    """One metric a judge can score."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="Stable metric id.")
    display_name: str = Field(description="Human name shown in reports.")
    description: str = Field(description="What the metric measures, in one sentence.")
    tier: Tier = Field(description="Execution, knowledge, process or delivery.")
    default_weight: float = Field(ge=0, description="Weight used when selected without one.")
    score_type: ScoreType = Field(description="scored (0-5) or binary (pass/fail).")
    rubric: str = Field(description="The scoring rubric the judge is given.")
    include_in_defaults: bool = Field(description="Part of the default 8-metric selection.")


def _rubric(*levels: str) -> str:
    return "\n".join(f"{5 - i}: {text}" for i, text in enumerate(levels))


BUILTIN_METRICS: tuple[MetricDefinition, ...] = (
    MetricDefinition(
        name="tool_routing",
        display_name="Tool Routing",
        description="Correct tool names and call sequence.",
        tier=Tier.EXECUTION,
        default_weight=0.15,
        score_type=ScoreType.SCORED,
        include_in_defaults=True,
        rubric=_rubric(
            "All expected tools called in correct sequence. No unnecessary calls.",
            "All critical tools called. Minor sequence deviation or one redundant call.",
            "One expected tool missed OR one wrong tool called, but core flow mostly intact.",
            "Multiple tool errors. Flow significantly impacted but partially functional.",
            "Most tool calls incorrect or missing. Only 1 of N expected tools called.",
            "No tools called when required, or entirely wrong tool set used.",
        ),
    ),
    MetricDefinition(
        name="parameter_extraction",
        display_name="Parameter Extraction",
        description="Argument values correctly extracted from conversation for tools.",
        tier=Tier.EXECUTION,
        default_weight=0.15,
        score_type=ScoreType.SCORED,
        include_in_defaults=True,
        rubric=_rubric(
            "All parameters correct. Values accurately extracted from user input.",
            "All critical parameters correct. One minor parameter slightly off.",
            "One critical parameter wrong or missing, affecting tool outcome.",
            "Multiple parameter errors. Tool may have returned wrong results or failed.",
            "Most parameters fabricated or missing. Values not grounded in conversation.",
            "No parameters extracted from conversation. All values fabricated or empty.",
        ),
    ),
    MetricDefinition(
        name="result_interpretation",
        display_name="Result Interpretation",
        description="Tool output accurately reflected in agent response.",
        tier=Tier.EXECUTION,
        default_weight=0.15,
        score_type=ScoreType.SCORED,
        include_in_defaults=True,
        rubric=_rubric(
            "Tool output accurately and completely reflected. Errors handled gracefully.",
            "Tool output mostly accurate. Minor omission that doesn't mislead user.",
            "One meaningful inaccuracy in conveying tool results.",
            "Significant misrepresentation of tool output.",
            "Tool output largely ignored or contradicted.",
            "Tool output completely ignored. No connection to what the tool returned.",
        ),
    ),
    MetricDefinition(
        name="grounding_fidelity",
        display_name="Grounding Fidelity",
        description="Every agent claim traceable to context, tools, or business rules.",
        tier=Tier.KNOWLEDGE,
        default_weight=0.125,
        score_type=ScoreType.SCORED,
        include_in_defaults=True,
        rubric=_rubric(
            "Every specific claim grounded. Appropriate hedging for uncertain info.",
            "All critical claims grounded. One minor unverifiable statement.",
            "One meaningful ungrounded claim that could mislead user.",
            "Multiple ungrounded claims. Mix of fabricated facts and invented policies.",
            "Most claims ungrounded. Agent is largely confabulating.",
            "Response is entirely fabricated with no connection to provided context.",
        ),
    ),
    MetricDefinition(
        name="instruction_compliance",
        display_name="Instruction Compliance",
        description="Agent follows explicit rules from system prompt and business rules.",
        tier=Tier.KNOWLEDGE,
        default_weight=0.125,
        score_type=ScoreType.SCORED,
        include_in_defaults=True,
        rubric=_rubric(
            "All instructions followed precisely. Stayed within role/scope.",
            "All critical instructions followed. One minor deviation.",
            "One meaningful instruction violated. Core functionality intact.",
            "Multiple instructions violated. Partially outside defined boundaries.",
            "Most instructions ignored. Largely operating outside its defined role.",
            "Agent completely disregards system prompt and business rules.",
        ),
    ),
    MetricDefinition(
        name="information_gathering",
        display_name="Information Gathering",
        description="Required info collected before action; previously stated info reused.",
        tier=Tier.PROCESS,
        default_weight=0.10,
        score_type=ScoreType.SCORED,
        include_in_defaults=True,
        rubric=_rubric(
            "All required info collected before action. No redundant questions.",
            "All critical info collected. One redundant question or minor missed detail.",
            "One required field missing before action, or forgot one previously stated detail.",
            "Multiple gaps in info collection. Acted on incomplete data.",
            "Most required info not collected. Acted with largely incomplete data.",
            "No info gathering attempted.",
        ),
    ),
    MetricDefinition(
        name="conversation_management",
        display_name="Conversation Management",
        description="Ambiguity handling, error recovery, and conversation closure.",
        tier=Tier.PROCESS,
        default_weight=0.10,
        score_type=ScoreType.SCORED,
        include_in_defaults=True,
        rubric=_rubric(
            "Ambiguity clarified. Errors acknowledged and corrected. Proper goodbye.",
            "Good management overall. One minor missed opportunity.",
            "One meaningful management failure.",
            "Multiple management failures. Conversation disjointed.",
            "Conversation poorly managed throughout.",
            "No conversation management. Agent froze or produced incoherent sequence.",
        ),
    ),
    MetricDefinition(
        name="response_delivery",
        display_name="Response Delivery",
        description="Concise, natural, TTS-friendly, non-repetitive responses.",
        tier=Tier.DELIVERY,
        default_weight=0.10,
        score_type=ScoreType.SCORED,
        include_in_defaults=True,
        rubric=_rubric(
            "All responses concise. Natural phrasing. No TTS-hostile formatting.",
            "Mostly natural and concise. One minor issue.",
            "One meaningful delivery issue (e.g. 2+ questions in one turn).",
            "Multiple delivery issues. Robotic or verbose.",
            "Pervasive delivery problems.",
            "Responses entirely unsuitable for voice delivery.",
        ),
    ),
    MetricDefinition(
        name="task_completion",
        display_name="Task Completion",
        description="Whether the agent completed the primary task from expected_outcomes.",
        tier=Tier.EXECUTION,
        default_weight=0.0,
        score_type=ScoreType.BINARY,
        include_in_defaults=False,
        rubric="pass: the primary task from expected_outcomes was completed.\nfail: it was not.",
    ),
)

BUILTIN_BY_NAME: dict[str, MetricDefinition] = {m.name: m for m in BUILTIN_METRICS}
DEFAULT_METRIC_NAMES: tuple[str, ...] = tuple(
    m.name for m in BUILTIN_METRICS if m.include_in_defaults
)

SCORE_LABELS: tuple[str, ...] = ("critical_fail", "fail", "poor", "acceptable", "good", "excellent")


def score_label(score: int, score_type: ScoreType) -> str:
    """Descriptive label of a metric score (labels never gate anything)."""
    if score_type is ScoreType.BINARY:
        return "pass" if score >= 5 else "fail"
    return SCORE_LABELS[max(0, min(5, score))]
