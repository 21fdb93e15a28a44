"""The FastAPI application: `create_app(settings)`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from evaledger.api import errors
from evaledger.api.bootstrap import Services, Settings, build_ledger
from evaledger.api.responses import OrjsonResponse
from evaledger.api.routes import cases, config, imports, reports, runs
from evaledger.api.schemas import ErrorResponse


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

    app = FastAPI(
        title="evaledger",
        version="0.1.0",
        description="Event-sourced evaluation ledger for LLM and voice-agent evaluations.",
        lifespan=lifespan,
        default_response_class=OrjsonResponse,
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
    app.include_router(imports.router)
    return app
