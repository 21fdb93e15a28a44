"""Share links (issue 36): a signed, read-only, revocable link to one page of one project.

A link reads `/share/<id>.<signature>`. The id is public (it names the link in listings and
revocations); the signature is HMAC-SHA256, under the store's share key, of everything the
link opens (`link_message`: the id, project, page, runs and expiry as the creation event
records them). The key never leaves the store and the signature is never logged, so a link
cannot be made, widened (another run, another project, a later expiry) or guessed without
the key: any change to the id or the signature fails `verify_signature`, and a changed event
no longer matches its signature. A link is trusted only while its event stands in the chain,
is not revoked and has not expired.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid5

import orjson

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.errors import ConflictError
from evaledger.domain.events import DomainEvent, ShareLinkCreated, ShareLinkRevoked

LINK_ID_HEX = 16
SIGNATURE_CHARS = 43  # 32 bytes, base64url without padding
LINK = re.compile(rf"^([0-9a-f]{{{LINK_ID_HEX}}})\.([A-Za-z0-9_-]{{{SIGNATURE_CHARS}}})$")
LinkState = Literal["active", "revoked", "expired"]


def share_aggregate_id(link_id: str) -> UUID:
    """Id of a share link's aggregate."""
    return uuid5(NAMESPACE, f"share\x1f{link_id}")


def new_link_id() -> str:
    """A fresh random link id (64 bits: an id, not a secret; the signature is the secret)."""
    return secrets.token_hex(LINK_ID_HEX // 2)


def new_share_key() -> bytes:
    """A fresh store share key (256 bits)."""
    return secrets.token_bytes(32)


def link_message(created: ShareLinkCreated) -> bytes:
    """What a link's signature covers: every field that decides what it opens, canonical."""
    body = {
        "v": 1,
        "link_id": created.link_id,
        "project": created.project,
        "page": created.page,
        "run_ids": [str(r) for r in created.run_ids],
        "expires_at": None if created.expires_at is None else created.expires_at.isoformat(),
    }
    return b"evaledger-share\x1f" + orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def signature(key: bytes, created: ShareLinkCreated) -> str:
    """The link's signature under the store's share key (base64url, no padding)."""
    digest = hmac.new(key, link_message(created), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def verify_signature(key: bytes, created: ShareLinkCreated, given: str) -> bool:
    """Whether `given` is the link's signature (constant-time comparison)."""
    return hmac.compare_digest(signature(key, created).encode(), given.encode())


def link_token(key: bytes, created: ShareLinkCreated) -> str:
    """The link's last path segment: `<id>.<signature>`."""
    return f"{created.link_id}.{signature(key, created)}"


def split_link(token: str) -> tuple[str, str] | None:
    """(link id, signature) of a well-formed link segment, else None."""
    found = LINK.match(token)
    return None if found is None else (found.group(1), found.group(2))


@dataclass(frozen=True)
class ShareInfo:
    """A share link as listed (never its signature)."""

    link_id: str
    project: str
    page: str
    run_ids: tuple[UUID, ...]
    created_at: datetime
    created_by: str
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    revoke_reason: str | None = None

    def state(self, now: datetime) -> LinkState:
        """active, revoked, or expired at `now`."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"


class ShareLink(Aggregate):
    """One share link: created once, revoked at most once."""

    created: ShareLinkCreated
    revoked: ShareLinkRevoked | None

    def create(self, link_id: str, meta: Meta, **fields: Any) -> None:
        """Record ShareLinkCreated (on a fresh aggregate)."""
        self.revoked = None
        self._trigger(ShareLinkCreated, meta, link_id=link_id, **fields)

    def revoke(self, meta: Meta, reason: str | None) -> None:
        """Record ShareLinkRevoked (once)."""
        if self.revoked is not None:
            raise ConflictError(f"share link {self.created.link_id} is already revoked")
        self._trigger(ShareLinkRevoked, meta, reason=reason)

    def info(self) -> ShareInfo:
        """The link as listed."""
        return shared_links([self.created, *([self.revoked] if self.revoked else [])])[0]

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, ShareLinkCreated):
            self.created = event
            self.revoked = None
        elif isinstance(event, ShareLinkRevoked):
            self.revoked = event


def shared_links(events: Iterable[DomainEvent]) -> list[ShareInfo]:
    """Every link created in `events` (the share events in log order), oldest first."""
    found: dict[UUID, ShareInfo] = {}
    for event in events:
        if isinstance(event, ShareLinkCreated):
            found[event.originator_id] = ShareInfo(
                link_id=event.link_id,
                project=event.project,
                page=event.page,
                run_ids=tuple(event.run_ids),
                created_at=event.timestamp,
                created_by=event.actor,
                expires_at=event.expires_at,
            )
        elif isinstance(event, ShareLinkRevoked) and event.originator_id in found:
            found[event.originator_id] = dataclasses.replace(
                found[event.originator_id],
                revoked_at=event.timestamp,
                revoked_by=event.actor,
                revoke_reason=event.reason,
            )
    return list(found.values())
