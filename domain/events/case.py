"""The events of a case: what was executed, judged, checked and corrected."""

from __future__ import annotations

from typing import ClassVar, Literal
from uuid import UUID

from pydantic import (
    AwareDatetime,
    Field,
    StrictBool,
)

from evaledger.domain.events.base import DomainEvent
from evaledger.domain.events.project import TokenScope
from evaledger.domain.events.values import (
    CheckStatus,
    Claim,
    JudgeIdentity,
    MetricScore,
    NamedScore,
    OutcomeResult,
    ParseStatus,
    ScoreLabel,
    TestCaseSnapshot,
    Turn,
    Usage,
)
from evaledger.domain.types import Amount, JsonObject


class CaseEvent(DomainEvent):
    """An event of a Case aggregate."""


class CaseOpened(CaseEvent):
    """A case (test case x repetition x variant) was opened in a run."""

    topic_name: ClassVar[str] = "evaledger.case.opened"
    added_fields: ClassVar[frozenset[str]] = frozenset({"subject", "cached"})

    run_id: UUID
    test_case: TestCaseSnapshot
    repetition: int = Field(ge=0)
    variant: str = Field(default="", description="Configuration/personality label.")
    subject: str | None = Field(
        default=None,
        description="The data subject the case's personal text belongs to (e.g. an end-user "
        "id): its sealed payloads share one key per (run, subject), destroyed by "
        "`erase --subject`. None: the case is its own subject.",
    )
    cached: bool = Field(
        default=False, description="Issue 35: its transcript was served from a cache."
    )


class TranscriptRecorded(CaseEvent):
    """The conversation of the case was recorded."""

    topic_name: ClassVar[str] = "evaledger.case.transcript_recorded"

    turns: list[Turn]
    usage: Usage | None = None
    cost_usd: Amount | None = None
    started_at: AwareDatetime | None = None
    ended_at: AwareDatetime | None = None
    duration_ms: Amount | None = None


class ExecutionErrored(CaseEvent):
    """The agent or the harness failed: a system error, not a judge failure."""

    topic_name: ClassVar[str] = "evaledger.case.execution_errored"

    message: str
    kind: str | None = None


class ExecutionCanceled(CaseEvent):
    """The case was canceled before or while running."""

    topic_name: ClassVar[str] = "evaledger.case.execution_canceled"

    reason: str | None = None


SkipOutcome = Literal["skipped", "xfailed", "xpassed"]
"""How a test runner reported a test that was not an execution (pytest's own words)."""


class ExecutionSkipped(CaseEvent):
    """The test runner skipped the case, or it was an expected failure: not an execution.

    The case stays in the run, shown apart (status `skipped`), and out of `total_executions`
    and the pass rate's denominator, as pytest leaves skipped and xfailed tests out of its own
    pass count.
    """

    topic_name: ClassVar[str] = "evaledger.case.execution_skipped"

    outcome: SkipOutcome = Field(
        default="skipped", description="skipped, xfailed or xpassed (pytest's report)."
    )
    reason: str | None = Field(default=None, description="The runner's reason, if any.")


class JudgeVerdictRecorded(CaseEvent):
    """One judge call: identity, prompt, raw reply verbatim, parsed scores; or an error."""

    topic_name: ClassVar[str] = "evaledger.case.judge_verdict_recorded"
    added_fields: ClassVar[frozenset[str]] = frozenset({"panel_id", "self_judged"})

    verdict_id: UUID
    judge: JudgeIdentity
    template_id: str | None = None
    template_hash: str | None = None
    prompt: str | None = Field(default=None, description="Rendered judge prompt, verbatim.")
    raw_output: str | None = Field(default=None, description="The judge's reply, verbatim.")
    parse_status: ParseStatus = ParseStatus.PARSED
    metric_scores: list[MetricScore] = Field(default_factory=list)
    expected_outcomes: list[OutcomeResult] = Field(default_factory=list)
    latency_ms: Amount | None = None
    usage: Usage | None = None
    cost_usd: Amount | None = None
    error: str | None = Field(default=None, description="Why the verdict is an error verdict.")
    panel_id: UUID | None = Field(
        default=None, description="Shared by the votes of one panel (one judging pass, ≥2 judges)."
    )
    self_judged: bool = Field(
        default=False, description="The judge's vendor is the agent's (asked for explicitly)."
    )


class OutcomeEvaluated(CaseEvent):
    """Expected outcomes / assertions were evaluated outside a metric verdict."""

    topic_name: ClassVar[str] = "evaledger.case.outcome_evaluated"

    results: list[OutcomeResult]
    judge: JudgeIdentity | None = None


class ClaimsVerified(CaseEvent):
    """The answer was decomposed into atomic claims and each was checked."""

    topic_name: ClassVar[str] = "evaledger.case.claims_verified"
    added_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "mode",
            "template_id",
            "template_hash",
            "prompt",
            "raw_output",
            "error",
            "latency_ms",
            "usage",
            "cost_usd",
        }
    )

    claims: list[Claim]
    judge: JudgeIdentity | None = None
    mode: Literal["grounding", "attribution"] | None = Field(
        default=None, description="grounding: against the case's sources; attribution: per claim."
    )
    template_id: str | None = Field(default=None, description="Claim-check prompt template.")
    template_hash: str | None = Field(default=None, description="Content hash of the template.")
    prompt: str | None = Field(default=None, description="Rendered claim-check prompt.")
    raw_output: str | None = Field(default=None, description="The judge's reply, verbatim.")
    error: str | None = Field(
        default=None, description="Extraction error (no claims, unparseable) or empty answer."
    )
    latency_ms: float | None = Field(default=None, ge=0)
    usage: Usage | None = None
    cost_usd: float | None = Field(default=None, ge=0)


class StructuralCheckRecorded(CaseEvent):
    """A structural (non-LLM) check ran; inconclusive when its hook is missing."""

    topic_name: ClassVar[str] = "evaledger.case.structural_check_recorded"

    check: str = Field(min_length=1, description="Check / hook name.")
    status: CheckStatus
    evidence: str | None = None


class VerdictOverridden(CaseEvent):
    """A human corrected a verdict; the original stays in the history."""

    topic_name: ClassVar[str] = "evaledger.case.verdict_overridden"

    verdict_id: UUID
    metric_scores: list[MetricScore] | None = None
    expected_outcomes: list[OutcomeResult] | None = None
    passed: StrictBool | None = Field(default=None, description="Forced case pass/fail.")
    reason: str = Field(min_length=1)


class VerdictInvalidated(CaseEvent):
    """A human ruled a verdict out; it no longer counts, and stays in the history."""

    topic_name: ClassVar[str] = "evaledger.case.verdict_invalidated"

    verdict_id: UUID
    reason: str = Field(min_length=1)


class ScoreOverridden(CaseEvent):
    """A human corrected a peer scorer's verdict on the case; the scorer's own stays in the history.

    The case's named score `score` reads `value` from here on: the spec's score gates and the
    source's metrics (e.g. Inspect's `match/accuracy`) use it as they would the scorer's, so the
    case's pass/fail and the run's figures change, in a catch-up, a rebuild and a rescore alike.
    """

    topic_name: ClassVar[str] = "evaledger.case.score_overridden"

    score: str = Field(
        min_length=1, description="The named score corrected, as the case records it (`match`)."
    )
    value: float = Field(
        allow_inf_nan=False,
        description="Its corrected numeric reading (binary and graded scores: 1 pass, 0 fail).",
    )
    reason: str = Field(min_length=1, description="Why the scorer's verdict was wrong.")


class NamedScoresRecorded(CaseEvent):
    """A peer scorer's result (Inspect scorer, promptfoo grading, a reward).

    Named scores on their own scales, with the grader's answer, explanation, prompt and reply
    where it has them.
    """

    topic_name: ClassVar[str] = "evaledger.case.named_scores_recorded"

    scorer: str = Field(min_length=1, description="Who scored: the peer's scorer or grader name.")
    scores: list[NamedScore] = Field(min_length=1, description="The named scores it gave.")
    answer: str | None = Field(default=None, description="The answer the scorer extracted.")
    explanation: str | None = Field(default=None, description="The scorer's explanation.")
    prompt: str | None = Field(default=None, description="The grader's prompt, verbatim.")
    raw_output: str | None = Field(default=None, description="The grader's reply, verbatim.")
    grader: JudgeIdentity | None = Field(default=None, description="Model grader, if any.")
    metadata: JsonObject = Field(default_factory=dict, description="Everything else it kept.")
    usage: Usage | None = None
    cost_usd: float | None = Field(default=None, ge=0)


class HumanLabelRecorded(CaseEvent):
    """A reviewer's own judgement of the case: pass/fail, optional metric scores, a comment.

    A label is not a verdict and scores nothing: it is what judge-vs-human agreement compares
    the judges with. A later label by anyone replaces an earlier one there; both stay here.
    `named_scores` labels the case's own scorers (an Inspect `match`, a promptfoo assertion):
    shown beside the scorer's reading; an admin's `ScoreOverridden` is what changes a result.
    """

    topic_name: ClassVar[str] = "evaledger.case.human_label_recorded"
    added_fields: ClassVar[frozenset[str]] = frozenset({"named_scores"})

    passed: StrictBool = Field(description="The reviewer's pass/fail for the case.")
    metric_scores: list[MetricScore] = Field(
        default_factory=list, description="The reviewer's score of some metrics (0-5 or passed)."
    )
    comment: str | None = Field(default=None, description="What the reviewer noted.")
    named_scores: list[ScoreLabel] = Field(
        default_factory=list, description="The reviewer's reading of some of the case's scorers."
    )


class CaseFlagged(CaseEvent):
    """A reviewer flagged the case for a person to look at (it joins the run's review queue)."""

    topic_name: ClassVar[str] = "evaledger.case.flagged"

    reason: str = Field(min_length=1)


class CaseUnflagged(CaseEvent):
    """A flag was cleared (the case leaves the review queue unless another reason keeps it)."""

    topic_name: ClassVar[str] = "evaledger.case.unflagged"

    reason: str | None = None


class PayloadErased(CaseEvent):
    """An admin erased the case's sealed payloads: the subject's key and ciphertexts destroyed.

    The events keep their references (`domain/payloads.py`), so the chain still verifies; their
    personal strings read "erased on DATE by WHO (reason)" from then on.
    """

    topic_name: ClassVar[str] = "evaledger.case.payload_erased"

    subject: str = Field(
        min_length=1,
        description="Whose key was destroyed: the case id, or `subject:RUN:S` for a case naming "
        "its data subject S (`domain/payloads.subject_key`).",
    )
    refs: list[str] = Field(min_length=1, description="The payload references erased.")
    reason: str = Field(min_length=1, description="Why (e.g. the deletion request).")


HUMAN_ACTS: dict[type[CaseEvent], tuple[TokenScope, str]] = {
    VerdictOverridden: (TokenScope.ADMIN, "recording overrides or invalidations"),
    VerdictInvalidated: (TokenScope.ADMIN, "recording overrides or invalidations"),
    ScoreOverridden: (TokenScope.ADMIN, "recording overrides or invalidations"),
    HumanLabelRecorded: (TokenScope.WRITE, "labelling or flagging a case"),
    CaseFlagged: (TokenScope.WRITE, "labelling or flagging a case"),
    CaseUnflagged: (TokenScope.WRITE, "labelling or flagging a case"),
    PayloadErased: (TokenScope.ADMIN, "erasing a case's payloads"),
}
"""A person's acts on a case, allowed on a closed run: the scope each needs, and the act named
in the refusal. Corrections are an admin's; labels and flags a reviewer's (write)."""
