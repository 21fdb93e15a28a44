"""Shared field types."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator


def _finite(value: Any) -> Any:
    """Refuse NaN and infinity anywhere inside free-form JSON (allow_inf_nan stops at Any)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("NaN and infinity are not allowed")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_finite)]
"""A free-form JSON object with finite numbers only."""
