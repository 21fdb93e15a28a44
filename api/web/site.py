"""Mount the web report: its pages, review routes, sign-in, HTML errors and assets under /ui."""

from __future__ import annotations

import secrets

from fastapi import Depends, FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from evaledger.api.deps import check_input
from evaledger.api.web import datasets, pages, review, signin
from evaledger.api.web.session import check_form


def install(app: FastAPI) -> None:
    """Serve the web report under /ui (pages, sign-in, review, assets) and send `/` there."""
    app.state.web_csrf_key = secrets.token_bytes(32)
    app.mount("/ui/static", StaticFiles(directory=pages.HERE / "static"), name="ui-static")
    guarded = [Depends(check_form), Depends(check_input)]
    app.include_router(pages.router, dependencies=guarded)
    app.include_router(review.router, dependencies=guarded)
    app.include_router(datasets.router, dependencies=guarded)
    signin.install(app)

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/ui/")
