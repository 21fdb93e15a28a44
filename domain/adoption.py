"""`evaledger chain adopt`: chaining, once and on the record, a store written before the chain.

The command is `Ledger.adopt_chain`; this module holds its aggregate and its result. A store
whose events predate the ledger chain has no blocks. Those events are chained only by this
explicit admin act: one `adopted` block over every stored event, written in the same commit as a
`ChainAdopted` event carrying the range, the actor and the reason, and signed with the checkpoint
key on a keyed store. Anything else that finds an empty chain over stored events (a writer,
`verify`) treats it as tampering.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID, uuid5

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.events import ChainAdopted, DomainEvent, SigningKeyRotated

CHAIN_RECORD_ID = uuid5(NAMESPACE, "ledger\x1fchain")
"""The one aggregate recording the ledger's own acts on its chain."""


class ChainRecord(Aggregate):
    """The ledger's acts on its own chain.

    Adoptions of unchained events (at most one) and hand-overs of the checkpoint signing key.
    """

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.adoptions: list[ChainAdopted] = []
        self.rotations: list[SigningKeyRotated] = []

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

    def rotate_key(
        self, meta: Meta, old_key: str, new_key: str, signature: str, reason: str | None
    ) -> None:
        """Record the hand-over of checkpoint signing from `old_key` to `new_key`."""
        self._trigger(
            SigningKeyRotated,
            meta,
            old_key=old_key,
            new_key=new_key,
            signature=signature,
            reason=reason,
        )

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, ChainAdopted):
            self.adoptions.append(event)
        elif isinstance(event, SigningKeyRotated):
            self.rotations.append(event)


@dataclass(frozen=True)
class Adoption:
    """What `chain adopt` chained."""

    first_position: int
    last_position: int
    events: int
    position: int
    """Where the `ChainAdopted` record was written."""
