"""A run as listed (`RunRow`), the filter of a listing (`RunFilter`) and a stored row's decoding.

Imported by the queries and by the bare-driver reads of `evaledger runs` (`bare_reads.py`), so
both decode a runs row by one definition; it imports no SQLAlchemy (start-up, issue 32).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import Field

from evaledger.domain.model import StrictModel
from evaledger.domain.spec import ScoringSpec
from evaledger.projections import encoding

LABEL_PATTERN = r"^[^=]+=.*$"
"""A label filter is `key=value` (the API's `label` and the CLI's `--label` alike)."""


class RunFilter(StrictModel):
    """Filters of GET /runs."""

    project: str | None = None
    key: str | None = Field(default=None, description="The run key (unique in a project).")
    suite: str | None = None
    agent: str | None = None
    status: str | None = None
    label: str | None = Field(default=None, description="key=value", pattern=LABEL_PATTERN)
    created_from: datetime | None = None
    created_to: datetime | None = None
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0)


class RunRow(StrictModel):
    """A run as listed."""

    run_id: UUID
    run_key: str
    project: str
    name: str | None
    suite: dict[str, Any]
    agent: dict[str, Any]
    status: str
    labels: dict[str, str]
    created_at: str = Field(description="When the run was created at its source.")
    recorded_at: str | None = Field(
        default=None,
        description="When the run was recorded in this ledger, given for a run whose source has "
        "no date (it is listed by it); null otherwise, so a run reads the same in every store.",
    )
    undated: bool = Field(
        default=False,
        description="The source has no date (created_at is 1970-01-01): the run is listed and "
        "sorted by recorded_at.",
    )
    completed_at: str | None
    reason: str | None = None
    case_count: int
    baseline: bool
    config: dict[str, Any]
    spec: dict[str, Any]
    spec_id: str


def run_row(r: Any) -> RunRow:
    """A runs-table row (attribute access: a SQLAlchemy row or a named tuple) as listed."""
    created = encoding.loads(r.created)
    spec = ScoringSpec.model_validate(created["spec"])
    return RunRow(
        run_id=UUID(r.run_id),
        run_key=r.run_key,
        project=r.project,
        name=r.name,
        suite=created["suite"],
        agent=created["agent"],
        status=r.status,
        labels=encoding.loads(r.labels),
        created_at=r.created_at,
        recorded_at=r.recorded_at if r.listed_at != r.created_at else None,
        undated=r.listed_at != r.created_at,
        completed_at=r.completed_at,
        reason=r.reason,
        case_count=r.case_count,
        baseline=bool(r.baseline),
        config=created["config"],
        spec=created["spec"],
        spec_id=spec.spec_id,
    )
