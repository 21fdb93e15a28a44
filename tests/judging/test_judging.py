"""The judge runner against a loopback server speaking both wire formats, through the real SDKs."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import orjson
import pytest

from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import JudgeVerdictRecorded, ParseStatus
from evaledger.domain.ledger import Context
from evaledger.judging.runner import JudgeOptions, JudgeReport, plan, run_plan
from tests.conftest import example_bundle_data
from tests.fake_judges import Answer, FakeJudges, default_script, serve
from tests.helpers import event_count

CTX = Context(actor="judge-test")


def unjudged_bundle(
    agent_provider: str = "google", agent_model: str = "gemini-2.5-flash"
) -> dict[str, Any]:
    """The example run without any verdict, outcome or override, its agent of another vendor."""
    data: dict[str, Any] = copy.deepcopy(example_bundle_data())
    data["run"]["key"] = f"unjudged-{agent_provider}"
    data["run"]["agent"]["provider"] = agent_provider
    data["run"]["agent"]["model"] = agent_model
    data["run"]["config"]["judge"]["model"] = "claude-sonnet-4-6"
    for case in data["cases"]:
        for name in ("verdicts", "outcomes", "overrides", "claims", "checks"):
            case.pop(name, None)
    return data


@pytest.fixture
def judges() -> Iterator[FakeJudges]:
    yield from serve()


def import_unjudged(services: Services, **agent: str) -> UUID:
    bundle = RunBundle.model_validate(unjudged_bundle(**agent))
    return services.ledger.import_bundle(bundle, CTX).run_id


def judge(services: Services, run_id: UUID, env: dict[str, str], **options: Any) -> JudgeReport:
    planned = plan(services.ledger, run_id, JudgeOptions(**options), env)
    return run_plan(services.ledger, planned, CTX)


def verdicts(services: Services, run_id: UUID) -> list[JudgeVerdictRecorded]:
    run = services.ledger.get_run(run_id)
    return [
        e
        for cid in run.case_ids
        for e in services.ledger.events_of(cid)
        if isinstance(e, JudgeVerdictRecorded)
    ]


def only(script_for: dict[str, Answer]) -> Any:
    """A script answering each wire format with a fixed answer (others: well-formed)."""

    def script(kind: str, body: dict[str, Any]) -> Answer:
        return script_for.get(kind) or default_script(kind, body)

    return script


@pytest.mark.parametrize(
    ("provider", "model", "version", "tokens", "cost"),
    [
        ("openai", "gpt-4.1", "gpt-4.1-2025-04-14", (1200, 300), 0.0048),
        ("anthropic", "claude-sonnet-4-6", "claude-sonnet-4-6-20250929", (1000, 250), 0.00675),
    ],
)
def test_a_well_formed_reply_becomes_a_parsed_verdict_with_prompt_reply_usage_and_cost(
    services: Services,
    judges: FakeJudges,
    provider: str,
    model: str,
    version: str,
    tokens: tuple[int, int],
    cost: float,
) -> None:
    run_id = import_unjudged(services)
    report = judge(services, run_id, judges.env(), judges=(f"{provider}:{model}",))
    # Two cases have transcripts; the errored one has none and is skipped.
    assert (report.cases, report.skipped, report.calls, report.verdicts) == (2, 1, 2, 2)
    assert (report.parsed, report.errors, report.failures) == (2, 0, [])
    assert (report.prompt_tokens, report.completion_tokens) == (2 * tokens[0], 2 * tokens[1])
    assert report.cost_usd == pytest.approx(2 * cost, abs=1e-12)
    assert judges.calls(provider) == 2
    found = verdicts(services, run_id)
    assert len(found) == 2
    v = next(v for v in found if len(v.expected_outcomes) == 2)
    assert v.parse_status is ParseStatus.PARSED and v.error is None
    assert (v.judge.provider, v.judge.model, v.judge.version) == (provider, model, version)
    assert v.template_id == "connexity-judge/v1" and len(v.template_hash or "") == 64
    assert v.prompt is not None and v.prompt.startswith("[system]\nYou are an expert evaluator")
    assert "Turn 2 [tool → lookup_order]" in v.prompt
    assert orjson.loads(v.raw_output or "")["tool_routing"]["score"] == 4
    assert [m.score for m in v.metric_scores] == [4] * 8
    assert v.metric_scores[0].turns == [1] and v.metric_scores[0].failure_code is None
    assert [o.passed for o in v.expected_outcomes] == [True, True]
    assert v.usage is not None and (v.usage.prompt_tokens, v.usage.completion_tokens) == tokens
    assert v.cost_usd == pytest.approx(cost, abs=1e-12)
    assert v.panel_id is None and v.self_judged is False
    # The structured-output request carries the strict schema of the selected metrics.
    kind, body, headers = judges.requests[0]
    assert "sk-test" in (headers.get("authorization", "") + headers.get("x-api-key", ""))
    schema = (
        body["response_format"]["json_schema"]["schema"]
        if kind == "openai"
        else body["output_config"]["format"]["schema"]
    )
    assert schema["additionalProperties"] is False
    assert len(schema["required"]) in (8, 9)  # 8 metrics (+ expected_outcomes on one case)
    if kind == "openai":
        assert body["response_format"]["json_schema"]["strict"] is True
        assert body["temperature"] == 0.2
        assert v.judge.temperature == 0.2
    # Keys are never stored: not in any event of the store.
    stored = b"".join(n.state for n in services.ledger.notifications(1, 10_000))
    assert b"sk-test" not in stored and b"127.0.0.1" not in stored
    # Scores now come from the ledger's own verdicts: 4/5 on every metric = 80.
    services.sync()
    scores = {s.test_case_key: s for s in services.reads.case_scores(run_id)}
    assert scores["refund-above-limit"].overall_score == 80.0
    assert scores["refund-above-limit"].passed is True


def test_a_float_score_and_a_string_4_are_truncated_to_integers(
    services: Services, judges: FakeJudges
) -> None:
    def script(kind: str, body: dict[str, Any]) -> Answer:
        reply = orjson.loads(default_script(kind, body).text or "")
        reply["tool_routing"]["score"] = 3.9
        reply["parameter_extraction"]["score"] = "4"
        reply["result_interpretation"]["score"] = 7  # clamped to 5
        reply["grounding_fidelity"]["score"] = -2  # clamped to 0
        return Answer(text=orjson.dumps(reply).decode())

    judges.script = script
    run_id = import_unjudged(services)
    report = judge(services, run_id, judges.env(), judges=("openai:gpt-4.1",))
    assert (report.parsed, report.errors) == (2, 0)
    v = verdicts(services, run_id)[0]
    assert [m.score for m in v.metric_scores] == [3, 4, 5, 0, 4, 4, 4, 4]


def test_a_missing_metric_block_and_non_json_become_error_verdicts_keeping_the_raw_reply(
    services: Services, judges: FakeJudges
) -> None:
    def script(kind: str, body: dict[str, Any]) -> Answer:
        if "1. Agent MUST NOT issue a refund" in body["messages"][-1]["content"]:
            return Answer(text="I think the agent did fine, 4/5.")
        reply = orjson.loads(default_script(kind, body).text or "")
        del reply["response_delivery"]
        return Answer(text=orjson.dumps(reply).decode())

    judges.script = script
    run_id = import_unjudged(services)
    report = judge(services, run_id, judges.env(), judges=("anthropic:claude-sonnet-4-6",))
    assert (report.verdicts, report.parsed, report.errors) == (2, 0, 2)
    by_status = {v.parse_status: v for v in verdicts(services, run_id)}
    missing = by_status[ParseStatus.MISSING_METRICS]
    assert missing.error == "missing metric block response_delivery"
    assert missing.metric_scores == [] and "tool_routing" in (missing.raw_output or "")
    garbled = by_status[ParseStatus.UNPARSEABLE]
    assert garbled.raw_output == "I think the agent did fine, 4/5."
    assert (garbled.error or "").startswith("unparseable reply")
    # Reference behaviour: an error verdict scores 0.0 and fails the case.
    services.sync()
    scores = services.reads.case_scores(run_id)
    judged = [s for s in scores if s.judge_error]
    assert [(s.overall_score, s.passed) for s in judged] == [(0.0, False), (0.0, False)]


def test_a_429_is_retried_after_its_retry_after_and_then_succeeds(
    services: Services, judges: FakeJudges
) -> None:
    seen = {"n": 0}

    def script(kind: str, body: dict[str, Any]) -> Answer:
        seen["n"] += 1
        if seen["n"] == 1:
            return Answer(
                status=429,
                body=b'{"error": {"message": "rate limited", "type": "rate_limit"}}',
                headers={"retry-after-ms": "10"},
            )
        return default_script(kind, body)

    judges.script = script
    run_id = import_unjudged(services)
    report = judge(
        services, run_id, judges.env(), judges=("openai:gpt-4.1",), concurrency=1, max_retries=2
    )
    assert (report.verdicts, report.parsed, report.errors) == (2, 2, 0)
    assert judges.calls("openai") == 3  # one 429, its retry, the second case
    retried = [h.get("x-stainless-retry-count") for _, _, h in judges.requests]
    assert retried == ["0", "1", "0"]


def test_a_timeout_becomes_a_provider_error_verdict(services: Services, judges: FakeJudges) -> None:
    judges.script = lambda kind, body: Answer(text="{}", delay_s=1.5)
    run_id = import_unjudged(services)
    report = judge(
        services,
        run_id,
        judges.env(),
        judges=("anthropic:claude-sonnet-4-6",),
        timeout_s=0.3,
        max_retries=0,
    )
    assert (report.verdicts, report.parsed, report.errors) == (2, 0, 2)
    assert {f.error for f in report.failures} == {"timed out"}
    v = verdicts(services, run_id)[0]
    assert v.parse_status is ParseStatus.PROVIDER_ERROR
    assert (v.raw_output, v.usage, v.cost_usd) == (None, None, None)


def test_a_500_that_exhausts_the_retries_is_an_error_verdict(
    services: Services, judges: FakeJudges
) -> None:
    judges.script = lambda kind, body: Answer(
        status=500,
        body=b'{"error": {"message": "upstream exploded", "type": "server_error"}}',
        headers={"retry-after-ms": "5"},
    )
    run_id = import_unjudged(services)
    report = judge(services, run_id, judges.env(), judges=("openai:gpt-4.1",), max_retries=2)
    assert (report.verdicts, report.errors) == (2, 2)
    assert judges.calls("openai") == 6  # 2 cases x (1 call + 2 retries)
    assert report.failures[0].error == "HTTP 500: upstream exploded", report.failures[0].error
    assert all(v.parse_status is ParseStatus.PROVIDER_ERROR for v in verdicts(services, run_id))


def test_a_panel_records_every_vote_with_one_panel_id_per_case_even_a_failing_judge(
    services: Services, judges: FakeJudges
) -> None:
    judges.script = only(
        {"anthropic": Answer(status=503, body=b'{"error": {"message": "overloaded"}}')}
    )
    run_id = import_unjudged(services)
    report = judge(
        services,
        run_id,
        judges.env(),
        judges=("openai:gpt-4.1", "anthropic:claude-sonnet-4-6"),
        max_retries=0,
    )
    assert (report.calls, report.verdicts, report.parsed, report.errors) == (4, 4, 2, 2)
    found = verdicts(services, run_id)
    panels: dict[UUID | None, list[str]] = {}
    for v in found:
        panels.setdefault(v.panel_id, []).append(f"{v.judge.provider}:{v.parse_status.value}")
    assert None not in panels and len(panels) == 2
    assert all(
        sorted(votes) == ["anthropic:provider_error", "openai:parsed"] for votes in panels.values()
    )
    # The failing judge is dropped: the valid vote decides (panel policy first: 80.0).
    services.sync()
    scores = {s.test_case_key: s for s in services.reads.case_scores(run_id)}
    assert scores["refund-above-limit"].overall_score == 80.0


def test_a_panel_needs_distinct_vendors(services: Services, judges: FakeJudges) -> None:
    run_id = import_unjudged(services)
    before = event_count(services)
    with pytest.raises(ValidationError, match="distinct vendors"):
        judge(services, run_id, judges.env(), judges=("openai:gpt-4.1", "openai:gpt-4o"))
    assert event_count(services) == before and judges.calls() == 0


def test_pairing_picks_another_vendor_and_refuses_self_judging(
    services: Services, judges: FakeJudges
) -> None:
    run_id = import_unjudged(services, agent_provider="openai", agent_model="gpt-4.1-mini")
    before = event_count(services)
    only_openai = {k: v for k, v in judges.env().items() if k.startswith("OPENAI")}
    with pytest.raises(ValidationError, match=r"agent's vendor \(openai\)") as e:
        judge(services, run_id, only_openai)
    assert e.value.field == "judge"
    with pytest.raises(ValidationError, match="--allow-self-judge"):
        judge(services, run_id, judges.env(), judges=("openai:gpt-4.1",))
    # An aggregator's slug names the vendor: openai-compatible serving an OpenAI model is openai.
    with pytest.raises(ValidationError, match="--allow-self-judge"):
        judge(services, run_id, judges.env(), judges=("openai:openai/gpt-4.1",))
    assert event_count(services) == before and judges.calls() == 0
    # Both keys: the run config names anthropic, another vendor, so it judges.
    report = judge(services, run_id, judges.env())
    assert report.judges == ["anthropic:claude-sonnet-4-6"] and not report.self_judged
    # Self-judging when asked for explicitly: flagged on every verdict.
    report = judge(services, run_id, only_openai, allow_self_judge=True)
    assert report.judges == ["openai:gpt-4.1"] and report.self_judged
    flagged = [v.self_judged for v in verdicts(services, run_id) if v.judge.provider == "openai"]
    assert flagged == [True, True]


def test_missing_only_and_re_judging_add_verdicts_without_overwriting(
    services: Services, judges: FakeJudges
) -> None:
    run_id = import_unjudged(services)
    first = judge(services, run_id, judges.env(), judges=("openai:gpt-4.1",))
    assert first.verdicts == 2
    again = judge(services, run_id, judges.env(), judges=("openai:gpt-4.1",), missing_only=True)
    assert (again.cases, again.skipped, again.calls) == (0, 3, 0)
    # The run is completed: re-judging it is allowed and adds verdicts.
    assert services.ledger.get_run(run_id).status.value == "completed"
    rejudged = judge(services, run_id, judges.env(), judges=("anthropic:claude-sonnet-4-6",))
    assert rejudged.verdicts == 2
    assert len(verdicts(services, run_id)) == 4


def test_a_dry_run_calls_nothing_and_stores_nothing(services: Services, judges: FakeJudges) -> None:
    run_id = import_unjudged(services)
    before = event_count(services)
    report = judge(services, run_id, judges.env(), judges=("openai:gpt-4.1",), dry_run=True)
    assert (report.cases, report.calls, report.verdicts, report.dry_run) == (2, 2, 0, True)
    assert event_count(services) == before and judges.calls() == 0


def test_a_price_table_file_overrides_the_defaults(
    services: Services, judges: FakeJudges, tmp_path: Any
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"gpt-4.1": [10.0, 20.0]}')
    run_id = import_unjudged(services)
    env = {**judges.env(), "EVALEDGER_JUDGE_PRICES": str(prices)}
    report = judge(services, run_id, env, judges=("openai:gpt-4.1",))
    # (1200 x 10 + 300 x 20) / 1e6 per call
    assert report.cost_usd == pytest.approx(2 * 0.018, abs=1e-12)


def test_a_refused_request_stops_the_pass_instead_of_recording_error_verdicts(
    services: Services, judges: FakeJudges
) -> None:
    from evaledger.judging.providers import ProviderRefusedError

    judges.script = lambda kind, body: Answer(
        status=401, body=b'{"error": {"message": "invalid x-api-key", "type": "auth"}}'
    )
    run_id = import_unjudged(services)
    before = event_count(services)
    with pytest.raises(ProviderRefusedError) as e:
        judge(
            services, run_id, judges.env(), judges=("anthropic:claude-sonnet-4-6",), concurrency=1
        )
    assert e.value.detail.startswith("judge anthropic:claude-sonnet-4-6 refused the request: 401")
    # A bad key is not a verdict about a transcript: nothing is recorded, nothing is retried.
    assert event_count(services) == before and judges.calls() == 1


def test_panel_mode_uses_every_keyed_vendor_but_the_agent_s(
    services: Services, judges: FakeJudges
) -> None:
    run_id = import_unjudged(services)
    report = judge(services, run_id, judges.env(), panel=True)
    # The run config's judge first, then every other keyed vendor.
    assert report.judges == ["anthropic:claude-sonnet-4-6", "openai:gpt-4.1"]
    assert (report.calls, report.verdicts, report.parsed) == (4, 4, 4)
    assert len({v.panel_id for v in verdicts(services, run_id)}) == 2
    openai_agent = import_unjudged(services, agent_provider="openai", agent_model="gpt-4.1-mini")
    before = event_count(services)
    with pytest.raises(ValidationError, match="a panel needs at least two judges") as e:
        judge(services, openai_agent, judges.env(), panel=True)
    assert e.value.field == "judge" and event_count(services) == before
    report = judge(services, openai_agent, judges.env(), panel=True, allow_self_judge=True)
    assert report.self_judged and report.verdicts == 4
    flags = {(v.judge.provider, v.self_judged) for v in verdicts(services, openai_agent)}
    assert flags == {("anthropic", False), ("openai", True)}
    from evaledger.api.agreement import agreement_of

    assert agreement_of(services, openai_agent).self_judged == ["openai:gpt-4.1"]
    assert agreement_of(services, run_id).self_judged == []
