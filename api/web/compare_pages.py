"""The compare pages: two runs, one test case of two runs, and many runs at once.

`/ui/compare` (and its Markdown, `/ui/compare.md`): two runs side by side, with the
comparability guard and the significance.

`/ui/compare/case`: a test case's answers and each turn as a word diff, and the judges'
reasoning side by side, read through `application.case_diff` (what `evaledger compare A B
--case KEY` prints). `/ui/compare?runs=BASE,CAND1,...` (`many_page`, dispatched by the compare
page): a row per test case, a column per run, through `application.compare_many`.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args
from urllib.parse import urlencode
from uuid import UUID

import pydantic
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from evaledger.api.bootstrap import Services
from evaledger.api.deps import SyncedDep
from evaledger.api.web import views
from evaledger.api.web.pages import form_number, render, resolve_run, visible_runs
from evaledger.api.web.session import Viewer, ViewerDep
from evaledger.application import (
    case_diff,
    compare,
    compare_many,
    statistics,
)
from evaledger.application.compare import ComparisonReport
from evaledger.application.statistics import CORRECTIONS
from evaledger.domain.errors import ValidationError
from evaledger.scoring.comparison import CaseStatus as CaseClass
from evaledger.scoring.comparison import CompareThresholds, render_markdown, source_metric_deltas
from evaledger.scoring.judge_errors import judge_error_note

router = APIRouter(prefix="/ui", include_in_schema=False)
COMPARE_PER_PAGE = 50
COMPARE_SHOW = ("all", *get_args(CaseClass))
COMPARE_SORTS = ("key", "change")


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


def _thresholds(**given: str) -> CompareThresholds:
    return CompareThresholds(**{k: form_number(v, k) for k, v in given.items()})


def _judge_error_notes(report: ComparisonReport) -> list[tuple[str, str]]:
    """(which run, "N judge errors counted as 0 …") for the compared runs that have any."""
    notes = []
    for label, errors in report.judge_errors.items():
        note = judge_error_note(errors.count, errors.policy)
        if note is not None:
            notes.append((label, note.text))
    return notes


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    services: SyncedDep,
    viewer: ViewerDep,
    baseline: str = "",
    candidate: str = "",
    show: str = "all",
    q: str = "",
    sort: str = "key",
    runs: str = "",
    page: Annotated[int, Query(ge=1)] = 1,
    max_pass_rate_drop: str = "",
    max_avg_score_drop: str = "",
    max_latency_increase_pct: str = "",
    case_score_delta: str = "",
    correction: str = "holm",
    noise_floor: str = "",
    allow_different_datasets: bool = False,
    exclude_cached: bool = False,
) -> Response:
    """Two completed runs side by side (or, given `runs`, several: `_many_runs`)."""
    if runs:
        return _many_runs(request, services, viewer, runs, correction, q, page)
    given = {
        "max_pass_rate_drop": max_pass_rate_drop,
        "max_avg_score_drop": max_avg_score_drop,
        "max_latency_increase_pct": max_latency_increase_pct,
        "case_score_delta": case_score_delta,
    }

    def build() -> dict[str, Any]:
        completed = [r for r in visible_runs(services, viewer) if r.status == "completed"]
        context: dict[str, Any] = {
            "title": "Compare runs",
            "completed": completed,
            "baseline": baseline,
            "candidate": candidate,
            "show": show,
            "shows": COMPARE_SHOW,
            "given": given,
            "result": None,
        }
        if not (baseline and candidate):
            return context
        if show not in COMPARE_SHOW:
            raise ValidationError(f"show: one of {', '.join(COMPARE_SHOW)}", field="show")
        options = (allow_different_datasets, exclude_cached, correction, noise_floor)
        b, c, report = _guarded_report(services, viewer, (baseline, candidate), given, options)
        result = report.result
        cases = _compared_cases(services, report, show, q, sort)
        rows, shown_page, pages, first = views.page_of(cases, page, COMPARE_PER_PAGE)
        runs = {str(r.run_id): r for r in completed}
        query = urlencode({k: v for k, v in given.items() if v})
        context.update(
            result=result,
            cases=rows,
            matching=len(cases),
            page=shown_page,
            pages=pages,
            first=first,
            q=q,
            answers=compare.compared_answers(services, report.runs, rows),
            diffs=case_diff.answer_diffs(services, report.runs, rows),
            sort=sort,
            sorts=COMPARE_SORTS,
            grid=views.compare_matrix(rows) if result.aggregate.per_variant else None,
            baseline_run=runs.get(str(b)) or report.baseline_run,
            candidate_run=runs.get(str(c)) or report.candidate_run,
            threshold_query=query,
            judge_error_notes=_judge_error_notes(report),
            source_deltas=source_metric_deltas(result.aggregate),
            headlines=report.headlines,
            noise_floor=noise_floor,
            title="Compare: "
            + ("regression detected" if result.verdict.regression_detected else "no regression"),
        )
        return context

    return render(request, "compare.html", build)


def _many_runs(
    request: Request,
    services: Services,
    viewer: Viewer,
    runs: str,
    correction: str,
    q: str,
    page: int,
) -> Response:
    """`/ui/compare?runs=BASE,CAND1,...` (issue 36): a base and several candidates."""
    return many_page(request, services, viewer, runs, correction=correction, q=q, page=page)


def _compared_cases(
    services: Services, report: ComparisonReport, show: str, q: str, sort: str
) -> list[Any]:
    """The comparison's case rows of class `show` matching `q`, in the `sort` order."""
    # Filtered and paged by the caller: a 10k-case comparison is one page of rows, not 10k.
    if sort not in COMPARE_SORTS:
        raise ValidationError(f"sort: one of {', '.join(COMPARE_SORTS)}", field="sort")
    needle = q.casefold()
    cases = [
        t
        for t in report.result.test_case_comparisons
        if (show == "all" or t.status == show)
        and (needle in t.test_case_key.casefold() or needle in t.variant.casefold())
    ]
    if sort == "change":  # every matching row's answers read: the order is over all of them
        changes = case_diff.answer_changes(services, report.runs, cases)
        cases.sort(key=lambda t: -changes[(t.test_case_key, t.variant)])
    return cases


def _guarded_report(
    services: Services,
    viewer: Viewer,
    pair: tuple[str, str],
    given: dict[str, str],
    options: tuple[bool, bool, str, str],
) -> tuple[UUID, UUID, ComparisonReport]:
    """The compare form's two runs and their comparison with its significance.

    `options`: compare every case of two dataset versions, leave out cached test cases
    (issue 35), the correction and the noise floor (issue 37).
    """
    all_items, no_cached, correction, noise_floor = options
    b = resolve_run(services, viewer, pair[0], "baseline")
    c = resolve_run(services, viewer, pair[1], "candidate")
    report = compare.compare_report(
        services,
        b,
        c,
        _checked_thresholds(given),
        allow_different_datasets=all_items,
        exclude_cached=no_cached,
    )
    return b, c, _significant(services, viewer, report, correction, noise_floor)


def _checked_thresholds(given: dict[str, str]) -> CompareThresholds:
    """The thresholds of the compare form, each ≥ 0 (else a 4xx naming it)."""
    try:
        return _thresholds(**given)
    except pydantic.ValidationError as e:
        field = str(e.errors()[0]["loc"][0])
        raise ValidationError(f"{field}: must be ≥ 0", field=field) from None


def _significant(
    services: Services, viewer: Viewer, report: ComparisonReport, correction: str, noise: str
) -> ComparisonReport:
    """The report with its per-metric significance (issue 37), A/A runs as its noise floor."""
    if correction not in statistics.CORRECTIONS:
        raise ValidationError(
            f"correction: one of {', '.join(statistics.CORRECTIONS)}", field="correction"
        )
    floor = None
    if noise.strip():
        runs = [resolve_run(services, viewer, r.strip(), "noise_floor") for r in noise.split(",")]
        floor = statistics.noise_floor_of_runs(services, runs)
    return statistics.compare_significance(services, report, correction=correction, noise=floor)


@router.get("/compare.md", response_class=PlainTextResponse)
def compare_markdown(
    services: SyncedDep,
    viewer: ViewerDep,
    baseline: str,
    candidate: str,
    max_pass_rate_drop: str = "",
    max_avg_score_drop: str = "",
    max_latency_increase_pct: str = "",
    case_score_delta: str = "",
    correction: str = "holm",
    noise_floor: str = "",
) -> Response:
    """The comparison as the compact Markdown PR comment `evaledger compare --markdown` prints."""
    b = resolve_run(services, viewer, baseline, "baseline")
    c = resolve_run(services, viewer, candidate, "candidate")
    thresholds = _thresholds(
        max_pass_rate_drop=max_pass_rate_drop,
        max_avg_score_drop=max_avg_score_drop,
        max_latency_increase_pct=max_latency_increase_pct,
        case_score_delta=case_score_delta,
    )
    report = compare.compare_report(services, b, c, thresholds)
    report = _significant(services, viewer, report, correction, noise_floor)
    heads = {k: h.summary for k, h in report.headlines.items()}
    text = render_markdown(report.result, headlines=heads)
    return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")
