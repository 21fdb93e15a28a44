"""Issue 29: the judge reply parser never raises; a malformed reply is that case's error verdict.

The malformed replies a differential run found (an outcome `statement` that is not a string, a
score that is a huge integer, a `failure_code` that is not a string or is blank), each parsed
alone and then inside a real judge pass (the runner, the real SDKs, the loopback fake provider,
SQLite and PostgreSQL) where the other case is still judged. Then a property test feeding the
parsers arbitrary JSON shapes.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaledger.api.bootstrap import Services
from evaledger.domain.events import ParseStatus
from evaledger.judging.prompt import MAX_SCORE, ParsedReply, parse_reply, render
from evaledger.judging.rubric import parse_rubric_reply
from tests.fake_judges import Answer, FakeJudges, default_script
from tests.judging.test_judging import import_unjudged, judge, verdicts
from tests.judging.test_judging_prompt import FULL, FULL_METRICS, TURNS, reply

PROMPT = render(FULL, FULL_METRICS)
HUGE = "1" + "0" * 400
"""An integer orjson cannot hold as a double (it refuses it as 'infinity')."""


def parse(data: Any) -> ParsedReply:
    text = data if isinstance(data, str) else orjson.dumps(data).decode()
    return parse_reply(text, PROMPT, len(TURNS))


def _outcomes(first: Any) -> list[dict[str, Any]]:
    return [
        {"statement": first, "passed": True, "justification": "t"},
        {"statement": "Agent offers a refund of the shipping fee", "passed": True},
    ]


# ---------------------------------------------------------------------------------------------
# each malformed reply, parsed


@pytest.mark.parametrize("statement", [["A"], {"text": "A"}, 7, True])
def test_an_outcome_statement_that_is_not_a_string_is_an_error_verdict(statement: Any) -> None:
    parsed = parse(reply(expected_outcomes=_outcomes(statement)))
    assert parsed.status is ParseStatus.MISSING_METRICS
    assert (parsed.error or "").startswith("expected_outcomes[0]: statement ")
    assert parsed.error is not None and parsed.error.endswith("is not a string")
    assert parsed.metric_scores == [] and parsed.expected_outcomes == []


def test_an_outcome_without_a_statement_is_still_matched_by_position() -> None:
    outcomes = _outcomes(None)
    del outcomes[0]["statement"]
    parsed = parse(reply(expected_outcomes=outcomes))
    assert parsed.status is ParseStatus.PARSED
    assert [o.passed for o in parsed.expected_outcomes] == [True, True]


@pytest.mark.parametrize(
    ("literal", "score"),
    [(HUGE, MAX_SCORE), ("-" + HUGE, 0), ("100000000000000000000000000000", MAX_SCORE)],
)
def test_a_huge_integer_score_is_clamped_not_an_error(literal: str, score: int) -> None:
    text = orjson.dumps(
        reply(tool_routing={"score": "@", "justification": "", "failure_code": None, "turns": []})
    ).decode()
    parsed = parse(text.replace('"@"', literal))
    assert parsed.status is ParseStatus.PARSED, parsed.error
    assert parsed.metric_scores[0].score == score


def test_a_non_finite_score_is_no_score() -> None:
    text = orjson.dumps(reply()).decode().replace('"score":4', '"score":1e400', 1)
    parsed = parse(text)
    assert parsed.status is ParseStatus.MISSING_METRICS
    assert parsed.error == "metric tool_routing: score inf is not a number"
    # NaN / Infinity literals are not JSON, read either way
    assert parse(text.replace("1e400", "NaN")).status is ParseStatus.UNPARSEABLE


@pytest.mark.parametrize("code", [123, ["wrong_tool"], {"x": 1}, True, 0])
def test_a_failure_code_that_is_not_a_string_or_null_is_an_error_verdict(code: Any) -> None:
    block = {"score": 1, "justification": "", "failure_code": code, "turns": []}
    parsed = parse(reply(tool_routing=block))
    assert parsed.status is ParseStatus.MISSING_METRICS
    assert (parsed.error or "").startswith("metric tool_routing: failure_code ")
    assert (parsed.error or "").endswith("is not a string or null")


@pytest.mark.parametrize(("code", "kept"), [("", None), ("   ", None), ("\n\t", None)])
def test_an_empty_or_blank_failure_code_is_null(code: str, kept: str | None) -> None:
    block = {"score": 1, "justification": "", "failure_code": code, "turns": []}
    parsed = parse(reply(tool_routing=block))
    assert parsed.status is ParseStatus.PARSED
    assert parsed.metric_scores[0].failure_code is kept
    labelled = {**block, "failure_code": " wrong_tool_selected"}
    assert parse(reply(tool_routing=labelled)).metric_scores[0].failure_code == (
        " wrong_tool_selected"  # a label is kept verbatim
    )


# ---------------------------------------------------------------------------------------------
# inside a judge pass: the other case is judged


def _bad(kind: str, body: dict[str, Any], what: str) -> str:
    """The well-formed answer, made malformed as `what` says."""
    data = orjson.loads(default_script(kind, body).text or "")
    if what == "statement":
        data["expected_outcomes"][0]["statement"] = ["A"]
    elif what == "failure_code":
        data["tool_routing"]["failure_code"] = 123
    elif what == "huge":
        data["tool_routing"]["score"] = "@"
    return orjson.dumps(data).decode().replace('"@"', HUGE)


@pytest.mark.parametrize(("what", "errors"), [("statement", 1), ("failure_code", 1), ("huge", 0)])
def test_one_malformed_reply_in_a_pass_leaves_the_other_case_judged(
    store_services: Services, judges: FakeJudges, what: str, errors: int
) -> None:
    def script(kind: str, body: dict[str, Any]) -> Answer:
        if "1. Agent MUST NOT issue a refund" in body["messages"][-1]["content"]:
            return Answer(text=_bad(kind, body, what))
        return default_script(kind, body)

    judges.script = script
    run_id = import_unjudged(store_services)
    report = judge(store_services, run_id, judges.env(), judges=("openai:gpt-4.1",))
    assert (report.verdicts, report.parsed, report.errors) == (2, 2 - errors, errors)
    recorded = verdicts(store_services, run_id)
    assert len(recorded) == 2
    assert sum(v.parse_status is ParseStatus.PARSED for v in recorded) == 2 - errors
    bad = next(v for v in recorded if "1. Agent MUST NOT" in (v.prompt or ""))
    assert bad.raw_output is not None and bad.raw_output.startswith("{")
    if what == "huge":
        assert HUGE in bad.raw_output and bad.metric_scores[0].score == MAX_SCORE
    else:
        assert bad.parse_status is ParseStatus.MISSING_METRICS and bad.metric_scores == []
    store_services.sync()
    scores = store_services.reads.case_scores(run_id)
    assert sum(s.judge_error for s in scores) == errors
    assert all(s.scored for s in scores if not s.errored)  # the example's third case errored


# ---------------------------------------------------------------------------------------------
# any JSON shape: a verdict or an error verdict, never an exception

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**500), max_value=10**500)  # beyond 64 bits and doubles
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
block_keys = st.sampled_from(["score", "passed", "justification", "failure_code", "turns", "x"])
blocks = json_values | st.dictionaries(block_keys, json_values, max_size=6)
outcome_items = json_values | st.dictionaries(
    st.sampled_from(["statement", "passed", "justification"]), json_values, max_size=3
)
statements = [o.statement for o in FULL.test_case.expected_outcomes]


def _valid_block(binary: bool) -> dict[str, Any]:
    answer: dict[str, Any] = {"passed": True} if binary else {"score": 3}
    return {**answer, "justification": "j", "failure_code": None, "turns": [1]}


@st.composite
def replies(draw: st.DrawFn) -> Any:
    """An arbitrary JSON value, or an object shaped like a reply with arbitrary parts.

    Most blocks are valid but for one field, so that the outcomes after them are reached too.
    """
    if not draw(st.integers(0, 4)):
        return draw(json_values)
    data: dict[str, Any] = {}
    for m in FULL_METRICS:
        kind = draw(st.integers(0, 9))
        if kind == 0:
            continue  # missing
        if kind == 1:
            data[m.name] = draw(blocks)
            continue
        block = _valid_block(m.score_type == "binary")
        if kind == 2:
            block[draw(block_keys)] = draw(json_values)
        data[m.name] = block
    # Mostly one result per expected outcome (else the count alone decides), each either well
    # formed or with an arbitrary statement, pass or justification.
    size = len(statements) if draw(st.integers(0, 3)) else draw(st.integers(0, 3))
    items: list[Any] = []
    for i in range(size):
        item: Any = {"statement": statements[i % len(statements)], "passed": True}
        kind = draw(st.integers(0, 3))
        if kind == 1:
            item[draw(st.sampled_from(["statement", "passed", "justification"]))] = draw(
                json_values
            )
        elif kind == 2:
            item = draw(outcome_items)
        items.append(item)
    if draw(st.integers(0, 4)):
        data["expected_outcomes"] = items
    else:
        data["expected_outcomes"] = draw(json_values)
    return data


def _check(parsed: ParsedReply) -> None:
    assert isinstance(parsed, ParsedReply)
    if parsed.status is ParseStatus.PARSED:
        assert parsed.error is None
        assert [m.metric for m in parsed.metric_scores] == [m.name for m in FULL_METRICS]
        for m, definition in zip(parsed.metric_scores, FULL_METRICS, strict=True):
            if definition.score_type == "binary":
                assert isinstance(m.passed, bool)
            else:
                assert isinstance(m.score, int) and 0 <= m.score <= MAX_SCORE
            assert m.failure_code is None or m.failure_code.strip()
        assert [o.statement for o in parsed.expected_outcomes] == statements
    else:
        assert parsed.error and parsed.metric_scores == [] and parsed.expected_outcomes == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies(), st.booleans())
def test_any_json_reply_parses_to_a_verdict_or_an_error_verdict(data: Any, fenced: bool) -> None:
    text = json.dumps(data, ensure_ascii=False)  # integers of any size (orjson: 64 bits)
    if fenced:
        text = f"```json\n{text}\n```"
    _check(parse_reply(text, PROMPT, len(TURNS)))
    _check(parse_rubric_reply(text, PROMPT, {}, len(TURNS)))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_reply_parses_to_a_verdict_or_an_error_verdict(text: str) -> None:
    _check(parse_reply(text, PROMPT, len(TURNS)))
