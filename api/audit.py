"""Audit reads rendered for the API, the CLI and the web report: history, state, explanation.

Thin adapters over the use cases of `application/audit.py`: each calls one and renders its
typed result as the JSON the API has always answered.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from uuid import UUID

from evaledger.api.bootstrap import Services
from evaledger.api.schemas import HistoryEntry
from evaledger.application import audit
from evaledger.domain.events import DomainEvent
from evaledger.domain.spec import ScoringSpec


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
    found = audit.case_history(services, case_id, version)
    return {
        "case_id": str(found.case_id),
        "run_id": str(found.run_id),
        "version": found.version,
        "latest_version": found.latest_version,
        "events": [entry(e).model_dump(mode="json") for e in found.events],
        "state": {
            "facts": found.facts.model_dump(mode="json"),
            "score": found.score.model_dump(mode="json"),
        },
    }


def run_history(services: Services, run_id: UUID) -> dict[str, Any]:
    """Every event of the run aggregate in order."""
    found = audit.run_history(services, run_id)
    return {
        "run_id": str(found.run_id),
        "events": [entry(e).model_dump(mode="json") for e in found.events],
    }


def explain(services: Services, case_id: UUID, spec: ScoringSpec | None = None) -> dict[str, Any]:
    """The chain from judge prompt to run aggregate, under the run's own spec or `spec`."""
    found = audit.explain(services, case_id, spec)
    scores = [dataclasses.asdict(s) for s in found.source_scores]
    return {**found.trail, "source_scores": scores} if scores else found.trail
