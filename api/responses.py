"""orjson JSON responses."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel
from starlette.responses import JSONResponse, Response


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class OrjsonResponse(JSONResponse):
    """JSON rendered with orjson (UUIDs, datetimes and pydantic models handled)."""

    def render(self, content: Any) -> bytes:
        """Serialise the body."""
        return orjson.dumps(content, default=_default, option=orjson.OPT_SERIALIZE_NUMPY)


def created(response: Response, location: str, events: int) -> None:
    """201 Created with the resource's `Location`; 200 when an idempotent re-send wrote nothing."""
    response.headers["Location"] = location
    response.status_code = 201 if events else 200


def replayed(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """The 200 answer of a create endpoint, for its OpenAPI `responses`."""
    return {200: {"model": model, "description": "An idempotent re-send: nothing written."}}
