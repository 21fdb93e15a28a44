"""Filters of a run's cases table (issue 36): score and latency ranges, status, metric, label, flag.

One definition (`CaseFilter.keeps`) for the web run page, `GET /runs/{id}/cases` and `show`.
Ranges are inclusive; a bound left out is open. `metric` keeps the cases scored on that metric,
within `metric_min`..`metric_max` when given; `label` is a reviewer's label (`labelled` /
`unlabelled`), `flag` a standing flag (`flagged` / `unflagged`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, get_args
from uuid import UUID

from evaledger.application.ports import Services
from evaledger.application.reports import CaseList
from evaledger.application.review_queue import CaseFields, case_rows
from evaledger.domain.errors import ValidationError
from evaledger.projections.votes import reviewed_cases
from evaledger.scoring.models import CaseStatus

LabelFilter = Literal["labelled", "unlabelled"]
FlagFilter = Literal["flagged", "unflagged"]
RANGES = (
    ("min_score", "max_score"),
    ("min_latency_ms", "max_latency_ms"),
    ("metric_min", "metric_max"),
)


@dataclass(frozen=True)
class CaseFilter:
    """Which of a run's cases a table lists (every field None: all of them)."""

    status: str | None = None
    min_score: float | None = None
    max_score: float | None = None
    min_latency_ms: float | None = None
    max_latency_ms: float | None = None
    metric: str | None = None
    metric_min: float | None = None
    metric_max: float | None = None
    label: LabelFilter | None = None
    flag: FlagFilter | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in {s.value for s in CaseStatus}:
            known = ", ".join(s.value for s in CaseStatus)
            raise ValidationError(f"status: one of {known}", field="status")
        for low, high in RANGES:
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise ValidationError(f"{low}: {lo:g} is above {high} {hi:g}", field=low)
        if self.metric is None and (self.metric_min is not None or self.metric_max is not None):
            raise ValidationError("metric: name the metric the range is of", field="metric")
        if self.label is not None and self.label not in get_args(LabelFilter):
            raise ValidationError("label: labelled or unlabelled", field="label")
        if self.flag is not None and self.flag not in get_args(FlagFilter):
            raise ValidationError("flag: flagged or unflagged", field="flag")

    @property
    def active(self) -> bool:
        """Whether it leaves any case out."""
        return any(getattr(self, f.name) is not None for f in fields(self))

    @property
    def reviews(self) -> bool:
        """Whether it reads the reviewers' labels and flags."""
        return self.label is not None or self.flag is not None

    def keeps(self, row: CaseFields, review: Review | None = None) -> bool:
        """Whether the row passes every filter (`review`: the run's labels and flags)."""
        if self.status is not None and row.status != self.status:
            return False
        if not _within(row.overall_score, self.min_score, self.max_score):
            return False
        if not _within(row.latency_p50_ms, self.min_latency_ms, self.max_latency_ms):
            return False
        if self.metric is not None and (
            self.metric not in row.metric_scores
            or not _within(row.metric_scores[self.metric], self.metric_min, self.metric_max)
        ):
            return False
        if self.reviews:
            review = review or Review(frozenset(), frozenset())
            if self.label is not None and (row.case_id in review.labelled) != (
                self.label == "labelled"
            ):
                return False
            if self.flag is not None and (row.case_id in review.flagged) != (
                self.flag == "flagged"
            ):
                return False
        return True


@dataclass(frozen=True)
class Review:
    """A run's reviewed cases: those with a standing flag, those a reviewer labelled."""

    flagged: frozenset[str]
    labelled: frozenset[str]


def _within(value: float | None, low: float | None, high: float | None) -> bool:
    if low is None and high is None:
        return True
    if value is None:
        return False  # a bound asked for a value the case lacks
    return (low is None or value >= low) and (high is None or value <= high)


def run_review(services: Services, run_id: UUID) -> Review:
    """The run's flagged and labelled cases (what `label` and `flag` filter by)."""
    flagged, labelled = reviewed_cases(services.reads.engine, run_id)
    return Review(frozenset(flagged), frozenset(labelled))


def filter_cases(
    services: Services,
    run_id: UUID,
    f: CaseFilter,
    limit: int | None = None,
    offset: int = 0,
) -> CaseList:
    """A page of the run's cases that pass `f`, scored under the run's own spec, in order."""
    review = run_review(services, run_id) if f.reviews else None
    kept = {r.case_id for r in case_rows(services, run_id) if f.keeps(r, review)}
    matching = [s for s in services.reads.case_scores(run_id) if str(s.case_id) in kept]
    end = None if limit is None else offset + limit
    return CaseList(matching[offset:end], len(matching))
