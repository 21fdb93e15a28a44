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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services

# Start-up (issue 19): this module imports only the standard library, so `evaledger --version`
# loads nothing of the product; the parser (and through the command families pydantic,
# SQLAlchemy, the store) is imported when a command is parsed, the composition root when it runs.


def installed_version() -> str:
    """The installed package's version."""
    # lazy: importlib.metadata, only for --version and the parser's (not for a quick `runs`)
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("evaledger")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout without install
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: every family's commands, then `completion`."""
    from evaledger.api.cli import parsing  # lazy: every command family, not for --version

    return parsing.build_parser(installed_version())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the command's exit code (0/1/2/3), never a traceback for expected failures."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words == ["--version"]:
        # Answered before the parser exists (building it imports every command family), the
        # way argparse's own `--version` answers: SystemExit(0).
        sys.stdout.write(f"evaledger {installed_version()}\n")
        raise SystemExit(0)
    if words[:1] == ["runs"]:
        # lazy: the bare-driver listing, only for `runs` (start-up, issue 32: no SQLAlchemy)
        from evaledger.api.cli.run_list import quick_runs

        if (code := quick_runs(words)) is not None:
            return code
    # lazy: the parser, pydantic and the settings: `--version` answers without them
    from evaledger.api.bootstrap import Settings

    # lazy: SQLAlchemy and the read-model tables, not for --version
    from evaledger.api.cli.keys import completion_candidates

    # lazy: every command family, not for --version
    from evaledger.api.cli.parsing import COMPLETE_COMMAND, ArgumentsError, completion_script, parse

    # lazy: rich, not for --version
    from evaledger.api.console import (
        EXIT_OK,
        EXIT_USAGE,
        TABLES,
        Failure,
        closed_pipe_is_not_an_error,
        report_failure,
    )

    parser = build_parser()
    if words[:1] == [COMPLETE_COMMAND]:
        default_db = os.environ.get("EVALEDGER_DB") or Settings().db
        for key in completion_candidates(parser, words[1:], default_db):
            sys.stdout.write(key + "\n")
        return EXIT_OK
    as_json = "--json" in words
    with closed_pipe_is_not_an_error():
        try:
            args = parse(parser, words)
        except ArgumentsError as e:
            if not as_json:
                sys.stderr.write(e.usage)
            report_failure(Failure(str(e), EXIT_USAGE, "usage", e.field), as_json=as_json)
        TABLES.wide = bool(getattr(args, "wide", False))
        if args.command == "completion":
            sys.stdout.write(completion_script(parser, args.shell))
            return EXIT_OK
        return run(args)


def run(args: argparse.Namespace) -> int:
    """Open the store, run the command, map every expected failure to its exit code."""
    # lazy: the composition root (pydantic, SQLAlchemy), not for --version
    from evaledger.api.bootstrap import Settings
    from evaledger.api.console import failure_of, report_failure  # lazy: rich, not for --version

    db = args.db or os.environ.get("EVALEDGER_DB") or Settings().db
    try:
        return open_and_run(args)
    except Exception as e:
        failure = failure_of(e, db)
        if failure is None:
            raise
        report_failure(failure, as_json=bool(getattr(args, "json", False)))


def open_and_run(args: argparse.Namespace) -> int:
    """Run the command on the store, closed after it whatever happens."""
    from evaledger.api.bootstrap import Settings, build_services  # lazy: the composition root

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
