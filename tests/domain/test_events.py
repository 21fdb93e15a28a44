"""Stored events: golden fixtures, stable topics, upcasting on read, and the model rules.

Each file in tests/fixtures/golden_events/ is one stored event exactly as the store holds it
(topic + state bytes). Stored events never change: a schema change needs a new class version and
an upcaster, never a rewritten golden file. Missing golden files are created with
    UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/domain/test_events.py
(existing ones are never overwritten).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar
from uuid import UUID

import orjson
import pydantic
import pytest
from eventsourcing.persistence import StoredEvent
from pydantic import Field

from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import (
    BY_TOPIC_NAME,
    EVENT_CLASSES,
    GENESIS_HASH,
    AgentSnapshot,
    AlertDefined,
    AlertDeliveryAttempted,
    AlertDisabled,
    AlertEvent,
    AlertFired,
    AlertRecovered,
    BaselineApproved,
    BaselineRevoked,
    CalibrationEvent,
    CaseEvent,
    CaseFlagged,
    CaseOpened,
    CasesAttached,
    CaseUnflagged,
    CatalogueEvent,
    ChainAdopted,
    CheckStatus,
    Claim,
    ClaimSupport,
    ClaimsVerified,
    DatasetCreated,
    DatasetEvent,
    DatasetItem,
    DatasetLabel,
    DatasetRef,
    DatasetVersionAdded,
    DomainEvent,
    Estimate,
    ExecutionCanceled,
    ExecutionErrored,
    ExecutionSkipped,
    ExpectedOutcome,
    HumanLabelRecorded,
    IdempotencyKeyUsed,
    JudgeCalibrated,
    JudgeIdentity,
    JudgeVerdictRecorded,
    MetricRegistered,
    MetricScore,
    NamedScore,
    NamedScoresRecorded,
    OnlineCaseJudged,
    OnlineCaseSkipped,
    OnlineRuleAdded,
    OnlineRuleDisabled,
    OnlineRuleEvent,
    OutcomeEvaluated,
    OutcomeResult,
    ParseStatus,
    PayloadErased,
    ReviewAssignment,
    ReviewEvent,
    ReviewItemAdjudicated,
    ReviewItemLabelled,
    ReviewItemsAssigned,
    ReviewItemSkipped,
    ReviewQueueCreated,
    Role,
    RunCanceled,
    RunCompleted,
    RunCreated,
    RunEvent,
    RunFailed,
    RunStarted,
    ScoreLabel,
    ScoreOverridden,
    ScoreScale,
    ShareEvent,
    ShareLinkCreated,
    ShareLinkRevoked,
    SigningKeyRotated,
    SourceResultsRecorded,
    StructuralCheckRecorded,
    SuiteRef,
    TestCaseSnapshot,
    TokenEvent,
    TokenIssued,
    TokenRevoked,
    TokenScope,
    ToolCall,
    ToolSpec,
    TraceEvent,
    TraceRecorded,
    TraceSpansReceived,
    TranscriptRecorded,
    Turn,
    Usage,
    VerdictInvalidated,
    VerdictOverridden,
    encode_state,
    stored_hash,
)
from evaledger.domain.ledger import Context
from evaledger.domain.metrics import MetricDefinition, ScoreType, Tier
from evaledger.domain.spec import (
    JudgeConfig,
    MetricSelection,
    RunConfig,
    ScorerInfo,
    Severity,
    resolve_spec,
)
from evaledger.domain.store.codec import UPCASTERS, EventMapper, OrjsonTranscoder, upcaster
from evaledger.domain.verify import verify
from tests.conftest import FIXTURES
from tests.helpers import bundle

GOLDEN = FIXTURES / "golden_events"
CHAIN_ID = UUID("6f1c2a0e-2f33-5b7e-9d0e-3c1f4a5b6c7d")
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"
MAPPER = EventMapper(transcoder=OrjsonTranscoder())

RUN_ID = UUID("6f1d3c1e-0c6a-5b7e-9d41-1a2b3c4d5e6f")
CASE_ID = UUID("0b8e6a52-3f57-5c4e-8a1d-9e8f7a6b5c4d")
TRACE_ID = UUID("3a7c1e52-9b0d-5f21-8c4e-7d6f5a4b3c2e")
RULES_ID = UUID("4e1f0c2a-7b3d-5e6f-9a0b-1c2d3e4f5a6b")
RULE_DAY_ID = UUID("5f2a1d3b-8c4e-5f70-8b1c-2d3e4f5a6b7c")
DATASET_ID = UUID("d5e7a1b2-4c3d-5e6f-8a9b-0c1d2e3f4a5b")
CALIBRATION_ID = UUID("ca11b4a7-1e2d-5c3b-8a4f-6e5d4c3b2a19")
CATALOGUE_ID = UUID("c0ffee00-1234-5678-9abc-def012345678")
VERDICT_ID = UUID("a1b2c3d4-e5f6-5a7b-8c9d-0e1f2a3b4c5d")
IDEMPOTENCY_ID = UUID("1d3e0000-aaaa-5bbb-8ccc-0123456789ab")
TOKEN_ID = UUID("70c0e000-bbbb-5ccc-8ddd-0123456789ab")
QUEUE_ID = UUID("7e51e000-cccc-5ddd-8eee-0123456789ab")
SHARE_ID = UUID("5a4e0000-cccc-5ddd-8eee-0123456789ab")
ALERT_ID = UUID("a1e47000-cccc-5ddd-8eee-0123456789ab")
T0 = datetime(2026, 11, 20, 2, 0, 0, 123456, tzinfo=UTC)

# The stable topics of the catalogue. Changing one breaks every stored event of that class.
TOPICS = [
    "evaledger.run.created/v1",
    "evaledger.run.started/v1",
    "evaledger.run.cases_attached/v1",
    "evaledger.run.completed/v1",
    "evaledger.run.canceled/v1",
    "evaledger.run.failed/v1",
    "evaledger.run.baseline_approved/v1",
    "evaledger.run.baseline_revoked/v1",
    "evaledger.case.opened/v1",
    "evaledger.case.transcript_recorded/v1",
    "evaledger.case.execution_errored/v1",
    "evaledger.case.execution_canceled/v1",
    "evaledger.case.judge_verdict_recorded/v1",
    "evaledger.case.outcome_evaluated/v1",
    "evaledger.case.claims_verified/v1",
    "evaledger.case.structural_check_recorded/v1",
    "evaledger.case.verdict_overridden/v1",
    "evaledger.case.verdict_invalidated/v1",
    "evaledger.catalogue.metric_registered/v1",
    "evaledger.idempotency.key_used/v1",
    "evaledger.token.issued/v1",
    "evaledger.token.revoked/v1",
    "evaledger.case.named_scores_recorded/v1",
    "evaledger.ledger.chain_adopted/v1",
    "evaledger.case.human_label_recorded/v1",
    "evaledger.case.flagged/v1",
    "evaledger.case.unflagged/v1",
    "evaledger.run.source_results_recorded/v1",
    "evaledger.case.score_overridden/v1",
    "evaledger.case.execution_skipped/v1",
    "evaledger.ledger.signing_key_rotated/v1",
    "evaledger.trace.spans_received/v1",
    "evaledger.trace.recorded/v1",
    "evaledger.review.queue_created/v1",
    "evaledger.review.items_assigned/v1",
    "evaledger.review.item_labelled/v1",
    "evaledger.review.item_skipped/v1",
    "evaledger.review.item_adjudicated/v1",
    "evaledger.case.payload_erased/v1",
    "evaledger.rule.added/v1",
    "evaledger.rule.disabled/v1",
    "evaledger.rule.case_judged/v1",
    "evaledger.rule.case_skipped/v1",
    "evaledger.share.link_created/v1",
    "evaledger.share.link_revoked/v1",
    "evaledger.alert.defined/v1",
    "evaledger.alert.disabled/v1",
    "evaledger.alert.fired/v1",
    "evaledger.alert.recovered/v1",
    "evaledger.alert.delivery_attempted/v1",
    "evaledger.dataset.created/v1",
    "evaledger.dataset.version_added/v1",
    "evaledger.calibration.judge_calibrated/v1",
]


def _meta(
    aggregate: UUID, version: int, *, key: str | None = None, minutes: int = 0
) -> dict[str, Any]:
    return {
        "originator_id": aggregate,
        "originator_version": version,
        "timestamp": T0 + timedelta(minutes=minutes),
        "actor": "token:ci-42",
        "idempotency_key": key,
        "request_digest": None if key is None else "d" * 64,
        "prev_hash": GENESIS_HASH if version == 1 else f"{version - 1:x}" * 64,
    }


JUDGE = JudgeIdentity(
    kind="llm",
    provider="anthropic",
    model="claude-sonnet-4-5",
    version="2025-09-29",
    temperature=0.2,
    params={"max_tokens": 1024, "top_p": 0.9},
)

CONFIG = RunConfig(
    metrics_pass_threshold=85.0,
    judge=JudgeConfig(
        metrics=[
            MetricSelection(metric="tool_routing", weight=2.0),
            MetricSelection(metric="grounding_fidelity"),
            MetricSelection(metric="task_completion", weight=1.0),
        ],
        pass_threshold=70.0,
        provider="anthropic",
        model="claude-sonnet-4-5",
    ),
)


def samples() -> dict[type[DomainEvent], DomainEvent]:
    """One fully populated instance of every event class."""
    turns = [
        Turn(role=Role.USER, content="Where is order N-1042?"),
        Turn(
            role=Role.ASSISTANT,
            latency_ms=640.5,
            tool_calls=[ToolCall(id="call_1", name="lookup_order", arguments={"id": "N-1042"})],
            usage=Usage(prompt_tokens=120, completion_tokens=14),
            cost_usd=0.0004,
            metrics={"ttfb_ms": 210.0},
        ),
        Turn(role=Role.TOOL, tool_call_id="call_1", content='{"status": "delayed"}'),
        Turn(role=Role.ASSISTANT, content="It is delayed; I can refund shipping.", latency_ms=910),
    ]
    outcome = OutcomeResult(
        statement="Agent looks the order up first",
        passed=True,
        severity=Severity.BLOCKER,
        justification="turn 1",
    )
    built: list[DomainEvent] = [
        RunCreated(
            **_meta(RUN_ID, 1, key="create-1"),
            run_key="northwind-v12-nightly",
            project="northwind",
            name="Northwind v12 nightly",
            suite=SuiteRef(name="northwind-support-voice", version=3),
            agent=AgentSnapshot(
                name="northwind-support",
                version="12",
                provider="openai",
                model="gpt-4.1-mini",
                system_prompt="You are Ava.",
                tools=[ToolSpec(name="lookup_order", description="Fetch", parameters={"a": 1})],
            ),
            labels={"git_sha": "4f2c9e1", "trigger": "nightly"},
            config=CONFIG,
            spec=resolve_spec(CONFIG),
            created_at=datetime(2026, 11, 20, 2, 0, tzinfo=UTC),
        ),
        RunStarted(**_meta(RUN_ID, 2)),
        CasesAttached(**_meta(RUN_ID, 3), case_ids=[CASE_ID]),
        RunCompleted(
            **_meta(RUN_ID, 4),
            completed_at=datetime(2026, 11, 20, 2, 14, 31, tzinfo=UTC),
            seal="5" * 64,
            case_count=1,
        ),
        RunCanceled(**_meta(RUN_ID, 5), reason="harness stopped"),
        RunFailed(**_meta(RUN_ID, 6), reason="agent endpoint down"),
        BaselineApproved(
            **_meta(RUN_ID, 7), agent="northwind-support", suite="northwind-support-voice"
        ),
        BaselineRevoked(
            **_meta(RUN_ID, 8),
            agent="northwind-support",
            suite="northwind-support-voice",
            reason="regressed",
        ),
        SourceResultsRecorded(
            **_meta(RUN_ID, 9),
            labels={"inspect.status": "success"},
            scorers=(
                ScorerInfo(
                    name="match (max)",
                    score="match",
                    semantics="inspect",
                    metrics=("accuracy", "stderr"),
                    reducer="max",
                    reported={"accuracy": 0.75, "stderr": 0.25},
                ),
            ),
        ),
        CaseOpened(
            **_meta(CASE_ID, 1, key="case-1"),
            run_id=RUN_ID,
            test_case=TestCaseSnapshot(
                key="refund-late-delivery",
                name="Refund for a late delivery",
                test_id="B01",
                expected_outcomes=[
                    ExpectedOutcome(statement="Agent looks the order up first"),
                    ExpectedOutcome(statement="Agent offers the fee", severity=Severity.MEDIUM),
                ],
                evaluation_criteria_override="Weigh verification heavily.",
                tags=["refunds"],
                category="FABRICATION",
                weight=2.0,
                persona="hurried",
                configuration="voice-default",
                evaluation_method="judge",
                scenario="late delivery",
            ),
            repetition=2,
            variant="voice-default\x1fhurried",
        ),
        TranscriptRecorded(
            **_meta(CASE_ID, 2, minutes=1),
            turns=turns,
            usage=Usage(prompt_tokens=2140, completion_tokens=188),
            cost_usd=0.0031,
            started_at=datetime(2026, 11, 20, 2, 1, tzinfo=UTC),
            ended_at=datetime(2026, 11, 20, 2, 2, tzinfo=UTC),
            duration_ms=60000.0,
        ),
        ExecutionErrored(
            **_meta(CASE_ID, 3), message="Agent endpoint timed out after 120000 ms", kind="timeout"
        ),
        ExecutionCanceled(**_meta(CASE_ID, 4), reason="suite aborted"),
        JudgeVerdictRecorded(
            **_meta(CASE_ID, 5),
            verdict_id=VERDICT_ID,
            judge=JUDGE,
            template_id="connexity-judge/v3",
            template_hash="e" * 64,
            prompt="Score the conversation ...",
            raw_output='{"tool_routing": {"score": 5}}',
            parse_status=ParseStatus.PARSED,
            metric_scores=[
                MetricScore(
                    metric="tool_routing",
                    score=5,
                    justification="order looked up first",
                    failure_code=None,
                    turns=[1],
                ),
                MetricScore(metric="task_completion", passed=True),
            ],
            expected_outcomes=[outcome],
            latency_ms=2310.0,
            usage=Usage(prompt_tokens=3000, completion_tokens=400),
            cost_usd=0.012,
            error=None,
        ),
        OutcomeEvaluated(**_meta(CASE_ID, 6), results=[outcome], judge=JUDGE),
        ClaimsVerified(
            **_meta(CASE_ID, 7),
            claims=[
                Claim(claim="Order N-1042 is delayed", support=ClaimSupport.SUPPORTED, source="t2"),
                Claim(claim="Refunds take 1 day", support=ClaimSupport.UNSUPPORTED),
            ],
            judge=JUDGE,
        ),
        StructuralCheckRecorded(
            **_meta(CASE_ID, 8),
            check="refund_amount_matches",
            status=CheckStatus.INCONCLUSIVE,
            evidence="hook missing",
        ),
        VerdictOverridden(
            **_meta(CASE_ID, 9),
            verdict_id=VERDICT_ID,
            metric_scores=[MetricScore(metric="tool_routing", score=3)],
            expected_outcomes=[outcome.model_copy(update={"passed": False})],
            passed=False,
            reason="the refund was promised before lookup",
        ),
        VerdictInvalidated(
            **_meta(CASE_ID, 10), verdict_id=VERDICT_ID, reason="judge saw the wrong transcript"
        ),
        MetricRegistered(
            **_meta(CATALOGUE_ID, 1),
            project="northwind",
            definition=MetricDefinition(
                name="empathy",
                display_name="Empathy",
                description="Acknowledges the customer's situation.",
                tier=Tier.DELIVERY,
                default_weight=0.05,
                score_type=ScoreType.SCORED,
                rubric="5: warm\n0: cold",
                include_in_defaults=False,
            ),
        ),
        IdempotencyKeyUsed(
            **_meta(IDEMPOTENCY_ID, 1, key="create-run-7"),
            scope="POST /runs",
            result_ids=[RUN_ID],
        ),
        TokenIssued(
            **_meta(TOKEN_ID, 1),
            token_id="0123456789ab",
            project="northwind",
            scope=TokenScope.WRITE,
            name="ci",
            secret_sha256="5" * 64,
        ),
        TokenRevoked(**_meta(TOKEN_ID, 2, minutes=5), reason="leaked in a log"),
        NamedScoresRecorded(
            **_meta(CASE_ID, 11),
            scorer="model_graded_fact",
            scores=[
                NamedScore(name="model_graded_fact", value="C", scale=ScoreScale.GRADE),
                NamedScore(name="Tone", value=0.6, scale=ScoreScale.FRACTION),
                NamedScore(name="refused", value=False, scale=ScoreScale.BOOLEAN),
            ],
            answer="Yes.",
            explanation="The answer matches the criterion. GRADE: C",
            prompt="You are comparing a submitted answer to an expert answer.",
            raw_output="GRADE: C",
            grader=JudgeIdentity(provider="openai", model="gpt-4o-mini"),
            metadata={"epoch": 1},
            usage=Usage(prompt_tokens=120, completion_tokens=8),
            cost_usd=0.0001,
        ),
        HumanLabelRecorded(
            **_meta(CASE_ID, 12),
            passed=False,
            metric_scores=[
                MetricScore(metric="tool_routing", score=2, justification="looked it up late"),
                MetricScore(metric="task_completion", passed=False),
            ],
            comment="The refund was promised before the order was found.",
        ),
        CaseFlagged(**_meta(CASE_ID, 13), reason="caller asked twice for a human"),
        CaseUnflagged(**_meta(CASE_ID, 14), reason="checked: the hand-off happened"),
        PayloadErased(
            **_meta(CASE_ID, 17),
            subject=str(CASE_ID),
            refs=["5aaf9df924917cd97cec88dd8b7b7a896833b04b5847f322520d39886fc46db4"],
            reason="deletion request 12",
        ),
        ExecutionSkipped(**_meta(CASE_ID, 16), outcome="xfailed", reason="issue 12: flaky"),
        ScoreOverridden(
            **_meta(CASE_ID, 15),
            score="match",
            value=1.0,
            reason="the answer is right; the target spells it differently",
        ),
        ChainAdopted(
            **_meta(CHAIN_ID, 1),
            reason="written by 0.3, before the chain",
            first_position=1,
            last_position=40,
            events=40,
        ),
        SigningKeyRotated(
            **_meta(CHAIN_ID, 2),
            old_key="evaledger+8d1a5c2e+AZ3NLmKXcP4Zz3FbJ3QJjv7Q2m3GJ+0jvOe6A2Vb3t7e",
            new_key="evaledger+17f0c9b4+AVz5ktZ0Gk7mLr0bqV8aWQ2Qp0Xc4w2z0pXkQ1Y7t9u1",
            signature="c2lnbmF0dXJlIG9mIHRoZSBoYW5kLW92ZXI=",
            reason="yearly rotation",
        ),
        TraceSpansReceived(
            **_meta(TRACE_ID, 1),
            project="shop",
            trace_id="5b8efff798038103d269b633813fc60c",
            spans=[
                {
                    "span_id": "eee19b7ec3c1b174",
                    "parent_span_id": None,
                    "name": "chat gpt-4o-mini",
                    "kind": 3,
                    "start_ns": 1764000000000000000,
                    "end_ns": 1764000000812000000,
                    "status": {"code": 0, "message": ""},
                    "attributes": {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": "gpt-4o-mini",
                        "gen_ai.usage.input_tokens": 21,
                        "app.customer_tier": "gold",
                    },
                    "events": [],
                    "resource": {"service.name": "support-bot", "service.version": "1.2.0"},
                    "scope": {"name": "opentelemetry.instrumentation.openai_v2", "version": ""},
                }
            ],
        ),
        TraceRecorded(**_meta(TRACE_ID, 2), run_id=RUN_ID, case_id=CASE_ID),
        ReviewQueueCreated(
            **_meta(QUEUE_ID, 1),
            project="northwind",
            name="failed-but-scored-high",
            rule="status = failed and judge_score >= 4",
            run_ids=[RUN_ID],
            case_ids=[CASE_ID],
            reviewers=["alice", "bob"],
            per_item=2,
            blind=True,
            adjudicators=["lead"],
        ),
        ReviewItemsAssigned(
            **_meta(QUEUE_ID, 2),
            mode="round-robin",
            assignments=[ReviewAssignment(case_id=CASE_ID, reviewers=["alice", "bob"])],
        ),
        ReviewItemLabelled(
            **_meta(QUEUE_ID, 3, minutes=10),
            case_id=CASE_ID,
            reviewer="alice",
            passed=False,
            score=2.0,
            comment="promised a refund it could not give",
        ),
        ReviewItemSkipped(
            **_meta(QUEUE_ID, 4, minutes=11), case_id=CASE_ID, reviewer="bob", reason="unsure"
        ),
        ReviewItemAdjudicated(
            **_meta(QUEUE_ID, 5, minutes=20),
            case_id=CASE_ID,
            passed=False,
            score=2.0,
            reason="refund policy 4.2",
        ),
        OnlineRuleAdded(
            **_meta(RULES_ID, 1),
            project="shop",
            name="helpful",
            sample=0.1,
            where="agent=support-bot and attribute.app.customer_tier=gold",
            judge="anthropic:claude-sonnet-4-6",
            rubrics=[],
            outcomes=["The agent says where the order is"],
            max_cost_per_day_usd=5.0,
            allow_self_judge=False,
        ),
        OnlineRuleDisabled(**_meta(RULES_ID, 2), name="helpful", reason="too noisy"),
        OnlineCaseJudged(
            **_meta(RULE_DAY_ID, 1),
            rule="helpful",
            day="2026-11-20",
            run_id=RUN_ID,
            case_id=CASE_ID,
            trace_id="5b8efff798038103d269b633813fc60c",
            verdicts=1,
            cost_usd=0.00675,
        ),
        OnlineCaseSkipped(
            **_meta(RULE_DAY_ID, 2),
            rule="helpful",
            day="2026-11-20",
            run_id=RUN_ID,
            case_id=VERDICT_ID,
            trace_id="6c9f0008a9149214e37ac744924ad71d",
            reason="budget: the day's cost 5.001000 USD reached max_cost_per_day 5 USD",
        ),
        ShareLinkCreated(
            **_meta(SHARE_ID, 1),
            link_id="0123456789abcdef",
            project="northwind",
            page="compare",
            run_ids=[RUN_ID, CASE_ID],
            expires_at=T0 + timedelta(days=7),
        ),
        ShareLinkRevoked(**_meta(SHARE_ID, 2, minutes=5), reason="sent to the wrong person"),
        AlertDefined(
            **_meta(ALERT_ID, 1),
            project="shop",
            name="support-bot-pass-rate",
            measure="pass_rate",
            below=0.9,
            window_s=3600,
            webhook="https://hooks.example.com/evaledger",
            agent="support-bot",
            version="1.2.0",
        ),
        AlertFired(
            **_meta(ALERT_ID, 2, minutes=60),
            value=0.75,
            n=40,
            window_start=T0,
            window_end=T0 + timedelta(hours=1),
        ),
        AlertDeliveryAttempted(
            **_meta(ALERT_ID, 3, minutes=60),
            transition="fired",
            transition_version=2,
            attempt=1,
            status_code=200,
            delivered=True,
        ),
        AlertRecovered(
            **_meta(ALERT_ID, 4, minutes=120),
            value=0.95,
            n=38,
            window_start=T0 + timedelta(hours=1),
            window_end=T0 + timedelta(hours=2),
        ),
        AlertDisabled(**_meta(ALERT_ID, 5, minutes=180), reason="replaced by a per-version alert"),
        DatasetCreated(
            **_meta(DATASET_ID, 1),
            project="shop",
            name="refund-questions",
            description="Refund questions from the support queue",
        ),
        DatasetVersionAdded(
            **_meta(DATASET_ID, 2),
            version=1,
            content_hash="4" * 64,
            items=[
                DatasetItem(
                    key="refund-late-order",
                    input={"question": "Where is my refund?", "order": "N-1042"},
                    expected_outcomes=["Agent looks the order up first"],
                    tags=["refunds", "voice"],
                    metadata={"source": "queue", "weight": 1.5},
                    label=DatasetLabel(passed=True, score=4.0, by=["token:ann", "token:bo"]),
                )
            ],
            source="gold.jsonl",
        ),
        JudgeCalibrated(
            **_meta(CALIBRATION_ID, 1),
            project="shop",
            judge="anthropic:claude-sonnet-4-5",
            template_hash="5" * 64,
            rubric_hash="6" * 64,
            gold=DatasetRef(name="refund-questions", version=1, hash="4" * 64),
            run_id=RUN_ID,
            n=12,
            true_positives=5,
            false_negatives=1,
            true_negatives=5,
            false_positives=1,
            kappa=Estimate(value=0.6667, low=0.2, high=1.0, method="bootstrap percentile"),
            tpr=Estimate(value=0.8333, low=0.4365, high=0.9699, method="Wilson score"),
            tnr=Estimate(value=0.8333, low=0.4365, high=0.9699, method="Wilson score"),
            accuracy=Estimate(value=0.8333, low=0.5520, high=0.9530, method="Wilson score"),
        ),
    ]
    return {type(e): e for e in built}


SAMPLES = samples()


def golden_path(cls: type[DomainEvent]) -> Path:
    return GOLDEN / f"{cls.topic_name}.json"


def load_golden(cls: type[DomainEvent]) -> StoredEvent:
    path = golden_path(cls)
    if not path.exists():
        if not UPDATE:
            pytest.fail(
                f"{path.name} is missing: create it with "
                "UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/domain/test_events.py"
            )
        stored = MAPPER.to_stored_event(SAMPLES[cls])
        GOLDEN.mkdir(exist_ok=True)
        path.write_bytes(
            orjson.dumps(
                {
                    "topic": stored.topic,
                    "originator_id": str(stored.originator_id),
                    "originator_version": stored.originator_version,
                    "state": stored.state.decode(),
                },
                option=orjson.OPT_INDENT_2,
            )
            + b"\n"
        )
    data = orjson.loads(path.read_bytes())
    return StoredEvent(
        originator_id=UUID(data["originator_id"]),
        originator_version=data["originator_version"],
        topic=data["topic"],
        state=data["state"].encode(),
    )


by_name = pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda c: c.__name__)


def test_there_is_one_sample_and_one_golden_file_per_event_class() -> None:
    assert set(SAMPLES) == set(EVENT_CLASSES)
    assert len(EVENT_CLASSES) == 53
    if GOLDEN.exists():
        assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(
            f"{c.topic_name}.json" for c in EVENT_CLASSES
        )


@by_name
def test_golden_event_decodes_to_the_expected_event(cls: type[DomainEvent]) -> None:
    stored = load_golden(cls)
    decoded = MAPPER.to_domain_event(stored)
    expected = SAMPLES[cls]
    assert type(decoded) is cls
    assert decoded.model_dump() == expected.model_dump()
    # The mapper caches the stored hash on the event; give the expected one its hash too.
    assert expected.hash() == decoded.hash() == stored_hash(stored.topic, stored.state)
    assert decoded == expected


@by_name
def test_encoding_today_gives_the_golden_bytes(cls: type[DomainEvent]) -> None:
    stored = load_golden(cls)
    encoded = MAPPER.to_stored_event(SAMPLES[cls])
    assert encoded.topic == stored.topic == cls.topic()
    assert (encoded.originator_id, encoded.originator_version) == (
        stored.originator_id,
        stored.originator_version,
    )
    assert encoded.state == stored.state, (
        f"the stored form of {cls.__name__} drifted: add a class_version and an upcaster "
        "instead of changing what v1 stores"
    )
    assert encode_state(SAMPLES[cls]) == stored.state


@by_name
def test_golden_state_holds_every_field_but_the_aggregate_position(cls: type[DomainEvent]) -> None:
    state = orjson.loads(load_golden(cls).state)
    # Fields added to a shipped version are stored only when set (their default is left out).
    assert set(state) == set(cls.model_fields) - {"originator_id", "originator_version"} - set(
        cls.added_fields
    )
    assert state["timestamp"].endswith("+00:00")


# ---------------------------------------------------------------------------------------------
# Topics


def test_topics_are_explicit_stable_and_unique() -> None:
    topics = [c.topic() for c in EVENT_CLASSES]
    assert topics == TOPICS
    assert len(set(topics)) == len(topics)
    assert {c.topic_name: c for c in EVENT_CLASSES} == BY_TOPIC_NAME


@by_name
def test_topic_names_the_aggregate_not_the_module(cls: type[DomainEvent]) -> None:
    match = re.fullmatch(
        r"evaledger\.(run|case|catalogue|idempotency|token|ledger|trace|review|rule|share|alert|dataset|calibration)\.([a-z_]+)/v(\d+)",
        cls.topic(),
    )
    assert match is not None, cls.topic()
    base = {
        "run": RunEvent,
        "case": CaseEvent,
        "catalogue": CatalogueEvent,
        "idempotency": DomainEvent,
        "token": TokenEvent,
        "ledger": DomainEvent,
        "trace": TraceEvent,
        "review": ReviewEvent,
        "rule": OnlineRuleEvent,
        "share": ShareEvent,
        "alert": AlertEvent,
        "dataset": DatasetEvent,
        "calibration": CalibrationEvent,
    }[match.group(1)]
    assert issubclass(cls, base)
    assert int(match.group(3)) == cls.class_version == 1
    assert "topic_name" in vars(cls), "each class declares its own topic"
    assert cls.__module__ not in cls.topic() and cls.__name__ not in cls.topic()


def test_a_class_moved_elsewhere_keeps_its_topic() -> None:
    class Relocated(DomainEvent):
        topic_name: ClassVar[str] = "evaledger.run.started"

    assert Relocated.topic() == RunStarted.topic()
    assert Relocated.__module__ == __name__


def test_an_unknown_topic_is_refused() -> None:
    stored = load_golden(RunStarted)
    stored = StoredEvent(
        originator_id=stored.originator_id,
        originator_version=1,
        topic="evaledger.run.teleported/v1",
        state=stored.state,
    )
    with pytest.raises(
        ValueError, match=re.escape("unknown event topic 'evaledger.run.teleported/v1'")
    ):
        MAPPER.to_domain_event(stored)


# ---------------------------------------------------------------------------------------------
# Upcasting: a v3 ExecutionErrored (v2 added `retryable`, v3 renamed `kind` to `error_kind`).

ERRORED = ExecutionErrored.topic_name


class ExecutionErroredV3(CaseEvent):
    """What a future ExecutionErrored could look like."""

    topic_name: ClassVar[str] = ERRORED
    class_version: ClassVar[int] = 3

    message: str
    error_kind: str | None = None
    retryable: bool = Field(description="Added in v2.")


@pytest.fixture
def errored_v3(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[ExecutionErroredV3]]:
    """Register ExecutionErroredV3 and its two upcasters, and remove them afterwards."""
    before = dict(UPCASTERS)

    @upcaster(ERRORED, 1)
    def add_retryable(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "retryable": False}

    @upcaster(ERRORED, 2)
    def rename_kind(state: dict[str, Any]) -> dict[str, Any]:
        state = dict(state)
        state["error_kind"] = state.pop("kind")
        return state

    monkeypatch.setitem(BY_TOPIC_NAME, ERRORED, ExecutionErroredV3)
    try:
        yield ExecutionErroredV3
    finally:
        UPCASTERS.pop((ERRORED, 1), None)
        UPCASTERS.pop((ERRORED, 2), None)
        assert before == UPCASTERS


def test_a_v1_stored_event_is_upcast_on_read(errored_v3: type[ExecutionErroredV3]) -> None:
    stored = load_golden(ExecutionErrored)
    assert stored.topic.endswith("/v1")
    event = MAPPER.to_domain_event(stored)
    assert type(event) is errored_v3
    v1 = SAMPLES[ExecutionErrored]
    assert event.model_dump() == {
        **v1.model_dump(exclude={"kind"}),
        "error_kind": "timeout",
        "retryable": False,
    }
    # The hash is still the hash of the bytes stored: the chain does not move.
    assert event.hash() == v1.hash() == stored_hash(stored.topic, stored.state)
    # Written today, it is a v3 event.
    assert MAPPER.to_stored_event(event).topic == f"{ERRORED}/v3"


def test_a_v2_stored_event_only_takes_the_later_upcaster(
    errored_v3: type[ExecutionErroredV3],
) -> None:
    v1 = load_golden(ExecutionErrored)
    state = {**orjson.loads(v1.state), "retryable": True}
    stored = StoredEvent(
        originator_id=v1.originator_id,
        originator_version=v1.originator_version,
        topic=f"{ERRORED}/v2",
        state=orjson.dumps(state),
    )
    event = MAPPER.to_domain_event(stored)
    assert isinstance(event, errored_v3)
    assert (event.retryable, event.error_kind) == (True, "timeout")


def test_the_ledger_upcasts_events_it_reads_from_the_store(
    services: Services, errored_v3: type[ExecutionErroredV3]
) -> None:
    result = services.ledger.import_bundle(RunBundle.model_validate(bundle()), Context(actor="t"))
    errored_case = result.case_ids[2]
    events = services.ledger.events_of(errored_case)
    assert [type(e).__name__ for e in events] == ["CaseOpened", "ExecutionErroredV3"]
    last = events[-1]
    assert isinstance(last, errored_v3)
    assert (last.error_kind, last.retryable) == ("timeout", False)
    assert last.message == "Agent endpoint timed out after 120000 ms"
    assert verify(services.ledger).ok


def test_the_upcasting_fixture_cleaned_up() -> None:
    assert BY_TOPIC_NAME[ERRORED] is ExecutionErrored
    assert (ERRORED, 1) not in UPCASTERS and (ERRORED, 2) not in UPCASTERS
    event = MAPPER.to_domain_event(load_golden(ExecutionErrored))
    assert type(event) is ExecutionErrored


# ---------------------------------------------------------------------------------------------
# Model rules: frozen, extra=forbid, no NaN/inf, timezone-aware timestamps.


@by_name
def test_events_are_frozen_and_forbid_extra_fields(cls: type[DomainEvent]) -> None:
    event = SAMPLES[cls]
    assert cls.model_config.get("frozen") is True
    assert cls.model_config.get("extra") == "forbid"
    assert cls.model_config.get("allow_inf_nan") is False
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        event.actor = "mallory"  # type: ignore[misc]  # the runtime refusal is under test
    with pytest.raises(pydantic.ValidationError, match=r"extra_forbidden|Extra inputs"):
        cls.model_validate({**event.model_dump(), "surprise": 1})


def _value_classes() -> list[type[pydantic.BaseModel]]:
    seen: dict[str, type[pydantic.BaseModel]] = {}

    def walk(model: type[pydantic.BaseModel]) -> None:
        for field in model.model_fields.values():
            for t in _types_in(field.annotation):
                if t.__name__ not in seen:
                    seen[t.__name__] = t
                    walk(t)

    for cls in EVENT_CLASSES:
        walk(cls)
    return sorted(seen.values(), key=lambda t: t.__name__)


def _types_in(annotation: Any) -> list[type[pydantic.BaseModel]]:
    found = []
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        found.append(annotation)
    for arg in getattr(annotation, "__args__", ()):
        found.extend(_types_in(arg))
    return found


@pytest.mark.parametrize("model", _value_classes(), ids=lambda m: m.__name__)
def test_every_value_object_in_an_event_is_frozen_and_strict(
    model: type[pydantic.BaseModel],
) -> None:
    assert model.model_config.get("frozen") is True
    assert model.model_config.get("extra") == "forbid"
    assert model.model_config.get("allow_inf_nan") is False


NON_FINITE = [math.nan, math.inf, -math.inf]


def _with(cls: type[DomainEvent], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = SAMPLES[cls].model_dump()
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


NUMBER_PATHS = [
    (TranscriptRecorded, ("cost_usd",)),
    (TranscriptRecorded, ("duration_ms",)),
    (TranscriptRecorded, ("turns", 1, "latency_ms")),
    (TranscriptRecorded, ("turns", 1, "cost_usd")),
    (TranscriptRecorded, ("turns", 1, "metrics", "ttfb_ms")),
    (JudgeVerdictRecorded, ("latency_ms",)),
    (JudgeVerdictRecorded, ("cost_usd",)),
    (JudgeVerdictRecorded, ("judge", "temperature")),
    (CaseOpened, ("test_case", "weight")),
    (RunCreated, ("config", "metrics_pass_threshold")),
    (RunCreated, ("spec", "metrics", 0, "weight")),
    (MetricRegistered, ("definition", "default_weight")),
]


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize(
    ("cls", "path"),
    NUMBER_PATHS,
    ids=[f"{c.__name__}.{'.'.join(map(str, p))}" for c, p in NUMBER_PATHS],
)
def test_numbers_refuse_nan_and_inf(
    cls: type[DomainEvent], path: tuple[Any, ...], value: float
) -> None:
    with pytest.raises(pydantic.ValidationError, match="finite number"):
        cls.model_validate(_with(cls, path, value))


FREE_FORM_PATHS = [
    (JudgeVerdictRecorded, ("judge", "params", "top_p")),
    (TranscriptRecorded, ("turns", 1, "tool_calls", 0, "arguments", "id")),
    (RunCreated, ("agent", "tools", 0, "parameters", "a")),
    (RunCreated, ("config", "grading")),
    (DatasetVersionAdded, ("items", 0, "input", "order")),
    (DatasetVersionAdded, ("items", 0, "metadata", "weight")),
]


@pytest.mark.parametrize(
    ("cls", "path"),
    FREE_FORM_PATHS,
    ids=[f"{c.__name__}.{'.'.join(map(str, p))}" for c, p in FREE_FORM_PATHS],
)
def test_free_form_fields_refuse_nan_too(cls: type[DomainEvent], path: tuple[Any, ...]) -> None:
    value = {"x": math.nan} if path[-1] == "grading" else math.nan
    with pytest.raises(pydantic.ValidationError):
        cls.model_validate(_with(cls, path, value))


def _datetime_fields() -> list[tuple[type[DomainEvent], str]]:
    found = []
    for cls in EVENT_CLASSES:
        for name, field in cls.model_fields.items():
            if "datetime" in repr(field.annotation).lower():
                found.append((cls, name))
    return found


DATETIME_FIELDS = _datetime_fields()


def test_the_datetime_fields_are_the_expected_ones() -> None:
    assert {(c.__name__, n) for c, n in DATETIME_FIELDS if n != "timestamp"} == {
        ("RunCreated", "created_at"),
        ("RunCompleted", "completed_at"),
        ("TranscriptRecorded", "started_at"),
        ("TranscriptRecorded", "ended_at"),
        ("ShareLinkCreated", "expires_at"),
        ("AlertFired", "window_start"),
        ("AlertFired", "window_end"),
        ("AlertRecovered", "window_start"),
        ("AlertRecovered", "window_end"),
    }
    assert {c for c, n in DATETIME_FIELDS if n == "timestamp"} == set(EVENT_CLASSES)


@pytest.mark.parametrize(
    ("cls", "name"), DATETIME_FIELDS, ids=[f"{c.__name__}.{n}" for c, n in DATETIME_FIELDS]
)
def test_timestamps_must_be_timezone_aware(cls: type[DomainEvent], name: str) -> None:
    naive = datetime(2026, 11, 20, 2, 0)  # noqa: DTZ001 - the point of the test
    with pytest.raises(pydantic.ValidationError, match="timezone"):
        cls.model_validate({**SAMPLES[cls].model_dump(), name: naive})
    aware = cls.model_validate({**SAMPLES[cls].model_dump(), name: naive.replace(tzinfo=UTC)})
    assert getattr(aware, name) == naive.replace(tzinfo=UTC)


def test_equal_events_stay_equal_after_one_is_hashed() -> None:
    a = RunStarted(**_meta(RUN_ID, 2))
    b = RunStarted(**_meta(RUN_ID, 2))
    b.hash()
    assert a == b


def test_a_score_override_is_frozen_refuses_extra_fields_and_needs_a_finite_value() -> None:
    sample = SAMPLES[ScoreOverridden]
    assert isinstance(sample, ScoreOverridden)
    with pytest.raises(pydantic.ValidationError, match=r"extra_forbidden|Extra inputs"):
        ScoreOverridden.model_validate({**sample.model_dump(), "verdict_id": str(VERDICT_ID)})
    for bad in (math.nan, math.inf):
        with pytest.raises(pydantic.ValidationError, match="value"):
            ScoreOverridden.model_validate({**sample.model_dump(), "value": bad})
    with pytest.raises(pydantic.ValidationError, match="reason"):
        ScoreOverridden.model_validate({**sample.model_dump(), "reason": ""})
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        sample.value = 0.0  # type: ignore[misc]


def test_a_label_of_a_scorer_is_stored_and_a_label_without_one_keeps_its_bytes() -> None:
    plain = SAMPLES[HumanLabelRecorded]
    assert "named_scores" not in orjson.loads(MAPPER.to_stored_event(plain).state)
    labelled = HumanLabelRecorded.model_validate(
        {**plain.model_dump(), "named_scores": [{"score": "match", "value": 1.0}]}
    )
    stored = MAPPER.to_stored_event(labelled)
    assert orjson.loads(stored.state)["named_scores"] == [{"score": "match", "value": 1.0}]
    decoded = MAPPER.to_domain_event(stored)
    assert isinstance(decoded, HumanLabelRecorded)
    assert decoded.named_scores == [ScoreLabel(score="match", value=1.0)]
