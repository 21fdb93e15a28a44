"""Claim checks (`evaledger judge RUN --claims grounding|attribution`) against the loopback judges."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import orjson
import pytest

from evaledger.api.bootstrap import Services
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    AgentSnapshot,
    ClaimSupport,
    ClaimsVerified,
    TestCaseSnapshot,
    Turn,
)
from evaledger.judging.claims import SCHEMA, TEMPLATE_ID, parse_claims, render_claims
from evaledger.judging.prompt import CaseToJudge
from tests.fake_judges import Answer, FakeJudges, serve
from tests.helpers import event_count
from tests.judging.test_judging import import_unjudged, judge

CLAIMS = {
    "claims": [
        {"claim": "Order 42 was delivered", "support": "supported", "source": "turn 2"},
        {"claim": "The refund arrives tomorrow", "support": "unsupported", "source": None},
        {"claim": "Order 42 was on time", "support": "contradicted", "source": "turn 2"},
    ]
}


@pytest.fixture
def judges() -> Iterator[FakeJudges]:
    yield from serve()


def claims_of(services: Services, run_id: UUID) -> list[ClaimsVerified]:
    run = services.ledger.get_run(run_id)
    return [
        e
        for cid in run.case_ids
        for e in services.ledger.events_of(cid)
        if isinstance(e, ClaimsVerified)
    ]


def test_grounding_records_claims_with_prompt_and_reply_and_counts_hallucinations(
    services: Services, judges: FakeJudges
) -> None:
    judges.script = lambda kind, body: Answer(text=orjson.dumps(CLAIMS).decode())
    run_id = import_unjudged(services)
    report = judge(services, run_id, judges.env(), judges=("openai:gpt-4.1",), claims="grounding")
    assert (report.calls, report.verdicts, report.parsed, report.claims) == (2, 2, 2, 6)
    assert report.claim_mode == "grounding"
    # --missing-only in claim mode skips cases already checked, not cases already scored.
    again = judge(
        services,
        run_id,
        judges.env(),
        judges=("openai:gpt-4.1",),
        claims="grounding",
        missing_only=True,
    )
    assert (again.cases, again.skipped) == (0, 3)
    _, body, _ = judges.requests[0]
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    checked = claims_of(services, run_id)
    assert len(checked) == 2
    c = checked[0]
    assert (c.mode, c.template_id, c.error) == ("grounding", TEMPLATE_ID, None)
    assert [(x.support, x.source) for x in c.claims] == [
        (ClaimSupport.SUPPORTED, "turn 2"),
        (ClaimSupport.UNSUPPORTED, None),
        (ClaimSupport.CONTRADICTED, "turn 2"),
    ]
    assert c.raw_output == orjson.dumps(CLAIMS).decode()
    assert c.prompt is not None and "## Answer to check" in c.prompt
    assert c.judge is not None and c.judge.provider == "openai"
    assert c.usage is not None and c.cost_usd == pytest.approx(0.0048, abs=1e-12)
    services.sync()
    judged = [s for s in services.reads.case_scores(run_id) if s.claims_total]
    assert [(s.claims_total, s.claims_supported, s.hallucinations) for s in judged] == [
        (3, 1, 2),
        (3, 1, 2),
    ]


def test_unparseable_and_claimless_replies_are_extraction_errors(
    services: Services, judges: FakeJudges
) -> None:
    def script(kind: str, body: dict[str, Any]) -> Answer:
        if "N-2210" in body["messages"][-1]["content"]:
            return Answer(text='{"claims": []}')
        return Answer(text="Sorry, I cannot do that.")

    judges.script = script
    run_id = import_unjudged(services)
    report = judge(
        services,
        run_id,
        judges.env(),
        judges=("anthropic:claude-sonnet-4-6",),
        claims="attribution",
    )
    assert (report.verdicts, report.parsed, report.errors, report.claims) == (2, 0, 2, 0)
    errors = sorted(c.error or "" for c in claims_of(services, run_id))
    assert errors[0] == "extraction error: the judge found no claims"
    assert errors[1].startswith("extraction error: unparseable reply")
    assert {c.raw_output for c in claims_of(services, run_id)} >= {"Sorry, I cannot do that."}


def test_bad_claim_requests_store_nothing(services: Services, judges: FakeJudges) -> None:
    run_id = import_unjudged(services)
    before = event_count(services)
    with pytest.raises(ValidationError) as e:
        judge(services, run_id, judges.env(), judges=("openai:gpt-4.1",), claims="vibes")
    assert e.value.field == "claims"
    with pytest.raises(ValidationError, match="one judge, not a panel"):
        judge(
            services,
            run_id,
            judges.env(),
            judges=("openai:gpt-4.1", "anthropic:claude-sonnet-4-6"),
            claims="grounding",
        )
    with pytest.raises(ValidationError, match="one judge, not a panel"):
        judge(services, run_id, judges.env(), panel=True, claims="grounding")
    assert event_count(services) == before and judges.calls() == 0


SUBJECT = CaseToJudge(
    test_case=TestCaseSnapshot(key="k"),
    agent=AgentSnapshot(name="a", system_prompt="Refunds take 5 to 7 business days."),
    turns=[
        Turn(role="user", content="When do I get my refund?"),
        Turn(role="assistant", content="  "),
        Turn(role="tool", content='{"refund": "issued"}'),
        Turn(role="assistant", content="Your refund was issued; it takes 5 to 7 business days."),
    ],
)


def test_the_claim_prompts_name_sources_and_the_answer() -> None:
    grounding = render_claims(SUBJECT, "grounding")
    assert "Agent system prompt:\nRefunds take 5 to 7 business days.\n" in grounding.user
    assert 'Tool results:\nTurn 2 [tool]: {"refund": "issued"}\n' in grounding.user
    assert grounding.user.endswith(
        "## Answer to check\nTurn 3: Your refund was issued; it takes 5 to 7 business days.\n"
    )
    assert "against all of the sources below" in grounding.system
    attribution = render_claims(SUBJECT, "attribution")
    assert "name the one source it rests on" in attribution.system
    assert attribution.template_hash == grounding.template_hash


def test_parse_claims_rules() -> None:
    assert parse_claims('{"claims": [{"claim": "x", "support": "Supported"}]}').claims[
        0
    ].support is (ClaimSupport.SUPPORTED)
    assert parse_claims('{"claims": [{"claim": "x", "support": "maybe"}]}').error == (
        "extraction error: claims[0]: support 'maybe'"
    )
    assert parse_claims('{"claims": [{"claim": " ", "support": "supported"}]}').error == (
        "extraction error: claims[0] has no claim text"
    )
    assert parse_claims("[]").error == "extraction error: no `claims` list in the reply"


def test_an_empty_answer_is_recorded_without_a_call(services: Services, judges: FakeJudges) -> None:
    from evaledger.domain.bundle import RunBundle
    from evaledger.domain.ledger import Context
    from tests.judging.test_judging import unjudged_bundle

    data = unjudged_bundle()
    data["run"]["key"] = "silent-agent"
    for c in data["cases"]:
        for t in c.get("transcript", []):
            if t["role"] == "assistant":
                t["content"] = ""
    run_id = services.ledger.import_bundle(RunBundle.model_validate(data), Context()).run_id
    report = judge(services, run_id, judges.env(), judges=("openai:gpt-4.1",), claims="grounding")
    assert (report.verdicts, report.errors, judges.calls()) == (2, 2, 0)
    assert {c.error for c in claims_of(services, run_id)} == {
        "empty answer: the agent said nothing to check"
    }
