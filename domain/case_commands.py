"""The commands on a recorded case: one named command per fact (transcript, verdict, override...).

`CaseCommands` is built on the store's write unit (`writes.LedgerStore`) and `Ledger`
(`ledger.py`) on it: a case is opened by the ledger's run and bundle commands; every fact
recorded about it afterwards goes through one command here, and all of them through `_fact`
(one transaction, invariants on the `Case` aggregate, the run's own scope and state).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal, Required, TypedDict, Unpack
from uuid import UUID

from evaledger.domain.events import (
    HUMAN_ACTS,
    CaseEvent,
    CaseFlagged,
    CaseUnflagged,
    CheckStatus,
    Claim,
    ClaimsVerified,
    ExecutionCanceled,
    ExecutionErrored,
    HumanLabelRecorded,
    JudgeIdentity,
    JudgeVerdictRecorded,
    MetricScore,
    OutcomeEvaluated,
    OutcomeResult,
    ParseStatus,
    ScoreLabel,
    ScoreOverridden,
    StructuralCheckRecorded,
    TranscriptRecorded,
    Turn,
    Usage,
    VerdictInvalidated,
    VerdictOverridden,
    request_digest,
)
from evaledger.domain.writes import Context, LedgerStore, Written, jsonable


class VerdictFields(TypedDict, total=False):
    """A judge verdict as `Ledger.record_verdict` takes it: the fields of its event.

    Only the fields given are in the command's body (and its request digest).
    """

    verdict_id: Required[UUID]
    judge: JudgeIdentity
    template_id: str | None
    template_hash: str | None
    prompt: str | None
    raw_output: str | None
    parse_status: ParseStatus
    metric_scores: Sequence[MetricScore]
    expected_outcomes: Sequence[OutcomeResult]
    latency_ms: float | None
    usage: Usage | None
    cost_usd: float | None
    error: str | None
    panel_id: UUID | None
    self_judged: bool


class ClaimsFields(TypedDict, total=False):
    """A claim check as `Ledger.record_claims` takes it: the fields of its event."""

    claims: Required[Sequence[Claim]]
    judge: JudgeIdentity | None
    mode: Literal["grounding", "attribution"] | None
    template_id: str | None
    template_hash: str | None
    prompt: str | None
    raw_output: str | None
    error: str | None
    latency_ms: float | None
    usage: Usage | None
    cost_usd: float | None


class CaseCommands(LedgerStore):
    """One named command per fact of a recorded case."""

    def record_transcript(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        turns: Sequence[Turn],
        usage: Usage | None = None,
        cost_usd: float | None = None,
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
        duration_ms: float | None = None,
        auto_key: bool = False,
    ) -> Written:
        """Record the case's conversation (once)."""
        body: dict[str, Any] = {"turns": list(turns), "usage": usage, "cost_usd": cost_usd}
        body |= {"started_at": started_at, "ended_at": ended_at, "duration_ms": duration_ms}
        return self._fact(case_id, TranscriptRecorded, ctx, body, auto_key=auto_key)

    def record_verdict(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        judgement: bool = False,
        auto_key: bool = False,
        **verdict: Unpack[VerdictFields],
    ) -> Written:
        """Record one judge verdict (prompt and raw reply verbatim).

        `judgement`: a verdict the ledger's own judge reached about a recorded transcript. Like a
        correction it is allowed on a closed run: it is a fact about the transcript, not a new
        execution, and the run's seal covers only the executions (DESIGN §10, re-judging).
        """
        body = dict(verdict)
        return self._fact(case_id, JudgeVerdictRecorded, ctx, body, judgement, auto_key)

    def record_claims(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        judgement: bool = False,
        auto_key: bool = False,
        **check: Unpack[ClaimsFields],
    ) -> Written:
        """Record a claim decomposition with each claim's support (`judgement`: as a verdict's)."""
        return self._fact(case_id, ClaimsVerified, ctx, dict(check), judgement, auto_key)

    def record_outcomes(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        results: Sequence[OutcomeResult],
        judge: JudgeIdentity | None = None,
        auto_key: bool = False,
    ) -> Written:
        """Record expected-outcome results decided outside a metric verdict."""
        body = {"results": list(results), "judge": judge}
        return self._fact(case_id, OutcomeEvaluated, ctx, body, auto_key=auto_key)

    def record_check(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        check: str,
        status: CheckStatus,
        evidence: str | None = None,
        auto_key: bool = False,
    ) -> Written:
        """Record a structural check (inconclusive when its hook is missing)."""
        body = {"check": check, "status": status, "evidence": evidence}
        return self._fact(case_id, StructuralCheckRecorded, ctx, body, auto_key=auto_key)

    def record_execution_error(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        message: str,
        kind: str | None = None,
        auto_key: bool = False,
    ) -> Written:
        """Record an execution error (a system error of the agent or harness, not a judge's)."""
        body = {"message": message, "kind": kind}
        return self._fact(case_id, ExecutionErrored, ctx, body, auto_key=auto_key)

    def cancel_execution(
        self, case_id: UUID, ctx: Context, *, reason: str | None = None, auto_key: bool = False
    ) -> Written:
        """Cancel the case's execution."""
        return self._fact(case_id, ExecutionCanceled, ctx, {"reason": reason}, auto_key=auto_key)

    def override_verdict(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        verdict_id: UUID,
        reason: str,
        metric_scores: Sequence[MetricScore] | None = None,
        expected_outcomes: Sequence[OutcomeResult] | None = None,
        passed: bool | None = None,
        auto_key: bool = False,
    ) -> Written:
        """An admin's correction of one verdict; the original stays in the history."""
        body = {
            "verdict_id": verdict_id,
            "metric_scores": None if metric_scores is None else list(metric_scores),
            "expected_outcomes": None if expected_outcomes is None else list(expected_outcomes),
            "passed": passed,
            "reason": reason,
        }
        return self._fact(case_id, VerdictOverridden, ctx, body, auto_key=auto_key)

    def invalidate_verdict(
        self, case_id: UUID, ctx: Context, *, verdict_id: UUID, reason: str, auto_key: bool = False
    ) -> Written:
        """An admin rules a verdict out: it stops counting and stays in the history."""
        body = {"verdict_id": verdict_id, "reason": reason}
        return self._fact(case_id, VerdictInvalidated, ctx, body, auto_key=auto_key)

    def override_score(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        score: str,
        value: float,
        reason: str,
        auto_key: bool = False,
    ) -> Written:
        """An admin corrects a source scorer's reading of one of the case's named scores."""
        body = {"score": score, "value": value, "reason": reason}
        return self._fact(case_id, ScoreOverridden, ctx, body, auto_key=auto_key)

    def label_case(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        passed: bool,
        metric_scores: Sequence[MetricScore] = (),
        comment: str | None = None,
        named_scores: Sequence[ScoreLabel] = (),
        auto_key: bool = False,
    ) -> Written:
        """A reviewer's own label of the case (write scope); it feeds judge-vs-human agreement."""
        body: dict[str, Any] = {"passed": passed, "metric_scores": list(metric_scores)}
        if comment is not None:
            body["comment"] = comment
        if named_scores:
            body["named_scores"] = list(named_scores)
        return self._fact(case_id, HumanLabelRecorded, ctx, body, auto_key=auto_key)

    def flag_case(
        self, case_id: UUID, ctx: Context, *, reason: str, auto_key: bool = False
    ) -> Written:
        """Flag the case for a person (it joins the run's review queue); once until unflagged."""
        body = {"reason": reason}
        return self._fact(case_id, CaseFlagged, self._toggled(case_id, ctx, auto_key), body)

    def unflag_case(
        self, case_id: UUID, ctx: Context, *, reason: str | None = None, auto_key: bool = False
    ) -> Written:
        """Clear the case's flag (a conflict when it is not flagged)."""
        body = {"reason": reason}
        return self._fact(case_id, CaseUnflagged, self._toggled(case_id, ctx, auto_key), body)

    def _toggled(self, case_id: UUID, ctx: Context, auto_key: bool) -> Context:
        """The derived idempotency key of a flag or unflag: it names the case's version.

        A flag toggles, so without a client key the same body sent again after an unflag is a new
        act; a resent request meets the flag it made (409), never a silent replay.
        """
        if not auto_key or ctx.idempotency_key is not None:
            return ctx
        version = self.get_case(case_id).version
        return replace(ctx, idempotency_key=f"auto:toggle:{case_id}:v{version}")

    def _fact(
        self,
        case_id: UUID,
        cls: type[CaseEvent],
        ctx: Context,
        body: Mapping[str, Any],
        judgement: bool = False,
        auto_key: bool = False,
    ) -> Written:
        """Record one fact of a case; the one path every named case command takes.

        `auto_key`: without a client key, the same body re-sent is the same fact, a no-op (its key
        is `auto:{topic}:{digest of the body}`).
        """
        if auto_key and ctx.idempotency_key is None:
            key = f"auto:{cls.topic_name}:{request_digest(jsonable(body))}"
            ctx = replace(ctx, idempotency_key=key)
        act = HUMAN_ACTS.get(cls)  # a person's act: corrections, labels, flags
        overrides = judgement or act is not None
        if act is not None:
            ctx.scope.require(*act)

        def command() -> Written:
            case = self.get_case(case_id)
            run = self._run_in_scope(case.run_id, ctx, f"case {case_id}")
            if not overrides:
                run.ensure_open()
            meta = self._meta(ctx, {"type": cls.topic(), **jsonable(body)})
            if not case.seen(meta):
                case.record(cls, meta, self.catalogue(run.created.project), **body)
            position, n = self._save(case, project=run.created.project)
            return Written((case_id,), position, n)

        return self._retrying(command)
