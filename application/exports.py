"""A run exported in a format other tools read: CSV, Parquet, JUnit XML, JSON lines (issue 36).

`export_run_file` gathers the run as `show` reads it (its row, its aggregate and headline under
its own spec, every case score) and each case's judge summary and times from its events, then
lays it out with `application/export_formats.py`. The run bundle (`bundle`, the default format)
is `transcripts.export_run`: re-importable, unchanged.

Like `application/transcripts.py`, this reads the log (`Ledger.events_of`): the event classes
load with this module, which the CLI imports only for `export`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson

from evaledger.application.export_formats import (
    EXPORT_FORMATS,
    FORMATTERS,
    MEDIA_TYPES,
    SUFFIXES,
    CaseRow,
    RunTable,
)
from evaledger.application.transcripts import export_run
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    CaseOpened,
    ExecutionErrored,
    JudgeVerdictRecorded,
    NamedScoresRecorded,
    OutcomeEvaluated,
    TranscriptRecorded,
)
from evaledger.domain.export import bundle_to_json
from evaledger.domain.types import variant_label
from evaledger.scoring.headline import run_headline
from evaledger.scoring.models import CaseScore

if TYPE_CHECKING:
    from evaledger.application.ports import Services
    from evaledger.domain.events import DomainEvent


@dataclass(frozen=True)
class ExportedFile:
    """A run laid out in one format: the bytes, their media type, a file name, how many cases."""

    format: str
    content: bytes
    media_type: str
    filename: str
    run_key: str
    cases: int


def check_format(value: str, field: str = "format") -> str:
    """The format named, or a `ValidationError` naming the field and the formats there are."""
    if value not in EXPORT_FORMATS:
        raise ValidationError(
            f"{field}: unknown export format {value!r} (one of {', '.join(EXPORT_FORMATS)})",
            field=field,
        )
    return value


def export_run_file(services: Services, run_id: UUID, fmt: str = "bundle") -> ExportedFile:
    """The run in `fmt` (bundle, csv, parquet, junit, jsonl), read as `show` reads it.

    The caller syncs the read models first (as for `show`). A bundle is the compact JSON the
    `GET /runs/{id}/bundle` route answers.
    """
    check_format(fmt)
    if fmt == "bundle":
        bundle = export_run(services, run_id)
        content = orjson.dumps(bundle_to_json(bundle))
        return _file(fmt, bundle.run.key, content, len(bundle.cases))
    table = run_table(services, run_id)
    return _file(fmt, table.run["run_key"], FORMATTERS[fmt](table), len(table.cases))


def _file(fmt: str, run_key: str, content: bytes, cases: int) -> ExportedFile:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run_key)[:100]
    return ExportedFile(fmt, content, MEDIA_TYPES[fmt], safe + SUFFIXES[fmt], run_key, cases)


def run_table(services: Services, run_id: UUID) -> RunTable:
    """The run's figures and cases as every export format lays them out."""
    run = services.reads.get_run(run_id)
    summary = services.reads.summary(run_id)
    aggregate = summary.aggregate
    headline = run_headline(summary.spec, aggregate)
    figures: dict[str, Any] = {
        "pass_rate": aggregate.pass_rate,
        "total_executions": aggregate.total_executions,
        "passed_count": aggregate.passed_count,
        "failed_count": aggregate.failed_count,
        "error_count": aggregate.error_count,
        "canceled_count": aggregate.canceled_count,
        "skipped_count": aggregate.skipped_count,
        "pending_count": aggregate.coverage.pending,
        "weighted_metrics_score_pct": aggregate.weighted_metrics_score_pct,
        "named_score_means": aggregate.named_score_means,
        "scorer_metrics": aggregate.scorer_metrics,
        "headline": headline.model_dump(mode="json"),
    }
    header = {
        "run_id": str(run.run_id),
        "run_key": run.run_key,
        "name": run.name,
        "project": run.project,
        "suite": run.suite["name"],
        "agent": run.agent["name"],
        "status": run.status,
        "created_at": run.created_at,
        "completed_at": run.completed_at,
        "labels": run.labels,
    }
    scores = services.reads.case_scores(run_id)
    cases = [case_row(run.run_key, s, services.ledger.events_of(s.case_id)) for s in scores]
    return RunTable(header, figures, cases)


def case_row(run_key: str, score: CaseScore, events: Sequence[DomainEvent]) -> CaseRow:
    """One case's export row: its score under the run's spec, its name, times and judge summary."""
    name = started = ended = error = None
    for event in events:
        if isinstance(event, CaseOpened):
            name = event.test_case.name
        elif isinstance(event, TranscriptRecorded):
            started = event.started_at.isoformat() if event.started_at else None
            ended = event.ended_at.isoformat() if event.ended_at else None
        elif isinstance(event, ExecutionErrored):
            error = event.message
    values: dict[str, Any] = {
        "run_id": str(score.run_id),
        "run_key": run_key,
        "case_id": str(score.case_id),
        "test_case_key": score.test_case_key,
        "test_case_name": name,
        "repetition": score.repetition,
        "variant": variant_label(score.variant) or None,
        "status": score.status.value,
        "passed": score.passed,
        "errored": score.errored,
        "gate": score.gate.value,
        "gate_reason": score.gate_reason,
        "overall_score": score.overall_score,
        "judge_error": score.judge_error,
        "latency_p50_ms": score.latency_p50_ms,
        "latency_p95_ms": score.latency_p95_ms,
        "prompt_tokens": score.prompt_tokens,
        "completion_tokens": score.completion_tokens,
        "cost_usd": score.cost_usd,
        "judge_cost_usd": score.judge_cost_usd,
        "started_at": started,
        "ended_at": ended,
        "error": error,
        "judge_summary": judge_summary(events, set(score.verdict_ids)),
    }
    return CaseRow(
        values,
        {m.metric: m.score for m in score.metric_scores},
        dict(score.named_scores),
    )


def judge_summary(events: Sequence[DomainEvent], counted: set[UUID]) -> str | None:
    """What the judges and scorers said of the case, one line each (None: nothing).

    The verdicts that counted (their judge error, each metric's score and justification, each
    expected outcome), the last outcome evaluation's results, and each peer scorer's explanation.
    """
    lines: list[str] = []
    outcomes: OutcomeEvaluated | None = None
    for event in events:
        if isinstance(event, JudgeVerdictRecorded) and event.verdict_id in counted:
            lines.extend(_verdict_lines(event))
        elif isinstance(event, OutcomeEvaluated):
            outcomes = event
        elif isinstance(event, NamedScoresRecorded) and event.explanation:
            lines.append(f"{event.scorer}: {event.explanation}")
    if outcomes is not None:
        for o in outcomes.results:
            mark = "passed" if o.passed else "FAILED"
            why = f": {o.justification}" if o.justification else ""
            lines.append(f"{mark} {o.statement}{why}")
    return "\n".join(lines) or None


def _verdict_lines(event: JudgeVerdictRecorded) -> list[str]:
    judge = event.judge
    who = "/".join(p for p in (judge.provider, judge.model) if p) or f"{judge.kind} judge"
    lines = [f"{who}: judge error: {event.error}"] if event.error else []
    for m in event.metric_scores:
        value = "passed" if m.passed else "failed" if m.passed is False else f"{m.score}/5"
        why = f": {m.justification}" if m.justification else ""
        code = f" [{m.failure_code}]" if m.failure_code else ""
        lines.append(f"{who}: {m.metric} {value}{code}{why}")
    for o in event.expected_outcomes:
        mark = "passed" if o.passed else "FAILED"
        why = f": {o.justification}" if o.justification else ""
        lines.append(f"{who}: {mark} {o.statement}{why}")
    return lines
