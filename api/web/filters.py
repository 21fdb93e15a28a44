"""The web templates' filters: numbers, percentages, money, times and JSON as a page shows them.

Every figure goes through `figure_text` (the one display rounding, shared with the CLI).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from evaledger.domain.spec import ScorerInfo
from evaledger.projections.queries import RunRow
from evaledger.scoring.scorer_metrics import figure_text, not_recomputed


def fmt_num(value: float | None, digits: int = 2) -> str:
    """A number rounded for display; an em dash when missing."""
    if value is None:
        return "—"
    return figure_text(value, digits, grouping=True)


def fmt_figure(value: float | None, digits: int = 4) -> str:
    """A source metric's figure as `show` prints it (`figure_text`: 0.60625 → 0.6063)."""
    return "—" if value is None else figure_text(value, digits)


def source_note(metric: str, scorer: ScorerInfo | dict[str, Any]) -> str:
    """Why a source's figure is shown as reported (`not_recomputed`), as `show` says it."""
    return not_recomputed(metric, ScorerInfo.model_validate(scorer))


def fmt_pct(fraction: float | None, digits: int = 1) -> str:
    """A 0-1 fraction as a percentage."""
    return "—" if fraction is None else f"{fraction * 100:.{digits}f}%"


def fmt_usd(value: float | None) -> str:
    """Dollars, with enough places for per-call judge costs."""
    if value is None:
        return "—"
    return f"${value:,.4f}" if abs(value) < 1 else f"${value:,.2f}"


def fmt_ms(value: float | None) -> str:
    """Milliseconds, whole."""
    return "—" if value is None else f"{value:,.0f} ms"


def fmt_time(value: str | datetime | None) -> str:
    """A timestamp in UTC to the second."""
    if value is None:
        return "—"
    dt = datetime.fromisoformat(value) if isinstance(value, str) else value
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_created(run: RunRow) -> str:
    """When a run was created at its source; "unknown" when the source has no date.

    Never the 1970 placeholder a dateless import keeps (its `created_at`).
    """
    return "unknown" if run.undated else fmt_time(run.created_at)


def fmt_created_day(run: RunRow) -> str:
    """A run's creation day for a picker; "no date" when its source has none."""
    return "no date" if run.undated else run.created_at[:10]


def fmt_signed(value: float | None, digits: int = 2) -> str:
    """A delta with its sign."""
    return "—" if value is None else f"{value:+,.{digits}f}"


def fmt_flag(value: bool | None) -> str:
    """Met / not met / not decided."""
    return {True: "yes", False: "no", None: "—"}[value]


def fmt_json(value: Any, indent: int = 2) -> str:
    """JSON for reading (escaped by the template like any text)."""
    return json.dumps(value, indent=indent or None, ensure_ascii=False, sort_keys=False)
