"""Voxli rollups: pivot results by rows and columns, every summary recomputed from the results.

DESIGN §3.3. A rollup pivots the cases of one run or several: rows by configuration,
personality, agent or run; columns by test, tag or scenario. Every cell, row summary, column
summary and the overall summary is computed from the underlying results in its scope, never
from the cells shown on screen, so a summary may legitimately differ from the midpoint of its
cells (the slowest response of a row is the slowest of any of its messages: 17.4 s, not the
17.2 s average of two column maxima).

Rules, per scope (a set of results):

- **score**: mean of the result scores. A result's score is its ``assertion_score`` when it has
  one (Voxli weighted assertions), else its ``overall_score``. An *errored* execution counts 0.
  A completed result (passed or failed) keeps its score even when it failed its gate; a
  completed result without any numeric score counts 100 when it passed and 0 when it failed.
  Pending (and running), canceled and unscored results are left out of the score.
- **results**: how many results the score averages (completed + errored).
- **hallucinations**: *sum* of unsupported + contradicted claims over every conversation.
- **per-message metrics** (response time = assistant-turn ``latency_ms``, tokens and cost per
  message, custom ``MessageFact.metrics``): avg / min / max / percentiles over *every message*
  of every conversation in scope, so averages lean towards conversations with more messages.
- **totals per conversation** (tokens, cost, turns, custom ``per_conversation`` aggregates):
  summed within each conversation first, then averaged over the conversations that have the
  value.
- Each repetition and each personality is its own result; a case with several tags sits in
  several tag columns but counts once in its row summary and in the overall summary.

Pending results (not run yet, still running, or not judged yet) are left out of the rollup
altogether: only counted under ``pending``. Which conversations feed the message and conversation
metrics: every other result in scope except the canceled ones (unscored conversations are real,
and an errored execution's partial transcript counts too: Voxli's "every message in view"; the
run summary, by contrast, leaves errored cases out of its latency). A result whose transcript has
no turns has no conversation.

Percentiles are `projections.stats.percentile` (linear interpolation, type 7), the one
definition shared with run summaries and comparisons; here over every message in scope.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from uuid import UUID

from pydantic import Field, model_validator

from evaledger.domain.events import ClaimSupport, Role
from evaledger.domain.model import FrozenModel, StrictModel
from evaledger.scoring.facts import CaseFacts, MessageFact
from evaledger.scoring.models import CaseScore, CaseStatus
from evaledger.scoring.stats import percentile

NONE_LABEL = "(none)"
"""Label of a dimension value that is missing (no configuration, personality, scenario...)."""
UNTAGGED_LABEL = "(untagged)"
"""Tag column of the results that have no tag."""
ALL_LABEL = "all"
"""The single row (or column) label when no row (or column) dimension is chosen."""
LABEL_SEPARATOR = " / "
_DIGITS = re.compile(r"(\d+)")
"""Joins the values of several dimensions into one row or column label."""


class RowDimension(StrEnum):
    """What a rollup row groups by."""

    CONFIGURATION = "configuration"
    PERSONALITY = "personality"
    AGENT = "agent"
    RUN = "run"


class ColumnDimension(StrEnum):
    """What a rollup column groups by."""

    TEST = "test"
    TAG = "tag"
    SCENARIO = "scenario"


_ROW_ALIASES = {"persona": RowDimension.PERSONALITY}
_COLUMN_ALIASES = {"test_case": ColumnDimension.TEST, "tags": ColumnDimension.TAG}


class Aggregate(StrEnum):
    """An aggregate a custom per-message metric can declare."""

    AVG = "avg"
    MIN = "min"
    MAX = "max"
    P50 = "p50"
    P90 = "p90"
    P95 = "p95"
    P99 = "p99"
    PER_CONVERSATION = "per_conversation"
    """Summed within each conversation, then averaged over conversations (totals, counts)."""


_PERCENTILES = {Aggregate.P50: 50.0, Aggregate.P90: 90.0, Aggregate.P95: 95.0, Aggregate.P99: 99.0}
_MESSAGE_AGGREGATES = (
    Aggregate.AVG,
    Aggregate.MIN,
    Aggregate.MAX,
    Aggregate.P50,
    Aggregate.P90,
    Aggregate.P95,
    Aggregate.P99,
)


class CustomMetricSpec(FrozenModel):
    """A custom per-message metric to summarise (values come from ``MessageFact.metrics``)."""

    name: str = Field(min_length=1, description="Key in each message's ``metrics``.")
    unit: str | None = Field(default=None, description="Display unit, e.g. 'ms' or 'count'.")
    aggregates: tuple[Aggregate, ...] = Field(
        default=_MESSAGE_AGGREGATES,
        min_length=1,
        description="Aggregates to report; all message-level ones by default.",
    )


class RollupInput(StrictModel):
    """One result to roll up: its facts, its score under a spec and its run-level labels."""

    facts: CaseFacts = Field(description="The case's facts.")
    score: CaseScore = Field(description="The case scored under the spec of the rollup.")
    run_name: str | None = Field(default=None, description="Run name (row label of `run`).")
    agent: str | None = Field(default=None, description="Agent name (row label of `agent`).")
    suite: str | None = Field(
        default=None, description="Suite name: the `scenario` column when the case has none."
    )

    @model_validator(mode="after")
    def _same_case(self) -> RollupInput:
        if self.facts.case_id != self.score.case_id:
            raise ValueError(
                f"score.case_id {self.score.case_id} does not match facts.case_id "
                f"{self.facts.case_id}"
            )
        return self

    @property
    def run_id(self) -> UUID:
        """The run the case belongs to."""
        return self.facts.run_id


class MessageStats(StrictModel):
    """A per-message metric over every message in scope."""

    unit: str | None = Field(default=None, description="Unit of the values.")
    count: int = Field(default=0, description="Messages that have the value.")
    avg: float | None = Field(default=None, description="Mean over every message.")
    min: float | None = Field(default=None, description="Smallest value of any message.")
    max: float | None = Field(default=None, description="Largest value of any message.")
    p50: float | None = Field(default=None, description="Median over every message.")
    p90: float | None = Field(
        default=None, description="90th percentile over every message (linear, type 7)."
    )
    p95: float | None = Field(
        default=None, description="95th percentile over every message (linear, type 7)."
    )
    p99: float | None = Field(
        default=None, description="99th percentile over every message (linear, type 7)."
    )


class ConversationStats(StrictModel):
    """A total per conversation (summed within it), averaged over conversations."""

    unit: str | None = Field(default=None, description="Unit of the values.")
    conversations: int = Field(default=0, description="Conversations that have the value.")
    total: float | None = Field(default=None, description="Sum over those conversations.")
    avg: float | None = Field(default=None, description="total ÷ conversations.")
    min: float | None = Field(default=None, description="Smallest conversation total.")
    max: float | None = Field(default=None, description="Largest conversation total.")


class CustomMetricSummary(StrictModel):
    """A custom metric with the aggregates its spec declares."""

    name: str = Field(description="Metric name.")
    unit: str | None = Field(default=None, description="Display unit.")
    messages: int = Field(default=0, description="Messages that have the metric.")
    conversations: int = Field(default=0, description="Conversations with at least one value.")
    values: dict[str, float | None] = Field(
        default_factory=dict, description="Aggregate name → value (None without data)."
    )


class Summary(StrictModel):
    """Everything a rollup reports about one scope (cell, row, column or whole rollup)."""

    score: float | None = Field(
        default=None, description="Mean result score (0-100); errored count 0; None if none."
    )
    results: int = Field(default=0, description="Results in the score (completed + errored).")
    passed: int = Field(default=0, description="Completed results that passed.")
    failed: int = Field(default=0, description="Completed results that failed their gate.")
    errored: int = Field(default=0, description="Execution errors (score 0).")
    pending: int = Field(
        default=0,
        description="Not run yet, running or not judged yet: counted here, left out of every "
        "other figure (score, messages, conversations, claims).",
    )
    canceled: int = Field(default=0, description="Canceled: left out of everything.")
    unscored: int = Field(default=0, description="Unscored judge errors: left out of the score.")
    self_judged: int = Field(default=0, description="Scored results judged by their own provider.")
    conversations: int = Field(
        default=0, description="Conversations (results whose transcript has turns)."
    )
    messages: int = Field(default=0, description="Messages over those conversations.")
    claims: int = Field(default=0, description="Verified atomic claims.")
    hallucinations: int = Field(default=0, description="Unsupported + contradicted claims, summed.")
    response_time: MessageStats = Field(
        default_factory=lambda: MessageStats(unit="ms"),
        description="Assistant-turn latency over every assistant message in scope (not over "
        "per-case p50s like the run summary's latency_*), errored partial transcripts "
        "included; percentiles by projections.stats.percentile (linear).",
    )
    tokens_per_message: MessageStats = Field(
        default_factory=lambda: MessageStats(unit="tokens"),
        description="Tokens of every message that reports them.",
    )
    cost_per_message: MessageStats = Field(
        default_factory=lambda: MessageStats(unit="usd"),
        description="Cost of every message that reports it.",
    )
    tokens_per_conversation: ConversationStats = Field(
        default_factory=lambda: ConversationStats(unit="tokens"),
        description="Conversation token totals, averaged over conversations.",
    )
    cost_per_conversation: ConversationStats = Field(
        default_factory=lambda: ConversationStats(unit="usd"),
        description="Conversation cost totals, averaged over conversations.",
    )
    turns_per_conversation: ConversationStats = Field(
        default_factory=lambda: ConversationStats(unit="turns"),
        description="Messages per conversation, averaged over conversations.",
    )
    custom_metrics: dict[str, CustomMetricSummary] = Field(
        default_factory=dict, description="Declared custom per-message metrics by name."
    )


class RollupCell(StrictModel):
    """One non-empty cell of the pivot."""

    row: str = Field(description="Row label.")
    column: str = Field(description="Column label.")
    summary: Summary = Field(description="Summary of the results in the cell.")


class Rollup(StrictModel):
    """A pivot of results with cells, row and column summaries and an overall summary."""

    row_dimensions: list[str] = Field(description="Dimensions of the row labels, in order.")
    column_dimensions: list[str] = Field(description="Dimensions of the column labels, in order.")
    rows: list[str] = Field(description="Row labels (dimension values joined by ' / ').")
    columns: list[str] = Field(description="Column labels (dimension values joined by ' / ').")
    cells: list[RollupCell] = Field(description="Non-empty cells, row-major.")
    row_summaries: dict[str, Summary] = Field(description="Row label → summary of its results.")
    column_summaries: dict[str, Summary] = Field(
        description="Column label → summary of its results."
    )
    summary: Summary = Field(description="Summary of every result (each counted once).")

    def cell(self, row: str, column: str) -> Summary | None:
        """Summary of one cell, or None when the cell is empty."""
        for c in self.cells:
            if c.row == row and c.column == column:
                return c.summary
        return None


# ---------------------------------------------------------------------------------------------
# Statistics


def _message_stats(values: Sequence[float], unit: str | None) -> MessageStats:
    if not values:
        return MessageStats(unit=unit)
    return MessageStats(
        unit=unit,
        count=len(values),
        avg=math.fsum(values) / len(values),
        min=min(values),
        max=max(values),
        p50=percentile(values, 50),
        p90=percentile(values, 90),
        p95=percentile(values, 95),
        p99=percentile(values, 99),
    )


def _conversation_stats(totals: Sequence[float], unit: str | None) -> ConversationStats:
    if not totals:
        return ConversationStats(unit=unit)
    total = math.fsum(totals)
    return ConversationStats(
        unit=unit,
        conversations=len(totals),
        total=total,
        avg=total / len(totals),
        min=min(totals),
        max=max(totals),
    )


# ---------------------------------------------------------------------------------------------
# Per-result rules


def result_score(score: CaseScore) -> float | None:
    """Return the score a result adds to a rollup mean, or None when it is left out.

    Errored → 0; canceled, pending and unscored → None; completed → ``assertion_score`` if any,
    else ``overall_score``, else 100 when it passed and 0 when it failed.
    """
    if score.canceled or score.status is CaseStatus.CANCELED:
        return None
    if score.errored or score.status is CaseStatus.ERRORED:
        return 0.0
    if score.status in (CaseStatus.PENDING, CaseStatus.UNSCORED):
        return None
    if score.assertion_score is not None:
        return score.assertion_score
    if score.overall_score is not None:
        return score.overall_score
    if score.passed is None:
        return None
    return 100.0 if score.passed else 0.0


def _is_canceled(score: CaseScore) -> bool:
    return score.canceled or score.status is CaseStatus.CANCELED


def _has_conversation(facts: CaseFacts) -> bool:
    # "No transcript" means no turns: a transcript recorded with zero turns is no conversation.
    return facts.turn_count > 0 or bool(facts.messages)


def _conversation_tokens(facts: CaseFacts) -> float | None:
    declared = facts.prompt_tokens + facts.completion_tokens
    if declared > 0:
        return float(declared)
    per_message = [m.tokens for m in facts.messages if m.tokens is not None]
    return float(sum(per_message)) if per_message else None


def _conversation_cost(facts: CaseFacts) -> float | None:
    if facts.cost_usd is not None:
        return facts.cost_usd
    per_message = [m.cost_usd for m in facts.messages if m.cost_usd is not None]
    return math.fsum(per_message) if per_message else None


def _summarise(items: Sequence[RollupInput], metrics: Sequence[CustomMetricSpec]) -> Summary:
    scores: list[float] = []
    counts = dict.fromkeys(
        ("passed", "failed", "errored", "pending", "canceled", "unscored", "self_judged"), 0
    )
    latencies: list[float] = []
    message_tokens: list[float] = []
    message_costs: list[float] = []
    conv_tokens: list[float] = []
    conv_costs: list[float] = []
    conv_turns: list[float] = []
    custom_values: dict[str, list[float]] = {m.name: [] for m in metrics}
    custom_totals: dict[str, list[float]] = {m.name: [] for m in metrics}
    claims = hallucinations = conversations = messages = 0

    for item in items:
        sc, facts = item.score, item.facts
        value = result_score(sc)
        if _is_canceled(sc):
            counts["canceled"] += 1
            continue
        if sc.status is CaseStatus.PENDING and not sc.errored:
            # Not run, still running or not judged yet: counted, left out of every figure.
            counts["pending"] += 1
            continue
        if value is not None:
            scores.append(value)
            if sc.self_judged:
                counts["self_judged"] += 1
        if sc.errored or sc.status is CaseStatus.ERRORED:
            counts["errored"] += 1
        elif sc.status is CaseStatus.UNSCORED:
            counts["unscored"] += 1
        elif sc.passed is True:
            counts["passed"] += 1
        elif sc.passed is False:
            counts["failed"] += 1

        claims += len(facts.claims)
        hallucinations += sum(1 for c in facts.claims if c is not ClaimSupport.SUPPORTED)
        if not _has_conversation(facts):
            continue
        conversations += 1
        messages += len(facts.messages)
        conv_turns.append(float(max(facts.turn_count, len(facts.messages))))
        tokens = _conversation_tokens(facts)
        if tokens is not None:
            conv_tokens.append(tokens)
        cost = _conversation_cost(facts)
        if cost is not None:
            conv_costs.append(cost)
        _collect_messages(facts.messages, latencies, message_tokens, message_costs)
        for name, values in custom_values.items():
            mine = [m.metrics[name] for m in facts.messages if name in m.metrics]
            values.extend(mine)
            if mine:
                custom_totals[name].append(math.fsum(mine))

    return Summary(
        score=math.fsum(scores) / len(scores) if scores else None,
        results=len(scores),
        conversations=conversations,
        messages=messages,
        claims=claims,
        hallucinations=hallucinations,
        response_time=_message_stats(latencies, "ms"),
        tokens_per_message=_message_stats(message_tokens, "tokens"),
        cost_per_message=_message_stats(message_costs, "usd"),
        tokens_per_conversation=_conversation_stats(conv_tokens, "tokens"),
        cost_per_conversation=_conversation_stats(conv_costs, "usd"),
        turns_per_conversation=_conversation_stats(conv_turns, "turns"),
        custom_metrics={
            m.name: _custom_summary(m, custom_values[m.name], custom_totals[m.name])
            for m in metrics
        },
        **counts,
    )


def _collect_messages(
    messages: Iterable[MessageFact],
    latencies: list[float],
    tokens: list[float],
    costs: list[float],
) -> None:
    for m in messages:
        if m.role is Role.ASSISTANT and m.latency_ms is not None:
            latencies.append(m.latency_ms)
        if m.tokens is not None:
            tokens.append(float(m.tokens))
        if m.cost_usd is not None:
            costs.append(m.cost_usd)


def _custom_summary(
    spec: CustomMetricSpec, values: Sequence[float], totals: Sequence[float]
) -> CustomMetricSummary:
    stats = _message_stats(values, spec.unit)
    out: dict[str, float | None] = {}
    for agg in spec.aggregates:
        if agg is Aggregate.PER_CONVERSATION:
            out[agg.value] = math.fsum(totals) / len(totals) if totals else None
        else:
            out[agg.value] = getattr(stats, agg.value)
    return CustomMetricSummary(
        name=spec.name,
        unit=spec.unit,
        messages=len(values),
        conversations=len(totals),
        values=out,
    )


# ---------------------------------------------------------------------------------------------
# Pivot


def _parse_dimensions(
    names: Sequence[str], enum: type[StrEnum], aliases: Mapping[str, StrEnum], axis: str
) -> list[StrEnum]:
    out: list[StrEnum] = []
    allowed = [e.value for e in enum]
    for i, raw in enumerate(names):
        key = raw.strip().lower()
        dim = aliases.get(key)
        if dim is None:
            if key not in allowed:
                raise ValueError(
                    f"{axis}[{i}]: unknown dimension {raw!r}; expected one of {allowed}"
                )
            dim = enum(key)
        if dim in out:
            raise ValueError(f"{axis}[{i}]: dimension {raw!r} is given twice")
        out.append(dim)
    return out


def _run_labels(results: Sequence[RollupInput]) -> dict[UUID, str]:
    names: dict[UUID, str] = {}
    for r in results:
        names.setdefault(r.run_id, r.run_name or str(r.run_id))
    seen: dict[str, int] = {}
    for name in names.values():
        seen[name] = seen.get(name, 0) + 1
    return {
        run_id: f"{name} ({str(run_id)[:8]})" if seen[name] > 1 else name
        for run_id, name in names.items()
    }


def _values(item: RollupInput, dim: StrEnum, runs: dict[UUID, str], by_suite: bool) -> list[str]:
    f = item.facts
    value: str | None
    if dim is ColumnDimension.TAG:
        return list(dict.fromkeys(f.tags)) or [UNTAGGED_LABEL]
    if dim is RowDimension.CONFIGURATION:
        value = f.configuration
    elif dim is RowDimension.PERSONALITY:
        value = f.persona
    elif dim is RowDimension.AGENT:
        value = item.agent
    elif dim is RowDimension.RUN:
        value = runs[item.run_id]
    elif dim is ColumnDimension.TEST:
        # Two suites may use the same key for different cases: never merge them silently.
        value = f"{item.suite or NONE_LABEL}: {f.test_case_key}" if by_suite else f.test_case_key
    else:  # ColumnDimension.SCENARIO
        value = f.scenario or item.suite
    return [value if value else NONE_LABEL]


def _labels(
    item: RollupInput, dims: Sequence[StrEnum], runs: dict[UUID, str], by_suite: bool
) -> list[str]:
    if not dims:
        return [ALL_LABEL]
    combos = itertools.product(*(_values(item, d, runs, by_suite) for d in dims))
    return list(dict.fromkeys(LABEL_SEPARATOR.join(c) for c in combos))


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key reading digit runs as numbers: `task-2` before `task-10`."""
    return tuple(
        (0, int(chunk)) if chunk.isdigit() else (1, chunk.casefold())
        for chunk in _DIGITS.split(text)
        if chunk
    )


def _sort_key(label: str) -> tuple[tuple[bool, tuple[tuple[int, int | str], ...], str], ...]:
    return tuple(
        (part in (NONE_LABEL, UNTAGGED_LABEL), natural_key(part), part)
        for part in label.split(LABEL_SEPARATOR)
    )


def rollup(
    results: Sequence[RollupInput],
    rows: Sequence[str],
    columns: Sequence[str],
    *,
    metrics: Sequence[CustomMetricSpec] = (),
) -> Rollup:
    """Pivot results by row and column dimensions; every summary recomputed from the results.

    Args:
        results: the results to roll up (any status; each case at most once).
        rows: row dimensions, in order: ``configuration``, ``personality`` (alias ``persona``),
            ``agent``, ``run`` (the run name, else its id; runs sharing a name get the first 8
            characters of their id appended). Empty → one row labelled ``all``.
        columns: column dimensions, in order: ``test`` (test case key), ``tag`` (a case with
            several tags sits in several columns; no tag → ``(untagged)``), ``scenario`` (the
            case's scenario, else the suite name). Empty → one column labelled ``all``.
        metrics: custom per-message metrics to summarise, with their aggregates and unit.

    Returns:
        Row and column labels (sorted; missing values ``(none)`` last), the non-empty cells, row
        summaries, column summaries and the overall summary.

    Raises:
        ValueError: an unknown or repeated dimension, a case given twice, or two custom
            metrics with the same name.
    """
    row_dims = _parse_dimensions(rows, RowDimension, _ROW_ALIASES, "rows")
    col_dims = _parse_dimensions(columns, ColumnDimension, _COLUMN_ALIASES, "columns")
    names = [m.name for m in metrics]
    if len(set(names)) != len(names):
        raise ValueError(f"metrics: duplicate custom metric names in {names}")
    seen: set[UUID] = set()
    for i, r in enumerate(results):
        if r.facts.case_id in seen:
            raise ValueError(f"results[{i}]: case {r.facts.case_id} is given twice")
        seen.add(r.facts.case_id)

    runs = _run_labels(results)
    by_suite = len({r.suite for r in results}) > 1
    row_members: dict[str, list[int]] = {}
    col_members: dict[str, list[int]] = {}
    cell_members: dict[tuple[str, str], list[int]] = {}
    for i, item in enumerate(results):
        item_rows = _labels(item, row_dims, runs, by_suite)
        item_cols = _labels(item, col_dims, runs, by_suite)
        for row in item_rows:
            row_members.setdefault(row, []).append(i)
        for col in item_cols:
            col_members.setdefault(col, []).append(i)
        for row, col in itertools.product(item_rows, item_cols):
            cell_members.setdefault((row, col), []).append(i)

    def summary_of(indices: Iterable[int]) -> Summary:
        return _summarise([results[i] for i in indices], metrics)

    row_labels = sorted(row_members, key=_sort_key)
    col_labels = sorted(col_members, key=_sort_key)
    return Rollup(
        row_dimensions=[d.value for d in row_dims],
        column_dimensions=[d.value for d in col_dims],
        rows=row_labels,
        columns=col_labels,
        cells=[
            RollupCell(row=r, column=c, summary=summary_of(cell_members[(r, c)]))
            for r in row_labels
            for c in col_labels
            if (r, c) in cell_members
        ],
        row_summaries={r: summary_of(row_members[r]) for r in row_labels},
        column_summaries={c: summary_of(col_members[c]) for c in col_labels},
        summary=summary_of(range(len(results))),
    )


# ---------------------------------------------------------------------------------------------
# Rendering


def render_table(
    rollup: Rollup,
    *,
    value: Callable[[Summary], float | None] | None = None,
    decimals: int = 1,
) -> str:
    """Render a plain-text pivot table: scores by row and column, with summaries.

    Args:
        rollup: the rollup to render.
        value: what to show per summary; the score by default.
        decimals: digits after the decimal point.

    Returns:
        Lines joined by newlines. An empty cell shows ``-``; a cell without a value ``n/a``.
    """
    pick = value or (lambda s: s.score)

    def fmt(summary: Summary | None) -> str:
        if summary is None:
            return "-"
        v = pick(summary)
        return "n/a" if v is None else f"{v:.{decimals}f}"

    corner = LABEL_SEPARATOR.join(rollup.row_dimensions) or ALL_LABEL
    header = [corner, *rollup.columns, "Summary"]
    body = [
        [r, *(fmt(rollup.cell(r, c)) for c in rollup.columns), fmt(rollup.row_summaries[r])]
        for r in rollup.rows
    ]
    footer = [
        "Summary",
        *(fmt(rollup.column_summaries[c]) for c in rollup.columns),
        fmt(rollup.summary),
    ]
    table = [header, *body, footer]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(w) for cell, w in zip(cells[1:], widths[1:], strict=True))
        return " | ".join([first, *rest]).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(b) for b in body), rule, line(footer)])
