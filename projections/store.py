"""Read-model tables (SQLAlchemy Core), one schema for SQLite and PostgreSQL.

Each projection owns tables whose names carry its version and one row in `projection_tracking`;
rows and tracking position are written in one transaction.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    text,
)

metadata = MetaData()

tracking = Table(
    "projection_tracking",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("position", Integer, nullable=False),
)

# Identifier columns are Text: the edge bounds identifiers (domain/types.py, 200 characters), and
# events stored before that bound must still project; free text (names, personas) has no bound.
runs = Table(
    "runs_v2",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("run_key", Text, nullable=False),
    Column("project", Text, nullable=False),
    Column("name", Text),
    Column("suite_name", Text, nullable=False),
    Column("suite_version", Text),
    Column("agent_name", Text, nullable=False),
    Column("agent_version", Text),
    Column("status", String(20), nullable=False),
    Column("labels", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("completed_at", String(40)),
    Column("reason", Text),
    Column("case_count", Integer, nullable=False),
    Column("baseline", Boolean, nullable=False),
    Column("created", Text, nullable=False),  # RunCreated payload (agent, config, spec)
    Column("position", Integer, nullable=False),
)
Index("ix_runs_v2_list", runs.c.project, runs.c.created_at)

baselines = Table(
    "baselines_v2",
    metadata,
    Column("project", Text, primary_key=True),
    Column("agent", Text, primary_key=True),
    Column("suite", Text, primary_key=True),
    Column("run_id", String(36), nullable=False),
    Column("approved_at", String(40), nullable=False),
    Column("actor", Text, nullable=False),
    Column("reason", Text),
)

case_runs = Table(
    "cases_v1_runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("spec", Text, nullable=False),
    Column("agent_provider", Text),
    Column("status", String(20), nullable=False),
)

cases = Table(
    "cases_v1",
    metadata,
    Column("case_id", String(36), primary_key=True),
    Column("run_id", String(36), nullable=False),
    Column("test_case_key", Text, nullable=False),
    Column("repetition", Integer, nullable=False),
    Column("variant", Text, nullable=False),
    Column("seq", Integer, nullable=False),  # order of opening within the projection
    Column("facts", Text, nullable=False),
    Column("score", Text, nullable=False),
    Column("status", String(20), nullable=False),
    Column("overall_score", Float),
    Column("passed", Boolean),
    Column("position", Integer, nullable=False),
)
Index("ix_cases_v1_run", cases.c.run_id, cases.c.seq)

run_summaries = Table(
    "run_summaries_v1",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("spec_id", String(40), nullable=False),
    Column("aggregate", Text, nullable=False),
    Column("test_cases", Text, nullable=False),
    Column("position", Integer, nullable=False),
)

rescores = Table(
    "rescores_v1",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("spec_id", String(40), primary_key=True),
    Column("spec", Text, nullable=False),
    Column("aggregate", Text, nullable=False),
    Column("cases", Text, nullable=False),
    Column("position", Integer, nullable=False),
    Column("created_at", String(40), nullable=False),
)

custom_metrics = Table(
    "metrics_v1",
    metadata,
    Column("project", String(200), primary_key=True),
    Column("name", String(100), primary_key=True),
    Column("definition", Text, nullable=False),
    Column("position", Integer, nullable=False),
)


def make_engine(url: str) -> Engine:
    """Engine for the read models; SQLite in WAL mode so readers never block the projector."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: object, _record: object) -> None:
            cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
            if ":memory:" not in url and "mode=memory" not in url:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        metadata.create_all(engine)
    else:
        engine = create_engine(url, pool_size=10, max_overflow=10, pool_pre_ping=True)
        with engine.begin() as conn:
            # Concurrent start-ups race on DDL: one at a time.
            conn.execute(text("SELECT pg_advisory_xact_lock(4242002)"))
            metadata.create_all(conn)
            _widen(conn)
    return engine


WIDENED = (
    (cases.name, "test_case_key"),
    (cases.name, "variant"),
    (case_runs.name, "agent_provider"),
)
"""Columns once VARCHAR(n) that free text overflowed (a persona in the variant): now TEXT."""


def _widen(conn: Connection) -> None:
    """Turn the WIDENED columns of an older PostgreSQL database into TEXT (no table rewrite)."""
    for table, column in WIDENED:
        kind = conn.execute(
            text(
                "SELECT data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = :t AND column_name = :c"
            ),
            {"t": table, "c": column},
        ).scalar()
        if kind == "character varying":
            conn.execute(text(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE text'))
