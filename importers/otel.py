"""One OpenTelemetry trace (its spans as `importers.otlp` stores them) → one case of an online run.

Pure mapping, no I/O. The trace's spans are read in start order:

- a model call (GenAI semantic conventions: `gen_ai.operation.name` chat / text_completion /
  generate_content, or messages in `gen_ai.input.messages` / `gen_ai.output.messages`, in the
  older span events `gen_ai.*.message` / `gen_ai.choice`, or as `gen_ai.prompt.N.*` /
  `gen_ai.completion.N.*`; OpenInference: span kind LLM, `llm.input_messages.N.*`,
  `llm.output_messages.N.*`) adds the input messages the transcript does not hold yet, then its
  output as an assistant turn whose latency is the span's duration and whose usage is the span's
  tokens (`gen_ai.usage.input_tokens` / `output_tokens`, `llm.token_count.*`);
- a tool execution (`gen_ai.operation.name` execute_tool, OpenInference span kind TOOL) adds a
  tool turn answering its call id, with the tool's duration, unless the next model call's input
  holds that result already.

The agent is `gen_ai.agent.name` (any span, the root's first) or the root's resource
`service.name`; its version `gen_ai.agent.version` or `service.version`. The model (response model
first) and provider name the case's tags (`model:…`, `provider:…`). The case's key is the trace id,
its times the root span's; a root span whose status is ERROR makes an errored case. Attributes
that map to nothing stay in the trace's recorded spans (`TraceSpansReceived`), never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import orjson

from evaledger.domain.bundle import BundleCase, BundleCaseStatus, BundleError
from evaledger.domain.events import Role, TestCaseSnapshot, ToolCall, Turn, Usage

Span = Mapping[str, Any]
UNVERSIONED = "unversioned"
UNKNOWN_AGENT = "unknown_service"
STATUS_ERROR = 2
_LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
_NAME_CHARS = 80


@dataclass(frozen=True)
class MappedTrace:
    """A trace read as a case, with the agent it names and the UTC day it ended on."""

    agent: str
    version: str
    provider: str | None
    model: str | None
    day: date
    case: BundleCase


def root_span(spans: Sequence[Span]) -> Span | None:
    """The trace's root: its span without a parent (the earliest, if several); else None."""
    roots = [s for s in spans if not s.get("parent_span_id")]
    return min(roots, key=lambda s: s["start_ns"]) if roots else None


def instant(ns: int) -> datetime:
    """A span time (ns since the epoch) as a UTC datetime (microseconds)."""
    return datetime.fromtimestamp(ns // 1000 / 1e6, UTC)


def map_trace(trace_id: str, spans: Sequence[Span]) -> MappedTrace:
    """The case of a complete trace (it has a root span)."""
    root = root_span(spans)
    if root is None:
        raise ValueError(f"trace {trace_id} has no root span")
    ordered = sorted(spans, key=lambda s: (s["start_ns"], s["end_ns"]))
    unreadable = None
    try:
        transcript, usage, models, providers = _transcript(ordered)
    except (ValueError, TypeError, KeyError) as e:
        # Never a poison trace: its spans are recorded as received; the case says why it has
        # no transcript.
        transcript, usage, models, providers = [], None, [], []
        unreadable = f"the spans could not be read as a conversation: {str(e)[:300]}"
    agent = _first(ordered, root, "gen_ai.agent.name") or str(
        root["resource"].get("service.name") or UNKNOWN_AGENT
    )
    version = _first(ordered, root, "gen_ai.agent.version") or str(
        root["resource"].get("service.version") or UNVERSIONED
    )
    model = models[0] if models else None
    provider = providers[0] if providers else None
    tags = [f"model:{m}" for m in dict.fromkeys(models)]
    tags += [f"provider:{p}" for p in dict.fromkeys(providers)]
    errored = root["status"]["code"] == STATUS_ERROR or unreadable is not None
    case = BundleCase(
        test_case=TestCaseSnapshot(
            key=trace_id, name=root["name"] or None, tags=tags, scenario=root["name"] or None
        ),
        status=BundleCaseStatus.ERRORED if errored else BundleCaseStatus.COMPLETED,
        error=BundleError(
            message=unreadable
            or root["status"]["message"]
            or f"span {root['name']!r} ended with an error",
            kind="harness" if unreadable else "agent",
        )
        if errored
        else None,
        transcript=transcript,
        usage=usage,
        started_at=instant(root["start_ns"]),
        ended_at=instant(max(root["end_ns"], root["start_ns"])),
        subject=_subject(ordered, root),
    )
    return MappedTrace(
        agent=agent[:_NAME_CHARS],
        version=version[:_NAME_CHARS],
        provider=provider,
        model=model,
        day=instant(root["end_ns"]).date(),
        case=case,
    )


SUBJECT_ATTRIBUTES = ("enduser.id", "user.id")
"""The span attributes naming a trace's data subject, in order (OTel semantic conventions:
`enduser.id`, since renamed `user.id`); the root first, then the spans in time order."""


def _subject(spans: Iterable[Span], root: Span) -> str | None:
    for key in SUBJECT_ATTRIBUTES:
        value = _first(spans, root, key)
        if value is not None and value.strip():
            return value[:_SUBJECT_CHARS]
    return None


_SUBJECT_CHARS = 200


def _first(spans: Iterable[Span], root: Span, key: str) -> str | None:
    for span in (root, *spans):
        value = span["attributes"].get(key)
        if isinstance(value, str) and value:
            return value
    return None


# -- the transcript ----------------------------------------------------------------------------


def _transcript(spans: Sequence[Span]) -> tuple[list[Turn], Usage | None, list[str], list[str]]:
    turns: list[Turn] = []
    models: list[str] = []
    providers: list[str] = []
    prompt = completion = 0
    counted = False
    pending_tools: list[Turn] = []
    for span in spans:
        attrs = span["attributes"]
        if _is_llm(span):
            inputs = _input_messages(span)
            answered = {t.tool_call_id for t in inputs if t.role is Role.TOOL}
            turns.extend(t for t in pending_tools if t.tool_call_id not in answered)
            timed = {t.tool_call_id: t.latency_ms for t in pending_tools}
            pending_tools = []
            turns.extend(
                t.model_copy(update={"latency_ms": timed[t.tool_call_id]})
                if t.role is Role.TOOL and t.latency_ms is None and t.tool_call_id in timed
                else t
                for t in _new_inputs(turns, inputs)
            )
            tokens = _usage(attrs)
            if tokens is not None:
                counted = True
                prompt += tokens.prompt_tokens
                completion += tokens.completion_tokens
            latency = (span["end_ns"] - span["start_ns"]) / 1e6
            for i, out in enumerate(_output_messages(span)):
                first = i == 0
                turns.append(
                    out.model_copy(
                        update={
                            "latency_ms": latency if first else None,
                            "usage": tokens if first else None,
                        }
                    )
                )
            models.extend(_text_attrs(attrs, "gen_ai.response.model", "gen_ai.request.model"))
            models.extend(_text_attrs(attrs, "llm.model_name"))
            providers.extend(_text_attrs(attrs, "gen_ai.provider.name", "gen_ai.system"))
            providers.extend(_text_attrs(attrs, "llm.provider", "llm.system"))
        elif _is_tool(span):
            pending_tools.append(_tool_turn(span))
    turns.extend(pending_tools)
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion) if counted else None
    return turns, usage, models[:1] + [m for m in models[1:] if m != models[0]], providers


def _text_attrs(attrs: Mapping[str, Any], *keys: str) -> list[str]:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return [value]
    return []


def _is_llm(span: Span) -> bool:
    attrs = span["attributes"]
    if attrs.get("gen_ai.operation.name") in _LLM_OPERATIONS:
        return True
    if attrs.get("openinference.span.kind") == "LLM":
        return True
    return "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs


def _is_tool(span: Span) -> bool:
    attrs = span["attributes"]
    return bool(
        attrs.get("gen_ai.operation.name") == "execute_tool"
        or attrs.get("openinference.span.kind") == "TOOL"
    )


def _new_inputs(turns: Sequence[Turn], inputs: Sequence[Turn]) -> list[Turn]:
    """The input messages the transcript does not hold yet (a call repeats the history)."""
    k = 0
    while k < len(inputs) and k < len(turns) and _same(inputs[k], turns[k]):
        k += 1
    if k == len(turns):
        return list(inputs[k:])
    held = {_identity(t) for t in turns}
    return [t for t in inputs[k:] if _identity(t) not in held]


def _identity(turn: Turn) -> tuple[Any, ...]:
    return (turn.role, turn.content, turn.tool_call_id)


def _same(a: Turn, b: Turn) -> bool:
    """The same message (a history may repeat a call's tool calls or leave them out)."""
    if _identity(a) != _identity(b):
        return False
    if a.tool_calls and b.tool_calls:
        return [(c.id, c.name) for c in a.tool_calls] == [(c.id, c.name) for c in b.tool_calls]
    return True


def _usage(attrs: Mapping[str, Any]) -> Usage | None:
    pairs = (
        ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
        ("gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"),
        ("llm.token_count.prompt", "llm.token_count.completion"),
    )
    for p, c in pairs:
        if p in attrs or c in attrs:
            return Usage(prompt_tokens=_count(attrs.get(p)), completion_tokens=_count(attrs.get(c)))
    return None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


# -- messages ----------------------------------------------------------------------------------


def _input_messages(span: Span) -> list[Turn]:
    attrs = span["attributes"]
    turns: list[Turn] = []
    system = _json(attrs.get("gen_ai.system_instructions"))
    if isinstance(system, list):
        text = _parts_text(system)
        if text:
            turns.append(Turn(role=Role.SYSTEM, content=text))
    found = _genai_messages(attrs.get("gen_ai.input.messages"))
    if found is None:
        found = _indexed(attrs, "llm.input_messages.", _openinference_message)
    if found is None:
        found = _indexed(attrs, "gen_ai.prompt.", _flat_message)
    if found is None:
        found = _event_messages(span, output=False)
    return turns + (found or [])


def _output_messages(span: Span) -> list[Turn]:
    attrs = span["attributes"]
    found = _genai_messages(attrs.get("gen_ai.output.messages"))
    if found is None:
        found = _indexed(attrs, "llm.output_messages.", _openinference_message)
    if found is None:
        found = _indexed(attrs, "gen_ai.completion.", _flat_message)
    if found is None:
        found = _event_messages(span, output=True)
    return found or []


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    return value


def _role(value: Any) -> Role:
    try:
        return Role(str(value))
    except ValueError:
        return Role.ASSISTANT if value in ("model", "ai", "bot") else Role.USER


def _arguments(value: Any) -> dict[str, Any]:
    parsed = _json(value) if isinstance(value, str) else value
    if isinstance(parsed, dict):
        return parsed
    if parsed is None and value is None:
        return {}
    return {"input": parsed if parsed is not None else value}


def _text_of(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _parts_text(parts: Sequence[Any]) -> str | None:
    texts = [
        _text_of(p.get("content"))
        for p in parts
        if isinstance(p, dict) and p.get("type") in ("text", None) and p.get("content") is not None
    ]
    return "\n".join(t for t in texts if t) or None


def _genai_messages(value: Any) -> list[Turn] | None:
    """`gen_ai.input.messages` / `gen_ai.output.messages`: role and typed parts."""
    messages = _json(value)
    if not isinstance(messages, list):
        return None
    turns: list[Turn] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        raw_parts = m.get("parts")
        parts: list[Any] = raw_parts if isinstance(raw_parts, list) else []
        calls = [
            ToolCall(
                id=p.get("id"),
                name=str(p.get("name") or "tool"),
                arguments=_arguments(p.get("arguments")),
            )
            for p in parts
            if isinstance(p, dict) and p.get("type") == "tool_call"
        ]
        results = [
            p for p in parts if isinstance(p, dict) and p.get("type") == "tool_call_response"
        ]
        role = _role(m.get("role"))
        for r in results:
            turns.append(
                Turn(role=Role.TOOL, content=_text_of(r.get("response")), tool_call_id=r.get("id"))
            )
        text = _parts_text(parts) if parts else _text_of(m.get("content"))
        if text is not None or calls or not results:
            turns.append(Turn(role=role, content=text, tool_calls=calls))
    return turns


def _indexed(attrs: Mapping[str, Any], prefix: str, build: Any) -> list[Turn] | None:
    """Messages flattened into numbered attributes (`prefix` N `.`…), in index order."""
    grouped: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isdigit() and rest:
            grouped.setdefault(int(index), {})[rest] = value
    if not grouped:
        return None
    return [build(grouped[i]) for i in sorted(grouped)]


def _openinference_message(flat: Mapping[str, Any]) -> Turn:
    calls: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        if key.startswith("message.tool_calls."):
            index, _, rest = key[len("message.tool_calls.") :].partition(".")
            if index.isdigit():
                calls.setdefault(int(index), {})[rest] = value
    content = flat.get("message.content")
    if content is None:
        texts = [
            str(v)
            for k, v in sorted(flat.items())
            if k.startswith("message.contents.") and k.endswith(".message_content.text")
        ]
        content = "\n".join(texts) or None
    return Turn(
        role=_role(flat.get("message.role")),
        content=_text_of(content),
        tool_call_id=flat.get("message.tool_call_id"),
        tool_calls=[
            ToolCall(
                id=c.get("tool_call.id"),
                name=str(c.get("tool_call.function.name") or "tool"),
                arguments=_arguments(c.get("tool_call.function.arguments")),
            )
            for _, c in sorted(calls.items())
        ],
    )


def _flat_message(flat: Mapping[str, Any]) -> Turn:
    return Turn(
        role=_role(flat.get("role")),
        content=_text_of(flat.get("content")),
        tool_call_id=flat.get("tool_call_id"),
    )


_EVENT_ROLES = {
    "gen_ai.system.message": Role.SYSTEM,
    "gen_ai.user.message": Role.USER,
    "gen_ai.assistant.message": Role.ASSISTANT,
    "gen_ai.tool.message": Role.TOOL,
}


def _event_messages(span: Span, *, output: bool) -> list[Turn] | None:
    """Messages as span events (`gen_ai.user.message`, `gen_ai.choice`, …)."""
    turns: list[Turn] = []
    for event in span["events"]:
        name, attrs = event["name"], event["attributes"]
        if output and name == "gen_ai.choice":
            message = _json(attrs.get("message"))
            body = message if isinstance(message, dict) else attrs
            raw_calls = body.get("tool_calls")
            calls: list[Any] = raw_calls if isinstance(raw_calls, list) else []
            turns.append(
                Turn(
                    role=Role.ASSISTANT,
                    content=_text_of(body.get("content")),
                    tool_calls=[_event_call(c) for c in calls if isinstance(c, dict)],
                )
            )
        elif not output and name in _EVENT_ROLES:
            turns.append(
                Turn(
                    role=_EVENT_ROLES[name],
                    content=_text_of(attrs.get("content")),
                    tool_call_id=attrs.get("id") if name == "gen_ai.tool.message" else None,
                )
            )
    return turns or None


def _event_call(call: Mapping[str, Any]) -> ToolCall:
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    assert isinstance(function, dict)
    return ToolCall(
        id=call.get("id"),
        name=str(function.get("name") or "tool"),
        arguments=_arguments(function.get("arguments")),
    )


def _tool_turn(span: Span) -> Turn:
    attrs = span["attributes"]
    result = attrs.get("gen_ai.tool.call.result", attrs.get("output.value"))
    call_id = attrs.get("gen_ai.tool.call.id", attrs.get("tool_call.id"))
    return Turn(
        role=Role.TOOL,
        content=_text_of(result),
        tool_call_id=str(call_id) if call_id is not None else None,
        latency_ms=(span["end_ns"] - span["start_ns"]) / 1e6,
    )
