"""The ReviewQueue aggregate: a rule's cases, their reviewers, labels, skips and gold labels.

One queue per project and name. Its invariants: a case is labelled or skipped only by a reviewer
it was given to, once each; a label is final for that reviewer (a second one is a conflict); the
gold label of a case is an adjudicator's (the latest), or else the label every reviewer of the
case gave alike once all of them labelled it. In a blind queue a reviewer may see a case's
verdict, scores and the other labels only after labelling it (`may_see`): the one definition the
API, the web pages and the CLI all apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID, uuid5

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.errors import ConflictError, NotFoundError, ValidationError
from evaledger.domain.events.base import DomainEvent
from evaledger.domain.events.review import (
    ReviewAssignment,
    ReviewItemAdjudicated,
    ReviewItemLabelled,
    ReviewItemsAssigned,
    ReviewItemSkipped,
    ReviewQueueCreated,
)
from evaledger.domain.tokens import actor_name


def review_queue_id_for(project: str, name: str) -> UUID:
    """Id of the review queue `name` of `project` (tenants never share one)."""
    return uuid5(NAMESPACE, f"review-queue\x1f{project}\x1f{name}")


def reviewer_name(actor: str) -> str:
    """The reviewer an actor is: a token's name (`alice (token t1)` → `alice`), else the actor."""
    return actor_name(actor)


def round_robin(
    case_ids: Sequence[UUID], reviewers: Sequence[str], per_item: int
) -> list[ReviewAssignment]:
    """Each case to `per_item` distinct reviewers, taking them in turn (load spread evenly)."""
    if not reviewers:
        raise ValidationError("reviewers: a queue needs at least one reviewer", field="reviewers")
    if per_item > len(reviewers):
        raise ValidationError(
            f"per_item: {per_item} reviewers per case, but the queue has {len(reviewers)}",
            field="per_item",
        )
    n = len(reviewers)
    return [
        ReviewAssignment(
            case_id=case_id,
            reviewers=[reviewers[(i * per_item + j) % n] for j in range(per_item)],
        )
        for i, case_id in enumerate(case_ids)
    ]


@dataclass(frozen=True)
class GoldLabel:
    """A case's settled label: an adjudicator's, or every reviewer's alike."""

    passed: bool
    score: float | None
    by: tuple[str, ...]
    how: Literal["adjudicated", "unanimous"]


class ReviewQueue(Aggregate):
    """A named queue of cases selected by a rule, reviewed by people."""

    created: ReviewQueueCreated
    assigned: dict[UUID, list[str]]
    labels: dict[UUID, dict[str, ReviewItemLabelled]]
    skips: dict[UUID, set[str]]
    adjudicated: dict[UUID, ReviewItemAdjudicated]

    def define(self, meta: Meta, **fields: Any) -> None:
        """Create the queue (once); its cases are assigned by the caller next (`assign`)."""
        if self.exists:
            raise ConflictError(f"name: review queue {self.name!r} already exists", field="name")
        self._trigger(ReviewQueueCreated, meta, **fields)

    @property
    def exists(self) -> bool:
        """True once created (an aggregate with no event is no queue)."""
        return hasattr(self, "created")

    @property
    def project(self) -> str:
        """The queue's project."""
        return self.created.project

    def assign(
        self,
        assignments: Sequence[ReviewAssignment],
        meta: Meta,
        mode: Literal["round-robin", "explicit"],
    ) -> None:
        """Give cases of the queue to reviewers (a reviewer given a case twice is kept once)."""
        known = set(self.created.case_ids)
        fresh = []
        for a in assignments:
            if a.case_id not in known:
                raise NotFoundError(f"case_id: case {a.case_id} is not in queue {self.name!r}")
            new = [
                r for r in dict.fromkeys(a.reviewers) if r not in self.assigned.get(a.case_id, [])
            ]
            if new:
                fresh.append(ReviewAssignment(case_id=a.case_id, reviewers=new))
        if fresh:
            self._trigger(ReviewItemsAssigned, meta, mode=mode, assignments=fresh)

    @property
    def name(self) -> str:
        """The queue's name."""
        return self.created.name

    def reviewers_of(self, case_id: UUID) -> list[str]:
        """Who the case was given to (a case not in the queue: a 404)."""
        if case_id not in self.assigned and case_id not in set(self.created.case_ids):
            raise NotFoundError(f"no case {case_id} in review queue {self.name!r}")
        return self.assigned.get(case_id, [])

    def _check_reviewer(self, case_id: UUID, reviewer: str) -> None:
        if reviewer not in self.reviewers_of(case_id):
            # Not assigned: the item does not exist for them (no existence leak beyond the queue).
            raise NotFoundError(f"case {case_id} is not assigned to {reviewer!r} in {self.name!r}")

    def label(
        self,
        case_id: UUID,
        reviewer: str,
        meta: Meta,
        *,
        passed: bool,
        score: float | None,
        comment: str | None,
    ) -> None:
        """Record the reviewer's label of the case (once)."""
        self._check_reviewer(case_id, reviewer)
        if reviewer in self.labels.get(case_id, {}):
            raise ConflictError(f"{reviewer!r} already labelled case {case_id}")
        self._trigger(
            ReviewItemLabelled,
            meta,
            case_id=case_id,
            reviewer=reviewer,
            passed=passed,
            score=score,
            comment=comment,
        )

    def skip(self, case_id: UUID, reviewer: str, meta: Meta, reason: str | None) -> None:
        """Record that the reviewer passed on the case (a labelled case cannot be skipped)."""
        self._check_reviewer(case_id, reviewer)
        if reviewer in self.labels.get(case_id, {}):
            raise ConflictError(f"{reviewer!r} already labelled case {case_id}")
        if reviewer in self.skips.get(case_id, set()):
            raise ConflictError(f"{reviewer!r} already skipped case {case_id}")
        self._trigger(ReviewItemSkipped, meta, case_id=case_id, reviewer=reviewer, reason=reason)

    def adjudicate(
        self, case_id: UUID, meta: Meta, *, passed: bool, score: float | None, reason: str
    ) -> None:
        """Fix the case's gold label (who may is checked by the command)."""
        self.reviewers_of(case_id)
        self._trigger(
            ReviewItemAdjudicated, meta, case_id=case_id, passed=passed, score=score, reason=reason
        )

    def may_adjudicate(self, reviewer: str) -> bool:
        """Whether this reviewer is one of the queue's named adjudicators."""
        return reviewer in self.created.adjudicators

    def may_see(self, case_id: UUID, reviewer: str | None) -> bool:
        """Whether `reviewer` may see the case's verdict, scores and others' labels.

        Blind queues hide them from a reviewer the case was given to until they labelled it.
        Anyone the case was not given to (an admin, an adjudicator) sees them.
        """
        if not self.created.blind or reviewer is None:
            return True
        if reviewer not in self.assigned.get(case_id, []):
            return True
        return reviewer in self.labels.get(case_id, {})

    def next_for(self, reviewer: str, after: UUID | None = None) -> UUID | None:
        """The reviewer's next case: given to them, neither labelled nor skipped, in queue order.

        `after`: the first such case after this one (wrapping around), for "next" from an item.
        """
        order = self.created.case_ids
        start = order.index(after) + 1 if after is not None and after in order else 0
        for case_id in [*order[start:], *order[:start]]:
            if (
                reviewer in self.assigned.get(case_id, [])
                and reviewer not in self.labels.get(case_id, {})
                and reviewer not in self.skips.get(case_id, set())
                and case_id != after
            ):
                return case_id
        return None

    def gold(self, case_id: UUID) -> GoldLabel | None:
        """The case's settled label: the latest adjudication, or all its reviewers alike."""
        adj = self.adjudicated.get(case_id)
        if adj is not None:
            return GoldLabel(adj.passed, adj.score, (reviewer_name(adj.actor),), "adjudicated")
        reviewers = self.assigned.get(case_id, [])
        labels = self.labels.get(case_id, {})
        if not reviewers or any(r not in labels for r in reviewers):
            return None
        values = {(labels[r].passed, labels[r].score) for r in reviewers}
        if len(values) != 1:
            return None
        passed, score = values.pop()
        return GoldLabel(passed, score, tuple(reviewers), "unanimous")

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, ReviewQueueCreated):
            self.created = event
            self.assigned = {}
            self.labels = {}
            self.skips = {}
            self.adjudicated = {}
        # New inner containers, never mutated ones: a cached aggregate's copy shares them.
        elif isinstance(event, ReviewItemsAssigned):
            for a in event.assignments:
                self.assigned[a.case_id] = [*self.assigned.get(a.case_id, []), *a.reviewers]
        elif isinstance(event, ReviewItemLabelled):
            labels = self.labels.get(event.case_id, {})
            self.labels[event.case_id] = {**labels, event.reviewer: event}
        elif isinstance(event, ReviewItemSkipped):
            self.skips[event.case_id] = {*self.skips.get(event.case_id, set()), event.reviewer}
        elif isinstance(event, ReviewItemAdjudicated):
            self.adjudicated[event.case_id] = event
