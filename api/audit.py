"""Audit reads: a case's or run's history, and a case's state as of a version."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from evaledger.api.bootstrap import Services
from evaledger.api.schemas import HistoryEntry
from evaledger.domain.errors import NotFoundError, ValidationError
from evaledger.domain.events import CaseOpened, DomainEvent, NamedScoresRecorded
from evaledger.domain.spec import ScoringSpec
from evaledger.projections.fold import fold_events
from evaledger.projections.reports import explain_case
from evaledger.scoring.case import score_case


def entry(event: DomainEvent) -> HistoryEntry:
    """One event as a history entry."""
    payload = event.model_dump(
        mode="json",
        exclude={
            "originator_id",
            "originator_version",
            "timestamp",
            "actor",
            "idempotency_key",
            "request_digest",
            "prev_hash",
        },
    )
    return HistoryEntry(
        version=event.originator_version,
        type=type(event).__name__,
        topic=type(event).topic(),
        timestamp=event.timestamp,
        actor=event.actor,
        idempotency_key=event.idempotency_key,
        prev_hash=event.prev_hash,
        hash=event.hash(),
        payload=payload,
    )


def case_history(services: Services, case_id: UUID, version: int | None = None) -> dict[str, Any]:
    """Every event of the case in order, and its state (facts + score) as of `version`."""
    events = services.ledger.events_of(case_id)
    if not events or not isinstance(events[0], CaseOpened):
        raise NotFoundError(f"no case {case_id}")
    last = events[-1].originator_version
    if version is not None and not 1 <= version <= last:
        raise ValidationError(f"version: must be between 1 and {last}", field="version")
    upto = [e for e in events if version is None or e.originator_version <= version]
    run = services.ledger.get_run(events[0].run_id)
    spec: ScoringSpec = run.created.spec
    facts = fold_events(upto, run.created.agent.provider)
    return {
        "case_id": str(case_id),
        "run_id": str(run.id),
        "version": upto[-1].originator_version,
        "latest_version": last,
        "events": [entry(e).model_dump(mode="json") for e in events],
        "state": {
            "facts": facts.model_dump(mode="json"),
            "score": score_case(facts, spec).model_dump(mode="json"),
        },
    }


def run_history(services: Services, run_id: UUID) -> dict[str, Any]:
    """Every event of the run aggregate in order."""
    events = services.ledger.events_of(run_id)
    if not events:
        raise NotFoundError(f"no run {run_id}")
    return {"run_id": str(run_id), "events": [entry(e).model_dump(mode="json") for e in events]}


def explain(services: Services, case_id: UUID, spec: ScoringSpec | None = None) -> dict[str, Any]:
    """The chain from judge prompt to run aggregate, under the run's own spec or `spec`."""
    events = services.ledger.events_of(case_id)
    if not events or not isinstance(events[0], CaseOpened):
        raise NotFoundError(f"no case {case_id}")
    services.sync()
    facts, own_score = services.reads.case_score(case_id)
    run_id = facts.run_id
    if spec is None:
        summary = services.reads.summary(run_id)
        payload = explain_case(events, facts, own_score, summary.spec, summary, "run")
    else:
        summary, scores = services.reads.summary_under(run_id, spec)
        score = next(s for s in scores if s.case_id == case_id)
        payload = explain_case(events, facts, score, spec, summary, "given")
    found = source_scores(events)
    return {**payload, "source_scores": found} if found else payload


def source_scores(events: list[DomainEvent]) -> list[dict[str, Any]]:
    """Each source scorer's verdict on a case, in its own terms (issue 18).

    Its values, the answer it read, the target, its explanation and any grader conversation.
    """
    out = []
    for e in events:
        if not isinstance(e, NamedScoresRecorded):
            continue
        target = e.metadata.get("target")
        out.append(
            {
                "scorer": e.scorer,
                "values": {s.name: s.value for s in e.scores},
                "answer": e.answer,
                "target": target if isinstance(target, str | None) else str(target),
                "explanation": e.explanation,
                "grader_prompt": e.prompt,
                "grader_reply": e.raw_output,
            }
        )
    return out
