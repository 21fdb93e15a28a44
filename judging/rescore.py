"""Rescoring a run's stored rubric replies under other rubrics (`judge --rubric FILE --rescore`).

Read-only: no judge is called and nothing is stored. The answer on a rubric's own scale is in the
verdict's raw reply, so the same reply is parsed again with `judging/rubric.py`'s rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    CaseOpened,
    JudgeVerdictRecorded,
    MetricScore,
    ParseStatus,
    PayloadErased,
    TranscriptRecorded,
    VerdictInvalidated,
)
from evaledger.domain.ledger import Ledger
from evaledger.domain.metrics import MetricDefinition, ScoreType
from evaledger.domain.payloads import erased_text
from evaledger.judging.rubric import (
    RUBRIC_TEMPLATE_ID,
    JudgeRubric,
    check_rubric,
    rescore_reply,
    rubric_of,
)

__all__ = ["Rescored", "rescore_run"]


@dataclass(frozen=True)
class Rescored:
    """One metric of a stored rubric verdict read again under other rubrics (no judge call)."""

    test_case_key: str
    repetition: int
    verdict_id: UUID
    judge: str
    metric: str
    recorded: int | bool | None
    """The score (or pass/fail) the verdict recorded."""
    rescored: int | bool | None
    """What the same raw reply gives under the new rubrics; None with `error`."""
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The row as `judge --rescore --json` prints it."""
        return {**self.__dict__, "verdict_id": str(self.verdict_id)}


def _value(score: Any, definition: MetricDefinition) -> int | bool | None:
    value: int | bool | None = (
        score.passed if definition.score_type is ScoreType.BINARY else score.score
    )
    return value


def rescore_run(ledger: Ledger, run_id: UUID, rubrics: Sequence[JudgeRubric]) -> list[Rescored]:
    """Every active parsed rubric verdict of a run, its raw reply read under `rubrics` (issue 22).

    A metric the given rubrics do not name keeps the rubric it carries (else its 0-5 reading).
    Nothing is called and nothing stored: the answer on the rubric's own scale is in the raw reply.
    Raises ValidationError when a rubric names a metric no such verdict scored, or does not fit it.
    """
    run = ledger.get_run(run_id)
    catalogue = ledger.catalogue(run.created.project)
    given = {r.metric: r for r in rubrics}
    rows: list[Rescored] = []
    seen: set[str] = set()
    for case_id in run.case_ids:
        events = ledger.events_of(case_id)
        opened = events[0]
        assert isinstance(opened, CaseOpened)
        transcript = next((e for e in events if isinstance(e, TranscriptRecorded)), None)
        turns = len(transcript.turns) if transcript is not None else 0
        invalidated = {e.verdict_id for e in events if isinstance(e, VerdictInvalidated)}
        erased = next((e for e in events if isinstance(e, PayloadErased)), None)
        for e in events:
            if not (
                isinstance(e, JudgeVerdictRecorded)
                and e.verdict_id not in invalidated
                and e.template_id == RUBRIC_TEMPLATE_ID
                and e.parse_status is ParseStatus.PARSED
                and e.raw_output
            ):
                continue
            metrics = [catalogue[s.metric] for s in e.metric_scores if s.metric in catalogue]
            chosen = {m.name: r for m in metrics if (r := rubric_of(m)) is not None}
            chosen.update({m.name: given[m.name] for m in metrics if m.name in given})
            for m in metrics:
                if m.name in chosen:
                    check_rubric(m, chosen[m.name])
            seen.update(m.name for m in metrics)
            if erased is not None:  # the reply is gone: its recorded scores still count
                why = erased_text(erased.timestamp.isoformat(), erased.actor, erased.reason)
                by_metric: dict[str, MetricScore] = {}
                error: str | None = f"the reply was {why[1:-1]}: it cannot be read again"
            else:
                again = rescore_reply(e.raw_output, metrics, chosen, turn_count=turns)
                by_metric, error = {s.metric: s for s in again.metric_scores}, again.error
            recorded = {s.metric: s for s in e.metric_scores}
            label = f"{e.judge.provider}:{e.judge.model}"
            for m in metrics:
                new = by_metric.get(m.name)
                rows.append(
                    Rescored(
                        test_case_key=opened.test_case.key,
                        repetition=opened.repetition,
                        verdict_id=e.verdict_id,
                        judge=label,
                        metric=m.name,
                        recorded=_value(recorded[m.name], m),
                        rescored=None if new is None else _value(new, m),
                        error=error if new is None else None,
                    )
                )
    unjudged = sorted(set(given) - seen)
    if unjudged:
        raise ValidationError(
            f"rubric: metric {unjudged[0]!r} has no rubric verdict in this run to rescore",
            field="rubric",
        )
    return rows
