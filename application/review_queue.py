"""A run's review queue: the cases that need a person, and why (the web report and its forms).

`CaseRow` is what the run page's table and the queue need of one case's score, read from its
JSON; `review_queue` orders the cases needing a person. Pure functions here; the use case that
reads them from the read models is `run_review_queue` below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any
from uuid import UUID

from evaledger.domain import collector
from evaledger.projections.case_pages import NarrowCase, case_scores_by_id, narrow_case_scores
from evaledger.projections.queries import Summary
from evaledger.projections.votes import reviewed_cases, standing_flag
from evaledger.scoring.facts import CaseFacts, VerdictFact
from evaledger.scoring.models import GateRule
from evaledger.scoring.rollups import natural_key

if TYPE_CHECKING:
    from evaledger.application.ports import Services


@dataclass(frozen=True)
class CaseRow:
    """What the cases table needs of one `CaseScore` (same field names), read from its JSON.

    Filtering and sorting 10,000 cases needs every row; validating 10,000 full `CaseScore`
    models costs seconds, building these from the decoded JSON costs milliseconds.
    """

    case_id: str
    test_case_key: str
    repetition: int
    variant: str
    status: str
    overall_score: float | None
    passed: bool | None
    errored: bool
    judge_error: bool
    self_judged: bool
    gate: str
    gate_reason: str
    latency_p50_ms: float | None
    cost_usd: float | None
    hallucinations: int
    metric_scores: dict[str, float | None]
    named_scores: dict[str, float]
    """The case's named scores (an imported run's scorer values), by name."""

    @classmethod
    def of(cls, score: dict[str, Any]) -> CaseRow:
        """A row from a `CaseScore` as JSON."""
        return cls(
            case_id=score["case_id"],
            test_case_key=score["test_case_key"],
            repetition=score["repetition"],
            variant=score.get("variant", ""),
            status=score["status"],
            overall_score=score["overall_score"],
            passed=score["passed"],
            errored=score["errored"],
            judge_error=score.get("judge_error", False),
            self_judged=score.get("self_judged", False),
            gate=score["gate"],
            gate_reason=score["gate_reason"],
            latency_p50_ms=score.get("latency_p50_ms"),
            cost_usd=score.get("cost_usd"),
            hallucinations=score.get("hallucinations", 0),
            metric_scores={m["metric"]: m["score"] for m in score.get("metric_scores", [])},
            named_scores=score.get("named_scores", {}),
        )


CaseFields = CaseRow | NarrowCase
"""What a cases table filters, sorts and charts by: a whole `CaseRow`, or a `NarrowCase` (every
case of a run page read as columns, `page_cases`); both carry the `CaseScore` field names."""


class QueueReason(StrEnum):
    """Why a case needs a person (the review queue's reasons, most urgent first)."""

    FLAGGED = "flagged by a reviewer"
    MANDATORY_FAILED = "mandatory test failed"
    JUDGE_ERROR = "judge error"
    JUDGES_DISAGREE = "judges disagree"
    FLAKY = "flaky repetitions"
    SCORER_FAILED = "failed by its scorer"
    """A case its source's scorer failed (the score gate decided, no judge looked)."""


DISAGREEMENT_POINTS = 2
"""Two judges' 0-5 scores of one metric this far apart (or a binary metric split) disagree."""


@dataclass(frozen=True)
class CaseReview:
    """What reviewers did to a run's cases: standing flags (case id → reason), labelled cases."""

    flags: Mapping[str, str] = field(default_factory=dict)
    labelled: frozenset[str] = frozenset()


@dataclass(frozen=True)
class QueueItem:
    """One case in a run's review queue."""

    row: CaseRow
    reasons: list[QueueReason]
    reviewed: bool
    """A human already overrode or invalidated one of its verdicts, or labelled the case."""
    flag: str | None = None
    """The reason a reviewer flagged it, while the flag stands."""


def judges_disagree(verdicts: Sequence[VerdictFact]) -> bool:
    """Two counted verdicts of a case split a binary metric or differ by 2+ points on one."""
    counted = [
        v for v in verdicts if not v.invalidated and v.error is None and v.parse_status == "parsed"
    ]
    values: dict[str, list[float]] = {}
    for v in counted:
        for m in v.metric_scores:
            if m.passed is not None:
                values.setdefault(m.metric, []).append(1.0 if m.passed else 0.0)
            elif m.score is not None:
                values.setdefault(m.metric, []).append(float(m.score) / DISAGREEMENT_POINTS)
    return any(max(vs) - min(vs) >= 1 for vs in values.values() if len(vs) > 1)


def review_queue(
    rows: Sequence[CaseRow],
    facts: Sequence[CaseFacts],
    flaky: set[tuple[str, str]],
    mandatory: set[str],
    review: CaseReview | None = None,
) -> list[QueueItem]:
    """The cases needing a person: unreviewed first, then by reason and key (naturally)."""
    by_id = {str(f.case_id): f for f in facts}
    review = review or CaseReview()
    items = []
    for row in rows:
        f = by_id.get(row.case_id)
        if f is None:
            continue
        reasons = []
        flag = review.flags.get(row.case_id)
        if flag is not None:
            reasons.append(QueueReason.FLAGGED)
        if f.test_id in mandatory and row.passed is False:
            reasons.append(QueueReason.MANDATORY_FAILED)
        if row.judge_error:
            reasons.append(QueueReason.JUDGE_ERROR)
        if judges_disagree(f.verdicts):
            reasons.append(QueueReason.JUDGES_DISAGREE)
        if (row.test_case_key, row.variant) in flaky:
            reasons.append(QueueReason.FLAKY)
        # An imported run's verdicts are its scorer's: a failed one is the person's to check
        # (and stays listed, reviewed, once an admin overrode the scorer).
        if row.gate == GateRule.SCORE_GATE and (row.passed is False or f.score_overrides):
            reasons.append(QueueReason.SCORER_FAILED)
        if reasons:
            reviewed = (
                row.case_id in review.labelled
                or bool(f.score_overrides)
                or any(v.overridden or v.invalidated for v in f.verdicts)
            )
            items.append(QueueItem(row, reasons, reviewed, flag))
    order = list(QueueReason)
    items.sort(
        key=lambda i: (
            i.reviewed,
            order.index(i.reasons[0]),
            natural_key(i.row.test_case_key),
            i.row.variant,
            i.row.repetition,
        )
    )
    return items


def final_answer(turns: Sequence[dict[str, Any]]) -> str | None:
    """The last assistant message with text: what a side-by-side comparison shows."""
    for turn in reversed(turns):
        if turn.get("role") == "assistant" and turn.get("content"):
            return str(turn["content"])
    return None


# ---------------------------------------------------------------------------------------------
# the use cases: a run's case rows, a case's flag, the run's queue


def case_rows(services: Services, run_id: UUID) -> list[CaseRow]:
    """Every case of the run as the cases table reads it (fast: no full model per case)."""
    # 10,000 decoded scores: no cycles, nothing for the collector to find.
    with collector.paused():
        return [CaseRow.of(s) for s in services.reads.case_score_objects(run_id)]


def case_flag(services: Services, case_id: UUID) -> Any | None:
    """A case's standing flag (reason, actor, position), None when it is not flagged."""
    return standing_flag(services.reads.engine, case_id)


def run_flaky(summary: Summary) -> set[tuple[str, str]]:
    """Flaky per test case × variant: repetitions of one variant only (issue 30)."""
    return {(t.test_case_key, t.variant) for t in summary.test_cases if t.flaky}


@dataclass(frozen=True)
class RunCases:
    """A run's summary and every case as the matrix and the queue read them (whole rows)."""

    summary: Summary
    rows: list[CaseRow]

    @property
    def flaky(self) -> set[tuple[str, str]]:
        """Flaky per test case × variant (`run_flaky`)."""
        return run_flaky(self.summary)


def run_cases(services: Services, run_id: UUID) -> RunCases:
    """The run's summary under its own spec and its case rows."""
    summary = services.reads.summary(run_id)
    return RunCases(summary, case_rows(services, run_id))


@dataclass(frozen=True)
class PageCases:
    """A run's summary and every case narrow, for a page that lays out one page of them."""

    summary: Summary
    rows: list[NarrowCase]
    """Every case in opening order; read the shown ones whole with `whole_rows`."""

    @property
    def flaky(self) -> set[tuple[str, str]]:
        """Flaky per test case × variant (`run_flaky`)."""
        return run_flaky(self.summary)


def page_cases(services: Services, run_id: UUID, *, by_metric: bool = False) -> PageCases:
    """The run's summary and its cases as the columns a run page filters, sorts and charts by.

    No case's score is decoded: the metric scores are read (a small JSON column) when the page
    filters by a metric (`by_metric`), the named scores when it charts them (a run with source
    scorers or named scores). Read the shown rows whole with `whole_rows`.
    """
    summary = services.reads.summary(run_id)
    named = bool(summary.spec.scorers or summary.aggregate.named_score_means)
    rows = narrow_case_scores(services.reads.engine, run_id, metrics=by_metric, named=named)
    return PageCases(summary, rows)


def whole_rows(services: Services, rows: Sequence[CaseFields]) -> list[CaseRow]:
    """`rows` read whole (their stored scores decoded), in their order."""
    found = case_scores_by_id(services.reads.engine, [r.case_id for r in rows])
    return [CaseRow.of(found[r.case_id]) for r in rows]


def run_review_queue(services: Services, run_id: UUID) -> list[QueueItem]:
    """The run's review queue: the cases needing a person, unreviewed first."""
    cases = run_cases(services, run_id)
    # Mandatory tests: those the run's grading section holds a minimum for (by test id).
    grading = services.reads.run_spec(run_id).grading or {}
    minimums = grading.get("mandatory_minimums")
    mandatory = {str(t) for t in minimums} if isinstance(minimums, dict) else set()
    flags, labelled = reviewed_cases(services.reads.engine, run_id)
    review = CaseReview(flags, frozenset(labelled))
    return review_queue(cases.rows, services.reads.facts(run_id), cases.flaky, mandatory, review)
