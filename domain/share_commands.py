"""The commands and reads of share links (issue 36), on the store's write unit.

Creating or revoking a link needs the write scope and happens inside the caller's project
(outside it the target does not exist); the runs a link shows are checked by the caller
(`application/sharing.py`), which also signs the link with the store's share key.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from eventsourcing.persistence import Notification

from evaledger.domain.aggregates import Meta
from evaledger.domain.errors import NotFoundError
from evaledger.domain.events import ShareLinkCreated, ShareLinkRevoked, TokenScope
from evaledger.domain.sharing import (
    ShareInfo,
    ShareLink,
    new_link_id,
    share_aggregate_id,
    shared_links,
)
from evaledger.domain.writes import Context, LedgerStore, Written

SHARE_TOPICS = (ShareLinkCreated.topic(), ShareLinkRevoked.topic())


class ShareCommands(LedgerStore):
    """Create, revoke, find and list share links."""

    def create_share(
        self,
        project: str,
        page: str,
        run_ids: Sequence[UUID],
        expires_at: datetime | None,
        ctx: Context,
    ) -> ShareLinkCreated:
        """Record a new share link of `project`'s `page` over `run_ids` (write scope)."""
        ctx.scope.require(TokenScope.WRITE, "sharing a page")
        ctx.check_project(project, f"project {project!r}")
        link_id = new_link_id()
        link = ShareLink(share_aggregate_id(link_id))
        link.create(
            link_id,
            Meta(timestamp=self.clock(), actor=ctx.actor),
            project=project,
            page=page,
            run_ids=list(run_ids),
            expires_at=expires_at,
        )
        self._save(link, project=project)
        return link.created

    def revoke_share(self, link_id: str, ctx: Context, reason: str | None = None) -> Written:
        """Revoke a share link (write scope, in its project): it opens nothing from now on."""
        ctx.scope.require(TokenScope.WRITE, "revoking a share link")
        found = self._find(ShareLink, share_aggregate_id(link_id))
        if found is None:
            raise NotFoundError(f"no share link {link_id!r}", field="link")
        ctx.check_project(found.created.project, f"share link {link_id!r}")

        def command() -> Written:
            link = self._get(ShareLink, share_aggregate_id(link_id))
            link.revoke(Meta(timestamp=self.clock(), actor=ctx.actor), reason)
            position, n = self._save(link, project=link.created.project)
            return Written((link.id,), position, n)

        return self._retrying(command)

    def share_link(self, link_id: str) -> ShareLink | None:
        """A share link whose creating commit stands in the chain, else None.

        A `ShareLinkCreated` row written straight into the tables is no link (as for tokens).
        """
        found = self._find(ShareLink, share_aggregate_id(link_id))
        if found is None or not hasattr(found, "created"):
            return None
        if not self.recorder.commit_verifies(found.id, 1, self.checkpoint_key):
            return None
        return found

    def share_links(self, project: str | None = None) -> list[ShareInfo]:
        """Every share link ever created (of `project` only, when given), oldest first."""
        links = shared_links(self.decode(n) for n in self._share_notifications())
        return [s for s in links if project is None or s.project == project]

    def _share_notifications(self) -> list[Notification]:
        found: list[Notification] = []
        start: int | None = None
        while True:
            page = self.app.recorder.select_notifications(start, 1000, topics=SHARE_TOPICS)
            if not page:
                return found
            found += page
            start = page[-1].id + 1
