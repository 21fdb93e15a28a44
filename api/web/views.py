"""What the pages show, shaped from query results: the cases table, chart geometry, chain links.

Pure functions over the read models' results (no I/O), so they are unit-tested without a server.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from operator import itemgetter
from typing import Any, Generic, TypeVar

from evaledger.application.case_filters import CaseFilter, Review
from evaledger.application.review_queue import (
    DISAGREEMENT_POINTS,
    CaseFields,
    CaseReview,
    CaseRow,
    QueueItem,
    QueueReason,
    final_answer,
    judges_disagree,
    review_queue,
)
from evaledger.application.transcripts import ChainLink, chain_links
from evaledger.domain.bundle import variant_label
from evaledger.domain.metrics import ScoreType
from evaledger.domain.spec import ScoringSpec
from evaledger.scoring.models import CaseStatus, RunAggregate
from evaledger.scoring.rollups import natural_key

__all__ = [  # the queue's and the chain's names, moved to the application layer, read from here
    "DISAGREEMENT_POINTS",
    "CaseReview",
    "CaseRow",
    "ChainLink",
    "QueueItem",
    "QueueReason",
    "chain_links",
    "final_answer",
    "judges_disagree",
    "review_queue",
]

PER_PAGE = 50


class Show(StrEnum):
    """Which cases the run report's table lists."""

    ALL = "all"
    PASSED = "passed"
    FAILED = "failed"
    ERRORED = "errored"
    FLAKY = "flaky"
    JUDGE_ERROR = "judge_error"
    UNSCORED = "unscored"
    PENDING = "pending"
    CANCELED = "canceled"


class SortKey(StrEnum):
    """Columns the cases table sorts by."""

    ORDER = "order"
    KEY = "key"
    SCORE = "score"
    STATUS = "status"
    LATENCY = "latency"
    COST = "cost"


@dataclass(frozen=True)
class CaseQuery:
    """Filter, sort and page of the cases table (all from the query string)."""

    show: Show = Show.ALL
    metric: str | None = None
    below: float | None = None
    q: str | None = None
    sort: SortKey = SortKey.ORDER
    desc: bool = False
    page: int = 1
    per_page: int = PER_PAGE
    filter: CaseFilter = field(default_factory=CaseFilter)
    """Score and latency ranges, metric at least, label, flag (issue 36)."""
    review: Review | None = None
    """The run's labels and flags, when `filter` reads them."""

    @property
    def reads_metrics(self) -> bool:
        """Whether keeping a case reads its metric scores (`_keep`, `CaseFilter.keeps`)."""
        by_below = bool(self.metric) and self.below is not None
        return by_below or self.filter.metric is not None


R = TypeVar("R", bound=CaseFields)


@dataclass(frozen=True)
class CasePage(Generic[R]):
    """One page of the filtered, sorted cases."""

    rows: list[R]
    matching: int
    page: int
    pages: int
    first: int
    """1-based index of the first row shown (0 when none)."""


def _keep(s: CaseFields, query: CaseQuery, flaky: set[tuple[str, str]]) -> bool:
    show = query.show
    if show is Show.FAILED and s.passed is not False:
        return False
    if show is Show.ERRORED and not s.errored:
        return False
    if show is Show.FLAKY and (s.test_case_key, s.variant) not in flaky:
        return False
    if show is Show.JUDGE_ERROR and not s.judge_error:
        return False
    if show is Show.PASSED and s.passed is not True:
        return False
    if show in (Show.UNSCORED, Show.PENDING, Show.CANCELED) and s.status != show.value:
        return False
    if query.q and query.q.lower() not in s.test_case_key.lower():
        return False
    if query.metric and query.below is not None:
        value = s.metric_scores.get(query.metric)
        if value is None or value >= query.below:
            return False
    return query.filter.keeps(s, query.review)


_STATUS_ORDER = {status.value: i for i, status in enumerate(CaseStatus)}


def _sort_value(s: CaseFields, key: SortKey) -> tuple[Any, ...]:
    # Missing values sort last in either direction: the flag comes first in the tuple.
    if key is SortKey.KEY:
        return (s.test_case_key, s.repetition, s.variant)
    if key is SortKey.STATUS:
        return (_STATUS_ORDER[s.status], s.test_case_key, s.repetition)
    value = {
        SortKey.SCORE: s.overall_score,
        SortKey.LATENCY: s.latency_p50_ms,
        SortKey.COST: s.cost_usd,
    }[key]
    return (value is None, value or 0.0, s.test_case_key, s.repetition)


_sort_key = itemgetter(0)


def select_cases(scores: Sequence[R], flaky: set[tuple[str, str]], query: CaseQuery) -> CasePage[R]:
    """Filter, sort and paginate a run's cases (opening order unless sorted)."""
    kept = [s for s in scores if _keep(s, query, flaky)]
    if query.sort is not SortKey.ORDER:
        # Each row's sort value computed once (10,000 rows: it was computed three times each).
        keyed = [(_sort_value(s, query.sort), s) for s in kept]
        present = [pair for pair in keyed if pair[0][0] is not True]
        missing = [pair for pair in keyed if pair[0][0] is True]
        present.sort(key=_sort_key, reverse=query.desc)
        missing.sort(key=_sort_key)
        kept = [s for _, s in present] + [s for _, s in missing]
    elif query.desc:
        kept.reverse()
    rows, page, pages, first = page_of(kept, query.page, query.per_page)
    return CasePage(rows, len(kept), page, pages, first)


T = TypeVar("T")


def page_of(items: Sequence[T], page: int, per_page: int) -> tuple[list[T], int, int, int]:
    """(rows, page, pages, 1-based first row or 0) of one page; a page past the end: the last."""
    pages = max(1, math.ceil(len(items) / per_page))
    page = min(max(1, page), pages)
    start = (page - 1) * per_page
    rows = list(items[start : start + per_page])
    return rows, page, pages, start + 1 if rows else 0


@dataclass(frozen=True)
class Bin:
    """One histogram bar: values in [low, high) (the last bin includes `high`)."""

    low: float
    high: float
    count: int


def histogram(values: Iterable[float], low: float, high: float, bins: int = 10) -> list[Bin]:
    """Counts of `values` in `bins` equal-width bins over [low, high]."""
    width = (high - low) / bins if high > low else 1.0
    counts = [0] * bins
    for v in values:
        i = int((v - low) / width) if width else 0
        counts[min(max(i, 0), bins - 1)] += 1
    return [Bin(low + i * width, low + (i + 1) * width, c) for i, c in enumerate(counts)]


def value_bins(values: Sequence[float], bins: int = 10) -> list[Bin]:
    """Histogram of scorer values: over [0, 1] when they all lie there, else their range."""
    if not values:
        return []
    low, high = min(values), max(values)
    if low >= 0.0 and high <= 1.0:
        low, high = 0.0, 1.0
    return histogram(values, low, high, bins)


@dataclass(frozen=True)
class ChartBar:
    """One bar of a bar chart: its label, figure as printed and share of the track."""

    metric: str
    name: str
    value: float | None
    fraction: float | None
    text: str
    binary: bool = False
    cls: str = "bar"
    """The bar's CSS class (the chart macro's)."""

    @classmethod
    def of(cls, metric: str, name: str, value: float | None, digits: int) -> ChartBar:
        """A figure drawn to scale when it lies in [0, 1] (a rate, a mean of 0-1 values)."""
        inside = value is not None and 0.0 <= value <= 1.0
        text = "—" if value is None else f"{value:,.{digits}f}"
        return cls(metric, name, value, value if inside else None, text)

    @classmethod
    def rubric(cls, metric: str, name: str, value: float | None, *, binary: bool) -> ChartBar:
        """A rubric metric's mean: binary ones a share passing, scored ones out of 5."""
        if value is None:
            return cls(metric, name, None, None, "—", binary)
        if binary:
            return cls(metric, name, value, value, f"{value * 100:.1f}% pass", binary)
        return cls(metric, name, value, value / 5, f"{value:,.2f} / 5", binary)


@dataclass(frozen=True)
class RunCharts:
    """The run page's charts, from what the run has (`pages.run_charts` chooses)."""

    bars: list[ChartBar]
    bars_label: str
    rubric: list[ChartBar]
    """The rubric's metrics (the cases filter lists them), shown as bars only with values."""
    bins: list[Bin]
    bins_label: str
    bins_unit: str


SPREADS = frozenset({"stderr", "std", "var"})
"""Source metrics that measure a spread, not a level: not drawn as bars beside the levels."""


def run_charts(
    spec: ScoringSpec,
    agg: RunAggregate,
    scores: Sequence[CaseFields],
    names: dict[str, str],
) -> RunCharts:
    """The run page's charts, drawn from what the run has.

    Its source scorers' metrics and values, else its rubric metrics and overall scores, else
    its named scores (issue 30: no empty rubric bars for a run no rubric judged).
    """
    if spec.scorers:
        head = spec.scorers[0].score
        # In the source's order, the headline first; spreads (stderr, std, var) are no levels.
        keys = [f"{s.name}/{m}" for s in spec.scorers for m in s.metrics if m not in SPREADS]
        bars = [
            ChartBar.of(key, key, agg.scorer_metrics[key], digits=4)
            for key in keys
            if key in agg.scorer_metrics
        ]
        values = [s.named_scores[head] for s in scores if head in s.named_scores]
        return RunCharts(
            bars, "Source metrics", [], value_bins(values), f"{head} per case", "value"
        )
    rubric = [
        ChartBar.rubric(
            m.metric,
            names.get(m.metric, m.metric),
            agg.per_metric_means.get(m.metric),
            binary=m.score_type is ScoreType.BINARY,
        )
        for m in spec.metrics
    ]
    overall = [s.overall_score for s in scores if s.overall_score is not None]
    if overall or not agg.named_score_means:
        shown = rubric if any(b.value is not None for b in rubric) else []
        return RunCharts(
            shown,
            "Per-metric means",
            rubric,
            histogram(overall, 0.0, 100.0),
            "Overall score distribution (cases)",
            "score 0–100",
        )
    head = next(iter(agg.named_score_means))
    bars = [
        ChartBar.of(name, name, value, digits=4) for name, value in agg.named_score_means.items()
    ]
    values = [s.named_scores[head] for s in scores if head in s.named_scores]
    return RunCharts(bars, "Named score means", [], value_bins(values), f"{head} per case", "value")


def latency_bins(values: Sequence[float], bins: int = 10) -> list[Bin]:
    """Histogram of latencies from 0 to a round ceiling above the largest."""
    if not values:
        return []
    top = max(values)
    step = 10 ** max(0, math.floor(math.log10(top))) if top > 0 else 1
    ceiling = math.ceil(top / step) * step if top > 0 else 1
    return histogram(values, 0.0, float(ceiling), bins)


def variant_heading(variant: str) -> str:
    """A variant as a column heading: its label, or `(default)` for the case's own."""
    return variant_label(variant) or "(default)"


@dataclass(frozen=True)
class Matrix:
    """A run as test case × variant (prompt/provider/model configuration, persona)."""

    variants: list[str]
    keys: list[str]
    """The test case keys of this page, in natural order."""
    cells: dict[tuple[str, str], CaseRow]
    """(key, variant) → the first repetition's row."""
    page: int
    pages: int
    total: int


def matrix(rows: Sequence[CaseRow], page: int, per_page: int = PER_PAGE) -> Matrix:
    """The run matrix, one page of test cases (every variant a column)."""
    cells: dict[tuple[str, str], CaseRow] = {}
    for r in rows:
        if (r.test_case_key, r.variant) not in cells or r.repetition < cells[
            (r.test_case_key, r.variant)
        ].repetition:
            cells[(r.test_case_key, r.variant)] = r
    variants = sorted({r.variant for r in rows}, key=natural_key)
    keys = sorted({r.test_case_key for r in rows}, key=natural_key)
    shown, page, pages, _ = page_of(keys, page, per_page)
    kept = {k: v for k, v in cells.items() if k[0] in set(shown)}
    return Matrix(variants, shown, kept, page, pages, len(keys))


@dataclass(frozen=True)
class CompareMatrix:
    """One page of a multi-variant comparison as test case × variant (promptfoo's view)."""

    variants: list[str]
    keys: list[str]
    cells: dict[tuple[str, str], Any]
    """(key, variant label) → its `TestCaseComparison`."""


def compare_matrix(rows: Sequence[Any]) -> CompareMatrix:
    """The compared rows of a page as a grid: a row per test case, a column per variant."""
    cells = {(t.test_case_key, t.variant): t for t in rows}
    variants = sorted({t.variant for t in rows}, key=natural_key)
    keys = sorted({t.test_case_key for t in rows}, key=natural_key)
    return CompareMatrix(variants, keys, cells)
