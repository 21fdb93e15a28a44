"""The events of a review queue: its rule and cases, who reviews what, and each review act.

A queue (one aggregate per project and name) is created over the cases a rule selected
(`ReviewQueueCreated`); its cases are then given to reviewers (`ReviewItemsAssigned`, round-robin
or explicit); each reviewer's label or skip of a case, and an adjudicator's final label, is its
own event whose actor is the person who acted (DESIGN §18).
"""

from __future__ import annotations

from typing import ClassVar, Literal
from uuid import UUID

from pydantic import Field

from evaledger.domain.events.base import DomainEvent
from evaledger.domain.events.values import Value

ReviewerName = str
"""A reviewer: a token's name (the part of its actor before `(token …)`), or a CLI actor."""


class ReviewEvent(DomainEvent):
    """An event of a ReviewQueue aggregate (one named queue of one project)."""


class ReviewQueueCreated(ReviewEvent):
    """A review queue was defined by a rule over runs; the cases it selected are its items."""

    topic_name: ClassVar[str] = "evaledger.review.queue_created"

    project: str = Field(min_length=1, description="The project of the queue and its runs.")
    name: str = Field(min_length=1, max_length=200, description="The queue's name (unique).")
    rule: str = Field(description="The selection rule as written (`--where`); empty: all.")
    run_ids: list[UUID] = Field(min_length=1, description="The runs the rule was applied to.")
    case_ids: list[UUID] = Field(description="The cases the rule selected, in queue order.")
    reviewers: list[ReviewerName] = Field(description="The queue's reviewers.")
    per_item: int = Field(ge=1, le=20, description="How many reviewers label each case.")
    blind: bool = Field(
        description="Blind: a reviewer sees no verdict, score or other label of a case "
        "before labelling it."
    )
    adjudicators: list[ReviewerName] = Field(
        default_factory=list, description="Who may fix a case's label (besides admins)."
    )


class ReviewAssignment(Value):
    """One case given to its reviewers."""

    case_id: UUID
    reviewers: list[ReviewerName] = Field(min_length=1)


class ReviewItemsAssigned(ReviewEvent):
    """Cases of the queue were given to reviewers (added to any earlier assignment)."""

    topic_name: ClassVar[str] = "evaledger.review.items_assigned"

    mode: Literal["round-robin", "explicit"]
    assignments: list[ReviewAssignment] = Field(min_length=1)


class ReviewItemLabelled(ReviewEvent):
    """A reviewer's label of one case of the queue (once per reviewer and case)."""

    topic_name: ClassVar[str] = "evaledger.review.item_labelled"

    case_id: UUID
    reviewer: ReviewerName = Field(min_length=1)
    passed: bool
    score: float | None = Field(default=None, ge=0, le=5, description="0-5, optional.")
    comment: str | None = Field(default=None, max_length=4000)


class ReviewItemSkipped(ReviewEvent):
    """A reviewer passed on one case (it leaves their "next"; they may still label it)."""

    topic_name: ClassVar[str] = "evaledger.review.item_skipped"

    case_id: UUID
    reviewer: ReviewerName = Field(min_length=1)
    reason: str | None = Field(default=None, max_length=4000)


class ReviewItemAdjudicated(ReviewEvent):
    """An adjudicator fixed the case's label (the gold label; a later one replaces it)."""

    topic_name: ClassVar[str] = "evaledger.review.item_adjudicated"

    case_id: UUID
    passed: bool
    score: float | None = Field(default=None, ge=0, le=5)
    reason: str = Field(min_length=1, max_length=4000)
