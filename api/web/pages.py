"""The web report's pages under /ui, rendered server-side with Jinja2 from the API's own queries.

Every page reads through the use cases the JSON API calls (`application.reports`, `.compare`,
`.grades`, `.review_queue`, and `api.audit`), so a number on a page is the number the API
returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Annotated, Any, cast
from urllib.parse import urlencode
from uuid import UUID

import jinja2
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from evaledger.api.agreement import agreement_notes, agreement_of, human_notes
from evaledger.api.audit import case_history, explain
from evaledger.api.bootstrap import Services
from evaledger.api.deps import SyncedDep
from evaledger.api.errors import status_of
from evaledger.api.web import views
from evaledger.api.web.filters import (
    fmt_created,
    fmt_created_day,
    fmt_figure,
    fmt_flag,
    fmt_json,
    fmt_ms,
    fmt_num,
    fmt_pct,
    fmt_signed,
    fmt_time,
    fmt_usd,
    source_note,
)
from evaledger.api.web.session import Viewer, ViewerDep
from evaledger.application import (
    calibration,
    case_filters,
    grades,
    reports,
    review,
    review_queue,
    transcripts,
)
from evaledger.application.search import SearchQuery, highlight, parse_optional
from evaledger.domain.aggregates import RunStatus
from evaledger.domain.errors import EvaledgerError, ValidationError
from evaledger.domain.spec import ScoringSpec
from evaledger.projections.queries import RunFilter, RunRow
from evaledger.scoring.agreement import shown
from evaledger.scoring.calibration import DEFAULT_MIN_KAPPA
from evaledger.scoring.case import variant_figures
from evaledger.scoring.grading import preset_names
from evaledger.scoring.headline import run_headline
from evaledger.scoring.judge_errors import run_judge_error_note
from evaledger.scoring.rollups import ColumnDimension, RowDimension
from evaledger.scoring.scorer_metrics import RANDOM_METRICS

HERE = Path(__file__).parent
# StrictUndefined: a misspelt field is an error in the tests, not an empty cell on a page.
templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
)
router = APIRouter(prefix="/ui", include_in_schema=False)

RUN_STATUSES = tuple(s.value for s in RunStatus)
PIVOT_MAX_COLUMNS = 10
"""The compare page's case orders: by key, or by how much the answer changed (most first)."""


# ---------------------------------------------------------------------------------------------
# display filters


def viewer_of(request: Request) -> Viewer | None:
    """Who the page is for (None on a page served before the viewer was known)."""
    viewer: Viewer | None = getattr(request.state, "viewer", None)
    return viewer


templates.env.globals["viewer_of"] = viewer_of
templates.env.globals["source_note"] = source_note
templates.env.globals["random_metrics"] = RANDOM_METRICS
templates.env.filters.update(
    num=fmt_num, figure=fmt_figure, pct=fmt_pct, usd=fmt_usd, ms=fmt_ms, time=fmt_time,
    signed=fmt_signed, flag=fmt_flag, pretty=fmt_json, created=fmt_created,
    created_day=fmt_created_day,
)  # fmt: skip


def fmt_mark(text: object, query: SearchQuery | None) -> Markup:
    """Text escaped, the words a search found in it inside `<mark>` (issue 36)."""
    return Markup(highlight("" if text is None else str(text), query))  # noqa: S704


templates.env.filters["mark"] = fmt_mark


# ---------------------------------------------------------------------------------------------
# plumbing


def error_page(request: Request, status: int, detail: str, code: str) -> Response:
    """The HTML error page: the message and the status (never raw JSON under /ui)."""
    return templates.TemplateResponse(
        request,
        "error.html",
        {"title": f"Error {status}", "status": status, "detail": detail, "code": code},
        status_code=status,
    )


def guarded(request: Request, act: Callable[[], Response]) -> Response:
    """What `act` answers; a domain error becomes the HTML error page (pages and forms alike)."""
    try:
        return act()
    except EvaledgerError as e:
        return error_page(request, status_of(e), e.detail, e.code)


def render(request: Request, template: str, build: Callable[[], dict[str, Any]]) -> Response:
    """Render `template` with what `build` returns; a domain error becomes an HTML error page."""
    return guarded(request, lambda: templates.TemplateResponse(request, template, build()))


def resolve_run(services: Services, viewer: Viewer, value: str, field: str) -> UUID:
    """A run id or a run key (wherever a run id is accepted), within the viewer's project.

    A blind reviewer with items of the run still to label is refused it (403).
    """
    rid = reports.run_id_for(services, viewer.principal.project, value, field)
    _check_blind(services, viewer, rid)
    return rid


def check_scope(services: Services, viewer: Viewer, aggregate_id: UUID, what: str) -> None:
    """Another project's run or case does not exist for this viewer (HTML 404).

    A blind reviewer with items of it still to label is refused it (403, `review.blind_hold`).
    """
    reports.require_in_project(services, viewer.principal.project, aggregate_id, what)
    _check_blind(services, viewer, aggregate_id)


def _check_blind(services: Services, viewer: Viewer, aggregate_id: UUID) -> None:
    actor = viewer.principal.actor or services.settings.default_actor
    review.check_not_blind(services, aggregate_id, actor, viewer.principal.project)


def viewed_run(services: Services, viewer: Viewer, value: str) -> tuple[UUID, RunRow]:
    """The run a page is about (its id or key in the path), within the viewer's project."""
    rid = resolve_run(services, viewer, value, "run_id")
    return rid, reports.get_run(services, rid)


def form_number(value: str, field: str) -> float | None:
    """A form field's number (None when empty); a value that is not one names its field."""
    if not value.strip():
        return None
    try:
        return float(value)
    except ValueError:
        raise ValidationError(f"{field}: not a number: {value!r}", field=field) from None


def _day(value: str, field: str, end: bool) -> datetime | None:
    """A date from an <input type=date> (whole day, UTC) or a full ISO timestamp."""
    if not value:
        return None
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), time.max if end else time.min, UTC)
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(f"{field}: not a date: {value!r}", field=field) from None


def visible_runs(services: Services, viewer: Viewer) -> list[RunRow]:
    """The runs the viewer may see (its project's), for the pickers."""
    return reports.recent_runs(services, viewer.principal.project)


def default_pair(completed: list[RunRow]) -> tuple[str, str] | None:
    """(baseline, candidate) preselected: the newest run and the run before it of its suite."""
    if len(completed) < 2:
        return None
    newest = completed[0]
    same_suite = [r for r in completed[1:] if r.suite["name"] == newest.suite["name"]]
    return str((same_suite or completed[1:])[0].run_id), str(newest.run_id)


# ---------------------------------------------------------------------------------------------
# pages


@router.get("/", response_class=HTMLResponse)
def runs_page(
    request: Request,
    services: SyncedDep,
    viewer: ViewerDep,
    project: str = "",
    suite: str = "",
    agent: str = "",
    status: str = "",
    label: str = "",
    created_from: str = "",
    created_to: str = "",
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    """Runs, newest first, with filters and key figures; pick two to compare."""
    given = {
        "project": project,
        "suite": suite,
        "agent": agent,
        "status": status,
        "label": label,
        "created_from": created_from,
        "created_to": created_to,
    }

    def build() -> dict[str, Any]:
        if label and "=" not in label:
            raise ValidationError("label: use key=value", field="label")
        if status and status not in RUN_STATUSES:
            raise ValidationError(f"status: one of {', '.join(RUN_STATUSES)}", field="status")
        f = RunFilter(
            project=viewer.principal.project or project or None,
            suite=suite or None,
            agent=agent or None,
            status=status or None,
            label=label or None,
            created_from=_day(created_from, "created_from", end=False),
            created_to=_day(created_to, "created_to", end=True),
            limit=50,
            offset=offset,
        )
        listing = reports.list_runs_shown(services, f)
        total = listing.total
        listed = [
            {
                "run": r.run,
                "aggregate": r.aggregate,
                "headline": r.headline,
                "total_cost": r.total_cost,
            }
            for r in listing.runs
        ]
        completed = [r for r in visible_runs(services, viewer) if r.status == "completed"]
        query = urlencode({k: v for k, v in given.items() if v})
        return {
            "pair": default_pair(completed),
            "title": "Runs",
            "runs": listed,
            "total": total,
            "offset": offset,
            "limit": f.limit,
            "filters": given,
            "query": query,
            "statuses": RUN_STATUSES,
            "completed": completed,
        }

    return render(request, "runs.html", build)


@dataclass(frozen=True)
class CaseFilterForm:
    """The run page's filters of issue 36 as typed in its form (blank: not given)."""

    min_score: str = ""
    max_score: str = ""
    min_latency: str = ""
    max_latency: str = ""
    above: str = ""
    """The chosen metric's score at least (`below`: under)."""
    label: str = ""
    flag: str = ""

    def case_filter(self, metric: str) -> case_filters.CaseFilter:
        """The filter they ask for (a bad number or value names its field)."""
        above = form_number(self.above, "above")
        return case_filters.CaseFilter(
            min_score=form_number(self.min_score, "min_score"),
            max_score=form_number(self.max_score, "max_score"),
            min_latency_ms=form_number(self.min_latency, "min_latency"),
            max_latency_ms=form_number(self.max_latency, "max_latency"),
            metric=(metric or None) if above is not None else None,
            metric_min=above,
            label=cast(case_filters.LabelFilter, self.label or None),
            flag=cast(case_filters.FlagFilter, self.flag or None),
        )


_NO_FILTER = CaseFilterForm()


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(
    request: Request,
    run_id: str,
    services: SyncedDep,
    viewer: ViewerDep,
    show: views.Show = views.Show.ALL,
    metric: str = "",
    below: str = "",
    q: str = "",
    sort: views.SortKey = views.SortKey.ORDER,
    desc: bool = False,
    page: Annotated[int, Query(ge=1)] = 1,
    narrow: Annotated[CaseFilterForm, Depends()] = _NO_FILTER,
    min_kappa: Annotated[float, Query(ge=-1, le=1)] = DEFAULT_MIN_KAPPA,
) -> Response:
    """A run: aggregate, thresholds, coverage, charts, its judges' calibration gate, its cases."""
    more = asdict(narrow)

    def build() -> dict[str, Any]:
        rid, run = viewed_run(services, viewer, run_id)
        narrowed = narrow.case_filter(metric)
        query = views.CaseQuery(
            show=show,
            metric=metric or None,
            below=form_number(below, "below"),
            q=q or None,
            sort=sort,
            desc=desc,
            page=page,
            filter=narrowed,
            review=case_filters.run_review(services, rid) if narrowed.reviews else None,
        )
        # Every case narrow (what the filters, sorts and charts read), the page's rows whole.
        cases = review_queue.page_cases(services, rid, by_metric=query.reads_metrics)
        summary, scores, flaky = cases.summary, cases.rows, cases.flaky
        selected = views.select_cases(scores, flaky, query)
        shown = views.CasePage(
            review_queue.whole_rows(services, selected.rows),
            selected.matching,
            selected.page,
            selected.pages,
            selected.first,
        )
        names = reports.metric_names(services, run.project)
        agg = summary.aggregate
        charts = views.run_charts(summary.spec, agg, scores, names)
        latencies = [float(s.latency_p50_ms) for s in scores if s.latency_p50_ms is not None]
        keep = {"show": show.value, "metric": metric, "below": below, "q": q, **more}
        return {
            "title": run.name or run.run_key,
            "run": run,
            "agg": agg,
            "spec": summary.spec,
            "headline": run_headline(summary.spec, agg),
            "scorer_names": list(dict.fromkeys(s.score for s in summary.spec.scorers)),
            "charts": charts,
            "metric_bars": charts.rubric,
            "latency_bins": views.latency_bins(latencies),
            "cases": shown,
            "flaky": flaky,
            "query": query,
            "keep": keep,
            "more_query": urlencode({k: v for k, v in more.items() if v}),
            "shows": list(views.Show),
            "sorts": list(views.SortKey),
            "metric_names": names,
            "rescores": reports.stored_rescores(services, rid),
            # One result per test case × variant: count the test cases themselves.
            "test_case_count": len({t.test_case_key for t in summary.test_cases}),
            "flaky_count": len(flaky),
            "judge_error_note": run_judge_error_note(scores, summary.spec.judge_errors),
            "total_cost": reports.run_cost(services, rid, summary.aggregate),
            # Issue 35: `gate --require-calibrated --min-kappa K`'s rule, per judge and template.
            "calibration_gate": calibration.calibration_gate_of(services, rid, min_kappa),
            "min_kappa": min_kappa,
        }

    return render(request, "run.html", build)


@router.get("/cases/{case_id}", response_class=HTMLResponse)
def case_page(
    request: Request,
    case_id: UUID,
    services: SyncedDep,
    viewer: ViewerDep,
    spec: str = "",
    queue: str = "",
    q: str = "",
) -> Response:
    """The audit trail of one case, under the run's own spec or a what-if spec.

    `q`: a search that led here; the words it found are marked on the page.
    """

    def build() -> dict[str, Any]:
        check_scope(services, viewer, case_id, "case")
        history = case_history(services, case_id)
        run = reports.get_run(services, UUID(history["run_id"]))
        what_if = reports.spec_from_query(services, spec or None, run.project)
        chain = explain(services, case_id, what_if)
        _, score = reports.show_case(services, case_id)
        own = reports.run_spec_of(services, run.run_id)
        events = history["events"]

        def payloads(kind: str) -> list[dict[str, Any]]:
            return [{**e["payload"], "_event": e} for e in events if e["type"] == kind]

        transcripts = payloads("TranscriptRecorded")
        links = views.chain_links(events)
        return {
            "title": f"Case {history['state']['facts']['test_case_key']}",
            "run": run,
            "facts": history["state"]["facts"],
            "score": score,
            "chain": chain,
            "events": events,
            "links": links,
            "chain_ok": all(link.linked for link in links),
            "transcript": transcripts[-1] if transcripts else None,
            "errors": payloads("ExecutionErrored"),
            "cancels": payloads("ExecutionCanceled"),
            "outcomes": payloads("OutcomeEvaluated"),
            "claims": payloads("ClaimsVerified"),
            "checks": payloads("StructuralCheckRecorded"),
            "corrections": [e for e in events if e["type"] in _CORRECTIONS],
            "labels": [e for e in events if e["type"] == "HumanLabelRecorded"],
            "flag": review_queue.case_flag(services, case_id),
            "erasures": [e for e in events if e["type"] == "PayloadErased"],
            # A case is labelled in its own terms: the rubric metrics when a judge scored it on
            # them, its own scorers (an Inspect `match`, a promptfoo assertion) when it has them.
            "label_metrics": own.metrics if chain["verdicts"] else (),
            "label_scores": _own_scores(history["state"]["facts"], events, own),
            "spec": spec,
            "rescores": reports.stored_rescores(services, run.run_id),
            "metric_names": reports.metric_names(services, run.project),
            "queue": _neighbours(services, viewer, queue, case_id) if queue else None,
            "search": parse_optional(q),
        }

    return render(request, "case.html", build)


_CORRECTIONS = ("VerdictOverridden", "VerdictInvalidated", "ScoreOverridden")


def _own_scores(
    facts: dict[str, Any], events: list[dict[str, Any]], spec: ScoringSpec
) -> list[dict[str, Any]]:
    """The case's named scores as the review forms offer them: name, reading, pass/fail or not.

    A score recorded as a boolean or a grade (Inspect's C/I, a promptfoo pass), or that its
    source's scorer declares binary, is offered as pass (1) / fail (0); any other as a number.
    """
    binary = {s.score for s in spec.scorers if s.value_type == "binary"}
    for e in events:
        if e["type"] == "NamedScoresRecorded":
            binary.update(
                s["name"] for s in e["payload"]["scores"] if s["scale"] in ("boolean", "grade")
            )
    return [
        {"score": name, "value": value, "binary": name in binary}
        for name, value in facts.get("named_scores", {}).items()
    ]


def _neighbours(services: Services, viewer: Viewer, run: str, case_id: UUID) -> dict[str, Any]:
    """Where a case opened from its run's review queue sits in it: previous, next, the queue."""
    run_id = resolve_run(services, viewer, run, "queue")
    ids = [i.row.case_id for i in queue_of(services, run_id)]
    at = ids.index(str(case_id)) if str(case_id) in ids else -1
    return {
        "run_id": run_id,
        "position": at + 1,
        "total": len(ids),
        "previous": ids[at - 1] if at > 0 else None,
        "next": ids[at + 1] if 0 <= at < len(ids) - 1 else None,
    }


def queue_of(services: Services, run_id: UUID) -> list[views.QueueItem]:
    """The run's review queue (from the read models the run page uses)."""
    return review_queue.run_review_queue(services, run_id)


@router.get("/rollup", response_class=HTMLResponse)
def rollup_page(
    request: Request,
    services: SyncedDep,
    viewer: ViewerDep,
    run_id: Annotated[list[str] | None, Query()] = None,
    rows: str = RowDimension.CONFIGURATION.value,
    columns: str = ColumnDimension.TEST.value,
) -> Response:
    """A pivot of one or several runs: rows × columns chosen on the page."""

    def build() -> dict[str, Any]:
        chosen = [resolve_run(services, viewer, r, "run_id") for r in run_id or []]
        result = grades.rollup_runs(services, chosen, [rows], [columns]) if chosen else None
        cells = {} if result is None else {(c.row, c.column): c.summary for c in result.cells}
        return {
            "title": "Rollup",
            "runs": visible_runs(services, viewer),
            "chosen": {str(r) for r in chosen},
            "rows": rows,
            "columns": columns,
            "row_dims": [d.value for d in RowDimension],
            "column_dims": [d.value for d in ColumnDimension],
            "result": result,
            "cells": cells,
            # Many columns read better down the page than squeezed across it.
            "transposed": result is not None
            and len(result.columns) > PIVOT_MAX_COLUMNS
            and len(result.columns) > len(result.rows),
        }

    return render(request, "rollup.html", build)


@router.get("/runs/{run_id}/matrix", response_class=HTMLResponse)
def matrix_page(
    request: Request,
    run_id: str,
    services: SyncedDep,
    viewer: ViewerDep,
    page: Annotated[int, Query(ge=1)] = 1,
) -> Response:
    """A run as test case × variant, each cell the answer and pass/fail (promptfoo's view)."""

    def build() -> dict[str, Any]:
        rid, run = viewed_run(services, viewer, run_id)
        cases = review_queue.run_cases(services, rid)
        grid = views.matrix(cases.rows, page)
        found = transcripts.final_answers(
            services, list(dict.fromkeys(UUID(cell.case_id) for cell in grid.cells.values()))
        )
        answers = {key: found[UUID(cell.case_id)] for key, cell in grid.cells.items()}
        summary = cases.summary
        figures = {f.variant: f for f in variant_figures(summary.test_cases, summary.spec)}
        return {
            "figures": figures,
            "title": f"Matrix: {run.name or run.run_key}",
            "run": run,
            "grid": grid,
            "answers": answers,
            "label": views.variant_heading,
        }

    return render(request, "matrix.html", build)


@router.get("/runs/{run_id}/scorecard", response_class=HTMLResponse)
def scorecard_page(
    request: Request,
    run_id: str,
    services: SyncedDep,
    viewer: ViewerDep,
    preset: str = "",
    min_score: str = "",
    strategic: bool = False,
) -> Response:
    """The run's governance scorecard (iFixAi rules): categories, tests, minimums, cap, grade."""

    def build() -> dict[str, Any]:
        rid, run = viewed_run(services, viewer, run_id)
        minimum = form_number(min_score, "min_score")
        context: dict[str, Any] = {
            "title": f"Scorecard: {run.name or run.run_key}",
            "run": run,
            "preset": preset,
            "presets": preset_names(),
            "min_score": min_score,
            "strategic": strategic,
            "grade": None,
            "has_section": grades.has_grading_section(services, rid),
        }
        if not (preset or context["has_section"]):
            return context
        grading = grades.grading_for(services, rid, preset or None, minimum)
        context["grading"] = grading
        context["grade"] = grades.grade_run(services, rid, grading, strategic_only=strategic)
        return context

    return render(request, "scorecard.html", build)


@router.get("/runs/{run_id}/agreement", response_class=HTMLResponse)
def agreement_page(
    request: Request, run_id: str, services: SyncedDep, viewer: ViewerDep
) -> Response:
    """Judge agreement: κ and α with 95 % intervals and n, or "insufficient data" (issue 22)."""

    def build() -> dict[str, Any]:
        rid, run = viewed_run(services, viewer, run_id)
        report = agreement_of(services, rid)
        measures = [*report.metrics, report.case_passed]
        return {
            "title": f"Agreement: {run.name or run.run_key}",
            "run": run,
            "report": report,
            "measures": measures,
            "notes": agreement_notes(measures),
            "human_notes": human_notes(report.human),
            "shown": shown,
        }

    return render(request, "agreement.html", build)
