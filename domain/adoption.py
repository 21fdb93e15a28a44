"""`evaledger chain adopt`: chaining, once and on the record, a store written before the chain.

A store whose events predate the ledger chain has no blocks. Those events are chained only by
this explicit admin act: one `adopted` block over every stored event, written in the same commit
as a `ChainAdopted` event carrying the range, the actor and the reason, and signed with the
checkpoint key on a keyed store. Anything else that finds
an empty chain over stored events (a writer, `verify`) treats it as tampering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid5

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.errors import ConflictError, ValidationError
from evaledger.domain.events import ChainAdopted, DomainEvent
from evaledger.domain.ledger import Context, Ledger, require_reason
from evaledger.domain.store.urls import KEY_ENV

CHAIN_RECORD_ID = uuid5(NAMESPACE, "ledger\x1fchain")
"""The one aggregate recording the ledger's own acts on its chain."""


class ChainRecord(Aggregate):
    """The ledger's adoptions of unchained events (normally none, at most one)."""

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.adoptions: list[ChainAdopted] = []

    def adopt(self, meta: Meta, reason: str, first: int, last: int, events: int) -> None:
        """Record the adoption of positions `first`–`last`."""
        self._trigger(
            ChainAdopted,
            meta,
            reason=reason,
            first_position=first,
            last_position=last,
            events=events,
        )

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, ChainAdopted):
            self.adoptions.append(event)


@dataclass(frozen=True)
class Adoption:
    """What `chain adopt` chained."""

    first_position: int
    last_position: int
    events: int
    position: int
    """Where the `ChainAdopted` record was written."""


def adopt_chain(
    ledger: Ledger, ctx: Context, reason: str | None, *, unsigned: bool = False
) -> Adoption:
    """Chain every stored event in one adopted block; only over an empty chain, and once.

    The adopted block is signed with the ledger's checkpoint key: a keyed `verify` refuses an
    unsigned adoption (issue 29). Without a key the caller says `unsigned`, so an operator of
    a keyed store who forgot the key is stopped before writing an adoption verify refuses.
    """
    ctx.check_admin("adopting unchained events")
    why = require_reason(reason, "adopting unchained events")
    if ledger.checkpoint_key is None and not unsigned:
        raise ValidationError(
            f"chain adopt: no checkpoint key ({KEY_ENV}): on a keyed store the adoption must "
            "be signed with it; for a store never verified with a key, pass --unsigned",
            field="unsigned",
        )
    if ledger.chain_blocks(-(2**62), 1):
        raise ConflictError(
            "the ledger chain already has commits: events outside it were written outside "
            "evaledger (tampering, see `evaledger verify`) and are not adopted"
        )
    first, last, count = None, 0, 0
    start: int | None = None
    while page := ledger.notifications(start, 5000):
        first = page[0].id if first is None else first
        last, count, start = page[-1].id, count + len(page), page[-1].id + 1
    if first is None:
        raise ValidationError("chain adopt: the store holds no events to adopt", field="reason")
    if first < 1:
        raise ConflictError(
            f"position {first} is below 1: written outside evaledger, it is not adopted "
            "(see `evaledger verify`)"
        )
    # The ledger's own aggregate and save (this module is the ledger's, split for size).
    found: Any = ledger._find(ChainRecord, CHAIN_RECORD_ID)
    record: ChainRecord = found or ChainRecord(CHAIN_RECORD_ID)
    record.adopt(Meta(timestamp=ledger.clock(), actor=ctx.actor), why, first, last, count)
    chain = ledger.recorder.chain
    chain.adopting = why
    try:
        position, _ = ledger._save(record)
    finally:
        chain.adopting = None
    return Adoption(first, last, count, position)
