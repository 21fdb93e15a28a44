"""Trends (issue 33): a project's measure per agent version by day or hour.

`/projects/{project}/series` is scoped by the path's project: another project's token is
answered 404 (`Context.check_project`), as for its runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from evaledger.api.deps import ContextDep, SyncedDep
from evaledger.application import trends

router = APIRouter(tags=["online"])


@router.get("/projects/{project}/series", response_model=trends.Series)
def get_series(
    project: str,
    services: SyncedDep,
    ctx: ContextDep,
    measure: Annotated[
        str,
        Query(max_length=300, description="pass_rate, score, latency_p95, cost or SCORER/METRIC"),
    ] = "pass_rate",
    by: Annotated[Literal["day", "hour"], Query(description="Bucket size (UTC)")] = "day",
    agent: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    version: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    since: Annotated[datetime | None, Query(description="From (inclusive, with a zone)")] = None,
    until: Annotated[datetime | None, Query(description="To (exclusive, with a zone)")] = None,
) -> trends.Series:
    """The measure per agent version and bucket; a bucket without an execution has no point."""
    query = trends.parse_query(
        project=project,
        measure=measure,
        by=by,
        agent=agent,
        version=version,
        since=since,
        until=until,
    )
    return trends.read_series(services, query, ctx)
