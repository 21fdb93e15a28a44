"""What kind of aggregate an id names: a run, a case, or something else (never a `{run_id}`)."""

from __future__ import annotations

from typing import Literal
from uuid import UUID

from evaledger.domain.events import CaseOpened, RunCreated
from evaledger.domain.ledger import Ledger

Kind = Literal["run", "case"]
_KINDS: dict[UUID, Kind] = {}
"""Ids are derived per kind (uuid5 of distinct names), so an id's kind never changes: cached."""


def kind_of(ledger: Ledger, aggregate_id: UUID) -> Kind | None:
    """The kind from the aggregate's first event: run, case, or None for anything else."""
    cached = _KINDS.get(aggregate_id)
    if cached is not None:
        return cached
    first = ledger.app.recorder.select_events(aggregate_id, lte=1)
    if not first:
        return None
    topic = first[0].topic
    kind: Kind | None = (
        "run" if topic == RunCreated.topic() else "case" if topic == CaseOpened.topic() else None
    )
    if kind is not None:
        if len(_KINDS) >= 100_000:
            _KINDS.clear()
        _KINDS[aggregate_id] = kind
    return kind
