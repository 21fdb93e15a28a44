"""Trends (issue 33, DESIGN §16): a measure per agent version over time, read from projections.

`read_series` (GET /projects/{project}/series, `evaledger trend`, the web chart) cuts a
project's cases into UTC day or hour buckets per agent and version and computes the measure over
each bucket with the run aggregate's definitions (`scoring.series`). A bucket without an
execution has no point; every point carries its case count `n` and the runs its cases are in
(an online run is one agent version's day, so a day's point names that day's run).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from evaledger.application.ports import Services
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context
from evaledger.domain.model import StrictModel
from evaledger.domain.spec import ScorerInfo, ScoringSpec
from evaledger.projections.series import SeriesCase, series_cases
from evaledger.scoring.series import bucket_figure, bucket_start, check_measure


class SeriesQuery(StrictModel):
    """What a trend reads: a project's measure by day or hour, optionally one agent version."""

    project: str = Field(min_length=1, max_length=200)
    measure: str = Field(
        default="pass_rate",
        min_length=1,
        max_length=300,
        description="pass_rate, score, latency_p95, cost or SCORER/METRIC.",
    )
    by: Literal["day", "hour"] = "day"
    agent: str | None = Field(default=None, min_length=1, max_length=200)
    version: str | None = Field(default=None, min_length=1, max_length=200)
    since: datetime | None = Field(default=None, description="From this instant (inclusive).")
    until: datetime | None = Field(default=None, description="To this instant (exclusive).")

    @field_validator("measure")
    @classmethod
    def _measure(cls, value: str) -> str:
        return check_measure(value)

    @field_validator("since", "until")
    @classmethod
    def _aware(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is not None and value.tzinfo is None:
            name = info.field_name or "since"
            raise ValidationError(f"{name}: give a time zone (Z or +00:00)", field=name)
        return value

    @model_validator(mode="after")
    def _order(self) -> SeriesQuery:
        if self.since is not None and self.until is not None and self.until <= self.since:
            raise ValidationError("until: must be after since", field="until")
        return self


class PointRun(StrictModel):
    """A run holding cases of a point."""

    run_id: str
    run_key: str


class SeriesPoint(StrictModel):
    """A measure over one bucket of one agent version."""

    at: datetime = Field(description="The bucket's UTC start.")
    value: float | None = Field(
        description="The measure (null: undefined there, e.g. latency_p95 below 20 cases)."
    )
    n: int = Field(description="Executions in the bucket.")
    passed: int
    failed: int
    errored: int
    runs: list[PointRun] = Field(description="The runs the bucket's cases are in.")


class SeriesLine(StrictModel):
    """One agent version's points, oldest first."""

    agent: str
    version: str
    points: list[SeriesPoint]


class Series(StrictModel):
    """A project's measure by bucket, one line per agent version."""

    project: str
    measure: str
    by: str
    lines: list[SeriesLine]


def parse_query(**given: object) -> SeriesQuery:
    """A `SeriesQuery` from entry-point values; a bad one is a ValidationError naming its field."""
    try:
        return SeriesQuery.model_validate(given)
    except PydanticValidationError as e:
        first = e.errors()[0]
        name = ".".join(str(p) for p in first["loc"]) or "query"
        raise ValidationError(f"{name}: {first['msg']}", field=name) from None


def read_series(services: Services, query: SeriesQuery, ctx: Context) -> Series:
    """The measure per agent version and bucket (another project's is not found)."""
    ctx.check_project(query.project, f"project {query.project!r}")
    found = series_cases(
        services.reads.engine,
        query.project,
        agent=query.agent,
        version=query.version,
        since=query.since,
        until=query.until,
    )
    buckets: dict[tuple[str, str], dict[datetime, list[SeriesCase]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for c in found:
        buckets[(c.agent, c.version)][bucket_start(c.at, query.by)].append(c)
    specs: dict[str, ScoringSpec] = {}
    lines: list[SeriesLine] = []
    for (agent, version), by_start in sorted(buckets.items()):
        points: list[SeriesPoint] = []
        for start, members in sorted(by_start.items()):
            run_ids = list(dict.fromkeys(c.run_id for c in members))
            for run_id in run_ids:
                if run_id not in specs:
                    specs[run_id] = services.reads.run_spec(_uuid(run_id))
            scorers: dict[str, ScorerInfo] = {}
            for run_id in run_ids:
                for s in specs[run_id].scorers:
                    scorers.setdefault(s.name, s)
            figure = bucket_figure(
                query.measure,
                [c.score for c in members],
                specs[run_ids[0]],
                list(scorers.values()),
            )
            if figure is None:
                continue
            keys = {c.run_id: c.run_key for c in members}
            points.append(
                SeriesPoint(
                    at=start,
                    value=figure.value,
                    n=figure.n,
                    passed=figure.passed,
                    failed=figure.failed,
                    errored=figure.errored,
                    runs=[PointRun(run_id=r, run_key=keys[r]) for r in run_ids],
                )
            )
        if points:
            lines.append(SeriesLine(agent=agent, version=version, points=points))
    return Series(project=query.project, measure=query.measure, by=query.by, lines=lines)


def _uuid(text: str) -> UUID:
    return UUID(text)
