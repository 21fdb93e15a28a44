"""Claim checks (FActScore, DESIGN §3.4 / §10): atomic claims of the answer, each labelled.

The judge decomposes the agent's answer into atomic claims and labels each supported /
unsupported / contradicted.
`grounding` checks every claim against all of the case's sources (the agent's system prompt and
every tool result); `attribution` makes the judge name the one source each claim rests on and
checks it against that source only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from jinja2 import Environment, StrictUndefined

from evaledger.domain.events import Claim, ClaimSupport, Role, Turn
from evaledger.judging.prompt import CaseToJudge, RenderedPrompt, strip_fence, transcript_lines

ClaimMode = Literal["grounding", "attribution"]
MODES: tuple[ClaimMode, ...] = ("grounding", "attribution")
TEMPLATE_ID = "factscore-claims/v1"

SYSTEM_TEMPLATE = """\
You check the factual claims an AI agent made in a conversation.

## Steps
1. Decompose the agent's answer (its assistant turns, listed under "Answer to check") into \
atomic claims: short, self-contained statements that each carry one piece of information. \
Greetings, questions, offers and promises state no fact and are not claims.
{% if mode == "grounding" %}
2. Label each claim against all of the sources below: `supported` when the sources state or \
directly imply it, `unsupported` when they neither state nor contradict it, `contradicted` when \
they say otherwise. Set `source` to the source that decided the label, or null when none did.
{% else %}
2. For each claim, name the one source it rests on in `source` (for example "turn 2 \
(tool → lookup_order)" or "system prompt"), then label the claim against that source only: \
`supported` when it states or directly implies the claim, `unsupported` when it does not, \
`contradicted` when it says otherwise. A claim that rests on no source is `unsupported` with \
`source` null.
{% endif %}
3. Judge only what the sources say, never your own knowledge of the world.

## Output format
Return only a JSON object: {"claims": [{"claim": "…", "support": "supported", "source": "…"}]}
"""

USER_TEMPLATE = """\
## Sources
Agent system prompt:
{{ system_prompt if system_prompt else "(not captured for this run)" }}

Tool results:
{% for line in tool_results %}
{{ line }}
{% else %}
(none)
{% endfor %}

## Conversation
{% for line in transcript %}
{{ line }}
{% endfor %}

## Answer to check
{% for line in answer %}
{{ line }}
{% endfor %}
"""

_ENV = Environment(
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    autoescape=False,  # noqa: S701 - plain text for a model, not HTML
)
_SYSTEM = _ENV.from_string(SYSTEM_TEMPLATE)
_USER = _ENV.from_string(USER_TEMPLATE)
TEMPLATE_HASH = hashlib.sha256(
    (TEMPLATE_ID + "\n" + SYSTEM_TEMPLATE + "\n" + USER_TEMPLATE).encode()
).hexdigest()

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "claims": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "claim": {"type": "string"},
                    "support": {"type": "string", "enum": [s.value for s in ClaimSupport]},
                    "source": {"type": ["string", "null"]},
                },
                "required": ["claim", "support", "source"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["claims"],
    "additionalProperties": False,
}


def answer_lines(turns: Sequence[Turn]) -> list[str]:
    """The agent's answer: every assistant turn with text, with its index."""
    return [
        f"Turn {i}: {t.content.strip()}"
        for i, t in enumerate(turns)
        if t.role is Role.ASSISTANT and t.content and t.content.strip()
    ]


def render_claims(case: CaseToJudge, mode: str) -> RenderedPrompt:
    """The claim-check prompt of one case."""
    lines = transcript_lines(case.turns)
    tool_results = [line for line in lines if line.split(" [", 1)[-1].startswith("tool")]
    system = _SYSTEM.render(mode=mode)
    user = _USER.render(
        system_prompt=case.agent.system_prompt,
        tool_results=tool_results,
        transcript=lines,
        answer=answer_lines(case.turns),
    )
    return RenderedPrompt(
        system=system,
        user=user,
        schema=SCHEMA,
        metrics=(),
        outcomes=(),
        template_id=TEMPLATE_ID,
        template_hash=TEMPLATE_HASH,
    )


@dataclass
class ParsedClaims:
    """Claims, or why there are none (an extraction error, excluded from scores)."""

    claims: list[Claim] = field(default_factory=list)
    error: str | None = None


def parse_claims(raw: str) -> ParsedClaims:
    """Parse a claim-check reply; unparseable or zero claims is an extraction error."""
    try:
        data = orjson.loads(strip_fence(raw))
    except orjson.JSONDecodeError as e:
        return ParsedClaims(error=f"extraction error: unparseable reply: {e}")
    items = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return ParsedClaims(error="extraction error: no `claims` list in the reply")
    claims: list[Claim] = []
    for i, item in enumerate(items):
        text = item.get("claim") if isinstance(item, dict) else None
        support = item.get("support") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            return ParsedClaims(error=f"extraction error: claims[{i}] has no claim text")
        try:
            label = ClaimSupport(str(support).strip().lower())
        except ValueError:
            return ParsedClaims(error=f"extraction error: claims[{i}]: support {support!r}")
        source = item.get("source")
        claims.append(
            Claim(
                claim=text.strip(),
                support=label,
                source=source if isinstance(source, str) and source.strip() else None,
            )
        )
    if not claims:
        return ParsedClaims(error="extraction error: the judge found no claims")
    return ParsedClaims(claims=claims)
