"""The web pages of versioned datasets (issue 35): the list, one version with its items, a diff.

Read through `application/datasets.py`, as the JSON API: a viewer with a project token sees only
its project (another project's dataset is the HTML 404); the open local server shows `project`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, Response

from evaledger.api.deps import SyncedDep
from evaledger.api.web.pages import render
from evaledger.api.web.session import Viewer, ViewerDep
from evaledger.application import calibration, datasets
from evaledger.domain.ledger import Context
from evaledger.domain.types import MAX_KEY_CHARS

router = APIRouter(prefix="/ui", include_in_schema=False)

Version = Annotated[int | None, Query(ge=1, le=2**31 - 1)]
Project = Annotated[str, Query(min_length=1, max_length=MAX_KEY_CHARS)]
Name = Annotated[str, Path(min_length=1, max_length=MAX_KEY_CHARS)]


def _scope(viewer: Viewer, project: str | None) -> tuple[str, Context]:
    """The project shown (a token's own unless asked for another) and the reads' context."""
    own = viewer.principal.project
    return project or own or "default", Context.of(viewer.principal, "web")


@router.get("/datasets", response_class=HTMLResponse)
def datasets_page(
    request: Request, services: SyncedDep, viewer: ViewerDep, project: Project | None = None
) -> Response:
    """A project's datasets, each with its latest version."""

    def build() -> dict[str, Any]:
        shown, ctx = _scope(viewer, project)
        rows = datasets.list_datasets(services, shown, ctx)
        return {"title": "Datasets", "project": shown, "datasets": rows}

    return render(request, "datasets.html", build)


@router.get("/datasets/{name}", response_class=HTMLResponse)
def dataset_page(
    request: Request,
    services: SyncedDep,
    viewer: ViewerDep,
    name: Name,
    project: Project | None = None,
    version: Version = None,
) -> Response:
    """A dataset's versions and one version's items (the latest unless `version`)."""

    def build() -> dict[str, Any]:
        shown, ctx = _scope(viewer, project)
        versions = datasets.dataset_versions(services, shown, name, ctx)
        chosen = None
        if versions:
            ref = name if version is None else f"{name}@{version}"
            chosen = datasets.show_dataset(services, shown, ref, ctx)
        return {
            "title": f"Dataset {name}",
            "project": shown,
            "name": name,
            "versions": versions,
            "chosen": chosen,
        }

    return render(request, "dataset.html", build)


@router.get("/datasets/{name}/diff", response_class=HTMLResponse)
def dataset_diff_page(
    request: Request,
    services: SyncedDep,
    viewer: ViewerDep,
    name: Name,
    old: Annotated[int, Query(ge=1, le=2**31 - 1)],
    new: Annotated[int, Query(ge=1, le=2**31 - 1)],
    project: Project | None = None,
) -> Response:
    """The items added, removed and changed from version `old` to version `new`."""

    def build() -> dict[str, Any]:
        shown, ctx = _scope(viewer, project)
        diff = datasets.diff_datasets(services, shown, f"{name}@{old}", f"{name}@{new}", ctx)
        return {"title": f"Dataset {name}: {old} → {new}", "project": shown, "diff": diff}

    return render(request, "dataset_diff.html", build)


@router.get("/calibrations", response_class=HTMLResponse)
def calibrations_page(
    request: Request, services: SyncedDep, viewer: ViewerDep, project: Project | None = None
) -> Response:
    """A project's judge calibrations on gold sets, newest first (issue 35)."""

    def build() -> dict[str, Any]:
        shown, ctx = _scope(viewer, project)
        rows = calibration.list_calibrations(services, shown, ctx)
        return {"title": "Calibrations", "project": shown, "calibrations": rows[::-1]}

    return render(request, "calibrations.html", build)
