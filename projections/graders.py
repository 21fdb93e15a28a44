"""What graded each case of a run, and whether it was cached, read from the case rows (issue 35).

The comparability guard (`application.compare`) and the calibration gate
(`application.calibration`) read these columns of `cases_v6` instead of replaying every case's
events (one query per run, no JSON of facts or scores decoded).
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import orjson
from sqlalchemy import Engine, select

from evaledger.projections.tables import cases


@dataclass(frozen=True)
class Grader:
    """One judge identity and template of a recorded verdict (`rows.case_graders`)."""

    kind: str
    provider: str | None
    model: str | None
    version: str | None
    template_hash: str | None

    @property
    def judge(self) -> str:
        """`provider:model`, as judges are named (empty parts for a judge without them)."""
        return f"{self.provider or ''}:{self.model or ''}"


@dataclass(frozen=True)
class CaseGraders:
    """A case's key, whether its transcript was cached, and its verdicts' graders."""

    case_id: str
    test_case_key: str
    cached: bool
    graders: tuple[Grader, ...]


def run_case_graders(engine: Engine, run_id: UUID) -> list[CaseGraders]:
    """Every case of the run in opening order, with its `cached` flag and its graders."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(cases.c.case_id, cases.c.test_case_key, cases.c.cached, cases.c.graders)
            .where(cases.c.run_id == str(run_id))
            .order_by(cases.c.seq)
        ).all()
    return [
        CaseGraders(
            case_id,
            key,
            bool(cached),
            tuple(Grader(*g) for g in orjson.loads(graders)),
        )
        for case_id, key, cached, graders in rows
    ]
