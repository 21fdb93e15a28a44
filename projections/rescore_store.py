"""What a rescore keeps: its result beside the run's own scores, and the inputs it built.

The read models only read (`ReadModels.rescore` derives a `Rescoring` and writes nothing); the
rescore use case (`application.runs.rescore_run`) stores what it derived through this writer,
into the projections' own tables: `rescores_v1` (a spec replayed once can be compared under
again by its id, and the web report lists it) and `rescore_inputs_v1` (a closed run's inputs,
so that the next process decodes one row instead of every case's facts).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from evaledger.projections import encoding
from evaledger.projections.queries import Rescoring
from evaledger.projections.rows import upsert
from evaledger.projections.tables import rescore_inputs, rescores

RESCORE_CASES_FORMAT = "evaledger.rescore-cases/2"
"""The `cases` column of a stored rescore: per case in opening order its id, status, pass and
overall score under the spec, as columns. (Format 1, a list of full CaseScore objects, was
23 MB for a 10,000-case run; a full score is `score_case(facts, spec)` of the stored spec.)"""


def store_rescore(engine: Engine, rescoring: Rescoring) -> None:
    """Keep the rescore (and the inputs it built, if any) in one transaction."""
    row = rescore_row(rescoring)
    with engine.begin() as conn:
        built = rescoring.built_inputs
        if built is not None:
            upsert(
                conn,
                rescore_inputs,
                [
                    {
                        "run_id": built.run_id,
                        "marker": built.marker,
                        "inputs": built.inputs.to_bytes(),
                    }
                ],
            )
        upsert(conn, rescores, [row])


def rescore_row(rescoring: Rescoring) -> dict[str, Any]:
    """The `rescores_v1` row of a rescore: its spec, its aggregate and its cases as columns."""
    under = rescoring.cases
    overall_scores, passed, statuses = (
        map(list, zip(*under.decisions, strict=True)) if under.decisions else ([], [], [])
    )
    stored_cases = {
        "format": RESCORE_CASES_FORMAT,
        "case_id": under.case_ids,
        "status": statuses,
        "passed": passed,
        "overall_score": overall_scores,
    }
    return {
        "run_id": str(rescoring.run_id),
        "spec_id": rescoring.spec.spec_id,
        "spec": encoding.dumps(rescoring.spec),
        "aggregate": encoding.dumps(rescoring.after),
        "cases": encoding.dumps(stored_cases),
        "position": 0,
        "created_at": datetime.now(UTC).isoformat(),
    }
