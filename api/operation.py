"""Operation endpoints and middleware: /ready, /metrics, probe deadlines, request metrics, logs.

Everything here holds no per-process state a request depends on: several API worker processes
(`evaledger serve --workers N`) answer alike. Prometheus metrics of several workers are summed
through prometheus-client's multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`, set by `serve`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evaledger.api.bootstrap import Services
from evaledger.api.errors import error_body
from evaledger.api.routes.config import record_verification
from evaledger.api.routes.judging import job_queue
from evaledger.api.schemas import ErrorResponse
from evaledger.application import verification

log = logging.getLogger(__name__)

PROBE_DEADLINE_S = 1.5
"""/health, /ready and /metrics answer within this (503 past it): a hung store must not hang a
probe (a load balancer or orchestrator waits for the answer, then restarts a healthy process)."""
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUESTS = Counter(
    "evaledger_http_requests_total", "HTTP requests answered", ["method", "route", "status"]
)
LATENCY = Histogram(
    "evaledger_http_request_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

router = APIRouter(tags=["config"])


class Readiness(BaseModel):
    """Whether this worker can serve: the store answers, how far the read models lag."""

    status: str = Field(description="`ready` (the store answered within the deadline).")
    store: str = Field(description="sqlite or postgresql.")
    log_position: int = Field(description="The last position in the event log.")
    projection_lag: int = Field(description="Events the slowest read model still has to apply.")
    queue_depth: int | None = Field(
        description="Judge jobs waiting or running (PostgreSQL job queue); null without one."
    )


def projection_lag(services: Services) -> tuple[int, int]:
    """(log head, events the slowest projection is behind it)."""
    lag = verification.projection_lag(services)
    return lag.log_position, lag.projection_lag


@router.get(
    "/ready",
    responses={503: {"model": ErrorResponse, "description": "The store does not answer in time"}},
)
def get_ready(request: Request) -> Readiness:
    """Readiness: the store answers within a short deadline; projection lag and queue depth.

    Public like /health (a load balancer probes it without a token); 503 when the store is
    unreachable or hung, within 2 s.
    """
    services: Services = request.app.state.services
    head, lag = projection_lag(services)
    return Readiness(
        status="ready",
        store=services.location.kind,
        log_position=head,
        projection_lag=lag,
        queue_depth=queue_depth(services),
    )


def queue_depth(services: Services) -> int | None:
    """Judge jobs waiting or running, when the store carries the job queue (PostgreSQL)."""
    queue = job_queue(services)
    return None if queue is None else queue.pending()


class StoreCollector(Collector):
    """Gauges read from the store at scrape time (one answer whichever worker is scraped)."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def collect(self) -> Iterable[Metric]:
        """Log position (its rate is events appended/s), projection lag, the job queue."""
        head, lag = projection_lag(self.services)
        yield GaugeMetricFamily("evaledger_log_position", "Last position in the event log", head)
        yield GaugeMetricFamily(
            "evaledger_projection_lag_events", "Events the slowest read model is behind", lag
        )
        depth = queue_depth(self.services)
        if depth is not None:
            yield GaugeMetricFamily(
                "evaledger_judge_jobs_pending", "Judge jobs waiting or running", depth
            )


@router.get("/metrics", response_class=Response, include_in_schema=False)
def get_metrics(request: Request) -> Response:
    """Prometheus metrics of every worker of this server (text exposition format)."""
    registry = CollectorRegistry()
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        for metric in (REQUESTS, LATENCY):
            registry.register(metric)
    registry.register(StoreCollector(request.app.state.services))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


PROBES = frozenset({"/health", "/ready", "/metrics"})


class Operation:
    """ASGI middleware: probe deadlines and request metrics."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Count and time every HTTP request; cut a probe short at PROBE_DEADLINE_S."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        response_started = False

        async def sending(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
            await send(message)

        try:
            if scope["path"] in PROBES:
                await asyncio.wait_for(self.app(scope, receive, sending), PROBE_DEADLINE_S)
            else:
                await self.app(scope, receive, sending)
        except TimeoutError:
            # The blocked thread finishes (or times out) on its own; the probe answers now.
            if response_started:
                raise
            status = 503
            await _send_unavailable(send, _store_name(scope))
        finally:
            route = _route_of(scope)
            REQUESTS.labels(scope["method"], route, str(status)).inc()
            LATENCY.labels(scope["method"], route).observe(time.perf_counter() - started)


def _store_name(scope: Scope) -> str:
    """The store as the store errors name it (`PostgreSQL at host:port/db`)."""
    services: Services | None = getattr(getattr(scope.get("app"), "state", None), "services", None)
    if services is None or services.location.kind != "postgresql":
        return "the store"
    env = services.location.events_env
    return f"PostgreSQL at {env['POSTGRES_HOST']}:{env['POSTGRES_PORT']}/{env['POSTGRES_DBNAME']}"


async def _send_unavailable(send: Send, store: str) -> None:
    detail = f"{store} is not answering within {PROBE_DEADLINE_S} s (down or hung); retry later"
    body = orjson.dumps(error_body(detail, "store_unavailable", 503))
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"5")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _route_of(scope: Scope) -> str:
    """The route's path template (bounded label values), not the raw path."""
    # Starlette's router leaves the matched route in the scope.
    return str(getattr(scope.get("route"), "path", "other"))


def install(app: FastAPI) -> None:
    """Add /ready and /metrics, the probe deadline and request metrics."""
    app.include_router(router)
    app.add_middleware(Operation)


def json_line(level: str, logger: str, message: str) -> str:
    """A line of the JSON log written outside logging (before the server's logging is set up)."""
    record = logging.LogRecord(
        logger, logging.getLevelName(level.upper()), "", 0, message, (), None
    )
    return JsonFormatter().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per log line (`--log-format json`): time, level, logger, message."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


JsonFormatter.converter = time.gmtime


def log_config(fmt: str) -> dict[str, Any] | None:
    """Uvicorn's `log_config` for `--log-format` (None keeps uvicorn's own text format)."""
    if fmt != "json":
        return None
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {"default": handler},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "evaledger": {"handlers": ["default"], "level": "INFO", "propagate": False},
        },
    }


class PeriodicVerification:
    """`serve --verify-every SECONDS`: the server verifies its log and read models itself.

    Every `every_s` seconds, in a thread of its own, what `GET /verify?views=1` does: the log
    from the last verified checkpoint, then the read models against a scratch rebuild. `/health`
    reports the result (`degraded` on a broken log or drift) until a later check finds none. A
    check that cannot run (the store away) is logged and tried again at the next period.
    """

    def __init__(self, state: Any, services: Services, every_s: float) -> None:
        self.state, self.services, self.every_s = state, services, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evaledger-verify", daemon=True)

    def start(self) -> None:
        """Start checking (the first check one period after start-up)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop after the check in progress, if any."""
        self._stop.set()
        self._thread.join(timeout=self.every_s + 30)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                record_verification(self.state, self.services, views=True)
            except Exception:
                log.exception("periodic verification could not run")
