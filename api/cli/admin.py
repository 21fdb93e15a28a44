"""`evaledger token`, `migrate` and `project`: who may use a store, and keeping it in shape."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING

import pydantic

from evaledger.api.cli.inputs import Commands
from evaledger.api.console import EXIT_OK, Progress, UsageError, emit_json, print_table
from evaledger.domain.types import Key

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services, Settings

# Start-up (issue 19): the composition root and the ledger are imported by the commands that
# use them, so that building the parser loads neither.


def register(commands: Commands) -> None:
    """Add project, migrate and token."""
    p = commands.add(
        "project",
        cmd_project,
        "run the projections (catch up, --follow, --rebuild NAME)",
    )
    p.add_argument("--follow", action="store_true", help="keep following the log")
    p.add_argument("--rebuild", metavar="NAME", help="rebuild one projection from position 0")
    p.add_argument("--poll", type=float, default=0.2, help="poll interval in seconds")
    p.add_argument(
        "--safety-interval", type=float, default=30.0, help="full catch-up every N seconds"
    )
    p = commands.add(
        "migrate",
        cmd_migrate,
        "create or repair tables, append-only triggers and grants (run as the migration role)",
    )
    p.add_argument("--app-role", help="PostgreSQL role to grant SELECT/INSERT on the events")
    p.add_argument(
        "--seal-payloads",
        action="store_true",
        help="seal new payloads from now on (a store created before sealing was the default)",
    )
    # Before opening the store: a migration repairs what opening would refuse.
    p.set_defaults(before_open=migrate_before_open)
    _register_token(commands)


def _register_token(commands: Commands) -> None:
    # Tokens are not a project's: --project is each action's own argument, not the common one.
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--db", help="sqlite:///path or postgresql://... (default: EVALEDGER_DB)")
    store.add_argument("--actor", default="cli", help="who issues or revokes (default: cli)")
    store.add_argument("--json", action="store_true", help="machine-readable output")
    p = commands.subparsers.add_parser("token", help="create, list or revoke API tokens")
    tokens = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = tokens.add_parser("create", parents=[store], help="issue a token; prints its secret once")
    p.add_argument("--project", required=True, help="the only project the token can touch")
    p.add_argument(
        "--scope", required=True, choices=["read", "write", "admin"], help="what it may do"
    )
    p.add_argument("--name", help="whom it stands for (the actor of what it writes)")
    p.set_defaults(func=cmd_token_create)
    p = tokens.add_parser("list", parents=[store], help="every token, never its secret")
    p.add_argument("--project", help="only this project's tokens")
    p.set_defaults(func=cmd_token_list)
    p = tokens.add_parser("revoke", parents=[store], help="revoke a token by its id")
    p.add_argument("token_id", metavar="ID", help="the token id (evaledger token list)")
    p.add_argument("--reason", help="why, kept in the log")
    p.set_defaults(func=cmd_token_revoke)


def cmd_project(services: Services, args: argparse.Namespace) -> int:
    """Run the projections: catch up, follow, or rebuild one."""
    # lazy: the projections' runner and every projector, only for this command
    from evaledger.application import verification

    if args.rebuild:
        try:
            reached = verification.rebuild_projection(services, args.rebuild)
        except KeyError as e:
            raise UsageError(str(e.args[0])) from None
        if args.json:
            emit_json({"rebuilt": args.rebuild, "position": reached})
        else:
            print(f"rebuilt {args.rebuild} to position {reached}")
        return EXIT_OK
    progress = Progress("projecting events")
    reached = verification.catch_up_projections(services, progress)
    progress.done()
    if args.json:
        # With --follow, this first line is the catch-up; following prints nothing more.
        emit_json({"position": reached})
    else:
        print(f"projections at position {reached}")
    if args.follow:
        stop = threading.Event()
        # SIGTERM (a supervisor stopping us) ends the loop between pages, never inside one.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            # Several projectors on one PostgreSQL store: one leads, the others stand by.
            verification.follow_projections(
                services, stop, poll_interval=args.poll, safety_interval=args.safety_interval
            )
        except KeyboardInterrupt:
            stop.set()
    return EXIT_OK


def migrate_before_open(settings: Settings, args: argparse.Namespace) -> None:
    """Create or repair the store's tables, triggers and grants."""
    from evaledger.api.migrate import migrate_store  # lazy: the composition root and the store

    migrate_store(settings, args.app_role, seal_payloads=args.seal_payloads)


def cmd_migrate(services: Services, args: argparse.Namespace) -> int:
    """Report the migrated store (the migration itself ran before opening it)."""
    # lazy: the ledger and the projections, only for this command
    from evaledger.application.verification import log_position, seals_payloads

    position = log_position(services)
    seals = seals_payloads(services)
    if args.json:
        emit_json(
            {
                "kind": services.location.kind,
                "position": position,
                "append_only": True,
                "app_role": args.app_role,
                "seals_payloads": seals,
            }
        )
        return EXIT_OK
    granted = f", granted to {args.app_role}" if args.app_role else ""
    print(f"migrated: {services.location.kind} store at position {position}, append-only{granted}")
    print(f"payloads: {'sealed' if seals else 'inline (migrate --seal-payloads turns sealing on)'}")
    return EXIT_OK


def cmd_token_create(services: Services, args: argparse.Namespace) -> int:
    """Issue a token and print its secret, once."""
    # lazy: the ledger and the event classes, only for token commands
    from evaledger.application import projects
    from evaledger.domain.events import TokenScope  # lazy: the event classes
    from evaledger.domain.ledger import Context  # lazy: the ledger

    try:
        project = pydantic.TypeAdapter(Key).validate_python(args.project)
        name = None if args.name is None else pydantic.TypeAdapter(Key).validate_python(args.name)
    except pydantic.ValidationError as e:
        raise UsageError(f"--project/--name: {e.errors()[0]['msg']}") from None
    new = projects.issue_token(
        services, project, TokenScope(args.scope), name, Context(actor=args.actor)
    )
    if args.json:
        emit_json(
            {"token_id": new.token_id, "token": new.token, "project": project, "scope": args.scope}
        )
    else:
        print(new.token)
        sys.stderr.write(
            f"token {new.token_id} for project {project!r}, scope {args.scope}: "
            "shown once, keep it secret (only its hash is stored)\n"
        )
    return EXIT_OK


def cmd_token_revoke(services: Services, args: argparse.Namespace) -> int:
    """Revoke a token by its id."""
    # lazy: the ledger, only for token commands
    from evaledger.application import projects
    from evaledger.domain.ledger import Context  # lazy: the ledger

    projects.revoke_token(services, args.token_id, Context(actor=args.actor), args.reason)
    if args.json:
        emit_json({"revoked": args.token_id})
    else:
        print(f"revoked token {args.token_id}")
    return EXIT_OK


def cmd_token_list(services: Services, args: argparse.Namespace) -> int:
    """Every token (of one project with --project), never its secret."""
    from evaledger.application import projects  # lazy: the ledger, only for token commands

    tokens = projects.list_tokens(services, args.project).data
    if args.json:
        emit_json(
            {
                "data": [
                    {
                        "token_id": t.token_id,
                        "project": t.project,
                        "scope": t.scope.value,
                        "name": t.name,
                        "actor": t.actor,
                        "active": t.active,
                        "issued_at": t.issued_at.isoformat(),
                        "issued_by": t.issued_by,
                        "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None,
                        "revoked_by": t.revoked_by,
                        "revoke_reason": t.revoke_reason,
                    }
                    for t in tokens
                ],
                "count": len(tokens),
            }
        )
        return EXIT_OK
    print_table(
        [
            (
                t.token_id,
                t.project,
                t.scope.value,
                t.name,
                "active" if t.active else "revoked",
                t.issued_at.isoformat(timespec="seconds"),
            )
            for t in tokens
        ],
        ["token_id", "project", "scope", "name", "status", "issued_at"],
    )
    return EXIT_OK
