"""Which cases a judging pass judges, and what its new verdicts will change (DESIGN §10).

`--missing-only` and `--retry-errors` pick cases by the judge-error rule of scoring (DESIGN §3.1):
an error, a reply that did not parse, or a selected metric without its answer makes a verdict an
error verdict; a case counts an error only when none of its active verdicts is valid. The same
rule, read under the run's own scoring spec, tells the user beforehand when the new verdicts will
not count (an earlier valid verdict counts under panel `first`) or will count as judge errors (the
pass does not score the spec's metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from evaledger.domain.events import (
    CaseOpened,
    ClaimsVerified,
    JudgeVerdictRecorded,
    ParseStatus,
    TranscriptRecorded,
    VerdictInvalidated,
)
from evaledger.domain.ledger import Ledger
from evaledger.domain.metrics import ScoreType
from evaledger.domain.spec import PanelPolicy, ScoringSpec
from evaledger.judging.prompt import CaseToJudge

Wanted = tuple[tuple[str, ScoreType], ...]
"""The metrics a verdict must answer to be valid: (metric id, scored or binary)."""


@dataclass(frozen=True)
class PlannedCase:
    """One case to judge."""

    case_id: UUID
    key: str
    repetition: int
    subject: CaseToJudge


@dataclass(frozen=True)
class Selection:
    """Which cases with a transcript a pass judges."""

    missing_only: bool
    retry_errors: bool
    done_by: type[JudgeVerdictRecorded | ClaimsVerified]
    metrics: Wanted

    def wants(self, events: Sequence[Any]) -> bool:
        """Whether a case is judged: all, or those the flags pick (both flags: either).

        --missing-only: no valid verdict yet (none at all, or only error verdicts: a failed call
        is not a judgement); --retry-errors: its counted verdict is an error (it has verdicts,
        none valid).
        """
        if not (self.missing_only or self.retry_errors):
            return True
        active = self.active(events)
        valid = any(valid_verdict(e, self.metrics) for e in active)
        if self.missing_only and not valid:
            return True
        return self.retry_errors and bool(active) and not valid

    def active(self, events: Sequence[Any]) -> list[Any]:
        """The case's verdicts (or claim checks) that were not invalidated."""
        invalidated = {e.verdict_id for e in events if isinstance(e, VerdictInvalidated)}
        return [
            e
            for e in events
            if isinstance(e, self.done_by)
            and not (isinstance(e, JudgeVerdictRecorded) and e.verdict_id in invalidated)
        ]


def valid_verdict(event: JudgeVerdictRecorded | ClaimsVerified, metrics: Wanted) -> bool:
    """Whether a verdict is valid by the judge-error rule of scoring (DESIGN §3.1).

    An error, a reply that did not parse, or one of `metrics` without its answer: not valid.
    """
    if event.error is not None:
        return False
    if isinstance(event, ClaimsVerified):
        return True
    if event.parse_status is not ParseStatus.PARSED:
        return False
    by_metric = {m.metric: m for m in event.metric_scores}
    for name, score_type in metrics:
        found = by_metric.get(name)
        value = (
            None
            if found is None
            else (found.passed if score_type is ScoreType.BINARY else found.score)
        )
        if value is None:
            return False
    return True


@dataclass
class Selected:
    """The cases a pass judges, how many it skips, and how many of them the spec already scores."""

    cases: list[PlannedCase]
    skipped: int
    already_valid: int
    """Cases judged that already have a valid verdict under the run's own spec."""


def select_cases(
    ledger: Ledger, case_ids: Sequence[UUID], agent: Any, selection: Selection, spec: ScoringSpec
) -> Selected:
    """Cases with a transcript that the selection wants; the others are skipped."""
    by_spec: Wanted = tuple((m.metric, m.score_type) for m in spec.metrics)
    found = Selected([], 0, 0)
    for case_id in case_ids:
        events = ledger.events_of(case_id)
        opened = events[0]
        assert isinstance(opened, CaseOpened)
        transcript = next((e for e in events if isinstance(e, TranscriptRecorded)), None)
        if transcript is None or not transcript.turns or not selection.wants(events):
            found.skipped += 1
            continue
        if any(valid_verdict(e, by_spec) for e in selection.active(events)):
            found.already_valid += 1
        found.cases.append(
            PlannedCase(
                case_id=case_id,
                key=opened.test_case.key,
                repetition=opened.repetition,
                subject=CaseToJudge(opened.test_case, agent, transcript.turns),
            )
        )
    return found


def pass_notes(spec: ScoringSpec, judged: Sequence[str], selected: Selected) -> list[str]:
    """What the user should know before reading the pass's figures (empty when nothing)."""
    notes = []
    unscored = [m.metric for m in spec.metrics if m.metric not in judged]
    if unscored and selected.cases:
        notes.append(
            f"this pass does not score {', '.join(unscored)} of the run's scoring spec: under "
            f"that spec its verdicts are judge errors (judge_errors: {spec.judge_errors.value}) "
            "unless the case has a valid verdict already; judge those metrics too (--metric) "
            "or rescore with a spec of the judged metrics (evaledger rescore RUN --spec FILE)"
        )
    if selected.already_valid and spec.panel is PanelPolicy.FIRST:
        notes.append(
            f"{selected.already_valid} of the {len(selected.cases)} cases had a valid verdict "
            "before this pass: under the "
            "run's panel policy `first` the earliest valid verdict counts, so the new verdicts "
            "are recorded beside it and change no score (`explain` shows both; invalidate the "
            "old verdict, or rescore with another panel policy, to count the new one)"
        )
    return notes
