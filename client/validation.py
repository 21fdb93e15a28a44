"""Build the ledger's models from keyword arguments; a refusal names the argument's field."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import pydantic

from evaledger.domain.errors import ValidationError

M = TypeVar("M", bound=pydantic.BaseModel)
_TYPE_TAGS = frozenset({"bool", "int", "float", "str", "none", "list", "dict"})
_NAMED = re.compile(r"^([A-Za-z_][\w.\[\]]*): (.+)$", re.DOTALL)


def build(model: type[M], where: str, /, **fields: Any) -> M:
    """`model(**fields)`, or a ValidationError naming `where.<field>` and why."""
    try:
        return model.model_validate(fields)
    except pydantic.ValidationError as e:
        raise refused(e, where) from None


def refused(error: pydantic.ValidationError, where: str) -> ValidationError:
    """The first problem of a pydantic error as the ledger's typed error."""
    first = error.errors()[0]
    # A union's members appear in the location as type tags (`value.bool`): not fields.
    parts = [str(x) for x in first["loc"]]
    while parts and (parts[-1] in _TYPE_TAGS or "[" in parts[-1]):
        parts.pop()
    loc = ".".join(parts)
    message = first["msg"].removeprefix("Value error, ")
    named = _NAMED.match(message) if not loc else None
    if named is not None:
        # A whole-model rule names its field first (`test_case.key: at most 200 characters`).
        loc, message = named.group(1), named.group(2)
    field = f"{where}.{loc}" if loc else where
    return ValidationError(f"{field}: {message}", field=field)
