"""The compare pages of issue 36: one test case of two runs, what changed (`/ui/compare/case`).

Its answers and each turn as a word diff, and the judges' reasoning side by side, read through
`application.case_diff` (what `evaledger compare A B --case KEY` prints).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from evaledger.api.deps import SyncedDep
from evaledger.api.web.pages import render, resolve_run
from evaledger.api.web.session import ViewerDep
from evaledger.application import case_diff
from evaledger.domain.errors import ValidationError

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/compare/case", response_class=HTMLResponse)
def compare_case_page(
    request: Request,
    services: SyncedDep,
    viewer: ViewerDep,
    baseline: str = "",
    candidate: str = "",
    key: str = "",
    variant: str = "",
) -> Response:
    """One test case in both runs: answer and turns as word diffs, judge reasoning side by side."""

    def build() -> dict[str, Any]:
        for field, value in (("baseline", baseline), ("candidate", candidate), ("key", key)):
            if not value.strip():
                raise ValidationError(f"{field}: required", field=field)
        b = resolve_run(services, viewer, baseline, "baseline")
        c = resolve_run(services, viewer, candidate, "candidate")
        diff = case_diff.case_output_diff(services, b, c, key, variant)
        return {
            "title": f"Compare: {key}",
            "baseline": str(b),
            "candidate": str(c),
            "diff": diff,
        }

    return render(request, "compare_case.html", build)
