"""The read use cases over the log: a run's export, a case's transcript, answers and chain.

These read the log (`Ledger.events_of`), not the read models: the event classes load with this
module, so the commands that only list or show (`runs`, `show`) never import it (issue 19).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

import pydantic

from evaledger.application.review_queue import final_answer
from evaledger.domain.bundle import RunBundle, variant_label
from evaledger.domain.errors import NotFoundError
from evaledger.domain.events import GENESIS_HASH, CaseOpened, ExecutionErrored, TranscriptRecorded
from evaledger.domain.export import export_bundle

if TYPE_CHECKING:
    from evaledger.application.ports import Services


def export_run(services: Services, run_id: UUID) -> RunBundle:
    """The run exported as a run bundle (from its events: what re-imports to the same run)."""
    return export_bundle(services.ledger, run_id)


def final_answers(services: Services, case_ids: Sequence[UUID]) -> dict[UUID, str | None]:
    """Each case's final answer, read from its transcript event (for the cases of one page)."""
    found: dict[UUID, str | None] = {}
    for case_id in case_ids:
        found[case_id] = None
        for event in services.ledger.events_of(case_id):
            if isinstance(event, TranscriptRecorded):
                turns = [t.model_dump(include={"role", "content"}) for t in event.turns]
                found[case_id] = final_answer(turns)
                break
    return found


class Transcript(pydantic.BaseModel):
    """A case's messages as recorded: its last transcript (the one that counts) and errors."""

    case_id: str
    run_id: str
    run_key: str
    test_case_key: str
    repetition: int
    variant: str | None
    turns: list[dict[str, Any]] = []
    usage: dict[str, Any] | None = None
    cost_usd: float | None = None
    started_at: str | None = None
    ended_at: str | None = None
    errors: list[str] = []


def case_transcript(services: Services, case_id: UUID, field: str = "CASE") -> Transcript:
    """The case, its run, and the turns of its last recorded transcript."""
    events = services.ledger.events_of(case_id)
    if not events or not isinstance(events[0], CaseOpened):
        raise NotFoundError(f"no case {case_id}", field=field)
    opened = events[0]
    transcript = next((e for e in reversed(events) if isinstance(e, TranscriptRecorded)), None)
    run = services.ledger.get_run(opened.run_id)
    body: dict[str, Any] = {
        "case_id": str(case_id),
        "run_id": str(opened.run_id),
        "run_key": run.created.run_key,
        "test_case_key": opened.test_case.key,
        "repetition": opened.repetition,
        "variant": variant_label(opened.variant) or None,
        "errors": [e.message for e in events if isinstance(e, ExecutionErrored)],
    }
    if transcript is not None:
        body.update(
            transcript.model_dump(
                mode="json", include={"turns", "usage", "cost_usd", "started_at", "ended_at"}
            )
        )
    return Transcript.model_validate(body)


@dataclass(frozen=True)
class ChainLink:
    """One event of an aggregate's hash chain and whether it links to its predecessor."""

    version: int
    prev_hash: str
    hash: str
    linked: bool


def chain_links(events: Sequence[dict[str, Any]]) -> list[ChainLink]:
    """Check each history entry's `prev_hash` against the stored hash of the one before it.

    The hashes come from the stored bytes (the mapper sets them on read), so an edited event
    breaks the link after it. The whole log (seals, every aggregate) is `evaledger verify`'s job.
    """
    links = []
    expected = GENESIS_HASH
    for e in events:
        links.append(ChainLink(e["version"], e["prev_hash"], e["hash"], e["prev_hash"] == expected))
        expected = e["hash"]
    return links
