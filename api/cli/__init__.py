"""The `evaledger` command line: one module per command family, each adding its commands.

Exit codes: 0 ok, 1 regression / failed gate / grade below --min-score / tampering found by
`verify`, 2 usage or input error, 3 infrastructure error (store missing, unreachable, locked,
corrupt or not append-only).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services

# Start-up (issue 19): this module imports only the standard library, so `evaledger --version`
# loads nothing of the product; the families (and through them pydantic, SQLAlchemy, the store)
# are imported when a command is parsed, the composition root when it runs.


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: every family's commands, then `completion`."""
    from evaledger.api.cli import admin, audit, judging, reports, runs, serve
    from evaledger.api.cli.inputs import EPILOG, Commands, common_options

    # The command families, in the order `evaledger --help` lists their commands.
    families = (serve, runs, audit, admin, reports, judging)
    parser = argparse.ArgumentParser(
        prog="evaledger",
        description="Event-sourced evaluation ledger.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"evaledger {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = Commands(sub, common_options())
    for family in families:
        family.register(commands)
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description='bash: eval "$(evaledger completion bash)"; zsh: write it to a file named '
        "_evaledger on your $fpath",
    )
    p.add_argument("shell", choices=["bash", "zsh", "tcsh"])
    p.set_defaults(func=None)
    return parser


def installed_version() -> str:
    """The installed package's version."""
    try:
        return package_version("evaledger")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout without install
        return "unknown"


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """A completion script for `shell`, generated from the parser itself (shtab)."""
    # Deferred for start-up: only `completion` needs shtab.
    import shtab

    script: str = shtab.complete(parser, shell=shell)
    return script


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the command's exit code (0/1/2/3), never a traceback for expected failures."""
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        # Answered before the parser exists (building it imports every command family), the
        # way argparse's own `--version` answers: SystemExit(0).
        sys.stdout.write(f"evaledger {installed_version()}\n")
        raise SystemExit(0)
    from evaledger.api.console import EXIT_OK, closed_pipe_is_not_an_error

    parser = build_parser()
    args = parser.parse_args(argv)
    with closed_pipe_is_not_an_error():
        if args.command == "completion":
            sys.stdout.write(completion_script(parser, args.shell))
            return EXIT_OK
        return run(args)


def run(args: argparse.Namespace) -> int:
    """Open the store, run the command, map every expected failure to its exit code."""
    from evaledger.api.bootstrap import Settings
    from evaledger.api.console import fail, failure_of

    db = args.db or os.environ.get("EVALEDGER_DB") or Settings().db
    try:
        return open_and_run(args)
    except Exception as e:
        failure = failure_of(e, db)
        if failure is None:
            raise
        fail(failure.message, failure.exit_code)


def open_and_run(args: argparse.Namespace) -> int:
    """Run the command on the store, closed after it whatever happens."""
    from evaledger.api.bootstrap import Settings, build_services

    services: Services | None = None
    # A command may answer without the store (`compare A.json B.json`: two files, no database).
    without_store = getattr(args, "without_store", None)
    if without_store is not None and (code := without_store(args)) is not None:
        return int(code)
    try:
        settings = Settings.from_env(db=args.db)
        before_open = getattr(args, "before_open", None)
        if before_open is not None:
            before_open(settings, args)
        # Commands without `reads` (token actions) may create the store.
        services = build_services(settings, create=not getattr(args, "reads", False))
        return int(args.func(services, args))
    finally:
        if services is not None:
            services.close()
