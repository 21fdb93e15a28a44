"""POST /imports: run bundles and peer result files (Inspect, promptfoo, tau-bench, Connexity)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from evaledger.api.deps import ContextDep, ServicesDep
from evaledger.application.runs import import_files as import_run_files
from evaledger.domain.errors import EvaledgerError, ValidationError
from evaledger.importers.base import Format
from evaledger.importers.load import FORMATS

router = APIRouter(tags=["imports"])

_COPY_CHUNK = 1 << 20
_SUFFIX = {"application/json": ".json", "application/zip": ".eval"}


class ImportedRun(BaseModel):
    """One run written by an import."""

    file: str = Field(description="The (first) file the run came from.")
    format: Format = Field(description="The format it was read as.")
    run_id: UUID
    run_key: str
    events: int = Field(description="Events written (0 when the file was imported before).")
    cases: int = Field(description="Cases in the file.")
    new_cases: int = Field(description="Cases that were not in the ledger before.")
    position: int = Field(description="Log position; wait for it to read your writes.")


class ImportsResponse(BaseModel):
    """What POST /imports wrote, one entry per run."""

    imported: list[ImportedRun]


_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The file(s): multipart `file` fields (a Connexity run file with its "
        "test-case files, several logs...), or one file as the body itself (JSON, or an "
        "Inspect `.eval` archive as application/zip).",
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "array", "items": {"type": "string", "format": "binary"}}
                    },
                }
            },
            "application/json": {"schema": {"type": "object"}},
            "application/zip": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


async def _save_body(request: Request, folder: Path) -> list[Path]:
    """The uploaded files on disk (streamed: a large file never sits in memory whole)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    paths: list[Path] = []
    if kind == "multipart/form-data":
        async with request.form() as form:  # closes the spooled uploads
            for i, item in enumerate(form.getlist("file")):
                if not isinstance(item, UploadFile):
                    raise ValidationError("file: give files, not text fields", field="file")
                name = Path(item.filename or f"upload-{i}").name
                path = folder / f"{i}" / name
                path.parent.mkdir()
                with path.open("wb") as out:
                    while chunk := await item.read(_COPY_CHUNK):
                        out.write(chunk)
                paths.append(path)
        if not paths:
            raise ValidationError("file: no file in the multipart body", field="file")
        return paths
    path = folder / f"body{_SUFFIX.get(kind, '')}"
    with path.open("wb") as out:
        async for chunk in request.stream():
            out.write(chunk)
    if path.stat().st_size == 0:
        raise ValidationError("body: empty; send a file", field="body")
    return [path]


@router.post("/imports", operation_id="import_files", openapi_extra=_BODY)
async def import_files(
    request: Request,
    services: ServicesDep,
    ctx: ContextDep,
    from_format: Annotated[
        str, Query(alias="from", description=f"One of {', '.join(FORMATS)}.")
    ] = "auto",
    run_key: Annotated[str | None, Query(description="The run's key (one run only).")] = None,
    project: Annotated[str | None, Query(description="Project of the run(s).")] = None,
) -> ImportsResponse:
    """Import run bundles or peer result files; the same file twice writes nothing."""
    with tempfile.TemporaryDirectory(prefix="evaledger-import-") as tmp:
        paths = await _save_body(request, Path(tmp))

        def work() -> ImportsResponse:
            done = import_run_files(
                services, paths, ctx, from_format=from_format, run_key=run_key, project=project
            )
            return ImportsResponse(
                imported=[
                    ImportedRun(
                        file=Path(d.file).name,
                        format=d.format,
                        run_id=d.run.run_id,
                        run_key=d.run.run_key,
                        events=d.run.events,
                        cases=d.run.cases,
                        new_cases=d.run.new_cases,
                        position=d.run.position,
                    )
                    for d in done
                ]
            )

        try:
            return await run_in_threadpool(work)
        except EvaledgerError as e:
            raise _without_paths(e, Path(tmp), paths) from None


def _without_paths(error: EvaledgerError, folder: Path, paths: list[Path]) -> EvaledgerError:
    """The error as the client sees it: uploads named by their file names.

    Never by where the server spooled them (a temporary folder of the server's).
    """
    detail = error.detail
    for path in paths:
        detail = detail.replace(str(path), path.name)
    error.detail = detail.replace(str(folder), "upload")
    error.args = (error.detail,)
    return error
