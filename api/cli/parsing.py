"""The parser of the `evaledger` command line: every family's commands, errors with suggestions.

Imported by `evaledger.api.cli.main` once it knows a command must be parsed (start-up: see there).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from typing import NoReturn

import evaledger.api.cli.admin as admin
import evaledger.api.cli.audit as audit
import evaledger.api.cli.calibration as calibration
import evaledger.api.cli.datasets as datasets
import evaledger.api.cli.erasure as erasure
import evaledger.api.cli.judging as judging
import evaledger.api.cli.online as online
import evaledger.api.cli.proofs as proofs
import evaledger.api.cli.reports as reports
import evaledger.api.cli.review as review
import evaledger.api.cli.runs as runs
import evaledger.api.cli.search as search
import evaledger.api.cli.serve as serve
import evaledger.api.cli.share as share
import evaledger.api.cli.statistics as statistics
import evaledger.api.cli.transcript as transcript
import evaledger.api.cli.trend as trend
from evaledger.api.cli.inputs import EPILOG, Commands, HelpFormatter, common_options
from evaledger.api.cli.keys import (
    CASE_REF_ARG,
    RUN_ARGS,
    subcommands,
)
from evaledger.api.console import (
    UsageError,
    did_you_mean,
)

FAMILIES = (
    serve,
    runs,
    transcript,
    search,
    audit,
    proofs,
    admin,
    reports,
    statistics,
    judging,
    online,
    review,
    erasure,
    share,
    trend,
    datasets,
    calibration,
)
"""The command families, in the order `evaledger --help` lists their commands."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors reach `main` (for --json and "did you mean") unprinted."""

    def error(self, message: str) -> NoReturn:
        """Raise, instead of printing and exiting: `main` reports it."""
        raise ArgumentsError(suggest(message), self.format_usage(), field=field_of(message))


class ArgumentsError(UsageError):
    """Bad arguments, with the usage line of the (sub-)command they were given to."""

    def __init__(self, message: str, usage: str, *, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.usage = usage


def field_of(message: str) -> str | None:
    """The argument an argparse message names (`argument --limit: …`, `…required: RUN`)."""
    named = re.match(r"argument ([^:]+):", message)
    if named:
        return named.group(1).split("/")[-1]
    listed = re.search(r"(?:required|unrecognized arguments): ([^\s,]+)", message)
    return listed.group(1) if listed else None


def suggest(message: str) -> str:
    """An argparse message with "did you mean" for a mistyped command or choice."""
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice is None:
        return message
    options = re.findall(r"'([^']*)'", choice.group(2))
    hint = did_you_mean(choice.group(1), options)
    return (
        message[: choice.start()]
        + f"invalid choice: {choice.group(1)!r}{hint}"
        + ("" if hint else f" (choose from {choice.group(2)})")
    )


def build_parser(version: str) -> argparse.ArgumentParser:
    """The argument parser: every family's commands, then `completion`."""
    parser = Parser(
        prog="evaledger",
        description="Event-sourced evaluation ledger.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"evaledger {version}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = Commands(sub, common_options())  # type: ignore[arg-type]
    for family in FAMILIES:
        family.register(commands)
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (commands, options, run keys and case keys)",
        description='bash: eval "$(evaledger completion bash)"; zsh: write it to a file named '
        "_evaledger on your $fpath; fish: evaledger completion fish > "
        "~/.config/fish/completions/evaledger.fish",
        formatter_class=HelpFormatter,
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(func=None)
    for action in key_arguments(parser):
        action.complete = KEY_COMPLETER  # type: ignore[attr-defined]
    return parser


SHELLS = ("bash", "zsh", "fish", "tcsh")

COMPLETE_COMMAND = "__complete"
"""The hidden command the completion scripts call for run and case keys (not in --help)."""

KEY_COMPLETER = {
    # Each gets the words typed so far (after `evaledger`, before the one being completed).
    "bash": "_evaledger_keys",
    "zsh": f"($(evaledger {COMPLETE_COMMAND} ${{words[2,CURRENT-1]}} 2>/dev/null))",
    "fish": f"(evaledger {COMPLETE_COMMAND} (commandline -opc)[2..-1] 2>/dev/null)",
    "tcsh": f"`evaledger {COMPLETE_COMMAND} 2>/dev/null`",
    "preamble": {
        "bash": f"""
_evaledger_keys() {{
  local keys
  keys="$(evaledger {COMPLETE_COMMAND} "${{COMP_WORDS[@]:1:COMP_CWORD-1}}" 2>/dev/null)"
  compgen -W "$keys" -- "$1"
}}
"""
    },
}
"""How each shell asks for keys (shtab's custom completion)."""


def key_arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """Every positional, in every (sub-)command, that takes a run or a case reference."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from key_arguments(sub)
        elif not action.option_strings and action.dest in {*RUN_ARGS, CASE_REF_ARG}:
            yield action


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """A completion script for `shell`, generated from the parser itself (shtab)."""
    # lazy: shtab, only for `completion`
    import shtab

    script: str = shtab.complete(parser, shell=shell)
    return script


def parse(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    """The parsed arguments; an unknown option names the closest ones its command takes."""
    args, extras = parser.parse_known_args(words)
    if not extras:
        return args
    command = parser
    for name in (getattr(args, "command", None), getattr(args, "action", None)):
        command = subcommands(command).get(name or "", command)
    unknown = extras[0].partition("=")[0]
    hint = did_you_mean(unknown, command._option_string_actions) if unknown.startswith("-") else ""
    raise ArgumentsError(
        f"unrecognized arguments: {' '.join(extras)}{hint}", command.format_usage(), field=unknown
    )
