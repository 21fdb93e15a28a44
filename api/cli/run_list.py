"""`evaledger runs`: its options, its output, and its quick path on a caught-up SQLite store.

Start-up (issue 32): `main` hands `runs` here before it imports the parser, the composition root
or SQLAlchemy. `quick_runs` parses the command line with the options the full parser is built
from (`add_runs_arguments`, `arguments.common_options`), reads the page through the bare driver
(`application.quick_reads`) and prints it with `print_runs`, which the full path prints with too.
Whatever it cannot answer exactly as the full path does (help, a usage error, a store that is
not a caught-up SQLite one, a setting from the environment), it leaves to the full path (None).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

import pydantic

from evaledger.api.cli.arguments import (
    LazyChoices,
    add_json_option,
    common_options,
    label_filter,
    positive_int,
)
from evaledger.api.console import (
    EXIT_OK,
    TABLES,
    Col,
    closed_pipe_is_not_an_error,
    emit_json,
    print_table,
)
from evaledger.application.quick_reads import list_runs_unopened
from evaledger.domain.store.urls import DEFAULT_DB_URL
from evaledger.projections.run_rows import RunFilter, RunRow
from evaledger.scoring.headline import Headline
from evaledger.scoring.models import RunAggregate

DB_ENV = "EVALEDGER_DB"
"""The store's URL when --db is not given (the settings' `db`)."""


def run_statuses() -> list[str]:
    """The statuses a run can be in (the aggregate's, imported when first asked)."""
    # lazy: the aggregates (the event classes), only when --status is checked or listed
    from evaledger.domain.aggregates import RunStatus

    return [s.value for s in RunStatus]


class RunLine(NamedTuple):
    """One run as `evaledger runs` lists it."""

    run: RunRow
    aggregate: RunAggregate
    headline: Headline
    """What the run leads with (`scoring.headline.run_headline`), as every view prints it."""


# The columns of `runs` and `show` in display order, each one line: its header, its drop order
# on a narrow terminal (0: never dropped; the highest goes first) and its value. Ids, keys,
# status, pass rate and the headline figure stay longest; counts, names and times give way first.
RUN_COLUMNS: tuple[tuple[Col, Callable[[RunLine], Any]], ...] = (
    (Col("run_id"), lambda x: str(x.run.run_id)),
    (Col("key", fold=True), lambda x: x.run.run_key),
    (Col("suite", drop=5), lambda x: x.run.suite["name"]),
    (Col("agent", drop=6), lambda x: x.run.agent["name"]),
    (Col("status", drop=1), lambda x: x.run.status),
    (Col("cases", drop=4), lambda x: x.run.case_count),
    (Col("metric", drop=7, fold=True), lambda x: x.headline.label),
    (Col("score", drop=3), lambda x: x.headline.value_text),
    (Col("pass", drop=2), lambda x: x.headline.pass_rate_text),
    (Col("passes_when", drop=9, fold=True), lambda x: x.headline.rule),
    (Col("created_at", drop=8), lambda x: listed_at(x.run)),
)
UNDATED_MARK = "*"
UNDATED_NOTE = f"{UNDATED_MARK} imported at this time; the source has no date"


def listed_at(run: RunRow) -> str:
    """The time a run is listed by: its creation at the source, else its import (marked)."""
    return f"{run.recorded_at} {UNDATED_MARK}" if run.recorded_at else run.created_at


def add_runs_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `runs` (its filters and --limit), for the full parser and the quick one."""
    p.add_argument("--suite", help="only runs of this suite name")
    p.add_argument("--agent", help="only runs of this agent name")
    p.add_argument("--key", help="the run key")
    p.add_argument(
        "--status",
        choices=LazyChoices(run_statuses),
        # A metavar: argparse lists choices without one while building the parser.
        metavar="STATUS",
        help="only runs in this status: %(choices)s",
    )
    p.add_argument("--label", type=label_filter, help="key=value")
    p.add_argument(
        "--limit", type=positive_int, default=50, metavar="N", help="list at most N runs"
    )


def run_filter(args: argparse.Namespace) -> RunFilter:
    """The listing's filter from the parsed options of `runs`."""
    return RunFilter(
        project=args.project,
        key=args.key,
        suite=args.suite,
        agent=args.agent,
        status=args.status,
        label=args.label,
        limit=args.limit,
    )


def print_runs(
    rows: Sequence[RunRow],
    total: int,
    aggregates: Sequence[RunAggregate],
    heads: Sequence[Headline],
    args: argparse.Namespace,
) -> int:
    """Print a page of runs as `evaledger runs` does (a table, or `--json`)."""
    if args.json:
        emit_json(
            {
                "data": [
                    {
                        **r.model_dump(mode="json"),
                        "pass_rate": a.pass_rate,
                        "passed": a.passed_count,
                        "failed": a.failed_count,
                        "errored": a.coverage.errored,
                        "pending": a.coverage.pending,
                        "weighted_metrics_score_pct": a.weighted_metrics_score_pct,
                        **({"scorer_metrics": a.scorer_metrics} if a.scorer_metrics else {}),
                        "headline": head.model_dump(mode="json"),
                    }
                    for r, a, head in zip(rows, aggregates, heads, strict=True)
                ],
                "count": len(rows),
                "total": total,
            }
        )
        return EXIT_OK
    columns = RUN_COLUMNS
    shown = print_table(
        [
            [get(RunLine(r, a, head)) for _, get in columns]
            for r, a, head in zip(rows, aggregates, heads, strict=True)
        ],
        [col for col, _ in columns],
    )
    if "created_at" in shown and any(r.undated for r in rows):
        print(UNDATED_NOTE)
    if total > len(rows):
        print(f"{len(rows)} of {total} runs (--limit {args.limit})")
    return EXIT_OK


class _Declined(Exception):
    """The quick parser met what only the full parser answers (help, a usage error)."""


class QuickParser(argparse.ArgumentParser):
    """A parser of `runs` alone that declines instead of printing: the full one reports."""

    def error(self, message: str) -> NoReturn:
        """Decline: the full parser reports the same error with its own usage and hints."""
        raise _Declined(message)


def quick_runs(words: Sequence[str]) -> int | None:
    """`evaledger runs …` answered without the store's full stack; None: take the full path.

    The environment's other settings (`EVALEDGER_*` besides the store's URL and the tests'
    own) are checked by the full path's `Settings`, so with any of them set it declines.
    """
    if words[:1] != ["runs"] or any(
        name.startswith("EVALEDGER_") and name != DB_ENV and not name.startswith("EVALEDGER_TEST")
        for name in os.environ
    ):
        return None
    parser = QuickParser(prog="evaledger runs", add_help=False, parents=[common_options()])
    add_json_option(parser)
    add_runs_arguments(parser)
    try:
        args = parser.parse_args(words[1:])
        f = run_filter(args)
    except (_Declined, pydantic.ValidationError):
        return None
    page = list_runs_unopened(args.db or os.environ.get(DB_ENV) or DEFAULT_DB_URL, f)
    if page is None:
        return None
    TABLES.wide = bool(args.wide)
    with closed_pipe_is_not_an_error():
        return print_runs(page.rows, page.total, page.aggregates, page.headlines, args)
