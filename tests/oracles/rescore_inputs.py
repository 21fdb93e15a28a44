"""The reference for a run's stored rescore inputs (issue 19).

The cases projection stores a closing run's `rescore_inputs_v1` row while it folds. That table
is a cache: whether a row exists depends on what the projection instance saw (a restart mid-run,
small pages, the cache caps), and a row whose marker has moved on is never read. So the
read-model comparisons leave the table out (`CACHE_TABLES`) and hold it here instead: every row
`ReadModels` would read (marker current) is byte for byte the inputs the reference path builds
from the run's `scoring` column. Never imported by product code.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from evaledger.projections.queries import _cases_marker
from evaledger.projections.rows import load_facts
from evaledger.projections.tables import cases, rescore_inputs
from evaledger.scoring.rescore import RunInputs

CACHE_TABLES = frozenset({rescore_inputs.name})
"""Read-model tables that are caches: compared through `check_stored_inputs`, not row by row."""


def check_stored_inputs(conn: Connection) -> int:
    """Assert every current stored inputs row is the reference build; how many were current."""
    current = 0
    for row in conn.execute(select(rescore_inputs)).all():
        marker, closed = _cases_marker(conn, row.run_id)
        if not closed or marker != row.marker:
            continue  # never read: `ReadModels` rebuilds and replaces it
        old = {
            r.case_id: (r.overall_score, r.passed, r.status)
            for r in conn.execute(
                select(
                    cases.c.case_id, cases.c.overall_score, cases.c.passed, cases.c.status
                ).where(cases.c.run_id == row.run_id)
            )
        }
        reference = RunInputs.build(load_facts(conn, row.run_id), old)
        assert row.inputs == reference.to_bytes(), f"stored inputs of run {row.run_id}"
        current += 1
    return current
