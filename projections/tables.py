"""Read-model tables (SQLAlchemy Core), one schema for SQLite and PostgreSQL.

Each projection owns tables whose names carry its version and one row in `projection_tracking`;
rows and tracking position are written in one transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    exc,
    text,
)
from sqlalchemy.engine import ExceptionContext

from evaledger.domain.errors import InfrastructureError
from evaledger.domain.store.urls import CONNECT_TIMEOUT, POSTGRES_CONNECT_KWARGS
from evaledger.projections.names import CASE_TIMES_PROJECTION as CASE_TIMES_PROJECTION
from evaledger.projections.names import CASES_PROJECTION as CASES_PROJECTION
from evaledger.projections.names import DATASETS_PROJECTION as DATASETS_PROJECTION
from evaledger.projections.names import LANE_TRACKING_TABLE as LANE_TRACKING_TABLE
from evaledger.projections.names import METRICS_PROJECTION as METRICS_PROJECTION
from evaledger.projections.names import PROJECTION_NAMES as PROJECTION_NAMES
from evaledger.projections.names import RUN_SUMMARIES_TABLE, TRACKING_TABLE
from evaledger.projections.names import RUNS_PROJECTION as RUNS_PROJECTION
from evaledger.projections.names import SEARCH_PROJECTION as SEARCH_PROJECTION
from evaledger.projections.names import VOTES_PROJECTION as VOTES_PROJECTION

metadata = MetaData()

tracking = Table(
    TRACKING_TABLE,
    metadata,
    Column("name", String(100), primary_key=True),
    Column("position", Integer, nullable=False),
)

lane_tracking = Table(
    LANE_TRACKING_TABLE,
    metadata,
    Column("name", String(100), primary_key=True),
    Column("lane", Integer, primary_key=True, autoincrement=False),
    Column("position", BigInteger().with_variant(Integer, "sqlite"), nullable=False),
)

projection_failures = Table(
    "projection_failures",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("event", Text, nullable=False),
    Column("error", Text, nullable=False),
    Column("failed_at", String(40), nullable=False),
)

# Identifier columns are Text: the edge bounds identifiers (domain/types.py, 200 characters), and
# events stored before that bound must still project; free text (names, personas) has no bound.
runs = Table(
    RUNS_PROJECTION,
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
    # When the run was recorded here (RunCreated's own timestamp), and the time it is listed and
    # sorted by: created_at, or recorded_at for a run whose source has no date (v3, issue 25).
    Column("recorded_at", String(40), nullable=False),
    Column("listed_at", String(40), nullable=False),
    Column("completed_at", String(40)),
    Column("reason", Text),
    Column("case_count", Integer, nullable=False),
    Column("baseline", Boolean, nullable=False),
    # RunCreated payload (agent, config, spec; v4, issue 32: its dataset reference, so that a
    # comparison's guard reads it here instead of loading the dataset use cases and the log)
    Column("created", Text, nullable=False),
    Column("position", Integer, nullable=False),
)
Index("ix_runs_v4_list", runs.c.project, runs.c.listed_at)
Index("ix_runs_v4_listed", runs.c.listed_at)

baselines = Table(
    "baselines_v4",
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
    "cases_v6_runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("spec", Text, nullable=False),
    Column("agent_provider", Text),
    Column("status", String(20), nullable=False),
)

# v4 (issue 32) dropped v3's `scoring` column (the facts without their per-message rows: most
# of the facts' bytes, written a second time per case): a rescore reads `facts` and keeps what
# scoring reads (`scoring.facts.scoring_view`). v5 (issue 35) adds what graded the case and
# whether its transcript was cached (`graders`, `cached`: the comparability guard and the
# calibration gate read them instead of the case events), and four fields of the score as
# columns (`errored` … `cost_usd`: the run page's narrow rows read no JSON). v6 (issue 32, the
# web run page) adds the score's metric scores and named scores as two small JSON objects
# (`metric_scores`, `named_scores`: the run page's metric filter and named-score chart read
# them instead of decoding every score) and puts the narrow columns before the large JSON ones:
# a SQLite row's columns are stored in order, and the facts and score (kilobytes, spilling to
# overflow pages) first made every narrow read walk past them.
cases = Table(
    CASES_PROJECTION,
    metadata,
    Column("case_id", String(36), primary_key=True),
    Column("run_id", String(36), nullable=False),
    Column("seq", Integer, nullable=False),  # order of opening within the projection
    Column("test_case_key", Text, nullable=False),
    Column("repetition", Integer, nullable=False),
    Column("variant", Text, nullable=False),
    Column("status", String(20), nullable=False),
    Column("overall_score", Float),
    Column("passed", Boolean),
    Column("errored", Boolean, nullable=False),
    Column("judge_error", Boolean, nullable=False),
    Column("latency_p50_ms", BigInteger),
    Column("cost_usd", Float),
    Column("cached", Boolean, nullable=False),
    Column("position", Integer, nullable=False),
    # The score's metric scores, JSON: {metric: score or null}, in the score's order.
    Column("metric_scores", Text, nullable=False),
    # The score's named scores, JSON: {name: value}, in the score's order.
    Column("named_scores", Text, nullable=False),
    # The case's verdicts' graders, JSON: distinct [kind, provider:model, version, template
    # hash] lists, sorted (`projections.rows.case_graders`).
    Column("graders", Text, nullable=False),
    Column("facts", Text, nullable=False),
    Column("score", Text, nullable=False),
)
Index("ix_cases_v6_run", cases.c.run_id, cases.c.seq)

run_summaries = Table(
    RUN_SUMMARIES_TABLE,
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
Index("ix_rescores_v1_spec", rescores.c.spec_id)

rescore_inputs = Table(
    "rescore_inputs_v1",
    metadata,
    # A run's spec-independent rescore inputs (projections.fastscore.RunInputs), so that a new
    # process rescores without decoding every case's facts; valid while `marker` is current.
    Column("run_id", String(36), primary_key=True),
    Column("marker", String(200), nullable=False),
    Column("inputs", LargeBinary, nullable=False),
)

compare_cache = Table(
    "compare_cache_v1",
    metadata,
    # sha256 of (runs, their summary positions, thresholds, spec, options, page): an answer
    # shared by every process serving this store; a moved summary position is a new key.
    Column("key", String(64), primary_key=True),
    Column("body", LargeBinary, nullable=False),
    Column("created_at", Float, nullable=False),
)
Index("ix_compare_cache_v1_created", compare_cache.c.created_at)

custom_metrics = Table(
    "metrics_v1",
    metadata,
    Column("project", String(200), primary_key=True),
    Column("name", String(100), primary_key=True),
    Column("definition", Text, nullable=False),
    Column("position", Integer, nullable=False),
)


# When each case happened (issue 33, trends): its transcript's end, else its start; a case
# without either is placed at its run's listed time by the series query (no row here).
case_times = Table(
    CASE_TIMES_PROJECTION,
    metadata,
    Column("case_id", String(36), primary_key=True),
    Column("at", String(40), nullable=False),
)


# The judge votes projection's tables (projections/votes.py): here with the others, so that
# opening the read models creates them without loading the projection (start-up, issue 19).
vote_cases = Table(
    "judge_votes_v1_cases",
    metadata,
    Column("case_id", String(36), primary_key=True),
    Column("run_id", String(36), nullable=False),
)

votes = Table(
    "judge_votes_v1",
    metadata,
    Column("verdict_id", String(36), primary_key=True),
    Column("case_id", String(36), nullable=False),
    Column("run_id", String(36), nullable=False),
    Column("judge", String(300), nullable=False),
    Column("panel_id", String(36)),
    Column("self_judged", Boolean, nullable=False),
    Column("valid", Boolean, nullable=False),
    Column("invalidated", Boolean, nullable=False),
    Column("metric_scores", Text, nullable=False),  # [{metric, score, passed}] as judged
    Column("outcomes", Text, nullable=False),  # [{statement, passed, severity}] as judged
    Column("human_scores", Text),  # the latest override's metric scores, if any
    Column("human_passed", Boolean),  # the latest override's forced pass/fail, if any
    Column("position", Integer, nullable=False),
)
Index("ix_judge_votes_v1_run", votes.c.run_id, votes.c.position)

labels = Table(
    "judge_votes_v1_labels",
    metadata,
    Column("position", Integer, primary_key=True),
    Column("case_id", String(36), nullable=False),
    Column("run_id", String(36), nullable=False),
    Column("actor", String(300), nullable=False),
    Column("passed", Boolean, nullable=False),
    Column("metric_scores", Text, nullable=False),  # [{metric, score, passed}] as labelled
)
Index("ix_judge_votes_v1_labels_run", labels.c.run_id, labels.c.position)

flags = Table(
    "judge_votes_v1_flags",
    metadata,
    Column("case_id", String(36), primary_key=True),
    Column("run_id", String(36), nullable=False),
    Column("reason", Text, nullable=False),
    Column("actor", String(300), nullable=False),
    Column("position", Integer, nullable=False),
)
Index("ix_judge_votes_v1_flags_run", flags.c.run_id)

# The datasets projection's tables (projections/datasets.py).
datasets = Table(
    "datasets_v1",
    metadata,
    Column("dataset_id", String(36), primary_key=True),
    Column("project", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("description", Text),
    Column("created_at", String(40), nullable=False),
    Column("created_by", Text, nullable=False),
    Column("latest_version", Integer, nullable=False),
    Column("position", Integer, nullable=False),
)
Index("ix_datasets_v1_project", datasets.c.project, datasets.c.name, unique=True)

dataset_versions = Table(
    "datasets_v1_versions",
    metadata,
    Column("dataset_id", String(36), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("content_hash", String(64), nullable=False),
    Column("item_count", Integer, nullable=False),
    Column("items", Text, nullable=False),  # the version's items, JSON, sorted by key
    Column("source", Text),
    Column("added_at", String(40), nullable=False),
    Column("added_by", Text, nullable=False),
    Column("position", Integer, nullable=False),
)


# The search projection's tables (projections/search.py, issue 36). `search_v1` holds the
# searchable text, one row per (event, field): append-only, keyed by the event's log position,
# so a rebuild writes the very same rows. Each engine indexes it in its own way,
# maintained by the database itself: an FTS5 table kept by triggers on SQLite, a GIN index over
# the text's tsvector on PostgreSQL (the DDL below, run when the table is created).
search_runs = Table(
    "search_v1_runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("project", Text, nullable=False),
)

search_cases = Table(
    "search_v1_cases",
    metadata,
    Column("case_id", String(36), primary_key=True),
    Column("run_id", String(36), nullable=False),
    Column("project", Text, nullable=False),
    Column("test_case_key", Text, nullable=False),
    Column("repetition", Integer, nullable=False),
)

search_docs = Table(
    SEARCH_PROJECTION,
    metadata,
    # Where in the log the row comes from, one place per field of an event: the event's position
    # * 8 + the field's number. Like every view's `position`, it moves when the same facts are
    # written in other transactions; an INTEGER PRIMARY KEY on SQLite (the rowid FTS5 keys on).
    Column("position", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("case_id", String(36), nullable=False),
    Column("run_id", String(36), nullable=False),
    Column("project", Text, nullable=False),
    Column("field", String(20), nullable=False),
    Column("body", Text, nullable=False),
)
Index("ix_search_v1_case", search_docs.c.case_id)
Index("ix_search_v1_project", search_docs.c.project, search_docs.c.run_id)

SEARCH_FTS = "search_v1_fts"
"""SQLite: the FTS5 index over `search_v1.body` (external content, kept by triggers)."""
SEARCH_TSVECTOR = (
    "to_tsvector('simple'::regconfig, regexp_replace(body, '[^[:alnum:]]+', ' ', 'g'))"
)
"""PostgreSQL: the indexed expression (words are runs of letters and digits, as in FTS5's
`unicode61` tokenizer and `projections.search_syntax.WORD`; `simple`: no stemming, no stop
words)."""

SEARCH_INDEX_DDL = {
    "sqlite": (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {SEARCH_FTS} USING fts5(body, "
        f"content='{SEARCH_PROJECTION}', content_rowid='position', "
        "tokenize='unicode61 remove_diacritics 0')",
        f"CREATE TRIGGER IF NOT EXISTS {SEARCH_PROJECTION}_ai AFTER INSERT ON {SEARCH_PROJECTION} "
        f"BEGIN INSERT INTO {SEARCH_FTS}(rowid, body) VALUES (new.position, new.body); END",
        f"CREATE TRIGGER IF NOT EXISTS {SEARCH_PROJECTION}_ad AFTER DELETE ON {SEARCH_PROJECTION} "
        f"BEGIN INSERT INTO {SEARCH_FTS}({SEARCH_FTS}, rowid, body) "
        "VALUES ('delete', old.position, old.body); END",
        f"CREATE TRIGGER IF NOT EXISTS {SEARCH_PROJECTION}_au AFTER UPDATE ON {SEARCH_PROJECTION} "
        f"BEGIN INSERT INTO {SEARCH_FTS}({SEARCH_FTS}, rowid, body) "
        "VALUES ('delete', old.position, old.body); "
        f"INSERT INTO {SEARCH_FTS}(rowid, body) VALUES (new.position, new.body); END",
    ),
    "postgresql": (
        f"CREATE INDEX IF NOT EXISTS ix_{SEARCH_PROJECTION}_tsv ON {SEARCH_PROJECTION} "
        f"USING gin (({SEARCH_TSVECTOR}))",
    ),
}
"""The engine's own index over `search_v1`, made when the table is (it then keeps itself)."""


@event.listens_for(search_docs, "after_create")
def _create_search_index(target: Table, conn: Connection, **_: Any) -> None:
    for statement in SEARCH_INDEX_DDL.get(conn.dialect.name, ()):
        conn.exec_driver_sql(statement)


def make_engine(url: str) -> Engine:
    """Engine for the read models; SQLite in WAL mode so readers never block the projector.

    On PostgreSQL: connect and statement timeouts, a lazily grown pool (a CLI process holds
    one connection), stale connections replaced after an outage (pre-ping). Unreachable,
    locked or corrupt stores raise InfrastructureError (503 / exit 3).
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: object, _record: object) -> None:
            cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
            if ":memory:" not in url and "mode=memory" not in url:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        _report_store_errors(engine, f"the SQLite read models {url.removeprefix('sqlite:///')}")
        with engine.connect() as conn:
            # Concurrent start-ups race on DDL: the write lock first, then check and create.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            _create_all(conn)
            conn.commit()
    else:
        # The PostgreSQL store's modules import psycopg: loaded for a postgresql:// URL only.
        # lazy: psycopg and its pool, only for a PostgreSQL store
        from evaledger.domain.store.liveness import BoundedConnection

        engine = create_engine(
            url,
            pool_size=5,
            max_overflow=10,
            pool_timeout=CONNECT_TIMEOUT,
            pool_pre_ping=True,
            connect_args=dict(POSTGRES_CONNECT_KWARGS),
        )

        @event.listens_for(engine, "do_connect")
        def bounded(dialect: Any, record: Any, cargs: Any, cparams: Any) -> Any:
            # Every call under the client-side bound of domain/store/liveness.py.
            return BoundedConnection.connect(*cargs, **cparams)

        _report_store_errors(engine, f"PostgreSQL read models at {engine.url.host}")
        with engine.begin() as conn:
            # Concurrent start-ups race on DDL: one at a time.
            conn.execute(text("SELECT pg_advisory_xact_lock(4242002)"))
            if not _schema_complete(conn):
                _create_all(conn)
    return engine


def _schema_complete(conn: Connection) -> bool:
    """Whether every read-model table and index exists (a migration makes them).

    Two catalogue queries (index names are unique in a schema): reflecting every table's
    indexes took ~250 ms of each PostgreSQL command's start.
    """
    schema = "schemaname = current_schema()"
    tables = set(conn.scalars(text(f"SELECT tablename FROM pg_tables WHERE {schema}")))
    if not all(t.name in tables for t in metadata.sorted_tables):
        return False
    indexes = set(conn.scalars(text(f"SELECT indexname FROM pg_indexes WHERE {schema}")))
    return all(i.name in indexes for t in metadata.sorted_tables for i in t.indexes)


def _create_all(conn: Connection) -> None:
    """Create missing tables, and indexes added to tables that already exist."""
    metadata.create_all(conn)
    for table in metadata.sorted_tables:
        for index in table.indexes:
            index.create(conn, checkfirst=True)


def _report_store_errors(engine: Engine, store: str) -> None:
    @event.listens_for(engine, "handle_error")
    def _infrastructure(ctx: ExceptionContext) -> None:
        e = ctx.sqlalchemy_exception
        operational = isinstance(e, exc.OperationalError | exc.InterfaceError | exc.InternalError)
        corrupt = type(e) is exc.DatabaseError
        if ctx.is_disconnect or operational or corrupt:
            first = (str(ctx.original_exception).strip().splitlines() or ["error"])[0]
            raise InfrastructureError(f"{store} is unavailable: {first}") from e


def grant_read_models(conn: Connection, app_role: str) -> None:
    """Let the app role read and write the read models (run by the migration role)."""
    # lazy: psycopg, only for a PostgreSQL store
    from evaledger.domain.store.postgres import quote_role

    role = quote_role(app_role)
    for table in metadata.sorted_tables:
        conn.execute(text(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table.name}" TO {role}'))
