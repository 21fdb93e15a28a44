"""Decoding for replay: stored events as plain state dicts, pydantic events only on demand.

Catch-up and rebuild read every event of the log. Validating each one into its frozen pydantic
class (prompts, replies, justifications and all) cost more than the whole raw read + decode, and
the read models need a handful of fields of each case event. So the runner decodes a page once
into `Decoded` records: the event class, the aggregate id and version, and the state as a plain
dict, upcast to the class's current version by the same upcasters as the full path
(`store.codec.decode_state`). Every case event is folded straight from that dict
(`projections/fold.py`); for the run lifecycle and the catalogue, `Decoded.event` gives the full
pydantic event, decoded by `Ledger.decode`, once, on first use.

The runner reads the log through one direct cursor (`Ledger.log_rows`: plain tuples, the id as
text) and decodes a page with `decode_rows`: `orjson.loads` of each state, the class looked up
once per topic, the upcasters (`store.codec.decode_state`) only for topics stored at an older
class version. No notification object, no UUID object per event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import StoredEvent

from evaledger.domain.events import BY_TOPIC_NAME, DomainEvent, split_topic
from evaledger.domain.payloads import PAYLOAD_KEY
from evaledger.domain.store.codec import OrjsonTranscoder, decode_state
from evaledger.domain.store.recorder import LogRow

_TRANSCODER = OrjsonTranscoder()


class Decoded:
    """One stored event decoded to a plain (upcast) state dict; the pydantic event on demand."""

    __slots__ = ("_decode", "_event", "_open", "_stored", "cls", "data", "oid", "version")

    def __init__(
        self,
        cls: type[DomainEvent],
        oid: str,
        version: int,
        data: dict[str, Any],
        stored: StoredEvent | LogRow | None = None,
        decode: Callable[[StoredEvent], DomainEvent] | None = None,
        event: DomainEvent | None = None,
        open_sealed: Opener | None = None,
    ) -> None:
        self.cls = cls
        """The event class (the current version of the stored topic)."""
        self.oid = oid
        """The aggregate id as text."""
        self.version = version
        """The aggregate version (originator_version)."""
        self.data = data
        """The stored state (every field but the id and version), upcast; do not mutate."""
        self._stored = stored
        self._decode = decode
        self._event = event
        self._open = open_sealed

    def opened(self) -> dict[str, Any] | None:
        """The state with its sealed strings decrypted (a copy; `data` when nothing is sealed).

        None when the payload does not open: erased, missing, or no vault to read it through.
        """
        if PAYLOAD_KEY not in self.data:
            return self.data
        return self._open(self.data) if self._open is not None else None

    @property
    def event(self) -> DomainEvent:
        """The full pydantic event (validated, hash set), decoded once on first use."""
        if self._event is None:
            stored = self._stored
            assert stored is not None
            assert self._decode is not None
            if isinstance(stored, tuple):
                _, oid, version, topic, state = stored
                stored = StoredEvent(
                    originator_id=UUID(oid), originator_version=version, topic=topic, state=state
                )
            self._event = self._decode(stored)
        return self._event

    def describe(self) -> str:
        """`ClassName of <id> v<version>` (how failures name an event)."""
        return f"{self.cls.__name__} of {self.oid} v{self.version}"

    def __repr__(self) -> str:
        return f"Decoded({self.describe()})"

    @classmethod
    def of_event(cls, event: DomainEvent) -> Decoded:
        """A decoded record of an in-memory event (its stored bytes decoded again)."""
        data = orjson.loads(event.stored_state())
        return cls(
            type(event), str(event.originator_id), event.originator_version, data, event=event
        )


DecodedBatch = Sequence[tuple[int, Decoded]]
Opener = Callable[[dict[str, Any]], dict[str, Any] | None]
"""A sealed state → its plaintext copy, or None when it does not open (`Ledger.opened`)."""
ManyOpener = Callable[[list[dict[str, Any]]], list[dict[str, Any] | None]]
"""`Opener` of many states at once, in order (`Ledger.opened_many`: one read of the vault)."""


class PageOpener:
    """Opens a page's sealed states together, on the first `Decoded.opened` of the page.

    The search projection asks for the plaintext of every sealed event it indexes; opening each
    through its own read of the vault was half of its catch-up (issue 32). The first request
    opens every sealed state of the page in one `ManyOpener` call; a state not of the page is
    opened alone. The same copy is returned to every asker: do not mutate it.
    """

    __slots__ = ("_many", "_opened", "_states")

    def __init__(self, many: ManyOpener) -> None:
        self._many = many
        self._states: list[dict[str, Any]] = []
        self._opened: dict[int, dict[str, Any] | None] | None = None

    def add(self, state: dict[str, Any]) -> None:
        """A state of the page (kept when sealed)."""
        if PAYLOAD_KEY in state:
            self._states.append(state)

    def __call__(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """The plaintext copy of `state` (None: it does not open)."""
        if self._opened is None:
            states = self._states  # kept alive with the page: their ids stay theirs
            self._opened = dict(zip(map(id, states), self._many(states), strict=True))
        found = self._opened.get(id(state), _UNSEEN)
        return self._many([state])[0] if found is _UNSEEN else found


def decode_stored(
    stored: StoredEvent,
    decode: Callable[[StoredEvent], DomainEvent] | None = None,
    open_sealed: Opener | None = None,
) -> Decoded:
    """Decode one stored event (or notification) to its state dict: orjson + upcast, no validation.

    `decode` is the full path (`Ledger.decode`), used by `Decoded.event` when a projection asks.
    Raises like the full path on an unknown topic or bytes that are not JSON.
    """
    cls, data = decode_state(stored.topic, stored.state, _TRANSCODER)
    oid = stored.originator_id
    return Decoded(
        cls,
        str(oid) if isinstance(oid, UUID) else str(UUID(str(oid))),
        stored.originator_version,
        data,
        stored,
        decode,
        open_sealed=open_sealed,
    )


_loads = orjson.loads


def decode_rows(
    rows: Sequence[LogRow],
    decode: Callable[[StoredEvent], DomainEvent] | None = None,
    on_error: Callable[[LogRow, Exception], None] | None = None,
    open_sealed: Opener | None = None,
    open_many: ManyOpener | None = None,
) -> list[tuple[int, Decoded]]:
    """A page of log rows decoded to (position, `Decoded`), up to its first undecodable row.

    What `decode_stored` gives for each row, with the event class found once per topic: a topic
    stored at its class's current version is `orjson.loads` alone; an older one goes through the
    upcasters (`decode_state`), an unknown one raises there. The first row that fails stops the
    page; `on_error(row, error)` is told when it is the page's first row. `open_sealed` is what
    `Decoded.opened` reads sealed text through; with `open_many`, a `PageOpener` over it opens
    the page's sealed states together instead.
    """
    page_opener = PageOpener(open_many) if open_many is not None else None
    if page_opener is not None:
        open_sealed = page_opener
    current: dict[str, type[DomainEvent] | None] = {}
    out: list[tuple[int, Decoded]] = []
    append = out.append
    for row in rows:
        position, oid, version, topic, state = row
        try:
            cls = current.get(topic, _UNSEEN)
            if cls is _UNSEEN:
                cls = _current_class(topic)
                current[topic] = cls
            if cls is None:
                cls, data = decode_state(topic, state, _TRANSCODER)
            else:
                data = _loads(state)
        except Exception as e:
            if not out and on_error is not None:
                on_error(row, e)
            break
        if page_opener is not None:
            page_opener.add(data)
        append((position, Decoded(cls, oid, version, data, row, decode, open_sealed=open_sealed)))
    return out


_UNSEEN: Any = object()


def _current_class(topic: str) -> type[DomainEvent] | None:
    """The class of a topic stored at its current version (None: upcast, or unknown)."""
    name, version = split_topic(topic)
    cls = BY_TOPIC_NAME.get(name)
    return cls if cls is not None and version == cls.class_version else None
