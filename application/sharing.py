"""Share links (issue 36): make, open, list and revoke a read-only link to one page.

`share_page` records a link to a run's page or to two runs' compare page (the runs must be in
the caller's project, and of one project) and signs it with the store's share key;
`open_share` gives what a link opens, or refuses it (404 for a malformed, unknown, forged or
tampered link; a 404 that says "revoked" or "expired" once it is: only a holder of the real
link learns that).
`expiry` reads `--expires` (`30m`, `12h`, `7d`, `4w`, or `never`). The key is the caller's
to give (`api/share_key.py` keeps it in the store's database).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from evaledger.domain.errors import NotFoundError, ValidationError
from evaledger.domain.events import ShareLinkCreated
from evaledger.domain.kinds import kind_of
from evaledger.domain.ledger import Context
from evaledger.domain.sharing import ShareInfo, link_token, split_link, verify_signature
from evaledger.domain.writes import Written, utcnow

if TYPE_CHECKING:
    from evaledger.application.ports import Services

SHARE_PREFIX = "/share/"
PAGES = {"run": 1, "compare": 2}
"""A shared page and how many runs it shows."""
DEFAULT_EXPIRY = "7d"
MAX_EXPIRY = timedelta(days=366)
_DURATION = re.compile(r"^([1-9][0-9]{0,5})([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class LinkGoneError(NotFoundError):
    """A share link that was revoked or has expired: a 404 that says so."""

    code = "gone"


@dataclass(frozen=True)
class SharedLink:
    """A link just made: its listing and its path (the only place its signature is)."""

    info: ShareInfo
    path: str


def expiry(text: str | None, field: str = "expires") -> timedelta | None:
    """`30m`, `12h`, `7d`, `4w` → how long a link lives; `never` → None (until revoked)."""
    value = (text or DEFAULT_EXPIRY).strip().lower()
    if value == "never":
        return None
    found = _DURATION.match(value)
    if found is None:
        raise ValidationError(
            f"{field}: a duration such as 30m, 12h, 7d or 4w, or never; got {text!r}", field=field
        )
    lasts = timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})
    if lasts > MAX_EXPIRY:
        raise ValidationError(f"{field}: at most {MAX_EXPIRY.days} days", field=field)
    return lasts


def share_page(
    services: Services,
    key: bytes,
    page: str,
    run_ids: Sequence[UUID],
    ctx: Context,
    lasts: timedelta | None,
) -> SharedLink:
    """Make a signed read-only link to `page` over `run_ids` (write scope, own project)."""
    if page not in PAGES:
        raise ValidationError(f"page: one of {', '.join(PAGES)}", field="page")
    if len(run_ids) != PAGES[page]:
        raise ValidationError(f"runs: the {page} page shows {PAGES[page]} run(s)", field="runs")
    projects = set()
    for run_id in run_ids:
        project = services.ledger.project_of(run_id)
        if project is None or kind_of(services.ledger, run_id) != "run":
            raise NotFoundError(f"no run {run_id}", field="runs")
        ctx.check_project(project, f"run {run_id}")
        projects.add(project)
    if len(projects) != 1:
        raise ValidationError("runs: a link shows runs of one project", field="runs")
    expires = None if lasts is None else services.ledger.clock() + lasts
    created = services.ledger.create_share(projects.pop(), page, run_ids, expires, ctx)
    info = ShareInfo(
        link_id=created.link_id,
        project=created.project,
        page=created.page,
        run_ids=tuple(created.run_ids),
        created_at=created.timestamp,
        created_by=created.actor,
        expires_at=created.expires_at,
    )
    return SharedLink(info, SHARE_PREFIX + link_token(key, created))


def open_share(services: Services, key: bytes, token: str) -> ShareLinkCreated:
    """What a link opens: its creation event (404 / 410 as the module says)."""
    parts = split_link(token)
    link = None if parts is None else services.ledger.share_link(parts[0])
    if parts is None or link is None or not verify_signature(key, link.created, parts[1]):
        raise NotFoundError("no such share link")
    if link.revoked is not None:
        raise LinkGoneError("this share link was revoked")
    expires = link.created.expires_at
    if expires is not None and utcnow() >= expires:
        raise LinkGoneError("this share link has expired")
    return link.created


def list_shares(services: Services, project: str | None) -> list[ShareInfo]:
    """Every link made in `project` (None: every project), oldest first; never a signature."""
    return services.ledger.share_links(project)


def revoke_share(
    services: Services, link_id: str, ctx: Context, reason: str | None = None
) -> Written:
    """Revoke a link (write scope, its project): it opens nothing from now on."""
    return services.ledger.revoke_share(link_id, ctx, reason)
