"""The base of every event: its topic, its stored bytes and their hash; digests of requests."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import Enum
from functools import cache
from typing import Any, ClassVar, Self, cast
from uuid import UUID

import orjson
from pydantic import (
    AwareDatetime,
    Field,
    PrivateAttr,
)

from evaledger.domain.errors import ValidationError
from evaledger.domain.model import FrozenModel
from evaledger.domain.payloads import SEALED_FIELDS, Sealed, own_along, seal_state
from evaledger.domain.types import ESCAPED_NUL, unstorable

GENESIS_HASH = "0" * 64


class DomainEvent(FrozenModel):
    """Base of every stored event: who, when, idempotency, and the hash chain."""

    topic_name: ClassVar[str] = ""
    class_version: ClassVar[int] = 1
    added_fields: ClassVar[frozenset[str]] = frozenset()
    """Optional fields added to this class version after it shipped. They are stored only when
    they differ from their default, so events recorded before keep their exact stored bytes (and
    hashes); decoding an old event gives them their default."""

    originator_id: UUID = Field(description="Aggregate id.")
    originator_version: int = Field(ge=1, description="Position in the aggregate, from 1.")
    timestamp: AwareDatetime = Field(description="When it was recorded (UTC).")
    actor: str = Field(min_length=1, description="Who recorded it (user or token id).")
    idempotency_key: str | None = Field(default=None, description="Client idempotency key.")
    request_digest: str | None = Field(default=None, description="Digest of the request body.")
    prev_hash: str = Field(description="Hash of the previous event of the aggregate.")

    _hash: str | None = PrivateAttr(default=None)
    _state: bytes | None = PrivateAttr(default=None)

    @classmethod
    def topic(cls) -> str:
        """The stable topic this class is stored under."""
        return f"{cls.topic_name}/v{cls.class_version}"

    def state(self) -> dict[str, Any]:
        """The stored state: every field but the aggregate id and version.

        Added fields still at their default are left out (see `added_fields`).
        """
        state = self.model_dump(exclude={"originator_id", "originator_version"})
        for name, default in _added_defaults(type(self)).items():
            if state[name] == default:
                del state[name]
        return state

    @classmethod
    def trusted(cls, values: Mapping[str, Any]) -> Self:
        """An event from values that already have its fields' types: no second validation.

        For values taken from a validated model whose fields have the same types as the
        event's (a bundle case's `Turn`s, `MetricScore`s, datetimes...): pydantic's validation
        of the same objects again was a fifth of a large import. Fields not given take their
        defaults; a missing required field or an unknown one is refused, as validation would.
        """
        template, names, required, factories = _field_specs(cls)
        if not names.issuperset(values):
            raise TypeError(f"{cls.__name__}: unknown fields {sorted(set(values) - names)}")
        if not required <= values.keys():
            raise TypeError(f"{cls.__name__}: missing fields {sorted(required - values.keys())}")
        data = {**template, **values}  # the template's order: every field, in order
        for name, factory in factories:
            if name not in values:
                if factory is list or factory is dict:
                    data[name] = factory()
                else:
                    info = cls.model_fields[name]
                    data[name] = info.get_default(call_default_factory=True, validated_data=data)
        event = cls.__new__(cls)
        object.__setattr__(event, "__dict__", data)
        object.__setattr__(event, "__pydantic_fields_set__", set(values))
        object.__setattr__(event, "__pydantic_extra__", None)
        object.__setattr__(event, "__pydantic_private__", {"_hash": None, "_state": None})
        return event

    def encode_with(self, dumped: Mapping[str, Any], seal: str | None = None) -> None:
        """Encode the stored state once from nested values the caller already dumped.

        `dumped` maps field names to their python-mode dump (`model_dump()` of the same value
        objects, e.g. taken from the dump of the bundle case the event is built from); every
        other field must hold a plain value (str, number, bool, None, UUID, datetime, enum),
        which a python-mode dump leaves as it is. The bytes equal `encode_state(self)`; a field
        that is neither leaves the state to `stored_state()`'s own encoding.

        `seal`: the subject to seal this event's personal strings under (`seal_payload`), done
        on the state before its one encoding rather than on a decoded copy of the encoded
        bytes; the containers on the sealed paths are copied first (the dumped values are the
        bundle case's own).
        """
        values = self.__dict__
        state: dict[str, Any] = {}
        for name in _stored_fields(type(self)):
            if name in dumped:
                state[name] = dumped[name]
                continue
            value = values[name]
            if type(value) not in _PLAIN and not isinstance(value, Enum):
                if seal is not None:
                    self.seal_payload(seal)
                return
            state[name] = value
        for name, default in _added_defaults(type(self)).items():
            if state[name] == default:
                del state[name]
        private = self.__pydantic_private__
        assert private is not None
        if seal is not None:
            paths_of = SEALED_FIELDS.get(self.topic_name)
            if paths_of is not None:
                own_along(state, list(paths_of(state)))
            sealed = seal_state(self.topic_name, state, seal)
            if sealed is not None:
                private["_sealed"] = sealed
        private["_state"] = orjson.dumps(state)

    def __eq__(self, other: object) -> bool:
        # Field values only: the cached hash (a private attribute) must not make two equal
        # events unequal.
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self), self.originator_id, self.originator_version))

    # The two caches below are read through `__pydantic_private__` directly: pydantic's
    # `__getattr__` for a private attribute (a `hasattr` on its descriptor each time) cost about
    # a tenth of a large import at ~10 reads per event.

    def stored_state(self) -> bytes:
        """The canonical stored bytes of the state, encoded once (hashing and storing share it)."""
        private = self.__pydantic_private__
        assert private is not None
        state: bytes | None = private.get("_state")
        if state is None:
            state = private["_state"] = encode_state(self)
        return state

    def seal_payload(self, subject: str) -> None:
        """Store this event's personal strings as a sealed payload of `subject` (before hashing).

        The stored state then holds the payload's reference (`domain/payloads.py`); the fields
        keep their text in memory; `sealed_payload()` gives what the store encrypts.
        """
        private = self.__pydantic_private__
        assert private is not None
        assert private.get("_hash") is None
        state = orjson.loads(self.stored_state())
        sealed = seal_state(self.topic_name, state, subject)
        if sealed is not None:
            private["_state"] = orjson.dumps(state)
            # Only sealed events carry the key (no private attribute: the others stay as small).
            private["_sealed"] = sealed

    def sealed_payload(self) -> Sealed | None:
        """The sealed payload of this event, when it was sealed in this process."""
        private = self.__pydantic_private__
        assert private is not None
        return cast(Sealed | None, private.get("_sealed"))

    def hash(self) -> str:
        """Hash of this event as stored (set by the mapper when read back, else computed)."""
        private = self.__pydantic_private__
        assert private is not None
        digest: str | None = private.get("_hash")
        if digest is None:
            digest = private["_hash"] = stored_hash(type(self).topic(), self.stored_state())
        return digest


def split_topic(topic: str) -> tuple[str, int]:
    """`evaledger.case.opened/v2` → (`evaledger.case.opened`, 2)."""
    name, _, version = topic.rpartition("/v")
    return name, int(version)


_PLAIN: frozenset[type] = frozenset({str, int, float, bool, type(None), UUID, datetime})
"""Types a python-mode dump returns unchanged (enums too)."""


@cache
def _stored_fields(cls: type[DomainEvent]) -> tuple[str, ...]:
    """The fields of the stored state, in the order `model_dump` gives them."""
    return tuple(n for n in cls.model_fields if n not in ("originator_id", "originator_version"))


@cache
def _field_specs(
    cls: type[DomainEvent],
) -> tuple[dict[str, Any], frozenset[str], frozenset[str], tuple[tuple[str, Any], ...]]:
    """What `trusted` needs of a class's fields, computed once.

    A template of every field in order with its default (None for those without one), the
    names, the required ones, and (name, factory) of those with a default factory.
    """
    fields = cls.model_fields
    template = {
        name: None if info.is_required() or info.default_factory is not None else info.default
        for name, info in fields.items()
    }
    required = frozenset(name for name, info in fields.items() if info.is_required())
    factories = tuple(
        (name, info.default_factory)
        for name, info in fields.items()
        if info.default_factory is not None
    )
    return template, frozenset(fields), required, factories


@cache
def _added_defaults(cls: type[DomainEvent]) -> dict[str, Any]:
    """Default of each added field (left out of the state when a value equals it)."""
    return {
        name: cls.model_fields[name].get_default(call_default_factory=True)
        for name in sorted(cls.added_fields)
    }


def encode_state(event: DomainEvent) -> bytes:
    """Canonical stored bytes of an event's state."""
    return orjson.dumps(event.state())


def stored_hash(topic: str, state: bytes) -> str:
    """Hash of one stored event (topic + state bytes), the link of the chain."""
    h = hashlib.sha256(topic.encode() + b"\n")
    h.update(state)  # not concatenated: no copy of the state
    return h.hexdigest()


def request_digest(body: Any) -> str:
    """Digest of a request body, for idempotent re-sends."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


CASE_DIGEST_V2 = "v2:"
"""Prefix of a bundle case's digest computed by `case_digest` (unprefixed: `request_digest` of
its JSON-mode dump, what cases recorded before it carry)."""


def case_digest(dumped: Any) -> str:
    """Digest (v2) of a bundle case from its python-mode dump, which its events' states share.

    v1 was `request_digest(case.model_dump(mode="json"))`: a second, JSON-mode dump of the whole
    case. Both sort keys, so equal content gives equal digests whatever the input's key order.
    """
    data = orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS)
    return CASE_DIGEST_V2 + hashlib.sha256(data).hexdigest()


def same_case_digest(stored: str | None, digest: str, v1: Callable[[], Any]) -> bool:
    """Whether a recorded case's digest matches a case whose v2 digest is `digest`.

    A case recorded before v2 carries a v1 digest: `v1()` gives the JSON-mode dump to compare it
    with (only computed then).
    """
    if stored is None:
        return False
    if stored.startswith(CASE_DIGEST_V2):
        return stored == digest
    return stored == request_digest(v1())


def check_storable(event: DomainEvent) -> None:
    """Last guard before the store: every event must fit every store and read model.

    The edge refuses such input with the request's own field names; this catches any path
    around it (importers, scripts) before a projection could choke on a stored event.
    """
    try:
        state = event.stored_state()
    except orjson.JSONEncodeError:
        state = b""
    else:
        # A sealed event's personal strings are in its payload, not its state (issue 34): both
        # are JSON, and both reach a read model (the payload unsealed), so both are checked.
        sealed = event.sealed_payload()
        if sealed is not None:
            state += b"\n" + sealed.plaintext
        # The substring test first: the regex (a look-behind at every offset) alone was a third
        # of a large import; it only matters when an escaped NUL is there at all.
        if b"\\u0000" not in state or not ESCAPED_NUL.search(state):
            return
    found = unstorable(event.model_dump(mode="python", exclude={"timestamp"}))
    where, why = found if found is not None else ("", "not encodable as JSON")
    name = type(event).__name__
    raise ValidationError(f"{name}.{where}: {why}" if where else f"{name}: {why}", field=where)
