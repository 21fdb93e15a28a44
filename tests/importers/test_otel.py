"""One trace's spans (as recorded) → one case: GenAI conventions, OpenInference, span events."""

from __future__ import annotations

import json
from typing import Any

from evaledger.domain.bundle import BundleCaseStatus
from evaledger.importers.otel import map_trace

TRACE = "5b8efff798038103d269b633813fc60c"
RESOURCE = {"service.name": "support-bot", "service.version": "3.1.0"}
MS = 1_000_000
T0 = 1_764_000_000_000 * MS


def span(
    span_id: str,
    parent: str | None,
    start_ms: int,
    end_ms: int,
    attributes: dict[str, Any],
    *,
    name: str = "span",
    events: list[dict[str, Any]] | None = None,
    status: int = 0,
    resource: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "span_id": span_id,
        "parent_span_id": parent,
        "name": name,
        "kind": 1,
        "start_ns": T0 + start_ms * MS,
        "end_ns": T0 + end_ms * MS,
        "status": {"code": status, "message": "boom" if status == 2 else ""},
        "attributes": attributes,
        "events": events or [],
        "resource": RESOURCE if resource is None else resource,
        "scope": {"name": "test", "version": ""},
    }


def oi_message(prefix: str, i: int, role: str, content: str | None, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {f"{prefix}.{i}.message.role": role}
    if content is not None:
        out[f"{prefix}.{i}.message.content"] = content
    out.update({f"{prefix}.{i}.message.{k}": v for k, v in more.items()})
    return out


def test_openinference_agent_loop_with_a_tool_is_one_transcript_without_repeats() -> None:
    first = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.provider": "openai",
        "llm.token_count.prompt": 50,
        "llm.token_count.completion": 10,
        **oi_message("llm.input_messages", 0, "system", "Be brief."),
        **oi_message("llm.input_messages", 1, "user", "Where is order 7?"),
        **oi_message(
            "llm.output_messages",
            0,
            "assistant",
            None,
            **{
                "tool_calls.0.tool_call.id": "call_1",
                "tool_calls.0.tool_call.function.name": "lookup",
                "tool_calls.0.tool_call.function.arguments": '{"order": 7}',
            },
        ),
    }
    tool = {
        "openinference.span.kind": "TOOL",
        "tool.name": "lookup",
        "tool_call.id": "call_1",
        "output.value": "shipped",
        "app.cache": "miss",
    }
    second = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.token_count.prompt": 70,
        "llm.token_count.completion": 8,
        **oi_message("llm.input_messages", 0, "system", "Be brief."),
        **oi_message("llm.input_messages", 1, "user", "Where is order 7?"),
        **oi_message("llm.input_messages", 2, "assistant", None),
        **oi_message("llm.input_messages", 3, "tool", "shipped", tool_call_id="call_1"),
        **oi_message("llm.output_messages", 0, "assistant", "It shipped."),
    }
    spans = [
        span("0000000000000001", None, 0, 900, {"openinference.span.kind": "AGENT"}, name="agent"),
        span("0000000000000002", "0000000000000001", 10, 310, first),
        span("0000000000000003", "0000000000000001", 320, 420, tool),
        span("0000000000000004", "0000000000000001", 430, 880, second),
    ]
    mapped = map_trace(TRACE, spans)
    turns = mapped.case.transcript
    assert [(t.role, t.content) for t in turns] == [
        ("system", "Be brief."),
        ("user", "Where is order 7?"),
        ("assistant", None),
        ("tool", "shipped"),
        ("assistant", "It shipped."),
    ]
    assert turns[2].tool_calls[0].name == "lookup"
    assert turns[2].tool_calls[0].arguments == {"order": 7}
    assert turns[3].tool_call_id == "call_1"
    assert (turns[2].latency_ms, turns[3].latency_ms, turns[4].latency_ms) == (300.0, 100.0, 450.0)
    assert mapped.case.usage is not None
    assert (mapped.case.usage.prompt_tokens, mapped.case.usage.completion_tokens) == (120, 18)
    assert (mapped.agent, mapped.version, mapped.model) == ("support-bot", "3.1.0", "gpt-4o-mini")
    assert mapped.case.test_case.tags == ["model:gpt-4o-mini", "provider:openai"]
    assert mapped.case.status is BundleCaseStatus.COMPLETED


def test_genai_tool_span_without_the_result_in_the_next_call_becomes_a_tool_turn() -> None:
    chat = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m1",
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "refund please"}]}]
        ),
        "gen_ai.output.messages": json.dumps(
            [
                {
                    "role": "assistant",
                    "parts": [
                        {"type": "tool_call", "id": "c9", "name": "refund", "arguments": {"n": 1}}
                    ],
                }
            ]
        ),
    }
    tool = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "refund",
        "gen_ai.tool.call.id": "c9",
        "gen_ai.tool.call.result": "done",
    }
    spans = [
        span("00000000000000a1", None, 0, 500, {"gen_ai.agent.name": "refunder"}),
        span("00000000000000a2", "00000000000000a1", 0, 200, chat),
        span("00000000000000a3", "00000000000000a1", 210, 260, tool),
    ]
    mapped = map_trace(TRACE, spans)
    assert [(t.role, t.content, t.tool_call_id) for t in mapped.case.transcript] == [
        ("user", "refund please", None),
        ("assistant", None, None),
        ("tool", "done", "c9"),
    ]
    assert mapped.case.transcript[2].latency_ms == 50.0
    assert mapped.agent == "refunder"  # gen_ai.agent.name wins over service.name


def test_messages_as_span_events_and_an_errored_root() -> None:
    events = [
        {"name": "gen_ai.system.message", "time_ns": T0, "attributes": {"content": "sys"}},
        {"name": "gen_ai.user.message", "time_ns": T0, "attributes": {"content": "hi"}},
        {
            "name": "gen_ai.choice",
            "time_ns": T0,
            "attributes": {"message": json.dumps({"role": "assistant", "content": "hello"})},
        },
    ]
    chat = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 3}
    spans = [
        span("00000000000000b1", None, 0, 100, chat, events=events, status=2, resource={}),
    ]
    mapped = map_trace(TRACE, spans)
    assert [(t.role, t.content) for t in mapped.case.transcript] == [
        ("system", "sys"),
        ("user", "hi"),
        ("assistant", "hello"),
    ]
    assert mapped.case.status is BundleCaseStatus.ERRORED
    assert mapped.case.error is not None and mapped.case.error.message == "boom"
    assert (mapped.agent, mapped.version) == ("unknown_service", "unversioned")


def test_flat_prompt_and_completion_attributes() -> None:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "q",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "a",
        "gen_ai.usage.prompt_tokens": 4,
        "gen_ai.usage.completion_tokens": 2,
    }
    mapped = map_trace(TRACE, [span("00000000000000c1", None, 0, 10, attrs)])
    assert [(t.role, t.content) for t in mapped.case.transcript] == [
        ("user", "q"),
        ("assistant", "a"),
    ]
    assert mapped.case.usage is not None and mapped.case.usage.completion_tokens == 2


def test_spans_that_read_as_no_conversation_make_an_errored_case_not_a_failure() -> None:
    bad = json.dumps([{"role": "tool", "parts": [{"type": "tool_call_response", "id": 5}]}])
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": bad}
    mapped = map_trace(TRACE, [span("00000000000000d1", None, 0, 10, attrs)])
    assert mapped.case.status is BundleCaseStatus.ERRORED
    assert mapped.case.error is not None and "could not be read" in mapped.case.error.message
    assert mapped.case.transcript == []
