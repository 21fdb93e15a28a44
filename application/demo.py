"""The demo's own use cases: load its runs and judge one with recorded replies, offline.

`evaledger demo` (`api/demo/`) ships the run bundles and the replay judge's replies; these use
cases write them into the store idempotently (a second demo writes nothing) and say what was
written. What the demo then shows is read through the read use cases (`reports`, `compare`,
`grades`) and a rescore.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import JudgeVerdictRecorded, TranscriptRecorded
from evaledger.domain.ledger import Context
from evaledger.domain.model import StrictModel
from evaledger.judging.runner import JudgeOptions, plan, run_plan

if TYPE_CHECKING:
    from evaledger.application.ports import Services

DEMO = Context(actor="demo")


class DemoRun(StrictModel):
    """One demo run as loaded: its id and key, its cases, the events written (0: already)."""

    run_id: str
    run_key: str
    cases: int
    events: int


def load_demo_runs(services: Services, bundles: Sequence[RunBundle]) -> list[DemoRun]:
    """Import the demo's bundles (importing one again writes nothing)."""
    loaded = []
    for bundle in bundles:
        r = services.ledger.import_bundle(bundle, DEMO)
        loaded.append(
            DemoRun(run_id=str(r.run_id), run_key=r.run_key, cases=r.cases, events=r.events)
        )
    return loaded


class JudgedExample(StrictModel):
    """One case traced end to end: transcript → prompt → reply → scores."""

    case_id: str
    transcript_turns: int
    template_id: str | None
    template_hash: str | None
    prompt: str | None
    raw_output: str | None
    parse_status: str
    metric_scores: dict[str, int | None]


class DemoJudged(StrictModel):
    """How many verdicts the replay judge recorded (0: already recorded), and one example."""

    recorded: int
    example: JudgedExample


def judge_with_replay(services: Services, run_id: UUID, replies: Path) -> DemoJudged:
    """Judge the run once with the offline `replay` judge (the recorded replies in `replies`).

    A second call finds the replay verdicts and writes nothing.
    """
    run = services.ledger.get_run(run_id)
    first_case = run.case_ids[0]
    already = any(
        isinstance(e, JudgeVerdictRecorded) and e.judge.provider == "replay"
        for e in services.ledger.events_of(first_case)
    )
    recorded = 0
    if not already:
        options = JudgeOptions(judges=(f"replay:{replies}",), concurrency=8)
        report = run_plan(services.ledger, plan(services.ledger, run_id, options, {}), DEMO)
        recorded = report.verdicts
    events = services.ledger.events_of(first_case)
    verdict = next(
        e
        for e in reversed(events)
        if isinstance(e, JudgeVerdictRecorded) and e.judge.provider == "replay"
    )
    turns = next(len(e.turns) for e in events if isinstance(e, TranscriptRecorded))
    return DemoJudged(
        recorded=recorded,
        example=JudgedExample(
            case_id=str(first_case),
            transcript_turns=turns,
            template_id=verdict.template_id,
            template_hash=verdict.template_hash,
            prompt=verdict.prompt,
            raw_output=verdict.raw_output,
            parse_status=verdict.parse_status.value,
            metric_scores={m.metric: m.score for m in verdict.metric_scores},
        ),
    )
