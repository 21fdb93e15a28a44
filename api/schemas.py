"""HTTP request and response models (separate from the domain's events)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from evaledger.domain.events import (
    Claim,
    JudgeIdentity,
    MetricScore,
    OutcomeResult,
    ScoreLabel,
    TokenScope,
    Turn,
    Usage,
)
from evaledger.domain.ledger import Written as LedgerWritten
from evaledger.domain.metrics import MetricDefinition
from evaledger.domain.model import FrozenModel
from evaledger.domain.types import Amount, Instant
from evaledger.projections.queries import RunRow
from evaledger.scoring.facts import CaseFacts
from evaledger.scoring.models import CaseScore, RunAggregate

T = TypeVar("T")


class ErrorResponse(BaseModel):
    """Every error the API answers."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detail": "no run 8a32f05d-04b2-56b1-9c8f-6e48455156f0",
                    "code": "not_found",
                    "status": 404,
                }
            ]
        }
    )

    detail: str = Field(description="What is wrong, naming the offending field.")
    code: str = Field(description="Machine-readable error code, e.g. invalid, not_found.")
    status: int = Field(description="The HTTP status, repeated.")
    field: str | None = Field(default=None, description="The offending field, when known.")
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="Request validation errors: loc, msg, type."
    )


class Written(BaseModel):
    """What a command wrote (201 Created; 200 when an idempotent re-send wrote nothing)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"id": "8a32f05d-04b2-56b1-9c8f-6e48455156f0", "position": 14, "events": 1}
            ]
        }
    )

    id: UUID = Field(description="The run or case the command wrote to.")
    position: int = Field(description="Log position; wait for it to read your writes.")
    events: int = Field(description="Events written (0 for an idempotent re-send).")

    @classmethod
    def of(cls, written: LedgerWritten) -> Written:
        """The HTTP view of what a ledger command wrote."""
        return cls(id=written.id, position=written.position, events=written.events)


class BatchWritten(BaseModel):
    """What a batch wrote."""

    case_ids: list[UUID] = Field(description="The cases, in the order sent.")
    position: int = Field(description="Log position; wait for it to read your writes.")
    events: int = Field(description="Events written (0 for an idempotent re-send).")


class BundleImported(BaseModel):
    """What importing a run bundle wrote."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "run_id": "8a32f05d-04b2-56b1-9c8f-6e48455156f0",
                    "run_key": "northwind-support-v12-nightly-2026-11-20",
                    "position": 13,
                    "events": 13,
                    "cases": 3,
                    "new_cases": 3,
                }
            ]
        }
    )

    run_id: UUID
    run_key: str
    position: int = Field(description="Log position; wait for it to read your writes.")
    events: int = Field(description="Events written (0 when the bundle was imported before).")
    cases: int = Field(description="Cases in the bundle.")
    new_cases: int = Field(description="Cases not in the ledger before.")


class TranscriptBody(FrozenModel):
    """POST /cases/{id}/transcript."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "turns": [
                        {"role": "user", "content": "My parcel is late, can I get a refund?"},
                        {
                            "role": "assistant",
                            "content": "Yes: I have refunded the 12.99 USD shipping fee.",
                            "latency_ms": 840,
                        },
                    ],
                    "usage": {"prompt_tokens": 412, "completion_tokens": 38},
                    "cost_usd": 0.0021,
                }
            ]
        },
    )

    turns: list[Turn]
    usage: Usage | None = None
    cost_usd: Amount | None = None
    started_at: Instant | None = None
    ended_at: Instant | None = None
    duration_ms: Amount | None = None


class ClaimsBody(FrozenModel):
    """POST /cases/{id}/claims."""

    claims: list[Claim]
    judge: JudgeIdentity | None = None


class ErrorBody(FrozenModel):
    """POST /cases/{id}/error."""

    message: str = Field(min_length=1)
    kind: str | None = None


class ReasonBody(FrozenModel):
    """A reason, for cancel / fail / baseline."""

    reason: str | None = None


class FailBody(FrozenModel):
    """POST /runs/{id}/fail: why the run failed as a whole."""

    reason: str = Field(min_length=1, description="Why the run failed (e.g. the harness's error).")


class CompleteBody(FrozenModel):
    """POST /runs/{id}/complete."""

    completed_at: Instant | None = None


class OverrideBody(FrozenModel):
    """POST /cases/{id}/overrides."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "verdict_id": "f0b6121a-88de-50d7-9352-2fccaf58dd55",
                    "passed": True,
                    "reason": "The judge missed that a supervisor approved the refund (turn 6).",
                }
            ]
        },
    )

    verdict_id: UUID
    metric_scores: list[MetricScore] | None = None
    expected_outcomes: list[OutcomeResult] | None = None
    passed: StrictBool | None = None
    reason: str = Field(min_length=1)


class ScoreOverrideBody(FrozenModel):
    """POST /cases/{id}/score-overrides: an admin corrects a source scorer's verdict."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "score": "match",
                    "value": 1.0,
                    "reason": "The answer is right; the target's spelling differs.",
                }
            ]
        },
    )

    score: str = Field(
        min_length=1, max_length=200, description="One of the case's named scores (`match`)."
    )
    value: float = Field(
        allow_inf_nan=False,
        description="Its corrected numeric reading (binary and graded scores: 1 pass, 0 fail).",
    )
    reason: str = Field(min_length=1, max_length=4000, description="Why the scorer was wrong.")


class InvalidateBody(FrozenModel):
    """POST /cases/{id}/invalidations."""

    verdict_id: UUID
    reason: str = Field(min_length=1)


class LabelBody(FrozenModel):
    """POST /cases/{id}/labels: a reviewer's own label of the case (write scope)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "passed": False,
                    "metric_scores": [{"metric": "tool_routing", "score": 2}],
                    "comment": "Promised a refund before looking the order up.",
                }
            ]
        },
    )

    passed: StrictBool = Field(description="The reviewer's pass/fail for the case.")
    metric_scores: list[MetricScore] = Field(
        default_factory=list, description="Optional scores of metrics (0-5, or passed)."
    )
    comment: str | None = Field(default=None, max_length=4000)
    named_scores: list[ScoreLabel] = Field(
        default_factory=list,
        description="Optional readings of the case's own scorers (`match`: 1 pass, 0 fail).",
    )


class FlagBody(FrozenModel):
    """POST /cases/{id}/flag: flag the case for review, saying why."""

    reason: str = Field(min_length=1, max_length=4000)


class HistoryEntry(BaseModel):
    """One event in a case's or run's history."""

    version: int = Field(description="The event's version in its aggregate (1-based).")
    type: str = Field(description="Event class, e.g. JudgeVerdictRecorded.")
    topic: str = Field(description="Stable stored topic with its schema version.")
    timestamp: datetime = Field(description="When it was recorded (UTC).")
    actor: str = Field(description="Who recorded it.")
    idempotency_key: str | None
    prev_hash: str = Field(description="Hash of the previous event of the aggregate.")
    hash: str = Field(description="This event's hash (SHA-256, hex).")
    payload: dict[str, Any] = Field(description="The event's own fields.")


class Page(BaseModel, Generic[T]):
    """A page of a list: `data` holds items `offset` to `offset + count` of `total`."""

    data: list[T]
    count: int = Field(description="Items in this page.")
    total: int = Field(description="Items matching, over every page.")
    limit: int = Field(description="Largest page size asked for.")
    offset: int = Field(description="Items skipped before this page.")


class RunPage(Page[RunRow]):
    """A page of runs, newest first."""


class CasePage(Page[CaseScore]):
    """A page of a run's cases scored under the run's own spec, in opening order."""


class MetricPage(Page[MetricDefinition]):
    """A page of the metric catalogue: built-in metrics then the project's own."""


class CheckpointOut(BaseModel):
    """A verified point of the log: the last position of a commit and its chain link."""

    position: int = Field(description="Log position of the commit's last event.")
    link: str = Field(description="The ledger-wide chain link at that position (hex sha256).")
    signed: bool = Field(description="Whether its signature was checked with the checkpoint key.")


class AdoptionOut(BaseModel):
    """Events chained by `evaledger chain adopt`, not when they were written."""

    first_position: int
    last_position: int
    events: int
    actor: str | None
    timestamp: str | None
    reason: str | None
    position: int = Field(description="Where the `ChainAdopted` record is in the log.")


class ViewDriftOut(BaseModel):
    """The first row where a live read model departs from a rebuild from the log."""

    table: str
    key: dict[str, Any] = Field(description="The row's primary key.")
    column: str | None = Field(description="The differing column; null: the row is on one side.")
    live: Any = Field(description="The live value (true: a row only the live table has).")
    rebuilt: Any = Field(description="The rebuilt value (true: a row the live table lacks).")
    message: str


class ViewsOut(BaseModel):
    """`verify --views`: the read models compared with a rebuild from the log."""

    ok: bool
    position: int = Field(description="The log position both sides were compared at.")
    tables: int
    rows: int
    behind: list[str] = Field(
        default_factory=list, description="Projections stopped before that position."
    )
    drift: ViewDriftOut | None = None


class VerifyResult(BaseModel):
    """What a verification of the whole log found (`GET /verify`, `evaledger verify --json`)."""

    ok: bool = Field(description="No broken link, seal, chain block or signature.")
    events: int = Field(description="Events checked.")
    aggregates: int = Field(description="Aggregates whose per-aggregate hash chain was checked.")
    runs_sealed: int = Field(description="Completed runs whose seal was recomputed.")
    commits: int = Field(description="Ledger-wide chain blocks (one per commit) checked.")
    keyed: bool = Field(description="Whether signatures were checked (a checkpoint key is set).")
    adopted_until: int | None = Field(
        default=None, description="Events up to here were chained when the chain was introduced."
    )
    adoption: AdoptionOut | None = Field(
        default=None,
        description="The `chain adopt` record of adopted events (range, actor, time, reason).",
    )
    checkpoint: CheckpointOut | None = Field(
        default=None, description="The last commit up to which the whole log verified."
    )
    first_broken_position: int | None = Field(
        default=None,
        description="The lowest log position where the log departs from what was written.",
    )
    broken: list[str] = Field(default_factory=list, description="Every finding, first first.")
    resumed_from: int | None = Field(
        default=None,
        description="Incremental: the signed checkpoint this verification resumed from.",
    )
    resumption: str = Field(
        default="full",
        description="incremental, full, or unsigned (no checkpoint key: every event checked).",
    )
    views: ViewsOut | None = Field(
        default=None, description="With views=1: the read models against a rebuild."
    )
    verified_at: str = Field(description="When this verification ran (UTC, ISO 8601).")


class LastVerification(BaseModel):
    """The last verification this server ran, as `/health` reports it."""

    ok: bool
    verified_at: str
    checkpoint: CheckpointOut | None = None
    first_broken_position: int | None = None
    views: ViewsOut | None = Field(
        default=None, description="The last read-model comparison (`GET /verify?views=1`)."
    )


class ProjectionFailure(BaseModel):
    """A projection stopped by an event it could not apply."""

    name: str = Field(description="Projection name.")
    position: int = Field(description="Log position of the event.")
    event: str = Field(description="The event (topic and originator).")
    error: str = Field(description="Why it could not be applied.")
    failed_at: str = Field(description="When (UTC, ISO 8601).")


class WhoAmI(BaseModel):
    """Who the request's token is (`GET /whoami`): its project, scope and actor."""

    project: str | None = Field(
        description="The only project the token may touch; null: every project (no token)."
    )
    scope: TokenScope = Field(description="read, write or admin.")
    actor: str | None = Field(description="The actor of every event it writes; null: no token.")


class Health(BaseModel):
    """Liveness, the store, projection lag and failures, the last verification."""

    status: str = Field(description="ok, or degraded when a projection is stopped or verify failed")
    store: str = Field(description="sqlite or postgresql")
    log_position: int = Field(description="Last position in the event log.")
    projections: dict[str, int] = Field(description="Projection name → position reached.")
    projection_lag: dict[str, int] = Field(
        default_factory=dict, description="Projection name → events behind the log."
    )
    projection_failures: list[ProjectionFailure] = Field(default_factory=list)
    verify: LastVerification | None = Field(
        default=None, description="The last verification this server ran, if any."
    )


class RunDetail(RunRow):
    """A run with its aggregate under its own spec."""

    aggregate: RunAggregate


class CaseDetail(BaseModel):
    """A case's facts and its score under the run's own spec."""

    facts: CaseFacts
    score: CaseScore


class CaseState(BaseModel):
    """A case as of one version: its facts and its score under the run's spec."""

    facts: CaseFacts
    score: CaseScore


class CaseHistory(BaseModel):
    """Every event of a case (a page of them) and its state as of `version`."""

    case_id: UUID
    run_id: UUID
    version: int = Field(description="The version `state` is as of.")
    latest_version: int = Field(description="The case's last version (its number of events).")
    events: list[HistoryEntry]
    state: CaseState
    total: int = Field(default=0, description="Events of the case, over every page.")
    limit: int | None = None
    offset: int = 0


class RunHistory(BaseModel):
    """Every event of the run aggregate (a page of them)."""

    run_id: UUID
    events: list[HistoryEntry]
    total: int = Field(default=0, description="Events of the run aggregate, over every page.")
    limit: int | None = None
    offset: int = 0


class SpecAggregate(BaseModel):
    """A run aggregate under one spec."""

    spec_id: str
    aggregate: RunAggregate


class CaseOutcome(BaseModel):
    """A case's score, pass/fail and status under one spec."""

    overall_score: float | None
    passed: bool | None
    status: str


class ChangedCase(BaseModel):
    """A case whose score, pass/fail or status differs under the new spec."""

    case_id: UUID
    test_case_key: str
    repetition: int
    before: CaseOutcome
    after: CaseOutcome


class Rescored(BaseModel):
    """A run replayed under another spec: before and after side by side."""

    run_id: UUID
    spec_id: str = Field(description="Id of the spec replayed under (stored for later use).")
    own_spec_id: str = Field(description="Id of the run's own spec.")
    before: SpecAggregate
    after: SpecAggregate
    changed_cases: list[ChangedCase]
    judge_calls: int = Field(description="Always 0: a rescore never calls a judge.")
    events_written: int = Field(description="Always 0: a rescore writes no event.")


class ExplainedCorrection(BaseModel):
    """A human override or invalidation of a verdict."""

    type: str
    actor: str
    timestamp: str
    reason: str | None
    changes: dict[str, Any]


class ExplainedVerdict(BaseModel):
    """One judge verdict: prompt, raw reply, parse, and whether it counted."""

    verdict_id: UUID
    version: int
    recorded_by: str
    recorded_at: str
    judge: dict[str, Any]
    template_id: str | None
    template_hash: str | None
    prompt: str | None
    raw_output: str | None
    parse_status: str
    error: str | None
    parsed_metric_scores: list[dict[str, Any]]
    parsed_expected_outcomes: list[dict[str, Any]]
    counted: bool
    corrections: list[ExplainedCorrection]


class ExplainedWeight(BaseModel):
    """One metric's score, weight and contribution to the overall score."""

    metric: str
    score_type: str
    raw_weight: float | None
    normalised_weight: float
    score: float | None
    label: str | None
    contribution: float | None


class ExplainedOverall(BaseModel):
    """How the overall score was computed."""

    value: float | None
    formula: str
    sum_of_contributions: float | None
    judge_error: bool
    judge_error_message: str | None


class ExplainedGate(BaseModel):
    """Which rule decided pass/fail, and why."""

    policy: str
    rule: str
    passed: bool | None
    status: str
    reason: str
    pass_threshold: float
    outcome_results: list[dict[str, Any]]
    assertion_score: float | None
    blockers_passed: bool | None


class ExplainedRunAggregate(BaseModel):
    """How the case enters its run's aggregate."""

    counts_in_metric_mean: bool
    share_of_metric_mean: float | None
    counts_as: str
    weighted_metrics_score_pct: float | None
    metrics_pass_threshold: float | None
    metrics_passed: bool | None
    cases_pass_rate_pct: float | None
    cases_pass_threshold: float | None
    cases_passed: bool | None
    scored_cases: int
    total_executions: int


class Explanation(BaseModel):
    """From judge prompt and raw reply to parsed scores, weights, overall, gate and aggregate."""

    case_id: UUID
    run_id: UUID
    test_case_key: str
    repetition: int
    spec_id: str
    spec_source: str = Field(description="run: the run's own spec; given: the spec asked for.")
    panel_policy: str
    judge_errors_policy: str
    verdicts: list[ExplainedVerdict]
    weights: list[ExplainedWeight]
    overall_score: ExplainedOverall
    gate: ExplainedGate
    run_aggregate: ExplainedRunAggregate
