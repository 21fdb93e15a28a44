"""The durable job queue's tables: procrastinate's schema and the job reports table.

Apart from api/jobs.py so `evaledger migrate` (api/bootstrap.py) can create them for a two-role
app role without importing the queue, which imports the composition root (no import circle).
"""

from __future__ import annotations

from typing import Any

import procrastinate

from evaledger.domain.store.postgres import connect_postgres, quote_role

REPORTS = "evaledger_job_reports"
"""The report of each finished job (procrastinate keeps no task result)."""


def ensure_job_schema(events_env: dict[str, str], app_role: str | None = None) -> None:
    """Create the job queue's tables when missing, and (`app_role`) grant them (issue 29).

    `evaledger migrate` runs it as the owner, so a two-role app role, which may not create
    tables, finds them; the app itself creates them only when they are missing (one role).
    """
    with connect_postgres(events_env, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext('evaledger.jobs.schema'))")
        try:
            found = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
            if found is None or found[0] is None:
                conn.execute(procrastinate.schema.SchemaManager.get_schema())
            found = conn.execute("SELECT to_regclass(%s)", (REPORTS,)).fetchone()
            if found is None or found[0] is None:  # IF NOT EXISTS still needs the CREATE right
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {REPORTS} "
                    "(job_id uuid PRIMARY KEY, report jsonb, error text, finished_at timestamptz)"
                )
            column = conn.execute(
                "SELECT 1 FROM information_schema.columns "
                "WHERE table_name = %s AND column_name = 'finished_at'",
                (REPORTS,),
            ).fetchone()
            if column is None:  # a table made before finished_at was kept (migrate adds it)
                conn.execute(f"ALTER TABLE {REPORTS} ADD COLUMN finished_at timestamptz")
            if app_role is not None:
                _grant_jobs(conn, app_role)
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext('evaledger.jobs.schema'))")


def _grant_jobs(conn: Any, app_role: str) -> None:
    """Read-write on the queue's tables and their sequences; nothing else."""
    role = quote_role(app_role)
    ours = r"procrastinate\_%"
    tables = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE %s",
        (ours,),
    ).fetchall()
    for table in [*(r[0] for r in tables), REPORTS]:
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table}" TO {role}')
    sequences = conn.execute(
        "SELECT sequencename FROM pg_sequences WHERE schemaname = current_schema() "
        "AND sequencename LIKE %s",
        (ours,),
    ).fetchall()
    for (sequence,) in sequences:
        conn.execute(f'GRANT USAGE, SELECT ON SEQUENCE "{sequence}" TO {role}')
