"""One test case of two runs, what changed (issue 36): its answers, turns and judge reasoning.

`case_output_diff` reads each side's first repetition of the test case (as the compare page's
answers do) from the log: its last transcript and the judge verdicts that counted in its score
(`CaseScore.verdict_ids`; else its last verdict), and diffs them with
`scoring.comparison.output_diff`. `answer_changes` gives the `change` of many rows' final
answers at once, for the compare page's sort by change. Nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import Field

from evaledger.application.compare import compared_answers
from evaledger.application.review_queue import final_answer
from evaledger.domain.errors import NotFoundError
from evaledger.domain.events import JudgeVerdictRecorded, TranscriptRecorded
from evaledger.domain.model import StrictModel
from evaledger.domain.types import variant_label
from evaledger.scoring.comparison.output_diff import (
    TextDiff,
    TurnDiff,
    change,
    turn_diffs,
    word_diff,
)

if TYPE_CHECKING:
    from evaledger.application.ports import Services

SIDES = ("baseline", "candidate")


class ReasoningRow(StrictModel):
    """One thing the judges reasoned about (a metric, an outcome, or their reply), per side."""

    item: str = Field(description="`metric:<name>`, `outcome:<statement>` or `reply`.")
    baseline_value: str | None = Field(default=None, description="Score, pass/fail, or None.")
    candidate_value: str | None = None
    baseline: str | None = Field(default=None, description="The baseline judge's reasoning.")
    candidate: str | None = None


class CaseOutputDiff(StrictModel):
    """What changed in one test case between a baseline and a candidate run."""

    test_case_key: str
    variant: str = ""
    baseline_case_id: str | None = None
    candidate_case_id: str | None = None
    answer: TextDiff = Field(description="The final answers' word diff and `change`.")
    turns: list[TurnDiff] = Field(default_factory=list, description="Each turn, by position.")
    reasoning: list[ReasoningRow] = Field(
        default_factory=list, description="The judges' reasoning side by side."
    )


def _first_case(services: Services, run_id: UUID, key: str, variant: str) -> UUID | None:
    found = services.reads.first_cases(run_id, [key])
    for (k, v), case_id in found.items():
        if variant_label(v) == variant or (not variant and k == key):
            return case_id
    return None


def _side(services: Services, case_id: UUID | None) -> tuple[list[dict[str, Any]], list[Any]]:
    """A case's last transcript's turns and the judge verdicts that counted in its score."""
    if case_id is None:
        return [], []
    events = services.ledger.events_of(case_id)
    transcript = next((e for e in reversed(events) if isinstance(e, TranscriptRecorded)), None)
    turns = (
        []
        if transcript is None
        else [t.model_dump(include={"role", "content"}, mode="json") for t in transcript.turns]
    )
    verdicts = [e for e in events if isinstance(e, JudgeVerdictRecorded)]
    counted = set(services.reads.case_score(case_id)[1].verdict_ids)
    used = [v for v in verdicts if v.verdict_id in counted] or verdicts[-1:]
    return turns, used


def _value(score: int | None, passed: bool | None) -> str | None:
    if score is not None:
        return str(score)
    return None if passed is None else ("pass" if passed else "fail")


def _reasoning(verdicts: Sequence[Any]) -> dict[str, tuple[str | None, str | None]]:
    """Each item → (value, reasoning) over the verdicts (a later one joins the earlier)."""
    found: dict[str, tuple[str | None, str | None]] = {}

    def add(item: str, value: str | None, text: str | None) -> None:
        old_value, old_text = found.get(item, (None, None))
        joined = "\n".join(t for t in (old_text, text) if t) or None
        found[item] = (value if value is not None else old_value, joined)

    for v in verdicts:
        for m in v.metric_scores:
            add(f"metric:{m.metric}", _value(m.score, m.passed), m.justification)
        for o in v.expected_outcomes:
            add(f"outcome:{o.statement}", _value(None, o.passed), o.justification)
        if not v.metric_scores and not v.expected_outcomes:
            add("reply", None, v.error or v.raw_output)
    return found


def case_output_diff(
    services: Services, baseline_id: UUID, candidate_id: UUID, key: str, variant: str = ""
) -> CaseOutputDiff:
    """The test case's answers, turns and judge reasoning in both runs (404: in neither run)."""
    runs = {"baseline": baseline_id, "candidate": candidate_id}
    ids = {side: _first_case(services, run_id, key, variant) for side, run_id in runs.items()}
    if all(i is None for i in ids.values()):
        raise NotFoundError(f"case: no test case {key!r} in either run", field="case")
    (b_turns, b_verdicts), (c_turns, c_verdicts) = (_side(services, ids[s]) for s in SIDES)
    b_reason, c_reason = _reasoning(b_verdicts), _reasoning(c_verdicts)
    rows = [
        ReasoningRow(
            item=item,
            baseline_value=b_reason.get(item, (None, None))[0],
            candidate_value=c_reason.get(item, (None, None))[0],
            baseline=b_reason.get(item, (None, None))[1],
            candidate=c_reason.get(item, (None, None))[1],
        )
        for item in dict.fromkeys([*b_reason, *c_reason])
    ]
    return CaseOutputDiff(
        test_case_key=key,
        variant=variant,
        baseline_case_id=None if ids["baseline"] is None else str(ids["baseline"]),
        candidate_case_id=None if ids["candidate"] is None else str(ids["candidate"]),
        answer=word_diff(final_answer(b_turns), final_answer(c_turns)),
        turns=turn_diffs(b_turns, c_turns),
        reasoning=rows,
    )


def _answer_texts(
    services: Services, runs: Mapping[str, UUID], rows: Sequence[Any]
) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """(test case key, variant) → (baseline's, candidate's) final answer, for the rows given."""
    answers = compared_answers(services, runs, rows)

    def text(side: str, row: Any) -> str | None:
        found = answers.get((side, row.test_case_key, row.variant))
        return None if found is None else found["answer"]

    return {(t.test_case_key, t.variant): (text("baseline", t), text("candidate", t)) for t in rows}


def answer_changes(
    services: Services, runs: Mapping[str, UUID], rows: Sequence[Any]
) -> dict[tuple[str, str], float]:
    """(test case key, variant) → the `change` of its final answers (to sort every row)."""
    return {where: change(*texts) for where, texts in _answer_texts(services, runs, rows).items()}


def answer_diffs(
    services: Services, runs: Mapping[str, UUID], rows: Sequence[Any]
) -> dict[tuple[str, str], TextDiff]:
    """(test case key, variant) → the word diff of its final answers, for one page's rows."""
    return {
        where: word_diff(*texts) for where, texts in _answer_texts(services, runs, rows).items()
    }
