"""Trends (issue 33): series equal a plain-Python reference over the cases, on both stores."""

from __future__ import annotations

import statistics as pystats
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from evaledger.api.bootstrap import Services
from evaledger.application import runs, trends
from evaledger.application.traces import complete_traces, online_run_key, receive_traces
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import NotFoundError, ValidationError
from evaledger.domain.ledger import Context
from evaledger.importers.otlp import PROTOBUF
from tests.conftest import FIXTURES
from tests.helpers import bundle, scores
from tests.otlp_helpers import chat_trace, export_body, recorder

CTX = Context(actor="trend-test")
DAY1 = datetime(2026, 11, 20, tzinfo=UTC)
DAY2 = DAY1 + timedelta(days=1)


def trend_case(
    key: str, score: int, at: datetime | None, latency: float, cost: float, errored: bool = False
) -> dict[str, Any]:
    """A case: one answer of `latency` ms, `cost` USD, judged `score` on every metric."""
    c: dict[str, Any] = {
        "test_case": {"key": key, "name": key},
        "status": "errored" if errored else "completed",
        "transcript": [
            {"role": "user", "content": "where is my order?"},
            {"role": "assistant", "content": "on its way", "latency_ms": latency},
        ],
        "cost_usd": cost,
        "verdicts": []
        if errored
        else [
            {
                "judge": {"provider": "anthropic", "model": "claude"},
                "metric_scores": scores(score),
                "prompt": f"judge {key}",
                "raw_output": "{}",
            }
        ],
    }
    if errored:
        c["error"] = {"message": "timeout", "kind": "timeout"}
    if at is not None:
        c["started_at"] = (at - timedelta(seconds=2)).isoformat()
        c["ended_at"] = at.isoformat()
    return c


def load(services: Services, project: str = "shop") -> list[dict[str, Any]]:
    """Three runs of two agent versions over two days; returns each case with its run."""
    plan: list[tuple[str, datetime, list[tuple[int, datetime | None, float, float, bool]]]] = [
        (
            "1.0",
            DAY1,
            [
                (4, DAY1 + timedelta(hours=9, minutes=5), 800.0, 0.002, False),
                (2, DAY1 + timedelta(hours=9, minutes=40), 1200.0, 0.003, False),
                (5, DAY1 + timedelta(hours=14), 650.0, 0.001, False),
                (0, DAY1 + timedelta(hours=14, minutes=30), 300.0, 0.0005, True),
                # no transcript time: placed at the run's own time (created_at, 02:00)
                (4, None, 900.0, 0.002, False),
                # a case of this run that ended the next day counts on that day
                (3, DAY2 + timedelta(hours=1), 1000.0, 0.004, False),
            ],
        ),
        (
            "1.1",
            DAY1,
            [
                (
                    4 if i % 5 else 2,
                    DAY1 + timedelta(hours=10, minutes=i),
                    400.0 + 37 * i,
                    0.001 * i,
                    False,
                )
                for i in range(25)
            ],
        ),
        (
            "1.1",
            DAY2,
            [
                (5, DAY2 + timedelta(hours=3), 500.0, 0.01, False),
                (1, DAY2 + timedelta(hours=3, minutes=9), 700.0, 0.02, False),
            ],
        ),
    ]
    cases: list[dict[str, Any]] = []
    for n, (version, day, specs) in enumerate(plan):
        created = day + timedelta(hours=2)
        data = bundle(
            key=f"support-bot-{version}-{day.date()}-{n}",
            project=project,
            created_at=created.isoformat(),
            completed_at=(created + timedelta(hours=23)).isoformat(),
        )
        data["run"]["agent"] = {**data["run"]["agent"], "name": "support-bot", "version": version}
        data["cases"] = [
            trend_case(f"c{n}-{i}", score, at, latency, cost, errored)
            for i, (score, at, latency, cost, errored) in enumerate(specs)
        ]
        runs.import_run(services, RunBundle.model_validate(data), CTX)
        for score, at, latency, cost, errored in specs:
            cases.append(
                {
                    "version": version,
                    "at": at or created,
                    "passed": not errored and score >= 4,
                    "overall": None if errored else score * 20.0,
                    "latency": None if errored else int(latency),
                    "cost": cost,
                }
            )
    services.sync()
    return cases


def reference(
    cases: list[dict[str, Any]], measure: str, by: str
) -> dict[tuple[str, str], float | None]:
    """The measure per (version, bucket) in plain Python, straight from what was loaded."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in cases:
        at: datetime = c["at"]
        bucket = at.strftime("%Y-%m-%d") if by == "day" else at.strftime("%Y-%m-%dT%H")
        groups[(c["version"], bucket)].append(c)
    out: dict[tuple[str, str], float | None] = {}
    for key, members in groups.items():
        if measure == "pass_rate":
            out[key] = sum(c["passed"] for c in members) / len(members)
        elif measure == "score":
            overall = [c["overall"] for c in members if c["overall"] is not None]
            out[key] = sum(overall) / len(overall) if overall else None
        elif measure == "cost":
            out[key] = sum(c["cost"] for c in members)
        else:
            lat = [c["latency"] for c in members if c["latency"] is not None]
            out[key] = (
                pystats.quantiles(lat, n=100, method="inclusive")[94] if len(lat) >= 20 else None
            )
    return out


def got(series: trends.Series, by: str) -> dict[tuple[str, str], float | None]:
    fmt = "%Y-%m-%d" if by == "day" else "%Y-%m-%dT%H"
    return {
        (line.version, p.at.strftime(fmt)): p.value for line in series.lines for p in line.points
    }


@pytest.mark.parametrize("by", ["day", "hour"])
def test_every_measure_equals_the_plain_python_reference(store_services: Services, by: str) -> None:
    cases = load(store_services)
    load(store_services, project="elsewhere")  # another project's cases never count
    for measure in ("pass_rate", "score", "cost", "latency_p95"):
        query = trends.parse_query(project="shop", measure=measure, by=by)
        series = trends.read_series(store_services, query, CTX)
        expected = reference(cases, measure, by)
        actual = got(series, by)
        assert actual.keys() == expected.keys(), measure
        for key, value in expected.items():
            assert actual[key] == pytest.approx(value, abs=1e-6), (measure, key)
    assert any(v is not None for v in reference(cases, "latency_p95", "day").values())


def test_points_carry_counts_and_their_runs(store_services: Services) -> None:
    load(store_services)
    query = trends.parse_query(project="shop", agent="support-bot", version="1.0")
    (line,) = trends.read_series(store_services, query, CTX).lines
    day1, day2 = line.points
    assert (day1.n, day1.passed, day1.failed, day1.errored) == (5, 3, 1, 1)
    assert [r.run_key for r in day1.runs] == ["support-bot-1.0-2026-11-20-0"]
    assert day2.at == DAY2 and day2.n == 1 and day2.value == 0.0
    assert day2.runs == day1.runs  # the run's late case


def test_since_and_until_bound_the_buckets(store_services: Services) -> None:
    cases = load(store_services)
    query = trends.parse_query(project="shop", since=DAY2, until=DAY2 + timedelta(days=1))
    series = trends.read_series(store_services, query, CTX)
    assert {k[1] for k in got(series, "day")} == {"2026-11-21"}
    assert sum(p.n for line in series.lines for p in line.points) == sum(
        1 for c in cases if c["at"] >= DAY2
    )


def test_another_projects_token_reads_no_series(store_services: Services) -> None:
    load(store_services)
    theirs = Context(actor="token:x", project="elsewhere")
    with pytest.raises(NotFoundError):
        trends.read_series(store_services, trends.parse_query(project="shop"), theirs)
    own = trends.read_series(store_services, trends.parse_query(project="elsewhere"), theirs)
    assert own.lines == []


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"measure": "p99"}, "measure"),
        ({"measure": "a/b/c"}, "measure"),
        ({"by": "week"}, "by"),
        ({"since": "2026-11-20T00:00:00"}, "since"),
        ({"since": DAY2, "until": DAY1}, "until"),
    ],
)
def test_a_bad_query_names_its_field(given: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as e:
        trends.parse_query(project="shop", **given)
    assert e.value.field == field


def test_a_source_scorers_metric_is_the_runs_own_figure_by_day(store_services: Services) -> None:
    """`SCORER/METRIC`: an imported Inspect log (tests/fixtures/peers/inspect_ai, `match`)."""
    log = FIXTURES / "peers/inspect_ai/eval-logs/log_streaming.eval"
    (imported,) = runs.import_files(store_services, [log], CTX, project="inspect")
    store_services.sync()
    run_figure = store_services.reads.summary(imported.run.run_id).aggregate.scorer_metrics
    query = trends.parse_query(project="inspect", measure="match/accuracy")
    (line,) = trends.read_series(store_services, query, CTX).lines
    assert [p.value for p in line.points] == [run_figure["match/accuracy"]] == [0.75]
    unknown = trends.parse_query(project="inspect", measure="nosuch/accuracy")
    (line,) = trends.read_series(store_services, unknown, CTX).lines
    assert [p.value for p in line.points] == [None]


def test_an_online_days_point_is_that_days_online_run(store_services: Services) -> None:
    """Traces from the real OpenTelemetry SDK become cases; their day's point names their run."""
    tracer, memory = recorder()
    for _ in range(3):
        chat_trace(tracer)
    spans = memory.get_finished_spans()
    receive_traces(store_services, export_body(spans), PROTOBUF, None, CTX, max_bytes=1 << 22)
    later = datetime.now(UTC) + timedelta(minutes=1)
    done = complete_traces(store_services, CTX, quiet_s=30.0, now=later)
    assert done.cases == 3
    store_services.sync()
    roots = [s for s in spans if s.parent is None]
    ends = sorted(datetime.fromtimestamp((s.end_time or 0) / 1e9, UTC) for s in roots)
    query = trends.parse_query(project="default", measure="pass_rate", by="hour")
    (line,) = trends.read_series(store_services, query, CTX).lines
    assert (line.agent, line.version) == ("support-bot", "1.2.0")
    assert sum(p.n for p in line.points) == 3
    assert [p.at for p in line.points] == sorted(
        {e.replace(minute=0, second=0, microsecond=0) for e in ends}
    )
    day = trends.read_series(store_services, trends.parse_query(project="default"), CTX)
    keys = {r.run_key for p in day.lines[0].points for r in p.runs}
    assert keys == {online_run_key("support-bot", "1.2.0", e.date()) for e in ends}
    assert all(p.value == 0.0 for p in day.lines[0].points)  # not judged yet: pending
