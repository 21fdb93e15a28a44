"""The events of share links (issue 36): a read-only link to one page, created and revoked."""

from __future__ import annotations

from typing import ClassVar, Literal
from uuid import UUID

from pydantic import AwareDatetime, Field

from evaledger.domain.events.base import DomainEvent

SharedPage = Literal["run", "compare"]


class ShareEvent(DomainEvent):
    """An event of a share link (who shared what, until when; who revoked it)."""


class ShareLinkCreated(ShareEvent):
    """A read-only link to one page was made: a run's page, or two runs' compare page.

    The link is signed with its store's share key (HMAC-SHA256 over these fields, see
    `domain/sharing.py`); the signature is in the link only, never in the log.
    """

    topic_name: ClassVar[str] = "evaledger.share.link_created"

    link_id: str = Field(min_length=1, description="Public id of the link.")
    project: str = Field(min_length=1, description="The project of the runs shown.")
    page: SharedPage = Field(description="run: the run's page; compare: baseline vs candidate.")
    run_ids: list[UUID] = Field(
        min_length=1, max_length=2, description="The run (run), or baseline and candidate."
    )
    expires_at: AwareDatetime | None = Field(default=None, description="None: until revoked.")


class ShareLinkRevoked(ShareEvent):
    """A share link was revoked: it opens nothing from now on."""

    topic_name: ClassVar[str] = "evaledger.share.link_revoked"

    reason: str | None = None
