"""What every command family shares on the way in.

The command table, argument types, JSON and spec files, and run and case references.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import pydantic

from evaledger.api.cli.arguments import LazyChoices as LazyChoices
from evaledger.api.cli.arguments import add_json_option
from evaledger.api.cli.arguments import common_options as common_options
from evaledger.api.cli.arguments import label_filter as label_filter
from evaledger.api.cli.arguments import positive_int as positive_int
from evaledger.api.cli.keys import run_ids_starting, run_keys
from evaledger.api.console import UsageError, did_you_mean
from evaledger.application.reports import case_scores
from evaledger.application.runs import find_run_id, resolve_spec
from evaledger.domain.errors import NotFoundError
from evaledger.domain.spec import RunConfig, ScoringSpec
from evaledger.domain.types import UnstorableJSONError, parse_input_json, variant_label
from evaledger.scoring.models import CaseScore

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services

EPILOG = """\
exit codes:
  0  ok
  1  a regression, a failed gate or threshold, a grade below --min-score, a broken hash chain,
     a judge error verdict or a judging pass stopped at --max-cost
  2  usage or input error (the offending argument or field is named)
  3  infrastructure error: the store does not exist, is unreachable, locked or corrupt; no
     judge call reached the provider
  130  judge interrupted by Ctrl-C (the verdicts recorded stay)

storage (--db or EVALEDGER_DB):
  sqlite:///relative/dir/     three slashes: a path relative to the working directory
  sqlite:////absolute/dir/    four slashes: an absolute path (/absolute/dir/)
  postgresql://user:password@host:5432/dbname
  default: sqlite:///.evaledger/ (events.sqlite + views.sqlite in ./.evaledger/)
  Read commands never create a store: a missing one is exit 3.

shell completion:
  eval "$(evaledger completion bash)"    # or: evaledger completion zsh > ~/.zfunc/_evaledger
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs as written, and every argument's default at the end of its help."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default in (None, False, [], argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


RUN_HELP = "a run id, or a run key of --project"


Command = Callable[["Services", argparse.Namespace], int]
"""A command: the opened store and the parsed arguments in, the exit code out."""


@dataclass(frozen=True)
class Commands:
    """The table of sub-commands each family adds its own to."""

    subparsers: argparse._SubParsersAction[argparse.ArgumentParser]
    common: argparse.ArgumentParser
    """The options every store command takes: --db, --project, --actor."""

    def add(
        self, name: str, func: Command, help_: str, *, json: bool = True, reads: bool = False
    ) -> argparse.ArgumentParser:
        """A sub-command; `reads=True` ones never create a store (a missing one is exit 3)."""
        p = self.subparsers.add_parser(
            name,
            parents=[self.common],
            help=help_,
            description=help_,
            epilog=EPILOG,
            formatter_class=HelpFormatter,
        )
        if json:
            add_json_option(p)
        p.set_defaults(func=func, reads=reads)
        return p


def add_case_ref(p: argparse.ArgumentParser) -> None:
    """The `CASE | RUN TEST_CASE_KEY [--rep N]` arguments (read them with `resolve_case`)."""
    p.add_argument(
        "case", nargs="+", metavar="CASE | RUN TEST_CASE_KEY", help="a case id, or run + key"
    )
    p.add_argument("--rep", type=int, metavar="N", help="repetition (default 0) with a key")
    p.add_argument(
        "--variant",
        metavar="V",
        help="with a key whose test case has several variants (promptfoo prompt/provider, "
        "Inspect model...): the variant as `show` lists it, or a part of it that names one "
        "(default: the only one)",
    )


def fraction(value: str) -> float:
    """An argparse type: a fraction from 0 to 1 (`0.55`, not `55`: a percentage is refused)."""
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not math.isfinite(x) or x < 0:
        raise argparse.ArgumentTypeError(f"a fraction from 0 to 1 is expected, got {value}")
    if x > 1:
        raise argparse.ArgumentTypeError(
            f"a fraction from 0 to 1 is expected, got {value} ({x / 100:g}?)"
        )
    return x


def comma_list(value: str) -> list[str]:
    """`a, b,,c` as `["a", "b", "c"]`."""
    return [v.strip() for v in value.split(",") if v.strip()]


def read_json(path: str) -> Any:
    """Parse a JSON file; malformed JSON, or a value no store can keep, is an input error."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    try:
        return parse_input_json(data)
    except UnstorableJSONError as e:
        raise UsageError(f"{path}: {e}") from None


def load_config(path: str) -> RunConfig:
    """A run config plus policy fields from a file (or its `config` object), checked."""
    data = read_json(path)
    if isinstance(data, dict) and "config" in data and isinstance(data["config"], dict):
        data = data["config"]
    try:
        return RunConfig.model_validate(data)
    except pydantic.ValidationError as e:
        first = ".".join(str(x) for x in e.errors()[0]["loc"]) if e.errors() else None
        # lazy: the bundle importer (the bundle models, every event class), for a refused spec
        from evaledger.importers.bundle import describe

        raise UsageError(f"{path}: invalid spec:\n{describe(e, '  ')}", field=first) from None


def load_spec(services: Services, path: str, project: str = "default") -> ScoringSpec:
    """A scoring spec from a file holding a run config plus policy fields."""
    return resolve_spec(services, load_config(path), project)


def resolve_run(services: Services, ref: str, project: str = "default") -> UUID:
    """A run id from an id, a run key, or the start of an id (as a table shows it)."""
    try:
        return UUID(ref)
    except ValueError:
        pass
    run_id = find_run_id(services, project, ref)
    if run_id is None:
        # A key first; else the short id a table showed (`show 3f2a9c1d`), if it names one run.
        started = run_ids_starting(services.engine, project, ref)
        if len(started) == 1:
            return started[0]
        if started:
            raise UsageError(
                f"{ref!r} starts more than one run id in project {project!r}: give more of it",
                field="RUN",
            )
        hint = did_you_mean(ref, run_keys(services.engine, project))
        raise NotFoundError(
            f"no run with id or key {ref!r} in project {project!r}{hint}", field="RUN"
        )
    return run_id


def parse_uuid(ref: str, what: str) -> UUID:
    """A UUID argument."""
    try:
        return UUID(ref)
    except ValueError:
        raise UsageError(f"{what}: not a valid id: {ref!r}") from None


def resolve_case(services: Services, args: argparse.Namespace) -> UUID:
    """A case id from `CASE_ID`, or from `RUN TEST_CASE_KEY [--rep N] [--variant V]`."""
    refs: list[str] = args.case
    variant: str | None = getattr(args, "variant", None)
    if len(refs) == 1:
        if args.rep is not None:
            raise UsageError("--rep: give RUN TEST_CASE_KEY --rep N, or a CASE id alone")
        if variant is not None:
            raise UsageError("--variant: give RUN TEST_CASE_KEY --variant V, or a CASE id alone")
        return parse_uuid(refs[0], "CASE")
    if len(refs) != 2:
        raise UsageError("give a CASE id, or RUN TEST_CASE_KEY [--rep N] [--variant V]")
    run_id = resolve_run(services, refs[0], args.project)
    key, rep = refs[1], args.rep or 0
    services.sync()
    scores = case_scores(services, run_id)
    found = [s for s in scores if s.test_case_key == key and s.repetition == rep]
    if not found:
        keys = {s.test_case_key for s in scores}
        # A known key at a missing repetition is no typo: no key to suggest.
        hint = "" if key in keys else did_you_mean(key, keys)
        raise NotFoundError(
            f"no case {key!r} repetition {rep} in run {refs[0]!r}{hint}", field="TEST_CASE_KEY"
        )
    if variant is not None:
        return _of_variant(found, variant, key)
    if len(found) > 1:
        labels = sorted(variant_label(s.variant) for s in found)
        if len(set(labels)) == len(labels) and all(labels):
            raise UsageError(
                f"{key!r} repetition {rep} has {len(found)} variants: "
                + "; ".join(repr(v) for v in labels)
                + f" — give one with --variant, e.g. --variant {shell_word(labels[0])}",
                field="--variant",
            )
        ids = ", ".join(str(s.case_id) for s in found)
        raise UsageError(
            f"{key!r} repetition {rep} names {len(found)} cases ({ids}): give a CASE id"
        )
    return found[0].case_id


def _of_variant(found: list[CaseScore], variant: str, key: str) -> UUID:
    """The one case of `found` whose variant is `variant` (as listed) or alone contains it."""
    labels = {s.case_id: variant_label(s.variant) for s in found}
    exact = [i for i, label in labels.items() if label == variant]
    part = [i for i, label in labels.items() if variant.casefold() in label.casefold()]
    chosen = exact or part
    if len(chosen) == 1:
        return chosen[0]
    listed = "; ".join(repr(v) for v in sorted(labels.values()))
    if chosen:
        raise UsageError(
            f"--variant {variant!r} matches {len(chosen)} variants of {key!r}: {listed} — "
            "give more of it",
            field="--variant",
        )
    raise UsageError(
        f"{key!r} has no variant {variant!r}{did_you_mean(variant, labels.values())}; "
        f"its variants: {listed}",
        field="--variant",
    )


def shell_word(text: str) -> str:
    """`text` as one word of a shell command line (quoted when it needs to be)."""
    return shlex.quote(text)
