"""Shared field types and the one set of input limits (DESIGN §13: anything validated fits).

Every value accepted at the edge (HTTP bodies, query parameters, headers, CLI files) must fit
every store and every read model, so a stored event can never be refused by a projection:
identifiers are short, integers fit the columns and JSON encoders they end up in, amounts stay
finite when summed, and no string holds a NUL (PostgreSQL text refuses it) or a lone surrogate
(not encodable as UTF-8).
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
from pydantic import AfterValidator, AwareDatetime, Field, StringConstraints

MAX_KEY_CHARS = 200
"""Identifiers: project, run key, suite, agent, test case key, actor, idempotency key, labels."""
MAX_INDEX = 2**31 - 1
"""Repetitions, indexes, offsets: they land in 32-bit INTEGER columns."""
MAX_JSON_INT = 2**53 - 1
"""Any integer in free-form JSON: exact in every JSON reader (JavaScript included)."""
MAX_COUNT = 10**12
"""Token counts: summed over millions of cases they still fit in 64 bits."""
MAX_AMOUNT = 1e12
"""Costs, latencies, durations, custom per-message metric values: sums stay finite."""


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


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "NUL characters are not allowed"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "lone surrogates are not allowed (not valid Unicode)"
    return None


def _storable_text(value: str) -> str:
    problem = _text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Key = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_KEY_CHARS),
    AfterValidator(_storable_text),
]
"""An identifier: 1 to 200 characters, no NUL, valid Unicode."""

Index = Annotated[int, Field(ge=0, le=MAX_INDEX)]
"""A repetition, index or offset: 0 to 2^31 - 1."""

Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
"""A token count: 0 to 10^12."""

Amount = Annotated[float, Field(ge=0, le=MAX_AMOUNT)]
"""A cost, latency or duration: 0 to 10^12."""

SignedAmount = Annotated[float, Field(ge=-MAX_AMOUNT, le=MAX_AMOUNT)]
"""A custom metric value: -10^12 to 10^12."""


def _fits_utc(value: datetime) -> datetime:
    # Read models store instants as UTC text: 0001-01-01T00:00+05:00 has no UTC year.
    try:
        (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise ValueError("out of range once converted to UTC") from None
    return value


Instant = Annotated[AwareDatetime, AfterValidator(_fits_utc)]
"""A time with its offset that has a UTC equivalent (years 1 to 9999 in UTC)."""

QueryInstant = Annotated[datetime, AfterValidator(_fits_utc)]
"""A time in a query: naive means UTC."""


class UnstorableJSONError(ValueError):
    """JSON input that is malformed, or holds a value no store can keep (names where)."""


def parse_input_json(data: bytes | str) -> Any:
    """Parse JSON from a user; malformed JSON or an unstorable value raise UnstorableJSONError.

    orjson refuses lone surrogates as malformed; the standard reader accepts them, so the check
    after it can name the field that holds one.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        try:
            value = json.loads(data)
        except ValueError:
            raise UnstorableJSONError(f"malformed JSON: {e}") from None
    else:
        if isinstance(data, bytes) and not may_be_unstorable(data):
            return value
    found = unstorable(value)
    if found is not None:
        raise UnstorableJSONError(f"{found[0]}: {found[1]}")
    return value


_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))


def may_be_unstorable(data: bytes) -> bool:
    r"""Whether JSON bytes that orjson parsed may still hold something `unstorable` refuses.

    orjson refuses lone surrogates and raw control characters, so what remains is a NUL, only
    written as the escape `\u0000`, or an integer beyond 2^53 - 1, at least 16 digits in a
    row. Both are found in C-speed scans of the bytes (a tenth of the walk over the parsed
    value on large inputs); when either may be there, the walk decides and names the field.
    """
    return b"\\u0000" in data or b"0" * 16 in data.translate(_DIGITS_AS_ZERO)


def unstorable(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first place in plain JSON data that no store can hold, as (path, why); else None.

    Looks at every string (keys included) for NUL and lone surrogates, and at every integer
    for the JSON-safe range.
    """
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem is not None:
                return where, problem
        elif isinstance(item, bool | float) or item is None:
            continue
        elif isinstance(item, int):
            if not -MAX_JSON_INT <= item <= MAX_JSON_INT:
                return where, f"integers must be between -(2^53 - 1) and 2^53 - 1, got {item}"
        elif isinstance(item, dict):
            for k, v in reversed(item.items()):
                sub = f"{where}.{_printable(str(k))}" if where else _printable(str(k))
                if isinstance(k, str) and (problem := _text_problem(k)) is not None:
                    return sub, f"key: {problem}"
                stack.append((sub, v))
        elif isinstance(item, list | tuple):
            items = [(f"{where}.{i}" if where else str(i), v) for i, v in enumerate(item)]
            stack.extend(reversed(items))
    return None


def _printable(key: str) -> str:
    """A key as it can appear in an error message (escaped NUL and lone surrogates)."""
    if _text_problem(key) is None:
        return key
    return key.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


SUSPECT_JSON = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])|\d{16,}")
"""JSON bytes that may hold a NUL, a surrogate escape or a huge integer (checked in depth)."""

ESCAPED_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
"""A NUL escape in encoded JSON (not an escaped backslash followed by `u0000`)."""


VARIANT_SEPARATOR = "\x1f"  # joins a variant's configuration and persona


def variant_label(variant: str) -> str:
    """A case variant as people read it: `configuration / persona` (either may be absent).

    Here, not beside the bundle models (domain/bundle.py re-exports it): `show` lists variants
    without loading every event class (start-up, issue 19).
    """
    return " / ".join(part for part in variant.split(VARIANT_SEPARATOR) if part)
