"""The trend page (/ui/trends, issue 33): a measure per agent version as a server-rendered SVG.

The series is the API's (`application.trends.read_series`); each point links to its run's page
(an online run is one agent version's day, so a day's point opens that day's run).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from evaledger.api.deps import SyncedDep
from evaledger.api.web.pages import render
from evaledger.api.web.session import ViewerDep
from evaledger.application.trends import Series, parse_query, read_series
from evaledger.domain.ledger import Context
from evaledger.scoring.series import MEASURES

router = APIRouter(prefix="/ui", include_in_schema=False)

WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 48, 16, 40
COLOURS = ("#3b73c9", "#d1495b", "#2a9d8f", "#e9a23b", "#6a4c93", "#577590")


@dataclass(frozen=True)
class ChartPoint:
    """One point of the chart: where it is drawn and the run it opens."""

    x: float
    y: float
    label: str
    href: str


@dataclass(frozen=True)
class ChartLine:
    """One agent version's polyline."""

    name: str
    colour: str
    points: list[ChartPoint]

    @property
    def path(self) -> str:
        """The polyline's `points` attribute."""
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


@dataclass(frozen=True)
class Chart:
    """The chart's lines and axis labels."""

    lines: list[ChartLine]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]


def chart_of(series: Series) -> Chart:
    """The geometry of a series: x by bucket time, y from 0 (rates: 0..1) to the largest value."""
    values = [p.value for line in series.lines for p in line.points if p.value is not None]
    times = sorted({p.at for line in series.lines for p in line.points if p.value is not None})
    top = 1.0 if series.measure == "pass_rate" else max([*values, 0.0]) or 1.0
    span_w, span_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(at: datetime) -> float:
        if len(times) < 2:
            return LEFT + span_w / 2
        return LEFT + span_w * (at - times[0]) / (times[-1] - times[0])

    def y_of(value: float) -> float:
        return TOP + span_h * (1 - value / top)

    fmt = "%Y-%m-%d" if series.by == "day" else "%m-%d %H:00"
    lines = []
    for i, line in enumerate(series.lines):
        points = [
            ChartPoint(
                x=x_of(p.at),
                y=y_of(p.value),
                label=f"{line.agent} {line.version} · {p.at.strftime(fmt)}: "
                f"{series.measure} {p.value:.4g} (n={p.n})",
                href=f"/ui/runs/{p.runs[0].run_id}",
            )
            for p in line.points
            if p.value is not None
        ]
        if points:
            name = f"{line.agent} {line.version}"
            lines.append(ChartLine(name, COLOURS[i % len(COLOURS)], points))
    y_ticks = [(y_of(top * k / 4), f"{top * k / 4:.3g}") for k in range(5)]
    shown = times if len(times) <= 8 else times[:: max(1, len(times) // 8)]
    x_ticks = [(x_of(t), t.strftime(fmt)) for t in shown]
    return Chart(lines, y_ticks, x_ticks)


@router.get("/trends", response_class=HTMLResponse)
def trends_page(
    request: Request,
    services: SyncedDep,
    viewer: ViewerDep,
    project: str | None = None,
    measure: str = "pass_rate",
    by: str = "day",
    agent: str | None = None,
    version: str | None = None,
) -> Response:
    """A measure per agent version over time; each point opens its run."""

    def build() -> dict[str, Any]:
        chosen = project or viewer.principal.project or "default"
        query = parse_query(
            project=chosen,
            measure=measure,
            by=by,
            agent=agent or None,
            version=version or None,
        )
        ctx = Context.of(viewer.principal, services.settings.default_actor)
        series = read_series(services, query, ctx)
        return {
            "title": "Trends",
            "series": series,
            "chart": chart_of(series),
            "measures": MEASURES,
            "width": WIDTH,
            "height": HEIGHT,
            "left": LEFT,
            "bottom": HEIGHT - BOTTOM,
            "agent": agent or "",
            "version": version or "",
        }

    return render(request, "trends.html", build)
