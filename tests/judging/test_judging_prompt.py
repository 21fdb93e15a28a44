"""The Connexity judge prompt: golden renderings, the strict schema, and the parse rules of §3.1.

Golden files live in tests/fixtures/judge_prompts/; a missing one is written with
    UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/judging/test_judging_prompt.py
(an existing one is never overwritten: a prompt change is a new template and a reviewed diff).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from evaledger.domain.events import (
    AgentSnapshot,
    ParseStatus,
    TestCaseSnapshot,
    ToolCall,
    ToolSpec,
    Turn,
)
from evaledger.domain.metrics import BUILTIN_BY_NAME, DEFAULT_METRIC_NAMES, MetricDefinition
from evaledger.judging.prompt import (
    TEMPLATE_HASH,
    TEMPLATE_ID,
    CaseToJudge,
    output_schema,
    parse_reply,
    render,
    transcript_lines,
)

GOLDEN = Path(__file__).parents[1] / "fixtures" / "judge_prompts"
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"

TURNS = [
    Turn(role="user", content="Hi, order 42 arrived a week late. Can I get the shipping back?"),
    Turn(
        role="assistant",
        content="Let me check that order.",
        tool_calls=[ToolCall(id="call_1", name="lookup_order", arguments={"order_id": "42"})],
    ),
    Turn(role="tool", content='{"status": "delivered", "days_late": 7}', tool_call_id="call_1"),
    Turn(role="assistant", content="It was 7 days late. I have refunded the 4.99 USD shipping."),
]
POLITENESS = MetricDefinition(
    name="politeness",
    display_name="Politeness",
    description="Courteous, respectful tone throughout.",
    tier="delivery",
    default_weight=0.1,
    score_type="scored",
    rubric="5: Warm and respectful.\n3: Neutral.\n0: Rude.",
    include_in_defaults=False,
)

FULL = CaseToJudge(
    test_case=TestCaseSnapshot(
        key="refund-late-delivery",
        name="Refund for a late delivery",
        expected_outcomes=[
            "Agent MUST look up the order before offering a refund",
            {"statement": "Agent offers a refund of the shipping fee", "severity": "medium"},
        ],
        evaluation_criteria_override="Weigh verification of the order number heavily.",
    ),
    agent=AgentSnapshot(
        name="support-bot",
        provider="google",
        system_prompt="You are the support agent of a web shop. Look orders up before answering.",
        tools=[
            ToolSpec(
                name="lookup_order",
                description="Fetch an order by number.",
                parameters={"type": "object", "properties": {"order_id": {"type": "string"}}},
            )
        ],
    ),
    turns=TURNS,
)
BARE = CaseToJudge(
    test_case=TestCaseSnapshot(key="small-talk"),
    agent=AgentSnapshot(name="support-bot"),
    turns=[
        Turn(role="user", content="Hello?"),
        Turn(role="assistant", content="Hi! How can I help?"),
    ],
)
FULL_METRICS = [
    *(BUILTIN_BY_NAME[m] for m in ("tool_routing", "grounding_fidelity", "task_completion")),
    POLITENESS,
]
DEFAULTS = [BUILTIN_BY_NAME[m] for m in DEFAULT_METRIC_NAMES]


def golden(name: str, text: str) -> str:
    path = GOLDEN / name
    if not path.exists():
        if not UPDATE:
            pytest.fail(f"{path} is missing: UPDATE_SNAPSHOTS=1 .venv/bin/pytest {__file__}")
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path.read_text()


@pytest.mark.parametrize(
    ("name", "case", "metrics"),
    [
        ("full.txt", FULL, FULL_METRICS),
        ("bare-defaults.txt", BARE, DEFAULTS),
    ],
)
def test_the_rendered_prompt_matches_its_golden_file(
    name: str, case: CaseToJudge, metrics: list[MetricDefinition]
) -> None:
    assert render(case, metrics).text == golden(name, render(case, metrics).text)


def test_the_full_prompt_has_every_part_design_10_names() -> None:
    p = render(FULL, FULL_METRICS)
    assert p.system.startswith("You are an expert evaluator")
    assert "### Tool Routing (`tool_routing`) — Scored (0-5 integer)\n" in p.system
    assert "### Task Completion (`task_completion`) — Binary (pass/fail)\n" in p.system
    # A custom metric's rubric comes from the catalogue entry.
    assert "### Politeness (`politeness`) — Scored (0-5 integer)\n" in p.system
    assert "5: Warm and respectful.\n3: Neutral.\n0: Rude." in p.system
    assert (
        "4: All critical tools called. Minor sequence deviation or one redundant call." in p.system
    )
    user = p.user
    assert "1. Agent MUST look up the order before offering a refund\n" in user
    assert "2. Agent offers a refund of the shipping fee\n" in user
    assert "## Test case-specific evaluation emphasis\nWeigh verification" in user
    assert "## Expected outcomes\nFor each expected outcome above" in user
    assert '"name": "lookup_order"' in user
    assert user.endswith(
        "## Metrics to score\ntool_routing, grounding_fidelity, task_completion, politeness\n"
    )
    assert (p.template_id, p.template_hash) == (TEMPLATE_ID, TEMPLATE_HASH)


def test_the_bare_prompt_says_what_was_not_captured() -> None:
    user = render(BARE, DEFAULTS).user
    assert "Test case: small-talk\nExpected outcomes:\n(none)\n" in user
    assert "Agent system prompt:\n(not captured for this run)\n" in user
    assert "Agent tools:\n(not captured)\n" in user
    assert "evaluation emphasis" not in user and "## Expected outcomes" not in user


def test_transcript_lines_name_tool_turns_and_list_tool_calls() -> None:
    assert transcript_lines(TURNS) == [
        "Turn 0 [user]: Hi, order 42 arrived a week late. Can I get the shipping back?",
        "Turn 1 [assistant]: Let me check that order.",
        '  tool call: lookup_order({"order_id":"42"})',
        'Turn 2 [tool → lookup_order]: {"status": "delivered", "days_late": 7}',
        "Turn 3 [assistant]: It was 7 days late. I have refunded the 4.99 USD shipping.",
    ]


def test_the_schema_is_strict_with_one_property_per_metric_and_outcomes() -> None:
    schema = output_schema(FULL_METRICS, with_outcomes=True)
    assert schema["required"] == [
        "tool_routing",
        "grounding_fidelity",
        "task_completion",
        "politeness",
        "expected_outcomes",
    ]
    assert schema["additionalProperties"] is False
    scored, binary = schema["properties"]["tool_routing"], schema["properties"]["task_completion"]
    assert scored["required"] == ["score", "justification", "failure_code", "turns"]
    assert scored["properties"]["score"] == {"type": "integer"}
    assert binary["required"] == ["passed", "justification", "failure_code", "turns"]
    assert binary["properties"]["passed"] == {"type": "boolean"}
    assert scored["additionalProperties"] is binary["additionalProperties"] is False
    assert "expected_outcomes" not in output_schema(FULL_METRICS, with_outcomes=False)["properties"]


def reply(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tool_routing": {"score": 4, "justification": "ok", "failure_code": None, "turns": [1]},
        "grounding_fidelity": {"score": 5, "justification": "ok", "failure_code": "", "turns": []},
        "task_completion": {
            "passed": True,
            "justification": "ok",
            "failure_code": None,
            "turns": [],
        },
        "politeness": {"score": 2, "justification": "curt", "failure_code": "curt", "turns": [3]},
        "expected_outcomes": [
            {
                "statement": "Agent MUST look up the order before offering a refund",
                "passed": True,
                "justification": "t1",
            },
            {
                "statement": "Agent offers a refund of the shipping fee",
                "passed": False,
                "justification": "t3",
            },
        ],
    }
    base.update(changes)
    return base


def parse(data: Any) -> Any:
    text = data if isinstance(data, str) else orjson.dumps(data).decode()
    return parse_reply(text, render(FULL, FULL_METRICS), len(TURNS))


def test_a_well_formed_reply_parses_under_the_rules() -> None:
    parsed = parse(reply())
    assert parsed.status is ParseStatus.PARSED and parsed.error is None
    assert [(m.metric, m.score, m.passed) for m in parsed.metric_scores] == [
        ("tool_routing", 4, None),
        ("grounding_fidelity", 5, None),
        ("task_completion", None, True),
        ("politeness", 2, None),
    ]
    # An empty failure_code is null; turns are kept.
    assert [m.failure_code for m in parsed.metric_scores] == [None, None, None, "curt"]
    assert [m.turns for m in parsed.metric_scores] == [[1], [], [], [3]]
    assert [(o.statement[:9], o.passed) for o in parsed.expected_outcomes] == [
        ("Agent MUS", True),
        ("Agent off", False),
    ]


@pytest.mark.parametrize(
    ("score", "expected"),
    [(4.9, 4), ("4", 4), ("3.5", 3), (0.2, 0), (9, 5), (-1, 0), (5, 5)],
)
def test_scores_are_truncated_to_int_and_clamped(score: Any, expected: int) -> None:
    data = reply(
        tool_routing={"score": score, "justification": "", "failure_code": None, "turns": []}
    )
    assert parse(data).metric_scores[0].score == expected


@pytest.mark.parametrize(
    ("change", "status", "error"),
    [
        ({"tool_routing": None}, ParseStatus.MISSING_METRICS, "missing metric block tool_routing"),
        (
            {"politeness": {"score": "high"}},
            ParseStatus.MISSING_METRICS,
            "metric politeness: score 'high' is not a number",
        ),
        (
            {"politeness": {"score": True}},
            ParseStatus.MISSING_METRICS,
            "metric politeness: score True is not a number",
        ),
        (
            {"task_completion": {"passed": "true"}},
            ParseStatus.MISSING_METRICS,
            "metric task_completion: passed 'true' is not true or false",
        ),
        (
            {"expected_outcomes": []},
            ParseStatus.MISSING_METRICS,
            "expected_outcomes: expected 2 results, got 0",
        ),
    ],
)
def test_a_missing_or_invalid_block_is_an_error_verdict(
    change: dict[str, Any], status: ParseStatus, error: str
) -> None:
    data = reply(**change)
    if change.get("tool_routing", 1) is None:
        del data["tool_routing"]
    parsed = parse(data)
    assert (parsed.status, parsed.error, parsed.metric_scores) == (status, error, [])


def test_non_json_and_non_objects_are_unparseable_but_a_fenced_object_parses() -> None:
    assert parse("The agent did well.").status is ParseStatus.UNPARSEABLE
    assert parse("[1, 2]").error == "unparseable reply: not a JSON object"
    fenced = "```json\n" + orjson.dumps(reply()).decode() + "\n```"
    assert parse(fenced).status is ParseStatus.PARSED


def test_turns_outside_the_transcript_are_dropped_and_rephrased_outcomes_match_by_position() -> (
    None
):
    data = reply(
        tool_routing={"score": 3, "justification": "", "failure_code": "x", "turns": [1, 9, -1, 1]}
    )
    data["expected_outcomes"][1]["statement"] = "offered the shipping refund"
    parsed = parse(data)
    assert parsed.metric_scores[0].turns == [1]
    assert parsed.expected_outcomes[1].statement == "Agent offers a refund of the shipping fee"
    assert parsed.expected_outcomes[1].passed is False


# ---------------------------------------------------------------------------------------------
# Providers: vendors, judge references, prices


def test_vendors_follow_the_aliases_and_an_aggregator_s_slug() -> None:
    from evaledger.judging.providers import vendor_of

    assert vendor_of("azure", "gpt-4o") == "openai"
    assert vendor_of("gemini", "gemini-2.5-pro") == "google"
    assert vendor_of("openrouter", "anthropic/claude-sonnet-4-6") == "anthropic"
    assert vendor_of("openai", "meta-llama/llama-3.1-70b") == "meta-llama"
    assert vendor_of("OpenAI", "gpt-4.1") == "openai"
    assert vendor_of(None, None) is None


def test_judge_references_and_prices() -> None:
    from evaledger.domain.errors import ValidationError
    from evaledger.judging.providers import DEFAULT_PRICES, JudgeRef, cost_usd

    assert JudgeRef.parse("openai:anthropic/claude-x") == JudgeRef("openai", "anthropic/claude-x")
    with pytest.raises(ValidationError, match="unknown provider 'vertex'"):
        JudgeRef.parse("vertex:gemini")
    # USD per million tokens; a dated snapshot uses its family's price; unknown models: None.
    assert cost_usd(DEFAULT_PRICES, "gpt-4.1", 1_000_000, 0) == 2.0
    assert cost_usd(DEFAULT_PRICES, "gpt-4.1-mini-2025-04-14", 0, 1_000_000) == 1.6
    assert cost_usd(DEFAULT_PRICES, "openai/gpt-4o", 1000, 1000) == pytest.approx(0.0125)
    assert cost_usd(DEFAULT_PRICES, "llama-3.1-70b", 1000, 1000) is None
