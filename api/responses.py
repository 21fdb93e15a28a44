"""orjson JSON responses."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel
from starlette.responses import JSONResponse


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class OrjsonResponse(JSONResponse):
    """JSON rendered with orjson (UUIDs, datetimes and pydantic models handled)."""

    def render(self, content: Any) -> bytes:
        """Serialise the body."""
        return orjson.dumps(content, default=_default, option=orjson.OPT_SERIALIZE_NUMPY)
