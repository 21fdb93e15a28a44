"""orjson helpers for read-model columns."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel


def dumps(value: Any) -> str:
    """JSON text of plain data or pydantic models."""
    if isinstance(value, BaseModel):
        return value.__pydantic_serializer__.to_json(value).decode()
    return orjson.dumps(value, default=_default).decode()


def loads(text: str | bytes) -> Any:
    """Parse JSON text."""
    return orjson.loads(text)


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
