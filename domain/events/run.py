"""The events of a run: its lifecycle, its cases, its seal and its baseline approvals."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar
from uuid import UUID

from pydantic import (
    AwareDatetime,
    Field,
)

from evaledger.domain.events.base import DomainEvent
from evaledger.domain.events.dataset import DatasetRef
from evaledger.domain.events.values import (
    AgentSnapshot,
    SuiteRef,
)
from evaledger.domain.spec import RunConfig, ScorerInfo, ScoringSpec

UNDATED = datetime(1970, 1, 1, tzinfo=UTC)
"""`RunCreated.created_at` of a run whose source records no time (tau-bench): a fixed date keeps
the run's body, and so re-imports, stable; lists show and sort such a run by when it was
recorded (the event's own timestamp) instead."""


def is_undated(created_at: datetime) -> bool:
    """Whether a run's creation time is `UNDATED`: its source has no date."""
    return created_at == UNDATED


class RunEvent(DomainEvent):
    """An event of a Run aggregate."""


class RunCreated(RunEvent):
    """A run was created with its fully resolved config snapshot."""

    topic_name: ClassVar[str] = "evaledger.run.created"

    run_key: str = Field(min_length=1, description="Client key, unique in the project.")
    project: str = Field(default="default", min_length=1)
    name: str | None = None
    suite: SuiteRef
    agent: AgentSnapshot
    labels: dict[str, str] = Field(default_factory=dict, description="git sha, trigger, ...")
    config: RunConfig = Field(description="The config as given.")
    spec: ScoringSpec = Field(description="The resolved scoring spec snapshot.")
    created_at: AwareDatetime = Field(description="When the run was created at its source.")
    dataset: DatasetRef | None = Field(
        default=None, description="The dataset version the run ran (issue 35), if known."
    )

    added_fields: ClassVar[frozenset[str]] = frozenset({"dataset"})


class RunStarted(RunEvent):
    """The run started executing cases."""

    topic_name: ClassVar[str] = "evaledger.run.started"


class CasesAttached(RunEvent):
    """Cases were opened for the run (their ids), so the run can be sealed and listed."""

    topic_name: ClassVar[str] = "evaledger.run.cases_attached"

    case_ids: list[UUID]


class RunCompleted(RunEvent):
    """The run completed; the seal is a digest over its cases' last event hashes."""

    topic_name: ClassVar[str] = "evaledger.run.completed"

    completed_at: AwareDatetime
    seal: str
    case_count: int


class RunCanceled(RunEvent):
    """The run was canceled."""

    topic_name: ClassVar[str] = "evaledger.run.canceled"

    reason: str | None = None


class RunFailed(RunEvent):
    """The run failed as a whole (harness crash...)."""

    topic_name: ClassVar[str] = "evaledger.run.failed"

    reason: str


class SourceResultsRecorded(RunEvent):
    """What a run's source knew only when it ended, recorded after the run was created live.

    The Inspect hook creates its run at the task's start; importing the task's log later adds
    the log's status label and the scorers' final metric names and reported figures here.
    """

    topic_name: ClassVar[str] = "evaledger.run.source_results_recorded"

    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels the source wrote at its end, over the run's."
    )
    scorers: tuple[ScorerInfo, ...] = Field(
        default=(), description="The run's scorers with their final metrics and reported figures."
    )


class BaselineApproved(RunEvent):
    """The run was approved as the baseline of its (agent, suite)."""

    topic_name: ClassVar[str] = "evaledger.run.baseline_approved"

    agent: str
    suite: str
    reason: str | None = None


class BaselineRevoked(RunEvent):
    """The run's baseline approval was revoked."""

    topic_name: ClassVar[str] = "evaledger.run.baseline_revoked"

    agent: str
    suite: str
    reason: str | None = None
