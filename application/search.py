"""Full-text search over a project's cases (issue 36): `evaledger search`, `GET /search`, the web.

The query language and the highlighting are `projections/search_syntax.py`; the index and its
query `projections/search.py`. A search is always within one project (the token's); `run` narrows
it to a run (an id or a key, of that project), `field` to one kind of text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from evaledger.application.ports import Services
from evaledger.application.reports import run_id_for
from evaledger.domain.errors import ValidationError
from evaledger.projections.search import SearchHit, search
from evaledger.projections.search_syntax import (
    FIELDS,
    SearchQuery,
    highlight,
    marked,
    parse_optional,
    parse_query,
)

MAX_LIMIT = 200
DEFAULT_LIMIT = 20

__all__ = ["FIELDS", "SearchQuery", "highlight", "marked", "parse_optional", "search_cases"]


@dataclass(frozen=True)
class SearchResults:
    """The hits of one search, best first."""

    query: str
    project: str | None
    run_id: str | None
    field: str | None
    hits: list[SearchHit]

    def as_json(self) -> dict[str, Any]:
        """As `GET /search` and `evaledger search --json` give it."""
        return {
            "query": self.query,
            "project": self.project,
            "run_id": self.run_id,
            "field": self.field,
            "count": len(self.hits),
            "hits": [asdict(h) for h in self.hits],
        }


def search_cases(
    services: Services,
    query: str,
    project: str | None,
    *,
    run: str | None = None,
    field: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> SearchResults:
    """The cases of `project` (None: open serving, every project) whose text matches `query`."""
    parsed = parse_query(query)
    if field is not None and field not in FIELDS:
        raise ValidationError(f"field: one of {', '.join(FIELDS)}, not {field!r}", field="field")
    if not 1 <= limit <= MAX_LIMIT:
        raise ValidationError(f"limit: between 1 and {MAX_LIMIT}", field="limit")
    run_id = str(run_id_for(services, project, run, "run")) if run else None
    hits = search(services.reads.engine, parsed, project, run_id, field, limit)
    return SearchResults(query, project, run_id, field, hits)
