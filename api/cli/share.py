"""`evaledger share`: signed, read-only, revocable links to one page (issue 36).

- `share RUN [--expires 7d]`: a link to the run's page;
- `share compare BASELINE CANDIDATE [--expires 7d]`: a link to the two runs' compare page;
- `share list`: the project's links (never a signature), active, revoked or expired;
- `share revoke LINK_ID [--reason TEXT]`.

The link is printed whole, on the server's public URL (`--base-url`, else EVALEDGER_PUBLIC_URL,
else the local `serve` address). A run keyed `list`, `compare` or `revoke` is named by its id.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from evaledger.api.cli.inputs import Commands, resolve_run
from evaledger.api.console import EXIT_OK, UsageError, emit_json, print_table

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services
    from evaledger.domain.sharing import ShareInfo

LOCAL_URL = "http://127.0.0.1:8000"
ACTIONS = ("list", "revoke", "compare")


def register(commands: Commands) -> None:
    """Add share."""
    p = commands.add(
        "share",
        cmd_share,
        "make a signed read-only link to a run or compare page; list or revoke links",
    )
    p.add_argument(
        "target",
        nargs="+",
        metavar="RUN | compare BASELINE CANDIDATE | list | revoke LINK_ID",
        help="what to share, or list / revoke links",
    )
    p.add_argument(
        "--expires",
        default="7d",
        metavar="DURATION",
        help="how long the link opens: 30m, 12h, 7d, 4w, or never (default: 7d)",
    )
    p.add_argument("--reason", help="why a link is revoked (default: none)")
    p.add_argument(
        "--base-url",
        help="the server's public URL the link starts with "
        f"(default: EVALEDGER_PUBLIC_URL, else {LOCAL_URL})",
    )


def cmd_share(services: Services, args: argparse.Namespace) -> int:
    """Make, list or revoke share links."""
    # lazy: the ledger's share commands and the store's share key, for this command only
    from evaledger.api.share_key import share_key
    from evaledger.application import sharing
    from evaledger.domain.ledger import Context

    services.sync()
    action, rest = args.target[0], args.target[1:]
    ctx = Context(actor=args.actor, project=None)
    if action == "list":
        return _list(sharing.list_shares(services, args.project), args.json, rest)
    if action == "revoke":
        if len(rest) != 1:
            raise UsageError("share revoke: give one LINK_ID")
        sharing.revoke_share(services, rest[0], ctx, args.reason)
        if args.json:
            emit_json({"revoked": rest[0]})
        else:
            print(f"revoked share link {rest[0]}")
        return EXIT_OK
    page, given = ("compare", rest) if action == "compare" else ("run", args.target)
    if len(given) != sharing.PAGES[page]:
        raise UsageError(
            "share compare: give BASELINE and CANDIDATE" if page == "compare" else "share: one RUN"
        )
    runs = [resolve_run(services, r, args.project) for r in given]
    lasts = sharing.expiry(args.expires)
    made = sharing.share_page(services, share_key(services.engine), page, runs, ctx, lasts)
    base = (args.base_url or os.environ.get("EVALEDGER_PUBLIC_URL") or LOCAL_URL).rstrip("/")
    url = base + made.path
    i = made.info
    if args.json:
        emit_json(
            {
                "link_id": i.link_id,
                "url": url,
                "page": i.page,
                "run_ids": [str(r) for r in i.run_ids],
                "project": i.project,
                "expires_at": i.expires_at.isoformat() if i.expires_at else None,
            }
        )
    else:
        print(url)
        until = i.expires_at.isoformat() if i.expires_at else "it is revoked"
        sys.stderr.write(
            f"share link {i.link_id}: read-only, this {i.page} page only, until {until} "
            f"(evaledger share revoke {i.link_id})\n"
        )
    return EXIT_OK


def _list(found: list[ShareInfo], as_json: bool, rest: list[str]) -> int:
    if rest:
        raise UsageError("share list: takes no argument (--project picks the project)")
    now = datetime.now(UTC)
    if as_json:
        emit_json(
            {
                "data": [
                    {
                        "link_id": s.link_id,
                        "project": s.project,
                        "page": s.page,
                        "run_ids": [str(r) for r in s.run_ids],
                        "state": s.state(now),
                        "created_at": s.created_at.isoformat(),
                        "created_by": s.created_by,
                        "expires_at": s.expires_at.isoformat() if s.expires_at else None,
                        "revoked_at": s.revoked_at.isoformat() if s.revoked_at else None,
                        "revoked_by": s.revoked_by,
                        "revoke_reason": s.revoke_reason,
                    }
                    for s in found
                ]
            }
        )
        return EXIT_OK
    print_table(
        [
            [s.link_id, s.page, s.state(now), s.created_by, s.created_at.isoformat(),
             s.expires_at.isoformat() if s.expires_at else "—",
             " ".join(str(r) for r in s.run_ids)]
            for s in found
        ],
        ["link", "page", "state", "created by", "created at", "expires at", "runs"],
    )  # fmt: skip
    return EXIT_OK
