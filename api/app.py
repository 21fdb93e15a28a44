"""The FastAPI application: `create_app(settings)`."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline

from evaledger.api import errors, operation
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.deps import AUTH
from evaledger.api.limits import BodyLimit
from evaledger.api.online import TraceCompletion
from evaledger.api.responses import OrjsonResponse
from evaledger.api.routes import (
    alerts,
    cases,
    config,
    datasets,
    erasure,
    imports,
    ingest,
    judging,
    online_rules,
    otlp,
    receipts,
    reports,
    review,
    runs,
    search,
    statistics,
    trends,
)
from evaledger.api.schemas import ErrorResponse
from evaledger.api.security import BrowserGuard
from evaledger.api.web import site

SETTINGS_ENV = "EVALEDGER_SERVE_SETTINGS"


def operation_id(route: APIRoute) -> str:
    """A route's OpenAPI operationId: its function's name."""
    return route.name


def app_from_env() -> FastAPI:
    """The app of one `evaledger serve --workers N` worker process (uvicorn's factory).

    `serve` passes its settings down in the environment: every worker opens the same store.
    """
    return create_app(Settings.model_validate_json(os.environ[SETTINGS_ENV]))


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    """Build the app; the store is opened at start-up and closed at shutdown (lifespan)."""
    settings = settings or (services.settings if services else Settings.from_env())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = services is None
        app.state.services = services or build_services(settings)
        app.state.tokens_required = app.state.services.tokens_required()
        if owned and settings.projections == "inline":
            # Catch up before serving (with progress on a terminal), not in the first request.
            app.state.services.sync()
        # OTLP traces become cases once complete (api/online.py).
        completion = TraceCompletion(app.state.services, settings.trace_quiet_s)
        completion.start()
        checks = None
        if settings.verify_every_s is not None:
            checks = operation.PeriodicVerification(
                app.state, app.state.services, settings.verify_every_s
            )
            checks.start()
        try:
            yield
        finally:
            if checks is not None:
                checks.stop()
            completion.stop()
            if owned:
                app.state.services.close()

    # Swagger UI and ReDoc from files shipped in a package: /docs works offline.
    app = FastAPIOffline(
        title="evaledger",
        version="0.1.0",
        description="Event-sourced evaluation ledger for LLM and voice-agent evaluations.",
        lifespan=lifespan,
        default_response_class=OrjsonResponse,
        # operationId = the route function's name (list_runs, record_verdict): stable, readable
        # names for generated clients. FastAPI warns on a duplicate, and tests fail on warnings.
        generate_unique_id_function=operation_id,
        responses={
            status: {"model": ErrorResponse, "description": description}
            for status, description in (
                (400, "Wrong state for the request"),
                (401, "No valid API token"),
                (403, "The token's project or scope does not allow it"),
                (404, "Not found"),
                (409, "Conflicts with what is recorded"),
                (413, "Request body too large"),
                (422, "Invalid input (the field is named)"),
                (500, "Internal error"),
            )
        },
    )
    app.state.settings = settings  # serve's options (public URL...) over the store's settings
    errors.install(app)
    # Not Starlette's own limiter: it answers a declared oversize body in plain text, and every
    # error here is `{detail, code, status}`.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    operation.install(app)  # /ready, /metrics: probe deadlines, request metrics
    # Outermost: a request from a foreign Host, machine or web page is refused before anything.
    app.add_middleware(
        BrowserGuard, allowed_hosts=settings.allowed_hosts, public_url=settings.public_url
    )
    # /health stays public; every other route is authenticated and project-scoped (AUTH).
    app.include_router(config.router)
    for module in (reports, statistics, runs, receipts, cases, erasure):
        app.include_router(module.router, dependencies=AUTH)
    site.install(app)
    for module in (judging, imports, otlp, online_rules, ingest, review, search, trends, alerts):
        app.include_router(module.router, dependencies=AUTH)
    app.include_router(datasets.router, dependencies=AUTH)
    return app
