"""Mount the web report: its pages, review routes, sign-in, HTML errors and assets under /ui."""

from __future__ import annotations

import secrets

from fastapi import Depends, FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from evaledger.api.deps import check_input
from evaledger.api.web import (
    compare_pages,
    datasets,
    finder,
    pages,
    review,
    review_queues,
    share_pages,
    signin,
    trends,
)
from evaledger.api.web.session import check_form


def install(app: FastAPI) -> None:
    """Serve the web report under /ui (pages, sign-in, review, assets) and send `/` there."""
    app.state.web_csrf_key = secrets.token_bytes(32)
    app.mount("/ui/static", StaticFiles(directory=pages.HERE / "static"), name="ui-static")
    guarded = [Depends(check_form), Depends(check_input)]
    app.include_router(pages.router, dependencies=guarded)
    app.include_router(review.router, dependencies=guarded)
    app.include_router(review_queues.router, dependencies=guarded)
    app.include_router(finder.router, dependencies=guarded)
    app.include_router(compare_pages.router, dependencies=guarded)
    app.include_router(share_pages.router, dependencies=guarded)
    # A share link needs no token: the link itself is the signed, read-only credential.
    app.include_router(share_pages.public, dependencies=[Depends(check_input)])
    app.include_router(trends.router, dependencies=guarded)
    app.include_router(datasets.router, dependencies=guarded)
    signin.install(app)

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/ui/")
