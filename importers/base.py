"""What every importer produces (a run header, a re-openable stream of cases) and helpers.

The helpers read a peer's values (scores, times, usage, tool arguments) into the ledger's types.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from evaledger.domain.bundle import BundleCase, BundleRun
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import GRADE_VALUES, NamedScore, ScoreScale, Usage


class Format(StrEnum):
    """The file formats `evaledger import` reads."""

    BUNDLE = "bundle"
    INSPECT = "inspect"
    PROMPTFOO = "promptfoo"
    TAU_BENCH = "tau-bench"
    CONNEXITY = "connexity"
    TAU2 = "tau2"
    LM_EVAL = "lm-eval"
    OPENAI_EVALS = "openai-evals"


class ImportFormatError(ValidationError):
    """A file is not of a kind we can read, or not the kind asked for (CLI exit 2, HTTP 422)."""

    code = "unsupported_format"


@dataclass(frozen=True)
class PeerImport:
    """One run to import: its header and its cases as a stream that can be opened again.

    `cases` is read once by an import (the ledger builds the whole stream before it writes); it
    is called again only to name a duplicate's first place or when a concurrent writer made the
    import start again, so each call re-reads the source from the start.
    """

    format: Format
    sources: tuple[str, ...]
    run: BundleRun
    cases: Callable[[], Iterable[BundleCase]]
    count: int | None = None
    """How many cases the stream holds, when the opener knows (a bundle's header pass counts)."""

    def with_run(self, **changes: Any) -> PeerImport:
        """The same import with run header fields replaced (--run-key, --project)."""
        return replace(self, run=self.run.model_copy(update=changes))


def fail(path: Path | str, detail: str, field: str = "file") -> ImportFormatError:
    """An import error that names the file."""
    return ImportFormatError(f"{Path(path).name}: {detail}", field=field)


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 time (offset or Z) as an aware UTC datetime; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        # promptfoo writes epoch milliseconds.
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, datetime):
        parsed = value
    else:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def text_of(value: Any) -> str | None:
    """A peer's free-form value as text (JSON for structures)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def finite(value: Any) -> Any:
    """JSON-able copy of a peer's free-form data, with non-finite numbers as strings.

    Peers write NaN (Inspect, for an undefined metric); the ledger refuses NaN in events.
    """
    if (isinstance(value, float) and value != value) or value in (float("inf"), float("-inf")):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def named_score(name: str, value: Any) -> NamedScore:
    """A peer's raw score value on the scale it is written in."""
    if isinstance(value, bool):
        return NamedScore(name=name, value=value, scale=ScoreScale.BOOLEAN)
    if isinstance(value, int | float):
        number = float(value)
        scale = ScoreScale.FRACTION if 0.0 <= number <= 1.0 else ScoreScale.NUMBER
        return NamedScore(name=name, value=number, scale=scale)
    if isinstance(value, str) and value in GRADE_VALUES:
        return NamedScore(name=name, value=value, scale=ScoreScale.GRADE)
    return NamedScore(name=name, value=text_of(value) or "", scale=ScoreScale.LABEL)


def named_scores(name: str, value: Any) -> list[NamedScore]:
    """One named score, or one per key of a dict-valued score (`name/key`)."""
    if isinstance(value, Mapping):
        return [named_score(f"{name}/{k}", v) for k, v in value.items()]
    return [named_score(name, value)]


def usage_of(prompt: Any, completion: Any) -> Usage | None:
    """Token usage from a peer's counts (None when it has none)."""
    if prompt is None and completion is None:
        return None
    return Usage(prompt_tokens=int(prompt or 0), completion_tokens=int(completion or 0))


def arguments_of(raw: Any) -> dict[str, Any]:
    """Tool-call arguments: OpenAI writes them as a JSON string, others as an object."""
    if isinstance(raw, Mapping):
        return dict(finite(raw))
    if isinstance(raw, str) and raw.strip():
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {"_raw": raw}
        return dict(finite(parsed)) if isinstance(parsed, dict) else {"_value": finite(parsed)}
    return {}
