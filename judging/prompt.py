"""The Connexity judge prompt (DESIGN §10): rendering, the strict output schema, and parsing.

One system and one user message per case. The templates are Jinja2 text kept in this module; the
template id names the prompt's version and its content hash changes with any edit to the text,
so every stored verdict says exactly which prompt produced it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from jinja2 import Environment, StrictUndefined

from evaledger.domain.events import (
    AgentSnapshot,
    MetricScore,
    OutcomeResult,
    ParseStatus,
    TestCaseSnapshot,
    Turn,
)
from evaledger.domain.metrics import MetricDefinition, ScoreType

TEMPLATE_ID = "connexity-judge/v1"
MAX_SCORE = 5

SYSTEM_TEMPLATE = """\
You are an expert evaluator of conversations between a user and an AI agent (chat or voice). \
You judge one completed transcript against the metrics below and return one JSON object.

## Scoring rules
- Use the full range of each scale: 5 is flawless, 0 is a complete failure. Reserve 5 for \
behaviour with no issue at all.
- Score every metric independently: a problem counts against the metric it belongs to, not \
against every metric.
- Cite the turn indices (the numbers after "Turn") where you observed each issue.
- Be strict but fair: judge what the transcript shows, not what the agent may have meant.
- Be conservative without evidence: when the transcript does not show the behaviour a rubric \
level needs, do not award that level.

## Output fields per metric
Each metric is an object with these fields:
- `score` (scored metrics): an integer from 0 to 5 following the metric's rubric.
- `passed` (binary metrics): true or false.
- `justification`: one or two sentences naming the evidence, with turn indices.
- `failure_code`: a free-form snake_case label of the failure mode (for example \
wrong_tool_selected, hallucinated_result, missing_confirmation); null when the metric is \
acceptable or better (3 or more, or passed).
- `turns`: the integer turn indices where the issue was observed; an empty list if there is no \
issue.

## Metrics
{% for m in metrics %}

### {{ m.display_name }} (`{{ m.name }}`) — \
{% if m.score_type == "binary" %}Binary (pass/fail){% else %}Scored (0-5 integer){% endif %}

{{ m.description }}
{{ m.rubric }}
{% endfor %}

## Output format
Return only a JSON object, no prose around it, with one key per metric id above\
{% if outcomes %} and the key `expected_outcomes`{% endif %}:
{{ example }}
"""

USER_TEMPLATE = """\
## Test case context
Test case: {{ case_name }}
Expected outcomes:
{% for o in outcomes %}
{{ loop.index }}. {{ o }}
{% else %}
(none)
{% endfor %}

Agent system prompt:
{{ system_prompt if system_prompt else "(not captured for this run)" }}

Agent tools:
{{ tools if tools else "(not captured)" }}
{% if override %}

## Test case-specific evaluation emphasis
{{ override }}
{% endif %}
{% if outcomes %}

## Expected outcomes
For each expected outcome above, decide from the transcript whether it was achieved. Return \
`expected_outcomes` as a list with one entry per outcome, in the order listed, each with the \
outcome's `statement` copied verbatim, `passed` (true or false) and a `justification` citing \
turn indices. An outcome the transcript does not show as achieved has not passed.
{% endif %}

## Transcript
{% for line in transcript %}
{{ line }}
{% endfor %}

## Metrics to score
{{ metric_ids }}
"""

# Plain text for a model, not HTML: escaping would corrupt transcripts ("<", "&").
_ENV = Environment(
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    autoescape=False,  # noqa: S701
)
_SYSTEM = _ENV.from_string(SYSTEM_TEMPLATE)
_USER = _ENV.from_string(USER_TEMPLATE)
TEMPLATE_HASH = hashlib.sha256(
    (TEMPLATE_ID + "\n" + SYSTEM_TEMPLATE + "\n" + USER_TEMPLATE).encode()
).hexdigest()


@dataclass(frozen=True)
class CaseToJudge:
    """What the judge sees of one case: the test case, the agent snapshot and the transcript."""

    test_case: TestCaseSnapshot
    agent: AgentSnapshot
    turns: Sequence[Turn]


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered judge prompt with the output schema it asks for."""

    system: str
    user: str
    schema: dict[str, Any]
    metrics: tuple[MetricDefinition, ...]
    outcomes: tuple[str, ...]
    template_id: str = TEMPLATE_ID
    template_hash: str = TEMPLATE_HASH

    @property
    def text(self) -> str:
        """The prompt as stored in the verdict: both messages, labelled."""
        return f"[system]\n{self.system}\n[user]\n{self.user}"


def transcript_lines(turns: Sequence[Turn]) -> list[str]:
    """`Turn {i} [{role}]: …`; tool results as `[tool → name]`, assistant tool calls listed."""
    call_names = {c.id: c.name for t in turns for c in t.tool_calls if c.id is not None}
    lines: list[str] = []
    for i, turn in enumerate(turns):
        role = turn.role.value
        if role == "tool":
            name = call_names.get(turn.tool_call_id or "")
            role = f"tool → {name}" if name else "tool"
        lines.append(f"Turn {i} [{role}]: {turn.content or ''}".rstrip())
        for call in turn.tool_calls:
            args = orjson.dumps(call.arguments, option=orjson.OPT_SORT_KEYS).decode()
            lines.append(f"  tool call: {call.name}({args})")
    return lines


def _tools_json(agent: AgentSnapshot) -> str:
    if not agent.tools:
        return ""
    return orjson.dumps(
        [t.model_dump(mode="json", exclude_none=True) for t in agent.tools],
        option=orjson.OPT_INDENT_2,
    ).decode()


def _metric_example(m: MetricDefinition) -> dict[str, Any]:
    verdict: dict[str, Any] = {"passed": True} if m.score_type is ScoreType.BINARY else {"score": 4}
    return {**verdict, "justification": "…", "failure_code": None, "turns": []}


def output_schema(metrics: Sequence[MetricDefinition], with_outcomes: bool) -> dict[str, Any]:
    """The strict JSON schema of the reply: one property per metric (+ `expected_outcomes`).

    Every property is required and no other is allowed (OpenAI strict structured output rules);
    numeric bounds are left to the parser, which truncates and clamps (DESIGN §3.1).
    """
    properties: dict[str, Any] = {}
    for m in metrics:
        value: dict[str, Any] = (
            {"type": "boolean"} if m.score_type is ScoreType.BINARY else {"type": "integer"}
        )
        key = "passed" if m.score_type is ScoreType.BINARY else "score"
        properties[m.name] = {
            "type": "object",
            "properties": {
                key: value,
                "justification": {"type": "string"},
                "failure_code": {"type": ["string", "null"]},
                "turns": {"type": "array", "items": {"type": "integer"}},
            },
            "required": [key, "justification", "failure_code", "turns"],
            "additionalProperties": False,
        }
    if with_outcomes:
        properties["expected_outcomes"] = {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "statement": {"type": "string"},
                    "passed": {"type": "boolean"},
                    "justification": {"type": "string"},
                },
                "required": ["statement", "passed", "justification"],
                "additionalProperties": False,
            },
        }
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def render_user(case: CaseToJudge, metrics: Sequence[MetricDefinition]) -> str:
    """The user message: the case's context, its expected outcomes and the transcript."""
    return _USER.render(
        case_name=case.test_case.name or case.test_case.key,
        outcomes=tuple(o.statement for o in case.test_case.expected_outcomes),
        system_prompt=case.agent.system_prompt,
        tools=_tools_json(case.agent),
        override=case.test_case.evaluation_criteria_override,
        transcript=transcript_lines(case.turns),
        metric_ids=", ".join(m.name for m in metrics),
    )


def render(case: CaseToJudge, metrics: Sequence[MetricDefinition]) -> RenderedPrompt:
    """The system and user messages for one case and a metric selection (catalogue order kept)."""
    outcomes = tuple(o.statement for o in case.test_case.expected_outcomes)
    example: dict[str, Any] = {m.name: _metric_example(m) for m in metrics}
    if outcomes:
        example["expected_outcomes"] = [{"statement": "…", "passed": True, "justification": "…"}]
    system = _SYSTEM.render(
        metrics=[
            {
                "name": m.name,
                "display_name": m.display_name,
                "description": m.description,
                "rubric": m.rubric,
                "score_type": m.score_type.value,
            }
            for m in metrics
        ],
        outcomes=bool(outcomes),
        example=orjson.dumps(example, option=orjson.OPT_INDENT_2).decode(),
    )
    return RenderedPrompt(
        system=system,
        user=render_user(case, metrics),
        schema=output_schema(metrics, bool(outcomes)),
        metrics=tuple(metrics),
        outcomes=outcomes,
    )


# ---------------------------------------------------------------------------------------------
# Parsing (DESIGN §3.1)


@dataclass
class ParsedReply:
    """What a reply amounts to: scores and outcome results, or an error with its parse status."""

    status: ParseStatus
    metric_scores: list[MetricScore] = field(default_factory=list)
    expected_outcomes: list[OutcomeResult] = field(default_factory=list)
    error: str | None = None


class BlockError(ValueError):
    """A metric block is missing or invalid."""


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


def parse_score(value: Any, metric: str, low: int = 0, high: int = MAX_SCORE) -> int:
    """A judge's score truncated to int and clamped to low..high (§3.1); a bool is no score.

    An integer of any size is clamped (10**400 is 5), never turned into a float on the way; a
    non-finite number (1e400 reads as infinity) is no score.
    """
    if isinstance(value, bool) or value is None:
        raise BlockError(f"metric {metric}: score {_shown(value)} is not a number")
    if isinstance(value, int):
        return max(low, min(high, value))
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise BlockError(f"metric {metric}: score {_shown(value)} is not a number") from None
    if not isinstance(value, float) or not math.isfinite(value):
        raise BlockError(f"metric {metric}: score {_shown(value)} is not a number")
    return max(low, min(high, int(value)))


def _shown(value: Any, limit: int = 80) -> str:
    """A judge's value as an error message quotes it: its repr, cut to `limit` characters."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for repr (sys.get_int_max_str_digits)
        text = f"<an integer of {value.bit_length()} bits>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_turns(value: Any, turn_count: int) -> list[int]:
    """The valid turn indices, sorted; ones outside the transcript (miscounted) are dropped."""
    if not isinstance(value, list):
        return []
    return sorted(
        {t for t in value if isinstance(t, int) and not isinstance(t, bool) and 0 <= t < turn_count}
    )


def block_fields(block: Mapping[str, Any], metric: str, turn_count: int) -> dict[str, Any]:
    """A metric block's fields besides its value: justification, failure code, turns (§3.1)."""
    justification = block.get("justification")
    return {
        "metric": metric,
        "justification": justification if isinstance(justification, str) else None,
        "failure_code": parse_failure_code(block.get("failure_code"), metric),
        "turns": parse_turns(block.get("turns"), turn_count),
    }


def parse_failure_code(value: Any, metric: str) -> str | None:
    """A block's `failure_code`: a label, or null (§3.1: "failure_code empty → null").

    Empty or whitespace-only → null (no label). Anything but a string or null breaks the output
    schema the judge was given (`"type": ["string", "null"]`): the block is invalid, the case an
    error verdict, as for any invalid block — never a silent null.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise BlockError(f"metric {metric}: failure_code {_shown(value)} is not a string or null")
    return value if value.strip() else None


def _metric(block: Any, m: MetricDefinition, turn_count: int) -> MetricScore:
    if not isinstance(block, Mapping):
        raise BlockError(f"missing metric block {m.name}")
    common = block_fields(block, m.name, turn_count)
    if m.score_type is ScoreType.BINARY:
        passed = block.get("passed")
        if not isinstance(passed, bool):
            raise BlockError(f"metric {m.name}: passed {passed!r} is not true or false")
        return MetricScore(passed=passed, **common)
    return MetricScore(score=parse_score(block.get("score"), m.name), **common)


def parse_outcomes(value: Any, outcomes: Sequence[str]) -> list[OutcomeResult]:
    """One result per expected outcome, in order; a missing or invalid one is a BlockError."""
    if not isinstance(value, list) or len(value) != len(outcomes):
        raise BlockError(
            f"expected_outcomes: expected {len(outcomes)} results, "
            f"got {len(value) if isinstance(value, list) else 'none'}"
        )
    # Every result of a repeated statement is kept: the k-th occurrence of a statement takes the
    # judge's k-th result with that statement (one dict per statement would let a later passing
    # duplicate overwrite a failing one). A judge that rephrased a statement is matched by
    # position.
    by_statement: dict[str, list[Any]] = {}
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or item.get("statement") is None:
            continue
        if not isinstance(item["statement"], str):
            # The output schema says a string: a list or an object is a malformed result.
            shown = _shown(item["statement"])
            raise BlockError(f"expected_outcomes[{i}]: statement {shown} is not a string")
        by_statement.setdefault(item["statement"], []).append(item)
    seen: dict[str, int] = {}
    results = []
    for i, statement in enumerate(outcomes):
        occurrence = seen[statement] = seen.get(statement, -1) + 1
        matching = by_statement.get(statement, [])
        item = matching[occurrence] if occurrence < len(matching) else value[i]
        passed = item.get("passed") if isinstance(item, Mapping) else None
        if not isinstance(passed, bool):
            raise BlockError(f"expected_outcomes[{i}]: passed {passed!r} is not true or false")
        justification = item.get("justification") if isinstance(item, Mapping) else None
        results.append(
            OutcomeResult(
                statement=statement,
                passed=passed,
                justification=justification if isinstance(justification, str) else None,
            )
        )
    return results


def strip_fence(raw: str) -> str:
    """The JSON inside a Markdown code fence, or the reply as it is."""
    fenced = _FENCE.match(raw)
    return fenced.group(1) if fenced else raw


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _valid_text(value: Any) -> bool:
    """Every string in the decoded value is valid Unicode (no lone surrogate)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def load_reply(raw: str) -> dict[str, Any] | ParsedReply:
    """A reply's JSON object, or the unparseable reply's `ParsedReply` (an error verdict).

    orjson refuses a number it cannot hold as a double (an integer of 400 digits); the standard
    library reads it as the integer it is, which `parse_score` clamps like any other (§3.1).
    That second reading refuses what orjson would (NaN, Infinity, a lone surrogate).
    """
    text = strip_fence(raw)
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        if "number" not in str(e):
            return ParsedReply(ParseStatus.UNPARSEABLE, error=f"unparseable reply: {e}")
        try:
            data = json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            return ParsedReply(ParseStatus.UNPARSEABLE, error=f"unparseable reply: {e}")
        if not _valid_text(data):
            return ParsedReply(ParseStatus.UNPARSEABLE, error="unparseable reply: invalid text")
    if not isinstance(data, dict):
        return ParsedReply(ParseStatus.UNPARSEABLE, error="unparseable reply: not a JSON object")
    return data


def parse_reply(raw: str, prompt: RenderedPrompt, turn_count: int) -> ParsedReply:
    """Parse a raw reply under §3.1: unparseable or a missing/invalid block → error verdict.

    Never raises: whatever the reply holds, the case gets a verdict or an error verdict.
    """
    data = load_reply(raw)
    if isinstance(data, ParsedReply):
        return data

    def read() -> ParsedReply:
        scores = [_metric(data.get(m.name), m, turn_count) for m in prompt.metrics]
        outcomes = (
            parse_outcomes(data.get("expected_outcomes"), prompt.outcomes)
            if prompt.outcomes
            else []
        )
        return ParsedReply(ParseStatus.PARSED, metric_scores=scores, expected_outcomes=outcomes)

    return guarded(read)


def guarded(read: Callable[[], ParsedReply]) -> ParsedReply:
    """`read()`, or the error verdict's `ParsedReply` for what reading a reply's blocks raised.

    A `BlockError` names the block; anything else a malformed reply could still raise (a value
    the event model refuses) is caught too, so that one bad reply never stops a pass.
    """
    try:
        return read()
    except BlockError as e:
        return ParsedReply(ParseStatus.MISSING_METRICS, error=str(e))
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError) as e:
        error = f"invalid reply: {type(e).__name__}: {e}"
        return ParsedReply(ParseStatus.MISSING_METRICS, error=error[:500])
