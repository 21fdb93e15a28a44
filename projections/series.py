"""The cases a trend reads (issue 33): each case's score, run, agent version and time.

Read-only over `runs_v4`, `cases_v6` and `case_times_v1`. A case's time is its `case_times_v1`
row, else its run's listed time (`runs_v4.listed_at`); both are UTC ISO text, so the `since` /
`until` bounds are compared as text in either database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, func, select

from evaledger.projections.case_times import utc_text
from evaledger.projections.tables import case_times, cases, runs
from evaledger.scoring.models import CaseScore

PAGE = 5000


@dataclass(frozen=True)
class SeriesCase:
    """One case as a trend reads it."""

    run_id: str
    run_key: str
    agent: str
    version: str
    at: datetime
    score: CaseScore


def series_cases(
    engine: Engine,
    project: str,
    *,
    agent: str | None = None,
    version: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[SeriesCase]:
    """The project's cases from `since` (inclusive) to `until` (exclusive), in time order."""
    at = func.coalesce(case_times.c.at, runs.c.listed_at)
    query = (
        select(
            runs.c.run_id,
            runs.c.run_key,
            runs.c.agent_name,
            runs.c.agent_version,
            at.label("at"),
            cases.c.score,
        )
        .select_from(cases)
        .join(runs, runs.c.run_id == cases.c.run_id)
        .outerjoin(case_times, case_times.c.case_id == cases.c.case_id)
        .where(runs.c.project == project)
    )
    if agent is not None:
        query = query.where(runs.c.agent_name == agent)
    if version is not None:
        query = query.where(runs.c.agent_version == version)
    if since is not None:
        query = query.where(at >= utc_text(since))
    if until is not None:
        query = query.where(at < utc_text(until))
    query = query.order_by(at, cases.c.run_id, cases.c.seq)
    out: list[SeriesCase] = []
    with engine.connect() as conn:
        result = conn.execution_options(yield_per=PAGE).execute(query)
        for row in result:
            out.append(
                SeriesCase(
                    run_id=row.run_id,
                    run_key=row.run_key,
                    agent=row.agent_name,
                    version=row.agent_version or "",
                    at=datetime.fromisoformat(row.at),
                    score=CaseScore.model_validate_json(row.score),
                )
            )
    return out
