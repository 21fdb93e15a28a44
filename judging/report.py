"""What a judging pass did: counts by outcome, cost, the budget, and the exit code they mean.

Exit codes (issue 22): 0 only when every planned case got a parsed verdict; 1 when any verdict is
an error or the budget stopped the pass; 3 when calls were made and none reached the provider;
130 when Ctrl-C stopped it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from uuid import UUID

EXIT_OK = 0
EXIT_ERRORS = 1
EXIT_UNREACHED = 3
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as a shell reports it): what was recorded stays recorded."""


class FailureKind(StrEnum):
    """Why a judge call ended in an error verdict."""

    UNPARSEABLE = "unparseable"
    MISSING_METRICS = "missing_metrics"
    PROVIDER_ERROR = "provider_error"
    TIMEOUT = "timeout"
    EMPTY_ANSWER = "empty_answer"
    """A claim check of an answer that said nothing (no call is made)."""


@dataclass
class Failure:
    """One failed judge call (its error verdict is recorded)."""

    case_id: UUID
    test_case_key: str
    judge: str
    error: str
    kind: FailureKind = FailureKind.PROVIDER_ERROR


@dataclass
class Estimate:
    """Estimated tokens and cost of planned calls: an estimate, not a measurement."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    def as_json(self) -> dict[str, Any]:
        """The estimate as plain JSON values."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "unpriced_calls": self.unpriced_calls,
            "is_estimate": True,
        }


@dataclass(frozen=True)
class PlannedPrompt:
    """One planned case of a dry run: the prompt its judges would get and its estimated cost."""

    case_id: UUID
    test_case_key: str
    repetition: int
    prompt: str
    template_id: str
    estimate: Estimate
    """Every judge's call on this case, estimated (not measured)."""

    def as_json(self) -> dict[str, Any]:
        """The prompt as `judge --dry-run --json` prints it."""
        return {
            "case_id": str(self.case_id),
            "test_case_key": self.test_case_key,
            "repetition": self.repetition,
            "prompt": self.prompt,
            "template_id": self.template_id,
            "estimate": self.estimate.as_json(),
        }


@dataclass
class JudgeReport:
    """What a judging pass did."""

    run_id: UUID
    judges: list[str]
    metrics: list[str]
    cases: int
    skipped: int
    calls: int
    dry_run: bool
    self_judged: bool
    claim_mode: str | None = None
    verdicts: int = 0
    parsed: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    position: int = 0
    claims: int = 0
    failures: list[Failure] = field(default_factory=list)
    attempted_calls: int = 0
    """Calls sent to a provider (a claim check of an empty answer sends none)."""
    reached_calls: int = 0
    """Calls the provider answered (any HTTP status)."""
    rate_limit_waits: int = 0
    """Times a 429 was waited out before asking again."""
    rate_limit_wait_s: float = 0.0
    """Seconds those waits took (the Retry-After asked for, else the backoff)."""
    max_cost_usd: float | None = None
    budget_stopped: bool = False
    """The budget was reached: the calls left were not made."""
    calls_not_made: int = 0
    estimate: Estimate | None = None
    """The planned calls' estimated tokens and cost (dry run)."""
    notes: list[str] = field(default_factory=list)
    """What the new verdicts will not change, or will count as errors (judging/selection.py)."""
    interrupted: bool = False
    """Ctrl-C stopped the pass: calls in flight were dropped, recorded verdicts stay."""

    @property
    def not_judged(self) -> int:
        """Planned calls that made no verdict (the budget or Ctrl-C stopped the pass)."""
        return 0 if self.dry_run else self.calls - self.verdicts

    def error_counts(self) -> dict[str, int]:
        """Error verdicts by kind (every kind listed, zeros included)."""
        counts = {k.value: 0 for k in FailureKind}
        for f in self.failures:
            counts[f.kind.value] += 1
        return counts

    def exit_code(self) -> int:
        """0: every planned case parsed; 1: an error verdict or the budget; 3: nothing reached."""
        if self.dry_run:
            return EXIT_OK
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.attempted_calls and not self.reached_calls:
            return EXIT_UNREACHED
        if self.errors or self.budget_stopped:
            return EXIT_ERRORS
        return EXIT_OK

    def as_json(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return {
            "run_id": str(self.run_id),
            "judges": self.judges,
            "metrics": self.metrics,
            "cases": self.cases,
            "skipped": self.skipped,
            "calls": self.calls,
            "dry_run": self.dry_run,
            "self_judged": self.self_judged,
            "verdicts": self.verdicts,
            "parsed": self.parsed,
            "errors": self.errors,
            "error_counts": self.error_counts(),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "unpriced_calls": self.unpriced_calls,
            "claims": self.claims,
            "claim_mode": self.claim_mode,
            "position": self.position,
            "attempted_calls": self.attempted_calls,
            "reached_calls": self.reached_calls,
            "rate_limit_waits": self.rate_limit_waits,
            "rate_limit_wait_s": round(self.rate_limit_wait_s, 3),
            "max_cost_usd": self.max_cost_usd,
            "budget_stopped": self.budget_stopped,
            "calls_not_made": self.calls_not_made,
            "not_judged": self.not_judged,
            "interrupted": self.interrupted,
            "notes": self.notes,
            "estimate": None if self.estimate is None else self.estimate.as_json(),
            "exit_code": self.exit_code(),
            "failures": [
                {
                    "case_id": str(f.case_id),
                    "test_case_key": f.test_case_key,
                    "judge": f.judge,
                    "error": f.error,
                    "kind": f.kind.value,
                }
                for f in self.failures
            ],
        }
