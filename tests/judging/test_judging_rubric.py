"""Rubrics as data (issue 22): the prompt carries the criteria, answers map through the scale,
a stored reply rescored under another mapping, `--rubric FILE` and `POST /config/metrics`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
import yaml
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.domain.events import JudgeVerdictRecorded, ParseStatus
from evaledger.domain.metrics import BUILTIN_BY_NAME
from evaledger.judging.rubric import (
    RUBRIC_TEMPLATE_ID,
    JudgeRubric,
    Scale,
    load_rubrics,
    parse_rubric_reply,
    render_with_rubrics,
    rescore_reply,
)
from tests.fake_judges import Answer, FakeJudges, default_script, serve
from tests.judging.test_judging_cli import count, import_file, run_cli, wait_for
from tests.judging.test_judging_prompt import BARE, FULL, TURNS
from tests.judging.test_judging_prompt import reply as connexity_reply

EXAMPLE = Path(__file__).parents[2] / "examples" / "rubric.geval.yaml"
DELIVERY, GATHERING = BUILTIN_BY_NAME["response_delivery"], BUILTIN_BY_NAME["information_gathering"]
TOOLS = BUILTIN_BY_NAME["tool_routing"]


@pytest.fixture
def judges(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeJudges]:
    for server in serve():
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield server


def labelled(delivery: str = "good", gathering: int = 7) -> dict[str, Any]:
    block = {"justification": "seen in turn 1", "failure_code": None, "turns": [1]}
    return {
        "response_delivery": {"label": delivery, **block},
        "information_gathering": {"score": gathering, **block},
        "tool_routing": {"score": 4, **block},
    }


def script_with(**blocks: dict[str, Any]) -> Any:
    """Well-formed replies (outcomes all passed) with these metric blocks."""

    def script(kind: str, body: dict[str, Any]) -> Answer:
        reply = orjson.loads(default_script(kind, body).text or "")
        return Answer(text=orjson.dumps({**reply, **blocks}).decode())

    return script


def test_the_example_renders_criteria_steps_scale_and_examples() -> None:
    rubrics = load_rubrics(EXAMPLE)
    prompt = render_with_rubrics(BARE, [DELIVERY, GATHERING, TOOLS], rubrics)
    assert prompt.template_id == RUBRIC_TEMPLATE_ID and len(prompt.template_hash) == 64
    for text in (
        "Criteria: Coherence and tone of the agent's replies",
        "2. Read the agent's replies in order",
        "Categorical: `label` one of `excellent`, `good`, `adequate`, `poor`, `unacceptable`.",
        "- good: one small lapse in flow or tone",
        "Integer `score` from 0 to 10.",
        "→ excellent (Turn 1 answers the question directly and politely.)",
        "Reply: Write the justification first, step by step, then choose the label.",
        "Integer `score` from 0 to 5.",  # tool_routing: its own rubric text, on 0-5
        "All expected tools called in correct sequence.",
    ):
        assert text in prompt.system, text
    schema = prompt.schema["properties"]
    assert schema["response_delivery"]["properties"]["label"]["enum"][0] == "excellent"
    assert schema["information_gathering"]["required"][0] == "score"
    # The hash covers the rubrics: another mapping is another hash.
    other = dict(rubrics)
    other["response_delivery"] = rubrics["response_delivery"].model_copy(
        update={"scale": Scale(kind="categorical", mapping={"excellent": 5, "good": 3})}
    )
    assert render_with_rubrics(BARE, [DELIVERY], other).template_hash != prompt.template_hash


def test_answers_map_through_the_scale_and_a_stored_reply_rescored_under_another_mapping() -> None:
    rubrics = load_rubrics(EXAMPLE)
    metrics = [DELIVERY, GATHERING, TOOLS]
    prompt = render_with_rubrics(BARE, metrics, rubrics)
    raw = orjson.dumps(labelled("good", 7)).decode()
    parsed = parse_rubric_reply(raw, prompt, rubrics, len(BARE.turns))
    assert parsed.status is ParseStatus.PARSED
    # good → 4; 7 on 0-10 → 3 (halved, truncated); tool_routing on its own 0-5.
    assert [(m.metric, m.score) for m in parsed.metric_scores] == [
        ("response_delivery", 4),
        ("information_gathering", 3),
        ("tool_routing", 4),
    ]
    stricter = {
        **rubrics,
        "response_delivery": JudgeRubric(
            metric="response_delivery",
            criteria="c",
            scale=Scale(kind="categorical", mapping={"excellent": 5, "good": 3, "poor": 0}),
        ),
        "information_gathering": JudgeRubric(
            metric="information_gathering",
            criteria="c",
            scale=Scale(kind="0-10", mapping={"7": 4}),
        ),
    }
    again = rescore_reply(raw, metrics, stricter, turn_count=len(BARE.turns))
    assert [m.score for m in again.metric_scores] == [3, 4, 4]
    bad = parse_rubric_reply(
        orjson.dumps(labelled("superb")).decode(), prompt, rubrics, len(BARE.turns)
    )
    assert bad.status is ParseStatus.MISSING_METRICS
    assert bad.error == (
        "metric response_delivery: label 'superb' is not one of "
        "excellent, good, adequate, poor, unacceptable"
    )


@pytest.mark.parametrize(
    ("scale", "message"),
    [
        ({"kind": "categorical", "mapping": {"only": 5}}, "at least two labels"),
        ({"kind": "categorical", "mapping": {"a": 5, "b": 9}}, "ledger's 0-5 scale"),
        ({"kind": "1-5", "mapping": {"0": 0}}, "maps the points 1-5"),
        ({"kind": "binary", "mapping": {"yes": 5}}, "takes no mapping"),
    ],
)
def test_a_scale_that_does_not_map_onto_0_5_is_refused(scale: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scale.model_validate(scale)


def test_the_connexity_prompt_is_unchanged_without_rubrics() -> None:
    from evaledger.judging.prompt import TEMPLATE_ID, render

    assert render(FULL, [TOOLS]).template_id == TEMPLATE_ID == "connexity-judge/v1"


# ---------------------------------------------------------------------------------------------
# Duplicate expected outcomes (issue 22, the parser defect found against Connexity's code)


def test_duplicate_outcome_statements_keep_each_result() -> None:
    from evaledger.domain.events import AgentSnapshot, TestCaseSnapshot
    from evaledger.judging.prompt import CaseToJudge, parse_reply, render

    statement = "Agent MUST look up the order before offering a refund"
    case = CaseToJudge(
        test_case=TestCaseSnapshot(key="dup", expected_outcomes=[statement, statement]),
        agent=AgentSnapshot(name="bot"),
        turns=TURNS,
    )
    data = connexity_reply()
    # The crafted case: the first result fails, its duplicate passes. Merged by statement, the
    # later pass overwrote the fail and the case passed (Connexity: fails).
    data["expected_outcomes"] = [
        {"statement": statement, "passed": False, "justification": "never looked it up"},
        {"statement": statement, "passed": True, "justification": "t1"},
    ]
    metrics = [BUILTIN_BY_NAME[m] for m in ("tool_routing", "grounding_fidelity")]
    parsed = parse_reply(orjson.dumps(data).decode(), render(case, metrics), len(TURNS))
    assert [(o.passed, o.justification) for o in parsed.expected_outcomes] == [
        (False, "never looked it up"),
        (True, "t1"),
    ]
    # A judge that lists them in the other order is read in its order, occurrence by occurrence.
    data["expected_outcomes"].reverse()
    parsed = parse_reply(orjson.dumps(data).decode(), render(case, metrics), len(TURNS))
    assert [o.passed for o in parsed.expected_outcomes] == [True, False]


def test_a_judged_case_with_a_failing_duplicate_outcome_fails(
    services: Services, judges: FakeJudges
) -> None:
    from evaledger.domain.bundle import RunBundle
    from evaledger.judging.runner import JudgeOptions, plan, run_plan
    from tests.judging.test_judging import CTX, unjudged_bundle

    data = unjudged_bundle()
    statement = "Agent MUST NOT issue a refund above 100 USD"
    for case in data["cases"]:
        case["test_case"]["expected_outcomes"] = [statement, statement]

    def script(kind: str, body: dict[str, Any]) -> Answer:
        reply = orjson.loads(default_script(kind, body).text or "")
        reply["expected_outcomes"] = [
            {"statement": statement, "passed": False, "justification": "refunded 250"},
            {"statement": statement, "passed": True, "justification": "ok"},
        ]
        return Answer(text=orjson.dumps(reply).decode())

    judges.script = script
    run_id = services.ledger.import_bundle(RunBundle.model_validate(data), CTX).run_id
    planned = plan(services.ledger, run_id, JudgeOptions(judges=("openai:gpt-4.1",)), judges.env())
    assert run_plan(services.ledger, planned, CTX).parsed == 2
    services.sync()
    judged = [s for s in services.reads.case_scores(run_id) if s.outcome_results]
    assert judged and all(s.passed is False for s in judged)
    assert all([o.passed for o in s.outcome_results] == [False, True] for s in judged)


# ---------------------------------------------------------------------------------------------
# End to end: --rubric FILE and POST /config/metrics


def test_judge_with_a_rubric_file_stores_the_rubric_prompt_and_maps_labels(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    def script(kind: str, body: dict[str, Any]) -> Answer:
        reply = orjson.loads(default_script(kind, body).text or "")
        reply["response_delivery"] = labelled("adequate")["response_delivery"]
        reply["information_gathering"] = labelled(gathering=10)["information_gathering"]
        return Answer(text=orjson.dumps(reply).decode())

    judges.script = script
    run_id = import_file(tmp_path, capsys, sqlite_url)
    args = ("judge", run_id, "--judge", "openai:gpt-4.1", "--rubric", str(EXAMPLE))
    code, out, err = run_cli(capsys, sqlite_url, *args)
    assert code == 0, out + err
    system = judges.requests[0][1]["messages"][0]["content"]
    assert "Criteria: Coherence and tone" in system
    code, out, _ = run_cli(capsys, sqlite_url, "show", run_id, "--json")
    case = next(c for c in orjson.loads(out)["cases"] if c["test_case_key"] == "refund-above-limit")
    assert case["metric_scores"]["response_delivery"] == 3  # adequate → 3
    assert case["metric_scores"]["information_gathering"] == 5  # 10 → 5
    code, out, _ = run_cli(capsys, sqlite_url, "explain", case["case_id"], "--json")
    verdict = orjson.loads(out)["verdicts"][0]
    assert verdict["template_id"] == RUBRIC_TEMPLATE_ID and len(verdict["template_hash"]) == 64
    assert "Evaluation steps:" in verdict["prompt"]
    assert orjson.loads(verdict["raw_output"])["response_delivery"]["label"] == "adequate"


@pytest.mark.parametrize(
    ("rubric", "message"),
    [
        (
            {"metric": "politeness", "criteria": "c", "scale": {"kind": "0-10"}},
            "rubric: metric 'politeness' is not judged in this pass",
        ),
        (
            {"metric": "tool_routing", "criteria": "c", "scale": {"kind": "binary"}},
            "rubric: metric tool_routing is scored but its rubric's scale is binary",
        ),
        (
            {"metric": "tool_routing", "scale": {"kind": "0-10"}},
            "rubrics.0.criteria: Field required",
        ),
    ],
)
def test_a_bad_rubric_file_exits_2_before_any_call(
    sqlite_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    judges: FakeJudges,
    rubric: dict[str, Any],
    message: str,
) -> None:
    path = tmp_path / "rubric.json"
    path.write_bytes(orjson.dumps(rubric))
    run_id = import_file(tmp_path, capsys, sqlite_url)
    code, _, err = run_cli(
        capsys, sqlite_url, "judge", run_id, "--judge", "openai:gpt-4.1", "--rubric", str(path)
    )
    assert code == 2 and message in err and judges.calls() == 0


def test_a_metric_registered_with_a_rubric_is_judged_by_it(
    services: Services, judges: FakeJudges
) -> None:
    from tests.judging.test_judging_cli import imported

    rubric = {
        "metric": "empathy",
        "criteria": "The agent acknowledges the user's situation before solving it.",
        "steps": ["Find the user's complaint.", "Check the agent acknowledged it."],
        "scale": {"kind": "categorical", "mapping": {"warm": 5, "neutral": 3, "cold": 0}},
    }
    body = {
        "name": "empathy",
        "display_name": "Empathy",
        "description": "Acknowledges the user's feelings.",
        "tier": "delivery",
        "default_weight": 0.1,
        "score_type": "scored",
        "include_in_defaults": False,
        "judge_rubric": rubric,
    }
    with TestClient(create_app(services=services)) as client:
        mismatch = client.post(
            "/config/metrics", json={**body, "judge_rubric": {**rubric, "metric": "other"}}
        )
        assert mismatch.status_code == 422 and mismatch.json()["field"] == "judge_rubric.metric"
        r = client.post("/config/metrics", json=body)
        assert r.status_code == 201, r.text
        listed = client.get("/config/available-metrics").json()["data"]
        stored = next(m for m in listed if m["name"] == "empathy")
        assert orjson.loads(stored["rubric"])["format"] == "evaledger.rubric/1"
        run_id = imported(client)
        judges.script = script_with(
            empathy={"label": "neutral", "justification": "t", "failure_code": None, "turns": []}
        )
        started = client.post(
            f"/runs/{run_id}/judge",
            json={"judges": ["openai:gpt-4.1"], "metrics": ["empathy"]},
        )
        assert started.status_code == 202, started.text
        job = wait_for(client, started.json()["job_id"])
        assert job["status"] == "succeeded", job
    system = judges.requests[0][1]["messages"][0]["content"]
    assert "Criteria: The agent acknowledges the user's situation" in system
    verdicts = [
        e
        for cid in services.ledger.get_run(UUID(run_id)).case_ids
        for e in services.ledger.events_of(cid)
        if isinstance(e, JudgeVerdictRecorded)
    ]
    assert {v.template_id for v in verdicts} == {RUBRIC_TEMPLATE_ID}
    assert [v.metric_scores[0].score for v in verdicts] == [3, 3]  # neutral → 3


def test_a_failing_duplicate_outcome_shows_as_a_regression_in_a_comparison(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    """The crafted comparison: Connexity flags pass rate 1.00 → 0.00; merged duplicates hid it."""
    from tests.judging.test_judging import unjudged_bundle

    statement = "Agent MUST NOT issue a refund above 100 USD"

    def imported(key: str) -> str:
        data = unjudged_bundle()
        data["run"]["key"] = key
        data["cases"] = [c for c in data["cases"] if c["test_case"]["key"] != "store-hours"]
        for case in data["cases"]:
            case["test_case"]["expected_outcomes"] = [statement, statement]
        path = tmp_path / f"{key}.json"
        path.write_bytes(orjson.dumps(data))
        code, out, err = run_cli(capsys, sqlite_url, "import", str(path), "--json")
        assert code == 0, err
        return str(orjson.loads(out)["imported"][0]["run_id"])

    def outcomes(first: bool, second: bool) -> Any:
        def script(kind: str, body: dict[str, Any]) -> Answer:
            reply = orjson.loads(default_script(kind, body).text or "")
            reply["expected_outcomes"] = [
                {"statement": statement, "passed": first, "justification": "first"},
                {"statement": statement, "passed": second, "justification": "second"},
            ]
            return Answer(text=orjson.dumps(reply).decode())

        return script

    baseline, candidate = imported("dup-baseline"), imported("dup-candidate")
    judge = ("--judge", "openai:gpt-4.1", "--concurrency", "1")
    judges.script = outcomes(True, True)
    assert run_cli(capsys, sqlite_url, "judge", baseline, *judge)[0] == 0
    judges.script = outcomes(False, True)  # a failing duplicate, then a passing one
    assert run_cli(capsys, sqlite_url, "judge", candidate, *judge)[0] == 0
    code, out, _ = run_cli(
        capsys, sqlite_url, "compare", baseline, candidate, "--json", "--no-fail-on-thresholds"
    )
    result = orjson.loads(out)
    assert result["aggregate"]["pass_rate_delta"] == -1.0
    assert result["verdict"]["regression_detected"] is True
    assert "pass_rate dropped 100% (1.00 → 0.00)" in result["verdict"]["reasons"]
    assert code == 1


def test_a_json_rubric_judges_a_binary_a_1_5_and_a_registered_custom_metric(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    from evaledger.api.bootstrap import Settings, build_services

    services = build_services(Settings(db=sqlite_url))
    try:
        with TestClient(create_app(services=services)) as client:
            r = client.post(
                "/config/metrics",
                json={
                    "name": "politeness",
                    "display_name": "Politeness",
                    "description": "Courteous replies.",
                    "tier": "delivery",
                    "default_weight": 0.1,
                    "score_type": "scored",
                    "include_in_defaults": False,
                },
            )
            assert r.status_code == 201, r.text
    finally:
        services.close()
    rubrics: list[dict[str, Any]] = [
        {
            "metric": "task_completion",
            "criteria": "The user's refund request was settled.",
            "scale": {"kind": "binary"},
        },
        {
            "metric": "tool_routing",
            "criteria": "The right tools, in order, no needless calls.",
            "scale": {"kind": "1-5", "meanings": {"1": "wrong tools", "5": "exactly right"}},
        },
        {
            "metric": "politeness",
            "criteria": "Every reply is courteous, even to an angry customer.",
            "scale": {"kind": "0-10"},
        },
    ]
    path = tmp_path / "rubric.json"
    path.write_bytes(orjson.dumps({"format": "evaledger.rubric/1", "rubrics": rubrics}))
    block = {"justification": "turn 1", "failure_code": None, "turns": [1]}
    judges.script = script_with(
        task_completion={"passed": False, **block},
        tool_routing={"score": 1, **block},
        politeness={"score": 8, **block},
    )
    run_id = import_file(tmp_path, capsys, sqlite_url)
    metrics = ("--metric", "task_completion", "--metric", "tool_routing", "--metric", "politeness")
    code, out, err = run_cli(
        capsys, sqlite_url, "judge", run_id, "--judge", "openai:gpt-4.1", *metrics,
        "--rubric", str(path),
    )  # fmt: skip
    assert code == 0, out + err
    system = judges.requests[0][1]["messages"][0]["content"]
    for criteria in (r["criteria"] for r in rubrics):
        assert criteria in system
    assert "Integer `score` from 1 to 5." in system and "- 1: wrong tools" in system
    schema = judges.requests[0][1]["response_format"]["json_schema"]["schema"]["properties"]
    assert schema["task_completion"]["required"][0] == "passed"
    code, out, _ = run_cli(capsys, sqlite_url, "show", run_id, "--json")
    case = next(c for c in orjson.loads(out)["cases"] if c["test_case_key"] == "refund-above-limit")
    code, out, _ = run_cli(capsys, sqlite_url, "explain", case["case_id"], "--json")
    verdict = orjson.loads(out)["verdicts"][0]
    assert verdict["template_id"] == RUBRIC_TEMPLATE_ID and len(verdict["template_hash"]) == 64
    assert "The user's refund request was settled." in verdict["prompt"]
    got = {m["metric"]: (m.get("passed"), m.get("score")) for m in verdict["parsed_metric_scores"]}
    # binary stays pass/fail; 1 on 1-5 is 1; 8 on 0-10 is 4 (halved).
    assert got == {
        "task_completion": (False, None),
        "tool_routing": (None, 1),
        "politeness": (None, 4),
    }


def test_rescore_reads_stored_replies_under_another_mapping_without_a_call(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    judges.script = script_with(**labelled("good", 7))
    run_id = import_file(tmp_path, capsys, store_url)
    judge = ("--judge", "openai:gpt-4.1", "--rubric", str(EXAMPLE))
    assert run_cli(capsys, store_url, "judge", run_id, *judge)[0] == 0
    calls, before = judges.calls(), count(store_url)
    stricter = yaml.safe_load(EXAMPLE.read_text())
    stricter["rubrics"][0]["scale"]["mapping"]["good"] = 2  # good: 4 → 2
    stricter["rubrics"][1]["scale"]["mapping"] = {"7": 5}  # 7 on 0-10: 3 → 5
    path = tmp_path / "stricter.json"
    path.write_bytes(orjson.dumps(stricter))
    code, out, err = run_cli(
        capsys, store_url, "judge", run_id, "--rubric", str(path), "--rescore", "--json"
    )
    assert code == 0, err
    rows = orjson.loads(out)["rescored"]
    got = {(r["test_case_key"], r["metric"]): (r["recorded"], r["rescored"]) for r in rows}
    for key in ("refund-above-limit", "refund-late-delivery"):
        assert got[(key, "response_delivery")] == (4, 2)
        assert got[(key, "information_gathering")] == (3, 5)
        assert got[(key, "tool_routing")] == (4, 4)
    assert (judges.calls(), count(store_url)) == (calls, before)  # no call, nothing stored
    code, out, _ = run_cli(capsys, store_url, "judge", run_id, "--rubric", str(path), "--rescore")
    assert code == 0 and "no judge call, nothing stored): 4 differ" in out
    # A label the new mapping lacks is said per verdict; a rubric for an unjudged metric is exit 2.
    del stricter["rubrics"][0]["scale"]["mapping"]["good"]
    path.write_bytes(orjson.dumps(stricter))
    _, out, _ = run_cli(capsys, store_url, "judge", run_id, "--rubric", str(path), "--rescore")
    assert "label 'good' is not one of" in out
    other = {"metric": "task_completion", "criteria": "c", "scale": {"kind": "binary"}}
    path.write_bytes(orjson.dumps(other))
    code, _, err = run_cli(
        capsys, store_url, "judge", run_id, "--rubric", str(path), "--rescore", "--metric",
        "task_completion",
    )  # fmt: skip
    assert code == 2 and "has no rubric verdict in this run to rescore" in err
    code, _, err = run_cli(capsys, store_url, "judge", run_id, "--rescore")
    assert code == 2 and "rubric: --rescore reads the replies under a --rubric FILE" in err


def test_rescore_of_an_erased_case_says_the_reply_is_gone_and_keeps_its_scores(
    store_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    judges: FakeJudges,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 34: the erased reply cannot be read again; the recorded verdict still counts."""
    monkeypatch.setenv("EVALEDGER_SEAL_PAYLOADS", "1")
    judges.script = script_with(**labelled("good", 7))
    run_id = import_file(tmp_path, capsys, store_url)
    judge = ("--judge", "openai:gpt-4.1", "--rubric", str(EXAMPLE))
    assert run_cli(capsys, store_url, "judge", run_id, *judge)[0] == 0
    _, out, _ = run_cli(capsys, store_url, "show", run_id, "--json")
    shown = orjson.loads(out)
    case = next(c for c in shown["cases"] if c["test_case_key"] == "refund-above-limit")
    code, _, err = run_cli(
        capsys, store_url, "erase", "--case", case["case_id"], "--reason", "deletion request 9"
    )
    assert code == 0, err
    code, out, err = run_cli(
        capsys, store_url, "judge", run_id, "--rubric", str(EXAMPLE), "--rescore", "--json"
    )
    assert code == 0, err
    rows = orjson.loads(out)["rescored"]
    erased = [r for r in rows if r["test_case_key"] == "refund-above-limit"]
    kept = [r for r in rows if r["test_case_key"] == "refund-late-delivery"]
    assert erased and all(r["rescored"] is None for r in erased)
    assert all("erased on" in r["error"] and "deletion request 9" in r["error"] for r in erased)
    assert all(r["recorded"] is not None for r in erased)  # the stored verdict still counts
    assert kept and all(r["rescored"] is not None for r in kept)
    _, out, _ = run_cli(capsys, store_url, "show", run_id, "--json")
    assert orjson.loads(out)["aggregate"] == shown["aggregate"]
