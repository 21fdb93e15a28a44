"""The events of a project's own records: its metric catalogue, API tokens, idempotency keys."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar
from uuid import UUID

from pydantic import (
    Field,
)

from evaledger.domain.errors import PermissionDeniedError
from evaledger.domain.events.base import DomainEvent
from evaledger.domain.metrics import MetricDefinition


class CatalogueEvent(DomainEvent):
    """An event of a project's metric catalogue."""


class MetricRegistered(CatalogueEvent):
    """A custom metric was added to the project's catalogue."""

    topic_name: ClassVar[str] = "evaledger.catalogue.metric_registered"

    project: str = Field(min_length=1, description="Project whose catalogue this is.")
    definition: MetricDefinition


class IdempotencyKeyUsed(DomainEvent):
    """A client idempotency key was used to create something (a run, cases).

    Creation has no aggregate to remember the key on yet, so the key gets its own tiny
    aggregate, saved in the same transaction as what it created.
    """

    topic_name: ClassVar[str] = "evaledger.idempotency.key_used"

    scope: str = Field(min_length=1, description="The command the key was sent to.")
    result_ids: list[UUID] = Field(description="What the command created.")


class TokenScope(StrEnum):
    """What an API token may do; each scope includes the ones before it."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        """0 read, 1 write, 2 admin."""
        return list(TokenScope).index(self)

    def allows(self, needed: TokenScope) -> bool:
        """True when this scope includes `needed`."""
        return self.rank >= needed.rank

    def require(self, needed: TokenScope, what: str) -> None:
        """Refuse `what` (403) unless this scope includes `needed`."""
        if not self.allows(needed):
            raise PermissionDeniedError(
                f"{what} needs a token with the {needed.value} scope (this one is {self.value})"
            )


class TokenEvent(DomainEvent):
    """An event of an API token (tokens are facts too: who issued or revoked them, when)."""


class TokenIssued(TokenEvent):
    """An API token was issued for one project and scope; only its secret's hash is kept."""

    topic_name: ClassVar[str] = "evaledger.token.issued"

    token_id: str = Field(min_length=1, description="Public id, the part before the secret.")
    project: str = Field(min_length=1, description="The only project the token can touch.")
    scope: TokenScope = Field(description="read, write or admin.")
    name: str = Field(min_length=1, description="Whom the token stands for (its principal).")
    secret_sha256: str = Field(description="SHA-256 of the secret, hex.")


class TokenRevoked(TokenEvent):
    """An API token was revoked; it authenticates nothing from now on."""

    topic_name: ClassVar[str] = "evaledger.token.revoked"

    reason: str | None = None


class ChainAdopted(DomainEvent):
    """Events stored before the ledger chain existed were chained, explicitly, by an admin.

    Written in the same commit as the adopted block: `verify` names the range and the reason,
    since those events were chained when adopted, not when written.
    """

    topic_name: ClassVar[str] = "evaledger.ledger.chain_adopted"

    reason: str = Field(min_length=1, description="Why the unchained events are trusted.")
    first_position: int = Field(description="First adopted position.")
    last_position: int = Field(description="Last adopted position.")
    events: int = Field(ge=1, description="How many events were adopted.")


class SigningKeyRotated(DomainEvent):
    """The Ed25519 key that signs checkpoints was replaced, the change signed by the old key.

    `signature` is the old key's signature of `rotation_statement(old, new)`
    (`domain/signing.py`): whoever trusts the new key can trust the checkpoints (and receipts)
    the old one signed before, and nobody without the old key can record a rotation `verify`
    follows.
    """

    topic_name: ClassVar[str] = "evaledger.ledger.signing_key_rotated"

    old_key: str = Field(min_length=1, description="The retired verifier key (NAME+HASH+KEY).")
    new_key: str = Field(min_length=1, description="The verifier key that signs from now on.")
    signature: str = Field(min_length=1, description="The old key's signature (base64).")
    reason: str | None = None
