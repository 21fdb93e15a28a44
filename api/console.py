"""What the command line prints, and how it ends: exit codes, JSON, tables, the progress bar.

The `evaledger.api.cli` package and the demo both print with it. It sits beside the package, not
in it: importing any `evaledger.api.cli.*` module runs the package's `__init__`, which registers
every command family, the demo's among them; the demo importing from there would close a circle.
"""

from __future__ import annotations

import difflib
import io
import os
import re
import sys
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TextIO

import orjson
import pydantic
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from evaledger.domain.errors import EvaledgerError, InfrastructureError
from evaledger.scoring.scorer_metrics import figure_text

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

    from evaledger.scoring.comparison import RunComparison
    from evaledger.scoring.grading import Grade

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3


class UsageError(Exception):
    """Bad arguments or input: exit 2. `field` names the offending argument or field."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Failure(NamedTuple):
    """An expected failure as the command line reports it."""

    message: str
    exit_code: int
    code: str = "usage"
    """A stable word for scripts: `usage`, or the domain error's code (`not_found`, …)."""
    field: str | None = None


def failure_of(error: Exception, db: str) -> Failure | None:
    """The one line and exit code of an expected failure; None for a bug (it keeps its traceback).

    A driver error about the store `db` (locked, down, corrupt) is exit 3.
    """
    if isinstance(error, UsageError):
        return Failure(str(error), EXIT_USAGE, "usage", error.field)
    if isinstance(error, InfrastructureError):
        return Failure(error.detail, EXIT_INFRA, error.code, error.field)
    if isinstance(error, EvaledgerError):
        return Failure(error.detail, EXIT_USAGE, error.code, error.field)
    if isinstance(error, pydantic.ValidationError):
        first = error.errors()[0]["loc"] if error.errors() else ()
        field = ".".join(str(part) for part in first) or None
        # lazy: the importers' error wording, only when input is invalid
        from evaledger.importers.bundle import describe

        return Failure("invalid input:\n" + describe(error, "  "), EXIT_USAGE, "invalid", field)
    # lazy: the composition root (the parser imports this module; parsing loads none of it)
    from evaledger.api.bootstrap import infrastructure_error

    infra = infrastructure_error(error, db)
    return None if infra is None else Failure(infra.detail, EXIT_INFRA, infra.code)


def report_failure(failure: Failure, *, as_json: bool = False) -> NoReturn:
    """End the command: one JSON object on stdout under --json, else one line on stderr."""
    if as_json:
        emit_json(
            {
                "error": {
                    "code": failure.code,
                    "message": failure.message,
                    "field": failure.field,
                },
                "exit_code": failure.exit_code,
            }
        )
    else:
        sys.stderr.write(f"evaledger: error: {failure.message}\n")
    raise SystemExit(failure.exit_code)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print an error and exit."""
    report_failure(Failure(message, code))


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest candidates by edit similarity, else ``."""
    close = difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)
    if not close:
        return ""
    # Only the near-best: a second match far behind the first is noise ("--wide" for "--faild").
    best = difflib.SequenceMatcher(None, word, close[0]).ratio()
    close = [c for c in close if difflib.SequenceMatcher(None, word, c).ratio() >= best - 0.1]
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


# ---------------------------------------------------------------------------------------------
# JSON, numbers, tables, the progress bar


def emit_json(data: Any) -> None:
    """Print JSON (pretty, stable key order)."""
    text = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text stream (captured output): decoded
        sys.stdout.write(text.decode())
        return
    # The bytes as they are: a large answer (a 10k-case comparison is 14 MB) is not decoded to
    # a str only to be encoded again.
    sys.stdout.flush()
    buffer.write(text)
    buffer.flush()


def fmt(value: Any, digits: int = 2) -> str:
    """Numbers rounded for display only."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return figure_text(value, digits)
    return str(value)


def percent(fraction: float | None) -> str | None:
    """A fraction as a percentage for display."""
    return None if fraction is None else f"{100 * fraction:.1f}%"


def outcome(passed: bool | None) -> str:
    """`pass`, `fail`, or `—` (errored or missing) for display."""
    return "—" if passed is None else "pass" if passed else "fail"


STATUS_STYLE = {
    "passed": "green",
    "improvement": "green",
    "completed": "green",
    "failed": "red",
    "regression": "red",
    "errored": "yellow",
    "error": "yellow",
    "canceled": "dim",
}
"""Colours of status cells (on a terminal only)."""

PLAIN_WIDTH = 10_000
"""Piped output is never wrapped: a script reads whole rows."""

SHORT_ID = 8
"""A UUID on a terminal shows its first 8 characters, as git shortens hashes."""

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

COLUMN_GAP = 3
"""Characters between two columns of a terminal table (padding, rule, padding)."""


@dataclass(frozen=True)
class Col:
    """A table column, and how it gives way on a narrow terminal."""

    name: str
    drop: int = 0
    """Drop order when the row is wider than the terminal: the highest goes first; 0 never."""
    fold: bool = False
    """The cells may wrap (free text) when even the kept columns do not fit."""


@dataclass
class TableMode:
    """How tables print in this process (`--wide`: every column, ids in full)."""

    wide: bool = False


TABLES = TableMode()


def print_table(
    rows: Sequence[Sequence[Any]],
    header: Sequence[str | Col],
    *,
    fold: Sequence[str] = (),
) -> list[str]:
    """A table on stdout: fitted to the terminal and coloured on a TTY, plain when piped.

    On a terminal, columns are dropped by `Col.drop` until the row fits (a note names them,
    `--wide` shows them); numbers and ids are never cut, UUIDs show 8 characters. A plain
    header string is a column whose drop order is its position (the first is always kept).
    Returns the names of the columns shown.
    """
    out = sys.stdout
    tty = out.isatty()
    cols = [
        h if isinstance(h, Col) else Col(h, drop=i, fold=h in fold) for i, h in enumerate(header)
    ]
    short = tty and not TABLES.wide
    cells = [[_cell(c, short) for c in r] for r in rows]
    width = Console(file=out).width if tty else PLAIN_WIDTH
    kept = list(range(len(cols))) if not short else _fitting(cols, cells, width)
    t = Table(
        box=box.SIMPLE_HEAD if tty else None,
        show_edge=False,
        pad_edge=False,
        header_style="bold" if tty else "",
    )
    for i in kept:
        numeric = bool(rows) and all(
            (isinstance(r[i], int | float) and not isinstance(r[i], bool)) or r[i] is None
            for r in rows
        )
        t.add_column(
            cols[i].name,
            justify="right" if numeric else "left",
            no_wrap=not cols[i].fold,
            min_width=None if cols[i].fold else _natural(cols[i], cells, i),
            overflow="fold",
        )
    for row in cells:
        t.add_row(*(Text(row[i], style=STATUS_STYLE.get(row[i], "") if tty else "") for i in kept))
    dropped = [cols[i].name for i in range(len(cols)) if i not in kept]
    if tty:
        # --wide: the row's full width, which the terminal itself wraps; nothing is cut.
        full = _row_width(cols, cells, kept) if TABLES.wide else 0
        Console(file=out, highlight=False, width=max(width, full)).print(t)
        if dropped:
            Console(file=out, highlight=False).print(
                f"[dim]not shown at {width} columns: {', '.join(dropped)} (--wide shows them)[/]"
            )
        return [cols[i].name for i in kept]
    buffer = io.StringIO()
    Console(file=buffer, width=PLAIN_WIDTH, no_color=True, highlight=False).print(t)
    out.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))
    return [cols[i].name for i in kept]


def fits(rows: Sequence[Sequence[Any]], header: Sequence[Col]) -> bool:
    """Whether `print_table` would show every column of this table (piped or --wide: always)."""
    if not sys.stdout.isatty() or TABLES.wide:
        return True
    cells = [[_cell(c, True) for c in r] for r in rows]
    return len(_fitting(header, cells, Console(file=sys.stdout).width)) == len(header)


def _cell(value: Any, short: bool) -> str:
    text = fmt(value)
    return text[:SHORT_ID] if short and _UUID.fullmatch(text) else text


def _natural(col: Col, cells: Sequence[Sequence[str]], i: int) -> int:
    return max([cell_len(col.name), *(cell_len(r[i]) for r in cells)])


def _fitting(cols: Sequence[Col], cells: Sequence[Sequence[str]], width: int) -> list[int]:
    """The columns kept at `width`: drop the highest `drop` (rightmost first) until they fit."""
    kept = list(range(len(cols)))
    for i in sorted(kept, key=lambda i: (cols[i].drop, i), reverse=True):
        if _row_width(cols, cells, kept) <= width or cols[i].drop == 0:
            break
        kept.remove(i)
    return kept


def _row_width(cols: Sequence[Col], cells: Sequence[Sequence[str]], kept: Sequence[int]) -> int:
    return sum(_natural(cols[i], cells, i) for i in kept) + COLUMN_GAP * (len(kept) - 1)


class Progress:
    """A rich progress bar on stderr counting items (cases, events), only when it is a TTY."""

    def __init__(self, label: str, enabled: bool | None = None) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar: RichProgress | None = None

    def __call__(self, done: int, total: int) -> None:
        """Report `done` of `total`."""
        if not self.enabled:
            return
        if self._bar is None:
            # lazy: rich's progress bar, only a long command on a terminal shows one (issue 19)
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr),
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=total or None)
        # A total of 0 is not known yet (an import's validating pass): count without a bar end.
        self._bar.update(self._task, completed=done, total=total or None)

    def done(self) -> None:
        """Stop the bar (it stays on screen at its final count)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


# ---------------------------------------------------------------------------------------------
# a reader that goes away


class _PipeSafeStdout(io.TextIOBase):
    """stdout that goes quiet once its reader has gone (`evaledger show RUN | head`)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        """Write, or drop the text once the pipe is closed."""
        if not self.reader_gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._silence()
        return len(text)

    def flush(self) -> None:
        """Flush, unless the pipe is closed."""
        if not self.reader_gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._silence()

    def isatty(self) -> bool:
        """Whether the real stdout is a terminal."""
        return self.stream.isatty()

    def fileno(self) -> int:
        """The real stdout's descriptor."""
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The real stdout's encoding (rich asks)."""
        return self.stream.encoding

    def _silence(self) -> None:
        self.reader_gone = True
        # Python's own flush of stdout at exit would fail again: point the descriptor at devnull.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass


@contextmanager
def closed_pipe_is_not_an_error() -> Iterator[None]:
    """A reader that stops early (`| head`) ends the output, not the command or its exit code."""
    real = sys.stdout
    safe = _PipeSafeStdout(real)
    sys.stdout = safe
    try:
        yield
    finally:
        sys.stdout = real
        safe.flush()


# ---------------------------------------------------------------------------------------------
# reports as text (the commands and the demo print them alike)


AGGREGATE_FIELDS = (
    "weighted_metrics_score_pct",
    "metrics_pass_threshold",
    "metrics_passed",
    "cases_pass_rate_pct",
    "cases_pass_threshold",
    "cases_passed",
    "pass_rate",
    "passed_count",
    "failed_count",
    "error_count",
    "canceled_count",
    "total_executions",
    "unique_test_case_count",
    "avg_overall_score",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_avg_ms",
    "total_tokens",
    "total_cost_usd",
)


def print_aggregate(aggregate: dict[str, Any], title: str, unknown: Collection[str] = ()) -> None:
    """The seed's aggregate fields, one per line; those in `unknown` as "—" (never a 0).

    A run with no case passed or failed shows its pass rates as "—" with the reason (the JSON
    keeps the seed's figures: 0.0 for an all-errored run, issue 29).
    """
    print(title)
    for name in AGGREGATE_FIELDS:
        value = None if name in unknown else aggregate.get(name)
        if name in RATE_FIELDS and no_case_decided(aggregate):
            value = None
        why = f"  ({undecided(aggregate)})" if name == "pass_rate" and value is None else ""
        print(f"  {name:<28} {fmt(value)}{why}")
        if name == "total_executions" and aggregate.get("skipped_count"):
            # Not executions (skipped, xfailed tests): apart, shown only when there are some.
            skipped = aggregate["skipped_count"]
            print(f"  {'skipped_count':<28} {skipped}  ({skipped} skipped: not executions)")


RATE_FIELDS = ("pass_rate", "cases_pass_rate_pct")
"""The figures a text display shows as "—" for a run with no case decided."""


def no_case_decided(aggregate: dict[str, Any]) -> bool:
    """No case passed or failed (all errored, pending or canceled, or none): from the counts."""
    return not aggregate["passed_count"] and not aggregate["failed_count"]


def undecided(aggregate: dict[str, Any]) -> str:
    """Why a run shows no pass rate: no case passed or failed, and what its cases are instead."""
    c = aggregate["coverage"]
    parts = [f"{c[k]} {k}" for k in ("errored", "pending", "canceled") if c.get(k)]
    return "no case passed or failed" + (f": {', '.join(parts)}" if parts else "")


def print_rescore(result: dict[str, Any]) -> None:
    """Before and after, side by side."""
    before, after = result["before"]["aggregate"], result["after"]["aggregate"]
    print(
        f"rescore of run {result['run_id']}: {result['before']['spec_id']} → "
        f"{result['after']['spec_id']} (0 judge calls, 0 events)"
    )
    print_table(
        [(n, before.get(n), after.get(n)) for n in AGGREGATE_FIELDS[:12]],
        ["field", "before", "after"],
    )
    changed = result["changed_cases"]
    print(f"{len(changed)} case(s) changed")
    for c in changed[:20]:
        print(
            f"  {c['test_case_key']} rep {c['repetition']}: "
            f"{fmt(c['before']['overall_score'])} {c['before']['status']} → "
            f"{fmt(c['after']['overall_score'])} {c['after']['status']}"
        )


def print_comparison(result: RunComparison, headlines: dict[str, str] | None = None) -> None:
    """A readable comparison summary, each side's headline first when given."""
    agg = result.aggregate
    verdict = "REGRESSION" if result.verdict.regression_detected else "no regression"
    print(f"baseline {result.baseline_run_id} → candidate {result.candidate_run_id}: {verdict}")
    for side, line in (headlines or {}).items():
        print(f"  {side + ':':<11} {line}")
    for reason in result.verdict.reasons:
        print(f"  - {reason}")
    b, c = agg.baseline_metrics, agg.candidate_metrics
    print_table(
        [
            ("pass_rate", b.pass_rate, c.pass_rate, agg.pass_rate_delta),
            (
                "avg_score",
                b.weighted_metrics_score_pct,
                c.weighted_metrics_score_pct,
                agg.avg_score_delta,
            ),
            ("latency_avg_ms", b.latency_avg_ms, c.latency_avg_ms, agg.latency_avg_delta_ms),
            ("cost_usd", b.total_cost_usd, c.total_cost_usd, agg.cost_delta_usd),
        ],
        ["", "baseline", "candidate", "delta"],
    )
    print(
        f"cases: {agg.total_regressions} regression, {agg.total_improvements} improvement, "
        f"{agg.total_unchanged} unchanged, {agg.total_errors} error"
    )
    if agg.per_variant:
        print_table(
            [
                (
                    v.variant,
                    v.baseline_pass_rate,
                    v.candidate_pass_rate,
                    v.pass_rate_delta,
                    v.total_regressions,
                    v.total_improvements,
                    v.total_unchanged,
                    v.total_errors,
                )
                for v in agg.per_variant
            ],
            ["variant", "baseline", "candidate", "delta", "regr", "impr", "same", "error"],
            fold=("variant",),
        )
    _print_flips(result)
    _print_comparison_statistics(result)
    for w in result.warnings:
        print(f"warning: {w}")


def _print_flips(result: RunComparison) -> None:
    changed = [
        tc
        for tc in result.test_case_comparisons
        if tc.status in ("regression", "improvement", "error")
    ]
    if not changed:
        return
    # The flip behind each status: pass → fail, or the score move past case_score_delta.
    print_table(
        [
            (
                tc.status,
                f"{tc.test_case_key} [{tc.variant}]" if tc.variant else tc.test_case_key,
                f"{outcome(tc.baseline_passed)} → {outcome(tc.candidate_passed)}",
                f"{fmt(tc.baseline_score)} → {fmt(tc.candidate_score)}",
                tc.score_delta,
            )
            for tc in changed
        ],
        ["", "test_case_key", "baseline → candidate", "score", "Δ score"],
        fold=("test_case_key",),
    )


def _print_comparison_statistics(result: RunComparison) -> None:
    stats = result.statistics
    print(
        f"statistics: McNemar p={fmt(stats.mcnemar.p_value, 4)} (b={stats.mcnemar.b}, "
        f"c={stats.mcnemar.c}); mean Δ score {fmt(stats.score_delta_ci95.mean)} "
        f"[{fmt(stats.score_delta_ci95.low)}, {fmt(stats.score_delta_ci95.high)}] → "
        f"{stats.verdict}"
    )
    for n in result.named_scores:
        ci = n.paired
        print(
            f"named score {n.name}: {fmt(n.baseline_mean, 4)} → {fmt(n.candidate_mean, 4)} "
            f"(Δ {fmt(n.mean_delta, 4)}; paired Δ [{fmt(ci.low, 4)}, {fmt(ci.high, 4)}], "
            f"n={ci.n}) → {n.verdict}"
        )


def print_grade(result: Grade) -> None:
    """A scorecard."""
    o = result.overall
    cap = f" (capped from {fmt(o.score_before_cap, 4)})" if o.cap_applied else ""
    print(
        f"grade {o.grade}: overall {fmt(o.score, 4)}{cap}, min_score {fmt(o.min_score)} → "
        + ("passed" if o.passed else "FAILED")
    )
    print(f"strategic score {fmt(o.strategic_score, 4)}")
    for name, value in result.category_scores.items():
        print(f"  {name:<18} {fmt(value, 4)}")
    for m in result.mandatory_minimums:
        data = m.model_dump()
        print(
            f"  mandatory {fmt(data.get('test_id'))} ≥ {fmt(data.get('minimum'))}: "
            f"{fmt(data.get('status'))} ({fmt(data.get('score'), 4)})"
        )
    for w in result.warnings[:10]:
        print(f"warning: {w}")
