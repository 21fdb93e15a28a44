"""HTTP request and response models (separate from the domain's events)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from evaledger.domain.events import Claim, JudgeIdentity, MetricScore, OutcomeResult, Turn, Usage
from evaledger.domain.ledger import Written as LedgerWritten
from evaledger.domain.types import Amount, Instant

_REQ = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class ErrorResponse(BaseModel):
    """Every error the API answers."""

    detail: str = Field(description="What is wrong, naming the offending field.")
    code: str = Field(description="Machine-readable error code, e.g. invalid, not_found.")
    status: int = Field(description="The HTTP status, repeated.")
    field: str | None = Field(default=None, description="The offending field, when known.")
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="Request validation errors: loc, msg, type."
    )


class Written(BaseModel):
    """What a command wrote."""

    id: UUID = Field(description="The run or case the command wrote to.")
    position: int = Field(description="Log position; wait for it to read your writes.")
    events: int = Field(description="Events written (0 for an idempotent re-send).")

    @classmethod
    def of(cls, written: LedgerWritten) -> Written:
        """The HTTP view of what a ledger command wrote."""
        return cls(id=written.id, position=written.position, events=written.events)


class BatchWritten(BaseModel):
    """What a batch wrote."""

    case_ids: list[UUID]
    position: int
    events: int


class TranscriptBody(BaseModel):
    """POST /cases/{id}/transcript."""

    model_config = _REQ

    turns: list[Turn]
    usage: Usage | None = None
    cost_usd: Amount | None = None
    started_at: Instant | None = None
    ended_at: Instant | None = None
    duration_ms: Amount | None = None


class ClaimsBody(BaseModel):
    """POST /cases/{id}/claims."""

    model_config = _REQ

    claims: list[Claim]
    judge: JudgeIdentity | None = None


class ErrorBody(BaseModel):
    """POST /cases/{id}/error."""

    model_config = _REQ

    message: str = Field(min_length=1)
    kind: str | None = None


class ReasonBody(BaseModel):
    """A reason, for cancel / fail / baseline."""

    model_config = _REQ

    reason: str | None = None


class CompleteBody(BaseModel):
    """POST /runs/{id}/complete."""

    model_config = _REQ

    completed_at: Instant | None = None


class OverrideBody(BaseModel):
    """POST /cases/{id}/overrides."""

    model_config = _REQ

    verdict_id: UUID
    metric_scores: list[MetricScore] | None = None
    expected_outcomes: list[OutcomeResult] | None = None
    passed: StrictBool | None = None
    reason: str = Field(min_length=1)


class InvalidateBody(BaseModel):
    """POST /cases/{id}/invalidations."""

    model_config = _REQ

    verdict_id: UUID
    reason: str = Field(min_length=1)


class HistoryEntry(BaseModel):
    """One event in a case's or run's history."""

    version: int
    type: str
    topic: str
    timestamp: datetime
    actor: str
    idempotency_key: str | None
    prev_hash: str
    hash: str
    payload: dict[str, Any]


class Page(BaseModel):
    """A page of a list."""

    data: list[Any]
    count: int
    total: int | None = None
    limit: int | None = None
    offset: int | None = None
