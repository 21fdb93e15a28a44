"""Audit reads: how a verdict came to be, from the log itself.

A case's or a run's history (every event in order), a case's state as of a version, the
explanation of its pass/fail under its run's spec or another, and its recorded transcript. The
only reads that replay an aggregate's events (DESIGN §1: a GET never does, but these); the
entry points render the typed results (`api/audit.py` for the API and the web report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from evaledger.application.ports import Services
from evaledger.domain.errors import NotFoundError, ValidationError
from evaledger.domain.events import (
    CaseOpened,
    DomainEvent,
    NamedScoresRecorded,
)
from evaledger.domain.spec import ScoringSpec
from evaledger.projections.fold import fold_events
from evaledger.projections.reports import explain_case
from evaledger.scoring.case import score_case
from evaledger.scoring.facts import CaseFacts
from evaledger.scoring.models import CaseScore


@dataclass(frozen=True)
class CaseHistory:
    """Every event of a case in order, and its state (facts and score) as of `version`."""

    case_id: UUID
    run_id: UUID
    version: int
    latest_version: int
    events: tuple[DomainEvent, ...]
    facts: CaseFacts
    score: CaseScore


@dataclass(frozen=True)
class RunHistory:
    """Every event of a run aggregate in order."""

    run_id: UUID
    events: tuple[DomainEvent, ...]


@dataclass(frozen=True)
class SourceScore:
    """A source scorer's verdict on a case, in its own terms (issue 18)."""

    scorer: str
    values: dict[str, Any]
    answer: str | None
    target: str | None
    explanation: str | None
    grader_prompt: str | None
    grader_reply: str | None


@dataclass(frozen=True)
class Explanation:
    """From judge prompt to run aggregate (`explain_case`'s trail), and the source scores."""

    trail: dict[str, Any]
    source_scores: tuple[SourceScore, ...]


def _case_events(services: Services, case_id: UUID, field: str | None = None) -> list[DomainEvent]:
    events = services.ledger.events_of(case_id)
    if not events or not isinstance(events[0], CaseOpened):
        raise NotFoundError(f"no case {case_id}", field=field)
    return events


def case_history(services: Services, case_id: UUID, version: int | None = None) -> CaseHistory:
    """Every event of the case in order, and its state (facts + score) as of `version`."""
    events = _case_events(services, case_id)
    opened = events[0]
    assert isinstance(opened, CaseOpened)
    last = events[-1].originator_version
    if version is not None and not 1 <= version <= last:
        raise ValidationError(f"version: must be between 1 and {last}", field="version")
    upto = [e for e in events if version is None or e.originator_version <= version]
    run = services.ledger.get_run(opened.run_id)
    spec: ScoringSpec = run.created.spec
    facts = fold_events(upto, run.created.agent.provider)
    return CaseHistory(
        case_id=case_id,
        run_id=run.id,
        version=upto[-1].originator_version,
        latest_version=last,
        events=tuple(events),
        facts=facts,
        score=score_case(facts, spec),
    )


def run_history(services: Services, run_id: UUID) -> RunHistory:
    """Every event of the run aggregate in order."""
    events = services.ledger.events_of(run_id)
    if not events:
        raise NotFoundError(f"no run {run_id}")
    return RunHistory(run_id=run_id, events=tuple(events))


def explain(services: Services, case_id: UUID, spec: ScoringSpec | None = None) -> Explanation:
    """The chain from judge prompt to run aggregate, under the run's own spec or `spec`."""
    events = _case_events(services, case_id)
    services.sync()
    facts, own_score = services.reads.case_score(case_id)
    run_id = facts.run_id
    if spec is None:
        summary = services.reads.summary(run_id)
        trail = explain_case(events, facts, own_score, summary.spec, summary, "run")
    else:
        summary, scores = services.reads.summary_under(run_id, spec)
        score = next(s for s in scores if s.case_id == case_id)
        trail = explain_case(events, facts, score, spec, summary, "given")
    return Explanation(trail, source_scores(events))


def case_project(services: Services, case_id: UUID) -> str:
    """The project of a case, from the read models (NotFoundError: no such case)."""
    services.sync()
    facts, _ = services.reads.case_score(case_id)
    return services.reads.get_run(facts.run_id).project


def source_scores(events: list[DomainEvent]) -> tuple[SourceScore, ...]:
    """Each source scorer's verdict on a case, in its own terms (issue 18).

    Its values, the answer it read, the target, its explanation and any grader conversation.
    """
    out = []
    for e in events:
        if not isinstance(e, NamedScoresRecorded):
            continue
        target = e.metadata.get("target")
        out.append(
            SourceScore(
                scorer=e.scorer,
                values={s.name: s.value for s in e.scores},
                answer=e.answer,
                target=target if isinstance(target, str | None) else str(target),
                explanation=e.explanation,
                grader_prompt=e.prompt,
                grader_reply=e.raw_output,
            )
        )
    return tuple(out)
