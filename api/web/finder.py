"""`/ui/search`: the search box's results page (issue 36).

Every page has the box (`base.html`); the results link to each case's page with the query, where
the words found are marked (`mark` filter, `pages.py`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from evaledger.api.deps import SyncedDep
from evaledger.api.web.pages import render
from evaledger.api.web.session import ViewerDep
from evaledger.application.search import FIELDS, search_cases

router = APIRouter(prefix="/ui", include_in_schema=False)

ANCHORS = {
    "transcript": "tr-h",
    "judge": "v-h",
    "justification": "v-h",
    "outcome": "v-h",
    "key": "main",
    "tag": "main",
}
"""Where on the case page each field's text is (the section a result link opens at)."""


@router.get("/search", response_class=HTMLResponse)
def search_page(
    request: Request,
    services: SyncedDep,
    viewer: ViewerDep,
    q: str = "",
    run: str = "",
    field: str = "",
) -> Response:
    """The best hits of the viewer's project, each linking to its case with the words marked."""

    def build() -> dict[str, Any]:
        results = (
            search_cases(
                services, q, viewer.principal.project, run=run or None, field=field or None
            )
            if q.strip()
            else None
        )
        return {
            "title": f"Search: {q}" if q else "Search",
            "q": q,
            "run": run,
            "field": field,
            "fields": FIELDS,
            "anchors": ANCHORS,
            "results": results,
        }

    return render(request, "search.html", build)
