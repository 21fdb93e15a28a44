"""Small builders shared by tests."""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

from evaledger.api.bootstrap import Services
from evaledger.domain.events import (
    CaseEvent,
    CaseFlagged,
    CaseUnflagged,
    ClaimsVerified,
    ExecutionCanceled,
    ExecutionErrored,
    ExecutionSkipped,
    HumanLabelRecorded,
    JudgeVerdictRecorded,
    NamedScoresRecorded,
    OutcomeEvaluated,
    ScoreOverridden,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.ledger import Context, Ledger, Written
from evaledger.domain.metrics import DEFAULT_METRIC_NAMES
from tests.conftest import example_bundle_data

ROOT = Path(__file__).resolve().parents[1]


def checkout_copy(destination: Path) -> Path:
    """A copy of the checkout's files (tracked and untracked, not ignored) at `destination`.

    A package build writes `build/` and `*.egg-info` beside its sources: built from a copy, it
    neither litters the checkout nor races another build of it (CI runs two suites at once).
    """
    names = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in names:
        src = ROOT / name
        if src.is_symlink() or src.is_file():
            dst = destination / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_symlink():
                dst.symlink_to(src.readlink())
            else:
                shutil.copy2(src, dst)
    return destination


def event_count(services: Services) -> int:
    """How many events the store holds."""
    return len(services.ledger.notifications(1, 1_000_000))


def bundle(**run_overrides: Any) -> dict[str, Any]:
    """A deep copy of the example bundle, with run fields overridden."""
    data: dict[str, Any] = copy.deepcopy(example_bundle_data())
    data["run"].update(run_overrides)
    return data


def scores(*values: int) -> list[dict[str, Any]]:
    """Metric scores for the 8 default metrics, in catalogue order."""
    names = DEFAULT_METRIC_NAMES
    vals = list(values) * 8 if len(values) == 1 else list(values)
    return [
        {"metric": n, "score": v, "justification": f"{n} is {v}", "turns": []}
        for n, v in zip(names, vals, strict=True)
    ]


def case(
    key: str,
    score: int = 4,
    *,
    outcomes: list[dict[str, Any]] | None = None,
    repetition: int = 0,
    status: str = "completed",
) -> dict[str, Any]:
    """A bundle case with a 4-turn transcript and one verdict."""
    c: dict[str, Any] = {
        "test_case": {
            "key": key,
            "name": key,
            "expected_outcomes": [o["statement"] for o in outcomes or []],
        },
        "repetition": repetition,
        "status": status,
        "transcript": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "latency_ms": 500},
            {"role": "user", "content": "bye"},
            {"role": "assistant", "content": "bye", "latency_ms": 700},
        ],
        "verdicts": [
            {
                "judge": {"provider": "anthropic", "model": "claude"},
                "metric_scores": scores(score),
                "expected_outcomes": outcomes or [],
                "prompt": f"judge {key}",
                "raw_output": "{}",
            }
        ],
    }
    if status == "errored":
        c.update(transcript=[], verdicts=[], error={"message": "timeout", "kind": "timeout"})
    return c


def record_fact(
    ledger: Ledger,
    case_id: UUID,
    cls: type[CaseEvent],
    ctx: Context,
    body: Mapping[str, Any],
    judgement: bool = False,
) -> Written:
    """Record one fact of a case by its event class, through the named command it means.

    For the tests that walk every fact alike (the generic form lives here, not in the ledger).
    A skip and a scorer's named scores have no command of their own (a case gets them when it
    is opened from a bundle); they take the ledger's one fact path, `_fact`, directly.
    """
    fields = dict(body)
    if cls is TranscriptRecorded:
        return ledger.record_transcript(case_id, ctx, **fields)
    if cls is JudgeVerdictRecorded:
        return ledger.record_verdict(case_id, ctx, judgement=judgement, **fields)
    if cls is ClaimsVerified:
        return ledger.record_claims(case_id, ctx, judgement=judgement, **fields)
    commands: dict[type[CaseEvent], Any] = {
        OutcomeEvaluated: ledger.record_outcomes,
        StructuralCheckRecorded: ledger.record_check,
        ExecutionErrored: ledger.record_execution_error,
        ExecutionCanceled: ledger.cancel_execution,
        VerdictOverridden: ledger.override_verdict,
        VerdictInvalidated: ledger.invalidate_verdict,
        ScoreOverridden: ledger.override_score,
        HumanLabelRecorded: ledger.label_case,
        CaseFlagged: ledger.flag_case,
        CaseUnflagged: ledger.unflag_case,
    }
    if cls in commands:
        assert not judgement, f"{cls.__name__} is not a judgement"
        written: Written = commands[cls](case_id, ctx, **fields)
        return written
    assert cls in (NamedScoresRecorded, ExecutionSkipped), cls
    return ledger._fact(case_id, cls, ctx, fields, judgement)
