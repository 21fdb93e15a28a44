"""The command line's argument types and shared options, importing nothing heavy.

Start-up (issue 32): `evaledger runs` parses its arguments before anything of the store is
imported (`run_list.quick_runs`), with the same definitions the full parser is built from.
`inputs.py` re-exports these for the other command families.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable, Sequence
from typing import overload

from evaledger.projections.run_rows import LABEL_PATTERN


class LazyChoices(Sequence[str]):
    """An argument's choices, computed when argparse first reads them.

    That is when a value is checked, or help or completion lists them: the parser is built for
    every command line, and some choices live in modules only their commands need (issue 19).
    """

    def __init__(self, load: Callable[[], Iterable[str]]) -> None:
        self._load = load
        self._values: tuple[str, ...] | None = None

    def _all(self) -> tuple[str, ...]:
        if self._values is None:
            self._values = tuple(self._load())
        return self._values

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())


def add_json_option(p: argparse.ArgumentParser) -> None:
    """`--json`, which every command with an answer takes."""
    p.add_argument("--json", action="store_true", help="machine-readable output")


def common_options() -> argparse.ArgumentParser:
    """The parent parser of --db, --project and --actor."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        help="sqlite:///relative/dir/, sqlite:////absolute/dir/ or postgresql://user@host/db "
        "(default: EVALEDGER_DB or sqlite:///.evaledger/)",
    )
    common.add_argument(
        "--project", default="default", help="project of run keys (default: default)"
    )
    common.add_argument("--actor", default="cli", help="who records (default: cli)")
    common.add_argument(
        "--wide", action="store_true", help="tables: every column and full ids, never fitted"
    )
    return common


def label_filter(value: str) -> str:
    """An argparse type: `key=value`, the rule of the API's `label` filter."""
    if not re.fullmatch(LABEL_PATTERN, value):
        raise argparse.ArgumentTypeError(f"expected key=value, got {value!r}")
    return value


def positive_int(value: str) -> int:
    """An argparse type: an integer ≥ 1."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n
