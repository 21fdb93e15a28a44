"""Events as stored bytes: the orjson transcoder, the mapper under stable topics, upcasters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast
from uuid import UUID

import orjson
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder

from evaledger.domain.events import BY_TOPIC_NAME, DomainEvent, split_topic, stored_hash
from evaledger.domain.payloads import PAYLOAD_KEY, SEALED_TEXT, unseal_state
from evaledger.domain.store.chain import HashedStoredEvent

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

UPCASTERS: dict[tuple[str, int], Upcaster] = {}
"""(topic name, from version) → function taking the v(n) state dict to v(n+1)."""


def upcaster(topic_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register an upcaster taking stored state from `from_version` to the next version."""

    def register(func: Upcaster) -> Upcaster:
        UPCASTERS[(topic_name, from_version)] = func
        return func

    return register


class OrjsonTranscoder(Transcoder):
    """Transcoder of plain JSON-able state with orjson (datetimes, UUIDs handled natively)."""

    def encode(self, obj: Any) -> bytes:
        """Serialise state to bytes."""
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        """Deserialise bytes to state."""
        return orjson.loads(data)


class UnknownTopicError(ValueError):
    """A stored event's topic is not in the catalogue."""


def decode_state(
    topic: str, state: bytes, transcoder: Transcoder
) -> tuple[type[DomainEvent], dict[str, Any]]:
    """Decode a stored state and upcast it to the current class version."""
    name, version = split_topic(topic)
    cls = BY_TOPIC_NAME.get(name)
    if cls is None:
        raise UnknownTopicError(f"unknown event topic {topic!r}")
    data = cast(dict[str, Any], transcoder.decode(state))
    while version < cls.class_version:
        data = UPCASTERS[(name, version)](data)
        version += 1
    return cls, data


class EventMapper(Mapper[UUID]):
    """Maps pydantic domain events to stored events under their explicit stable topics."""

    unseal: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """Puts a sealed event's payload back (the store's vault: `LedgerRecorder.unseal`)."""

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        """Encode one domain event."""
        event = cast(DomainEvent, domain_event)
        return HashedStoredEvent(
            originator_id=event.originator_id,
            originator_version=event.originator_version,
            topic=type(event).topic(),
            # The bytes the hash chain was computed over (same orjson encoding as the transcoder).
            state=event.stored_state(),
            hash=event.hash(),
            sealed=event.sealed_payload(),
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """Decode (and upcast) one stored event."""
        cls, data = decode_state(stored_event.topic, stored_event.state, self.transcoder)
        if PAYLOAD_KEY in data:
            data = self.unseal(data) if self.unseal is not None else unseal_state(data, SEALED_TEXT)
        originator_id = stored_event.originator_id
        data["originator_id"] = (
            originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
        )
        data["originator_version"] = stored_event.originator_version
        event = cls.model_validate(data)
        event._hash = stored_hash(stored_event.topic, stored_event.state)
        return event
