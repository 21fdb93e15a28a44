"""The compare pages of issue 36: one test case of two runs, and many runs at once.

`/ui/compare/case`: a test case's answers and each turn as a word diff, and the judges'
reasoning side by side, read through `application.case_diff` (what `evaledger compare A B
--case KEY` prints). `/ui/compare?runs=BASE,CAND1,...` (`many_page`, dispatched by the compare
page): a row per test case, a column per run, through `application.compare_many`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from evaledger.api.bootstrap import Services
from evaledger.api.deps import SyncedDep
from evaledger.api.web import views
from evaledger.api.web.pages import render, resolve_run
from evaledger.api.web.session import Viewer, ViewerDep
from evaledger.application import case_diff, compare_many
from evaledger.application.statistics import CORRECTIONS
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


MANY_PER_PAGE = 50


def many_page(
    request: Request,
    services: Services,
    viewer: Viewer,
    runs: str,
    *,
    correction: str = "holm",
    q: str = "",
    page: int = 1,
) -> Response:
    """`/ui/compare?runs=BASE,CAND1,CAND2`: one row per case, one column per run."""

    def build() -> dict[str, Any]:
        given = [r.strip() for r in runs.split(",") if r.strip()]
        ids = [resolve_run(services, viewer, r, "runs") for r in given]
        if len(ids) < 2:
            raise ValidationError("runs: a base run and at least one candidate", field="runs")
        if correction not in CORRECTIONS:
            raise ValidationError(
                f"correction: one of {', '.join(CORRECTIONS)}", field="correction"
            )
        found = compare_many.compare_many(services, ids[0], ids[1:], correction=correction)
        needle = q.casefold()
        cases = [
            c
            for c in found.cases
            if needle in c.test_case_key.casefold() or needle in c.variant.casefold()
        ]
        rows, shown_page, pages, first = views.page_of(cases, page, MANY_PER_PAGE)
        return {
            "title": f"Compare {len(ids)} runs",
            "runs": ",".join(str(i) for i in ids),
            "found": found,
            "cases": rows,
            "matching": len(cases),
            "page": shown_page,
            "pages": pages,
            "first": first,
            "q": q,
            "correction": correction,
            "corrections": CORRECTIONS,
        }

    return render(request, "compare_many.html", build)
