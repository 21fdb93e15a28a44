"""API tokens (DESIGN §13): one project, one scope, a principal; stored as events, secret hashed.

A token reads `evl_<id>_<secret>`: the id is public (it names the token in listings, revocations
and the actor of what it writes); the 256-bit secret is shown once and only its SHA-256 is kept.
A slow password hash (argon2, scrypt) protects low-entropy secrets against guessing; a random
256-bit secret cannot be guessed, so a fast hash costs nothing in safety and keeps every request
cheap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID, uuid5

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.errors import ConflictError
from evaledger.domain.events import DomainEvent, TokenIssued, TokenRevoked, TokenScope

PREFIX = "evl_"
ID_HEX = 12


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: a token's project, scope and actor, or the open local user."""

    project: str | None
    """The only project it may touch; None: every project (CLI, open loopback serving)."""
    scope: TokenScope
    actor: str | None
    """The actor of every event it writes; None: the client names it (open serving only)."""
    token_id: str | None = None


OPEN = Principal(project=None, scope=TokenScope.ADMIN, actor=None)
"""No token: the local user of a loopback server or of the CLI."""


@dataclass(frozen=True)
class NewToken:
    """A token just issued: the secret is in `token` and nowhere else."""

    token_id: str
    token: str
    position: int


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed (never its secret)."""

    token_id: str
    project: str
    scope: TokenScope
    name: str
    actor: str
    issued_at: datetime
    issued_by: str
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    revoke_reason: str | None = None

    @property
    def active(self) -> bool:
        """Not revoked."""
        return self.revoked_at is None


def token_aggregate_id(token_id: str) -> UUID:
    """Id of a token's aggregate."""
    return uuid5(NAMESPACE, f"token\x1f{token_id}")


def new_secret() -> tuple[str, str]:
    """A fresh (token id, full token string)."""
    token_id = secrets.token_hex(ID_HEX // 2)
    return token_id, f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"


def split_token(token: str) -> tuple[str, str] | None:
    """(token id, secret) of a well-formed token string, else None."""
    if not token.startswith(PREFIX):
        return None
    token_id, sep, secret = token[len(PREFIX) :].partition("_")
    if not sep or len(token_id) != ID_HEX or not secret:
        return None
    return token_id, secret


def secret_hash(secret: str) -> str:
    """SHA-256 of a secret, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def actor_of(name: str, token_id: str) -> str:
    """The actor recorded on events a token writes: its name and its id."""
    return f"{name} (token {token_id})"


def actor_name(actor: str) -> str:
    """The name in an actor `actor_of` made (`alice (token t1)` → `alice`); else the actor."""
    head, mark, tail = actor.rpartition(" (token ")
    return head if mark and tail.endswith(")") else actor


class ApiToken(Aggregate):
    """One API token: issued once, revoked at most once."""

    issued: TokenIssued
    revoked: TokenRevoked | None

    @classmethod
    def issue(cls, token_id: str, meta: Meta, **fields: object) -> ApiToken:
        """Record TokenIssued."""
        token = cls(token_aggregate_id(token_id))
        token.revoked = None
        token._trigger(TokenIssued, meta, token_id=token_id, **fields)
        return token

    def revoke(self, meta: Meta, reason: str | None) -> None:
        """Record TokenRevoked (once)."""
        if self.revoked is not None:
            raise ConflictError(f"token {self.issued.token_id} is already revoked")
        self._trigger(TokenRevoked, meta, reason=reason)

    def matches(self, secret: str) -> bool:
        """True when `secret` is this token's secret (constant-time comparison)."""
        return hmac.compare_digest(secret_hash(secret), self.issued.secret_sha256)

    def principal(self) -> Principal:
        """What requests with this token act as."""
        i = self.issued
        return Principal(i.project, i.scope, actor_of(i.name, i.token_id), i.token_id)

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, TokenIssued):
            self.issued = event
            self.revoked = None
        elif isinstance(event, TokenRevoked):
            self.revoked = event


class VerifiedTokens:
    """Authentication that trusts a token only once the commit that issued it verifies.

    A `TokenIssued` row written straight into the tables (below position 1, after the chain's
    last block, or an edited secret hash) must not let anyone in: the issuing commit's chain
    block must cover it with a matching link and, on a keyed store, the key's signature. That
    costs a few indexed reads, so a token that passed is remembered for the process (by id and
    secret hash) and forgotten when it is found revoked; revocation is read on every request.
    """

    def __init__(self, commit_verifies: Callable[[UUID], bool]) -> None:
        self.commit_verifies = commit_verifies
        """Whether the commit of an aggregate's first event stands."""
        self.verified: set[tuple[str, str]] = set()

    def principal(self, found: ApiToken | None, secret: str | None) -> Principal | None:
        """The principal of an unrevoked, verified token (its secret checked if given)."""
        if found is None:
            return None
        issued = found.issued
        key = (issued.token_id, issued.secret_sha256)
        if found.revoked is not None:
            self.verified.discard(key)
            return None
        if secret is not None and not found.matches(secret):
            return None
        if key not in self.verified:
            if not self.commit_verifies(found.id):
                return None
            if len(self.verified) >= 100_000:
                self.verified.clear()
            self.verified.add(key)
        return found.principal()


def issued_tokens(events: Iterable[DomainEvent]) -> list[TokenInfo]:
    """Every token issued in `events` (the token events in log order), oldest first."""
    issued: dict[str, TokenInfo] = {}
    ids: dict[UUID, str] = {}
    for event in events:
        if isinstance(event, TokenIssued):
            ids[event.originator_id] = event.token_id
            issued[event.token_id] = TokenInfo(
                token_id=event.token_id,
                project=event.project,
                scope=event.scope,
                name=event.name,
                actor=actor_of(event.name, event.token_id),
                issued_at=event.timestamp,
                issued_by=event.actor,
            )
        elif isinstance(event, TokenRevoked) and event.originator_id in ids:
            tid = ids[event.originator_id]
            issued[tid] = dataclasses.replace(
                issued[tid],
                revoked_at=event.timestamp,
                revoked_by=event.actor,
                revoke_reason=event.reason,
            )
    return list(issued.values())
