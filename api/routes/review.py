"""Review queues (issue 35): create over a rule, read, next item, label, skip, adjudicate, export.

The reviewer of every act is the token's name (open serving: `X-Actor`), never a body field.
A blind queue's verdict and other labels are left out of these answers for a reviewer who has not
labelled the item (`application/review.py`); a case named in a path is checked against the
token's project by `AUTH` (`api/deps.py`), and an item not given to the reader is a 404.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from evaledger.api.deps import ContextDep, ServicesDep, SyncedDep
from evaledger.api.responses import created, replayed
from evaledger.api.schemas import Written
from evaledger.application import review
from evaledger.domain.ledger import Written as LedgerWritten

router = APIRouter(tags=["review"])

Name = Annotated[str, Path(min_length=1, max_length=200, description="The queue's name.")]
Project = Annotated[
    str | None,
    Query(min_length=1, max_length=200, description="Open serving: the queue's project."),
]
Reviewers = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200)]],
    Field(max_length=review.MAX_REVIEWERS),
]


class QueueBody(BaseModel):
    """A review queue to create."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, description="Unique in the project.")
    runs: list[UUID] = Field(min_length=1, max_length=100, description="Run ids.")
    where: str = Field(default="", max_length=2000, description="The selection rule.")
    reviewers: Reviewers = Field(min_length=1)
    per_item: int = Field(default=1, ge=1, le=20, description="Reviewers per case.")
    blind: bool = Field(default=False, description="Hide verdicts until labelled.")
    adjudicators: Reviewers = Field(default_factory=list)


class QueueCreatedOut(BaseModel):
    """A queue created."""

    project: str
    name: str
    cases: int = Field(description="Cases the rule took.")
    position: int


class QueueName(BaseModel):
    """A queue listed."""

    project: str
    name: str


class NextItem(BaseModel):
    """The reader's next case (null: none left for them)."""

    case_id: UUID | None


class ItemLabelBody(BaseModel):
    """A reviewer's label."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    score: float | None = Field(default=None, ge=0, le=5, allow_inf_nan=False)
    comment: str | None = Field(default=None, max_length=4000)


class SkipBody(BaseModel):
    """A skip, with an optional reason."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=4000)


class AdjudicateBody(BaseModel):
    """An adjudicator's gold label, with its reason."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    score: float | None = Field(default=None, ge=0, le=5, allow_inf_nan=False)
    reason: str = Field(min_length=1, max_length=4000)


class AssignBody(BaseModel):
    """Explicit assignments: case id → reviewers."""

    model_config = ConfigDict(extra="forbid")

    assignments: dict[UUID, Reviewers] = Field(min_length=1, max_length=10_000)


@router.post(
    "/review/queues",
    status_code=201,
    response_model=QueueCreatedOut,
    responses=replayed(QueueCreatedOut),
)
def create_queue(
    body: QueueBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> QueueCreatedOut:
    """Create a review queue over the cases of runs that its rule takes."""
    made = review.create_review_queue(
        services,
        body.name,
        body.runs,
        ctx,
        where=body.where,
        reviewers=body.reviewers,
        per_item=body.per_item,
        blind=body.blind,
        adjudicators=body.adjudicators,
    )
    created(response, f"/review/queues/{made.name}", made.written.events)
    return QueueCreatedOut(
        project=made.project, name=made.name, cases=made.cases, position=made.written.position
    )


class QueueList(BaseModel):
    """The review queues listed, oldest first."""

    data: list[QueueName]


@router.get("/review/queues", response_model=QueueList)
def list_queues(services: ServicesDep, ctx: ContextDep, project: Project = None) -> QueueList:
    """The review queues (a token's: its project's)."""
    found = review.list_review_queues(services, ctx, project)
    return QueueList(data=[QueueName(project=p, name=n) for p, n in found])


@router.get("/review/queues/{name}", response_model=review.QueueView)
def show_queue(
    name: Name, services: SyncedDep, ctx: ContextDep, project: Project = None
) -> review.QueueView:
    """The queue as its reader may see it: items, progress, inter-reviewer agreement."""
    return review.queue_view(services, name, ctx, project)


@router.get("/review/queues/{name}/next", response_model=NextItem)
def next_item(
    name: Name, services: ServicesDep, ctx: ContextDep, project: Project = None
) -> NextItem:
    """The reader's next case: given to them, neither labelled nor skipped."""
    return NextItem(case_id=review.next_item(services, name, ctx, project))


@router.get("/review/queues/{name}/items/{case_id}", response_model=review.ReviewItem)
def get_item(
    name: Name, case_id: UUID, services: SyncedDep, ctx: ContextDep, project: Project = None
) -> review.ReviewItem:
    """One item; in a blind queue, no verdict or other label before the reader labelled it."""
    return review.review_item(services, name, case_id, ctx, project)


def _written(name: str, case_id: UUID, written: LedgerWritten, response: Response) -> Written:
    created(response, f"/review/queues/{name}/items/{case_id}", written.events)
    return Written.of(written)


@router.post(
    "/review/queues/{name}/items/{case_id}/label", status_code=201, responses=replayed(Written)
)
def label_item(
    name: Name,
    case_id: UUID,
    body: ItemLabelBody,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    project: Project = None,
) -> Written:
    """The reader labels an item given to them (once)."""
    written = review.label_item(
        services,
        name,
        case_id,
        ctx,
        passed=body.passed,
        score=body.score,
        comment=body.comment,
        project=project,
    )
    return _written(name, case_id, written, response)


@router.post(
    "/review/queues/{name}/items/{case_id}/skip", status_code=201, responses=replayed(Written)
)
def skip_item(
    name: Name,
    case_id: UUID,
    body: SkipBody,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    project: Project = None,
) -> Written:
    """The reader passes on an item given to them."""
    written = review.skip_item(services, name, case_id, ctx, reason=body.reason, project=project)
    return _written(name, case_id, written, response)


@router.post(
    "/review/queues/{name}/items/{case_id}/adjudicate", status_code=201, responses=replayed(Written)
)
def adjudicate_item(
    name: Name,
    case_id: UUID,
    body: AdjudicateBody,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    project: Project = None,
) -> Written:
    """An adjudicator of the queue (or an admin) fixes the item's gold label."""
    written = review.adjudicate_item(
        services,
        name,
        case_id,
        ctx,
        passed=body.passed,
        score=body.score,
        reason=body.reason,
        project=project,
    )
    return _written(name, case_id, written, response)


@router.post("/review/queues/{name}/assign", status_code=201, responses=replayed(Written))
def assign_items(
    name: Name,
    body: AssignBody,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
    project: Project = None,
) -> Written:
    """Give cases of the queue to reviewers explicitly (admin)."""
    written = review.assign_items(services, name, dict(body.assignments), ctx, project)
    created(response, f"/review/queues/{name}", written.events)
    return Written.of(written)


class GoldItems(BaseModel):
    """The settled items of a queue, in the dataset item format (`evaledger review export`)."""

    items: list[dict[str, Any]] = Field(
        description='Each `{"key", "input", "expected_outcomes", "tags", "metadata", "label": '
        '{"passed", "score", "by"}}`.'
    )


@router.get("/review/queues/{name}/export", response_model=GoldItems)
def export_gold(
    name: Name, services: ServicesDep, ctx: ContextDep, project: Project = None
) -> GoldItems:
    """The settled items (adjudicated, or every reviewer alike) in the dataset item format."""
    return GoldItems(items=review.gold_items(services, name, ctx, project))
