"""`GET /search`: the cases of the token's project whose text matches a query (issue 36)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from evaledger.api.deps import ProjectDep, SyncedDep
from evaledger.application.search import MAX_LIMIT, search_cases

router = APIRouter(tags=["search"])

SearchField = Literal["transcript", "judge", "justification", "outcome", "key", "tag"]


class SearchHitOut(BaseModel):
    """One case whose text matched, in one field."""

    case_id: str
    run_id: str
    test_case_key: str
    repetition: int
    field: SearchField
    rank: float = Field(description="Higher is better (within one search).")
    snippet: str = Field(description="The text around the first hit (… where it was cut).")
    marks: list[tuple[int, int]] = Field(description="The hits in `snippet`: [start, end).")
    snippet_html: str = Field(description="The snippet escaped as HTML, hits in <mark>.")


class SearchResultsOut(BaseModel):
    """The hits of one search, best first (one per case and field)."""

    query: str
    project: str | None
    run_id: str | None
    field: SearchField | None
    count: int
    hits: list[SearchHitOut]


@router.get("/search", response_model=SearchResultsOut)
def search(
    services: SyncedDep,
    project: ProjectDep,
    q: Annotated[
        str,
        Query(
            max_length=500,
            description='Words (all must match), "quoted phrases", prefix*.',
        ),
    ],
    run: Annotated[str | None, Query(description="Only this run (id or key).")] = None,
    field: Annotated[SearchField | None, Query(description="Only this kind of text.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 20,
) -> dict[str, Any]:
    """Full-text search over transcripts, judge replies, justifications, outcomes, keys, tags."""
    return search_cases(services, q, project, run=run, field=field, limit=limit).as_json()
