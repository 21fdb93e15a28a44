"""The reference cases read model: what `cases_v6` must hold, computed from the validated log.

Every case is folded from its validated pydantic events by the reference fold
(tests/oracles/fold.py), scored once by `score_case` under its run's own spec (RunCreated's,
with the scorers a SourceResultsRecorded brought), and every closed run is summarised from those
scores in opening order. Nothing here reads a read-model table, the page-wise fold
(`projections/fold.py`), the projector's caches or its columnar paths: it is the slow, obvious
definition the catch-up is held to (tests/projections/test_fast_catch_up.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from evaledger.domain.events import (
    CaseEvent,
    CaseOpened,
    DomainEvent,
    JudgeVerdictRecorded,
    RunCanceled,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunStarted,
    SourceResultsRecorded,
)
from evaledger.domain.ledger import Ledger
from evaledger.domain.spec import ScoringSpec
from evaledger.projections import encoding
from evaledger.projections.tables import cases, run_summaries
from evaledger.scoring.case import reduce_repetitions, score_case
from evaledger.scoring.models import CaseScore
from evaledger.scoring.run import summarize_run
from tests.oracles.fold import fold_reference

_STATUS = {RunStarted: "running", RunCompleted: "completed", RunCanceled: "canceled"}
_STATUS[RunFailed] = "failed"
CLOSED = {"completed", "canceled", "failed"}


@dataclass
class _Run:
    spec: ScoringSpec
    provider: str | None
    status: str = "created"
    cases: list[str] = field(default_factory=list)


@dataclass
class ReferenceReadModel:
    """Per case its row (less `seq`), the case ids in opening order, per closed run its summary."""

    rows: dict[str, dict[str, Any]]
    opening_order: list[str]
    summaries: dict[str, dict[str, Any]]


def reference_read_model(ledger: Ledger) -> ReferenceReadModel:
    """The cases read model of everything in the ledger's log, by the obvious definitions."""
    runs: dict[str, _Run] = {}
    events: dict[str, list[DomainEvent]] = {}
    last: dict[str, int] = {}
    opened: dict[str, int] = {}
    head = ledger.position()
    for n in ledger.notifications(1, head) if head else ():
        event = ledger.decode(n)
        oid = str(event.originator_id)
        if isinstance(event, RunCreated):
            runs[oid] = _Run(event.spec, event.agent.provider)
        elif isinstance(event, SourceResultsRecorded):
            run = runs[oid]
            run.spec = run.spec.model_copy(update={"scorers": event.scorers})
        elif type(event) in _STATUS:
            runs[oid].status = _STATUS[type(event)]
        elif isinstance(event, CaseOpened):
            runs[str(event.run_id)].cases.append(oid)
            events[oid] = [event]
            opened[oid] = last[oid] = n.id
        elif isinstance(event, CaseEvent):
            events[oid].append(event)
            last[oid] = n.id
    rows: dict[str, dict[str, Any]] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for run_id, run in runs.items():
        scores = []
        for case_id in run.cases:
            facts = fold_reference(events[case_id], run.provider)
            score = score_case(facts, run.spec)
            scores.append(score)
            rows[case_id] = {
                "case_id": case_id,
                "run_id": run_id,
                "test_case_key": facts.test_case_key,
                "repetition": facts.repetition,
                "variant": facts.variant,
                "facts": encoding.dumps(facts),
                "score": encoding.dumps(score),
                "status": score.status.value,
                "overall_score": score.overall_score,
                "passed": score.passed,
                **_reference_columns(events[case_id], score),
                "position": last[case_id],
            }
        if run.status in CLOSED:
            summaries[run_id] = {
                "spec_id": run.spec.spec_id,
                "aggregate": encoding.dumps(summarize_run(scores, run.spec)),
                "test_cases": encoding.dumps(
                    [t.model_dump(mode="json") for t in reduce_repetitions(scores, run.spec)]
                ),
            }
    return ReferenceReadModel(rows, sorted(rows, key=opened.__getitem__), summaries)


def _reference_columns(events: list[DomainEvent], score: CaseScore) -> dict[str, Any]:
    """The v5 and v6 columns from the validated events themselves (not the facts) and the score."""
    opened = events[0]
    assert isinstance(opened, CaseOpened)
    graders = {
        (e.judge.kind, e.judge.provider, e.judge.model, e.judge.version, e.template_hash)
        for e in events
        if isinstance(e, JudgeVerdictRecorded)
    }
    return {
        "cached": opened.cached,
        "graders": json.dumps(
            [list(g) for g in sorted(graders, key=lambda g: [x or "" for x in g])],
            separators=(",", ":"),
        ),
        "errored": score.errored,
        "judge_error": score.judge_error,
        "latency_p50_ms": score.latency_p50_ms,
        "cost_usd": score.cost_usd,
        "metric_scores": json.dumps(
            {m.metric: m.score for m in score.metric_scores},
            separators=(",", ":"),
            ensure_ascii=False,
        ),
        "named_scores": json.dumps(score.named_scores, separators=(",", ":"), ensure_ascii=False),
    }


def stored_read_model(conn: Connection) -> ReferenceReadModel:
    """What the cases projection stored, in the reference's shape."""
    rows: dict[str, dict[str, Any]] = {}
    seqs: dict[str, int] = {}
    for row in conn.execute(select(cases)).mappings():
        found = dict(row)
        seqs[found["case_id"]] = found.pop("seq")
        rows[found["case_id"]] = found
    summaries = {
        row.run_id: {
            "spec_id": row.spec_id,
            "aggregate": row.aggregate,
            "test_cases": row.test_cases,
        }
        for row in conn.execute(select(run_summaries))
    }
    return ReferenceReadModel(rows, sorted(rows, key=seqs.__getitem__), summaries)
