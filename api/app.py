"""The FastAPI application: `create_app(settings)`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline

from evaledger.api import errors
from evaledger.api.bootstrap import Services, Settings, build_ledger
from evaledger.api.responses import OrjsonResponse
from evaledger.api.routes import cases, config, imports, judging, reports, runs
from evaledger.api.schemas import ErrorResponse
from evaledger.api.web import pages


def operation_id(route: APIRoute) -> str:
    """A route's OpenAPI operationId: its function's name."""
    return route.name


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    """Build the app; the store is opened at start-up and closed at shutdown (lifespan)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = services is None
        app.state.services = services or build_ledger(settings or Settings.from_env())
        try:
            yield
        finally:
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
                (404, "Not found"),
                (409, "Conflicts with what is recorded"),
                (422, "Invalid input (the field is named)"),
                (500, "Internal error"),
            )
        },
    )
    errors.install(app)
    app.include_router(config.router)
    app.include_router(reports.router)
    app.include_router(runs.router)
    app.include_router(cases.router)
    pages.install(app)
    app.include_router(judging.router)
    app.include_router(imports.router)
    return app
