"""The commands of review queues (the ReviewQueue aggregate): create, assign, label, skip, fix.

`ReviewCommands` is built on the store's write unit (`writes.LedgerStore`); `Ledger` (`ledger.py`)
inherits it. Every act is one event whose actor is the person acting; the reviewer an act is
recorded for is the actor's name (`review.reviewer_name`): a token's name, never a field the
client chooses.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from evaledger.domain.errors import ConflictError, NotFoundError, PermissionDeniedError
from evaledger.domain.events import ReviewQueueCreated, TokenScope
from evaledger.domain.events.review import ReviewAssignment
from evaledger.domain.review import ReviewQueue, review_queue_id_for, reviewer_name, round_robin
from evaledger.domain.store.lanes import lanes_to_read
from evaledger.domain.writes import Context, LedgerStore, Written, jsonable, require_reason


class ReviewCommands(LedgerStore):
    """Review queues: one named command per review act."""

    def create_review_queue(
        self,
        project: str,
        name: str,
        ctx: Context,
        *,
        rule: str,
        run_ids: Sequence[UUID],
        case_ids: Sequence[UUID],
        reviewers: Sequence[str],
        per_item: int,
        blind: bool,
        adjudicators: Sequence[str] = (),
    ) -> Written:
        """Create the queue over the cases its rule selected and give them out round-robin."""
        ctx.scope.require(TokenScope.WRITE, "creating a review queue")
        ctx.check_project(project, f"project {project!r}")
        for run_id in run_ids:
            run = self._run_in_scope(run_id, ctx)
            if run.created.project != project:
                raise NotFoundError(f"no run {run_id} in project {project!r}")
        reviewers = list(dict.fromkeys(reviewers))
        assignments = round_robin(case_ids, reviewers, per_item)
        queue_id = review_queue_id_for(project, name)
        fields: dict[str, Any] = {
            "project": project,
            "name": name,
            "rule": rule,
            "run_ids": list(run_ids),
            "case_ids": list(case_ids),
            "reviewers": reviewers,
            "per_item": per_item,
            "blind": blind,
            "adjudicators": list(dict.fromkeys(adjudicators)),
        }

        def command() -> Written:
            meta = self._meta(ctx, jsonable(fields))
            found = self._find(ReviewQueue, queue_id)
            if found is not None and found.exists:
                if found.seen(meta):  # the same request again, with its idempotency key
                    return Written((queue_id,), self.position(), 0)
                raise ConflictError(f"name: review queue {name!r} already exists", field="name")
            queue = ReviewQueue(queue_id)
            queue.define(meta, **fields)
            if assignments:
                queue.assign(assignments, meta, "round-robin")
            position, n = self._save(queue, project=project)
            return Written((queue_id,), position, n)

        return self._retrying(command)

    def review_queue(self, project: str, name: str, ctx: Context | None = None) -> ReviewQueue:
        """The queue `name` of `project` (outside the context's project: not found)."""
        if ctx is not None:
            ctx.check_project(project, f"review queue {name!r}")
        queue = self._find(ReviewQueue, review_queue_id_for(project, name))
        if queue is None or not queue.exists:
            raise NotFoundError(f"no review queue {name!r} in project {project!r}")
        return queue

    def review_queue_names(self, project: str | None) -> list[tuple[str, str]]:
        """(project, name) of every queue, of `project` only when given, oldest first in each.

        Read from the log once, then only what was logged since: every read of a run or a case
        asks (`application/review.blind_hold`), and a scan of the whole log by topic is not free.
        """
        with self._queues_lock:
            known: list[tuple[str, str]] = self.__dict__.setdefault("_queue_names", [])
            # Where the read is in each write lane (a place in the log could pass over a lower
            # position committed late once lanes commit concurrently: `lanes_to_read`).
            places: dict[int, int] = self.__dict__.setdefault("_queue_names_after", {})
            heads, topics = self.lane_heads(), [ReviewQueueCreated.topic()]
            for lane in lanes_to_read(heads, places):
                while page := self.recorder.lane_notifications(
                    lane, places.get(lane, 0), topics, 1000
                ):
                    for _, n in page:
                        event = self.decode(n)
                        assert isinstance(event, ReviewQueueCreated)
                        known.append((event.project, event.name))
                    places[lane] = page[-1][0]
                places[lane] = max(places.get(lane, 0), heads[lane])
            return [(p, n) for p, n in known if project is None or p == project]

    @property
    def _queues_lock(self) -> threading.Lock:
        lock: threading.Lock | None = self.__dict__.get("_queue_names_lock")
        if lock is None:
            lock = self.__dict__.setdefault("_queue_names_lock", threading.Lock())
        return lock

    def assign_review_items(
        self, project: str, name: str, assignments: Sequence[ReviewAssignment], ctx: Context
    ) -> Written:
        """Give cases to reviewers explicitly (admin: it changes who reviews what)."""
        ctx.scope.require(TokenScope.ADMIN, "assigning review items")
        return self._act(
            project,
            name,
            ctx,
            {"assign": [a.model_dump(mode="json") for a in assignments]},
            lambda q, meta: q.assign(assignments, meta, "explicit"),
        )

    def label_review_item(
        self,
        project: str,
        name: str,
        case_id: UUID,
        ctx: Context,
        *,
        passed: bool,
        score: float | None = None,
        comment: str | None = None,
    ) -> Written:
        """The acting reviewer labels a case given to them (write scope; once)."""
        ctx.scope.require(TokenScope.WRITE, "labelling a review item")
        me = reviewer_name(ctx.actor)
        body = {"label": str(case_id), "passed": passed, "score": score, "comment": comment}
        return self._act(
            project,
            name,
            ctx,
            body,
            lambda q, meta: q.label(case_id, me, meta, passed=passed, score=score, comment=comment),
        )

    def skip_review_item(
        self, project: str, name: str, case_id: UUID, ctx: Context, reason: str | None = None
    ) -> Written:
        """The acting reviewer passes on a case given to them (write scope)."""
        ctx.scope.require(TokenScope.WRITE, "skipping a review item")
        me = reviewer_name(ctx.actor)
        body = {"skip": str(case_id), "reason": reason}
        return self._act(
            project, name, ctx, body, lambda q, meta: q.skip(case_id, me, meta, reason)
        )

    def adjudicate_review_item(
        self,
        project: str,
        name: str,
        case_id: UUID,
        ctx: Context,
        *,
        passed: bool,
        score: float | None,
        reason: str | None,
    ) -> Written:
        """Fix a case's gold label: a named adjudicator of the queue, or an admin."""
        ctx.scope.require(TokenScope.WRITE, "adjudicating a review item")
        why = require_reason(reason, "adjudicating")
        body = {"adjudicate": str(case_id), "passed": passed, "score": score, "reason": why}

        def act(queue: ReviewQueue, meta: Any) -> None:
            if not ctx.scope.allows(TokenScope.ADMIN) and not queue.may_adjudicate(
                reviewer_name(ctx.actor)
            ):
                raise PermissionDeniedError(
                    f"adjudicating needs an adjudicator of {name!r} or the admin scope"
                )
            queue.adjudicate(case_id, meta, passed=passed, score=score, reason=why)

        return self._act(project, name, ctx, body, act)

    def _act(
        self, project: str, name: str, ctx: Context, body: dict[str, Any], action: Any
    ) -> Written:
        """One review act in one transaction (an idempotent re-send writes nothing)."""

        def command() -> Written:
            queue = self.review_queue(project, name, ctx)
            meta = self._meta(ctx, body)
            if not queue.seen(meta):
                action(queue, meta)
            position, n = self._save(queue, project=project)
            return Written((queue.id,), position, n)

        return self._retrying(command)
