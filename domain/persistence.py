"""Storing events: orjson transcoder, a mapper with stable topics and upcasting, storage URLs."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import unquote, urlparse
from uuid import UUID

import orjson
import psycopg
from eventsourcing.persistence import (
    DatabaseError,
    InterfaceError,
    InternalError,
    Mapper,
    Notification,
    OperationalError,
    ProgrammingError,
    StoredEvent,
    Transcoder,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor, SQLiteDatastore
from psycopg.sql import SQL, Identifier

from evaledger.domain.chain import (
    CHAIN_TABLE,
    SQLITE_CHAIN_DDL,
    Block,
    ChainWriter,
    HashedStoredEvent,
    postgres_chain_ddl,
)
from evaledger.domain.errors import InfrastructureError, ValidationError
from evaledger.domain.events import BY_TOPIC_NAME, DomainEvent, split_topic, stored_hash

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
T = TypeVar("T")

UPCASTERS: dict[tuple[str, int], Upcaster] = {}
"""(topic name, from version) → function taking the v(n) state dict to v(n+1)."""


def upcaster(topic_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register an upcaster taking stored state from `from_version` to the next version."""

    def register(func: Upcaster) -> Upcaster:
        UPCASTERS[(topic_name, from_version)] = func
        return func

    return register


class OrjsonTranscoder(Transcoder):
    """Transcoder of plain JSON-able state with orjson (datetimes, UUIDs handled natively)."""

    def encode(self, obj: Any) -> bytes:
        """Serialise state to bytes."""
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        """Deserialise bytes to state."""
        return orjson.loads(data)


class UnknownTopicError(ValueError):
    """A stored event's topic is not in the catalogue."""


def decode_state(
    topic: str, state: bytes, transcoder: Transcoder
) -> tuple[type[DomainEvent], dict[str, Any]]:
    """Decode a stored state and upcast it to the current class version."""
    name, version = split_topic(topic)
    cls = BY_TOPIC_NAME.get(name)
    if cls is None:
        raise UnknownTopicError(f"unknown event topic {topic!r}")
    data = cast(dict[str, Any], transcoder.decode(state))
    while version < cls.class_version:
        data = UPCASTERS[(name, version)](data)
        version += 1
    return cls, data


class EventMapper(Mapper[UUID]):
    """Maps pydantic domain events to stored events under their explicit stable topics."""

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        """Encode one domain event."""
        event = cast(DomainEvent, domain_event)
        return HashedStoredEvent(
            originator_id=event.originator_id,
            originator_version=event.originator_version,
            topic=type(event).topic(),
            # The bytes the hash chain was computed over (same orjson encoding as the transcoder).
            state=event.stored_state(),
            hash=event.hash(),
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """Decode (and upcast) one stored event."""
        cls, data = decode_state(stored_event.topic, stored_event.state, self.transcoder)
        originator_id = stored_event.originator_id
        data["originator_id"] = (
            originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
        )
        data["originator_version"] = stored_event.originator_version
        event = cls.model_validate(data)
        event._hash = stored_hash(stored_event.topic, stored_event.state)
        return event


@dataclass(frozen=True)
class StorageLocation:
    """Where the events and the read models live, parsed from one URL."""

    url: str
    kind: str  # "sqlite" or "postgresql"
    events_env: dict[str, str]
    views_url: str  # SQLAlchemy URL of the read models

    @property
    def is_sqlite(self) -> bool:
        """Embedded store (in-process projections)."""
        return self.kind == "sqlite"


DEFAULT_DB_URL = "sqlite:///.evaledger/"

CONNECT_TIMEOUT = 3
"""Seconds to open a PostgreSQL connection (or wait for a pooled one) before giving up."""
STATEMENT_TIMEOUT_MS = 60_000
"""Longest a PostgreSQL statement may run (a lost lock or a runaway query ends, not hangs)."""
RECONNECT_TIMEOUT = 5.0
"""The events pool gives up a reconnection attempt after this; the next request starts anew,
so recovery after an outage never waits on a long exponential backoff."""

POSTGRES_OPTIONS = f"-c statement_timeout={STATEMENT_TIMEOUT_MS}"


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


@contextmanager
def store_errors(store: str) -> Iterator[None]:
    """Report an unreachable, locked or corrupt store as InfrastructureError (503 / exit 3).

    Conflicts (IntegrityError) and bad statements keep their own types.
    """
    try:
        yield
    except (
        OperationalError,
        InterfaceError,
        InternalError,
        psycopg.OperationalError,
        sqlite3.OperationalError,  # raised raw while eventsourcing opens a connection
    ) as e:
        raise InfrastructureError(f"{store} is unavailable: {_first_line(e)}") from e
    except (DatabaseError, sqlite3.DatabaseError) as e:
        if type(e) not in (DatabaseError, sqlite3.DatabaseError):
            raise
        raise InfrastructureError(f"{store} is unreadable: {_first_line(e)}") from e


def parse_db_url(url: str) -> StorageLocation:
    """`sqlite:///dir/` or `sqlite:///file.db` or `postgresql://user@host:port/db`.

    SQLite keeps events and read models in two files (core SQLite shares table names across
    applications, DESIGN §7): `<dir>/events.sqlite` + `<dir>/views.sqlite`, or `file.db` +
    `file.views.db`. `sqlite:///:memory:` keeps both in shared-cache memory (tests).
    PostgreSQL keeps both in one database.
    """
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = unquote(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else ""
        if not path:
            raise ValidationError(f"--db: no path in {url!r}", field="db")
        if path.startswith(":memory:"):
            name = path.split(":", 2)[2] or "evaledger"
            return StorageLocation(
                url=url,
                kind="sqlite",
                events_env={
                    "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                    "SQLITE_DBNAME": f"file:{name}-events?mode=memory&cache=shared",
                    "APPLICATION_RECORDER_TOPIC": f"{__name__}:ChainedSQLiteApplicationRecorder",
                },
                views_url=f"sqlite:///file:{name}-views?mode=memory&cache=shared&uri=true",
            )
        p = Path(path)
        if path.endswith("/") or p.is_dir():
            p.mkdir(parents=True, exist_ok=True)
            events, views = p / "events.sqlite", p / "views.sqlite"
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            events, views = p, p.with_name(f"{p.stem}.views{p.suffix or '.db'}")
        return StorageLocation(
            url=url,
            kind="sqlite",
            events_env={
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": str(events),
                "SQLITE_LOCK_TIMEOUT": "30",
                "APPLICATION_RECORDER_TOPIC": f"{__name__}:ChainedSQLiteApplicationRecorder",
            },
            views_url=f"sqlite:///{views}",
        )
    if parsed.scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        if not parsed.path.strip("/"):
            raise ValidationError(f"--db: no database name in {url!r}", field="db")
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": unquote(parsed.path.lstrip("/")),
            "POSTGRES_HOST": parsed.hostname or "127.0.0.1",
            "POSTGRES_PORT": str(parsed.port or 5432),
            "POSTGRES_USER": unquote(parsed.username or "postgres"),
            "POSTGRES_PASSWORD": unquote(parsed.password or ""),
            # One connection kept per process (a CLI uses one at a time); a server grows the
            # pool on demand up to 1 + 9 and shrinks it back when idle.
            "POSTGRES_POOL_SIZE": "1",
            "POSTGRES_MAX_OVERFLOW": "9",
            # How long a request waits for a pooled connection before the store counts as down.
            "POSTGRES_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
            "APPLICATION_RECORDER_TOPIC": f"{__name__}:ChunkedPostgresApplicationRecorder",
        }
        netloc = parsed.netloc
        return StorageLocation(
            url=url,
            kind="postgresql",
            events_env=env,
            views_url=f"postgresql+psycopg://{netloc}{parsed.path}",
        )
    raise ValidationError(
        f"--db: unsupported URL scheme {parsed.scheme!r} (use sqlite:/// or postgresql://)",
        field="db",
    )


class ChainReader:
    """Reading the chain's blocks, for `verify` (both recorders)."""

    chain: ChainWriter
    datastore: Any
    _name: str

    def chain_blocks(self, after: int, limit: int) -> list[Block]:
        """Blocks ending after position `after`, in log order."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            return self.chain.blocks(curs, after, limit)

    def last_stored(self, originator_ids: Sequence[UUID]) -> dict[UUID, tuple[str, bytes]]:
        """(topic, state) of the last stored event of each aggregate that has one."""
        found: dict[UUID, tuple[str, bytes]] = {}
        select = cast(Any, self).select_events
        for oid in originator_ids:
            last = select(oid, desc=True, limit=1)
            if last:
                found[oid] = (last[0].topic, bytes(last[0].state))
        return found


class ChainedSQLiteApplicationRecorder(ChainReader, SQLiteApplicationRecorder):
    """eventsourcing's SQLite recorder, appending each commit's block to the ledger chain.

    SQLite has one writer at a time: the events are inserted first (which takes the write
    lock), so the chain's last block read next is the one this commit follows.
    """

    def __init__(
        self, datastore: SQLiteDatastore, events_table_name: str = "stored_events"
    ) -> None:
        super().__init__(datastore, events_table_name)
        self.chain = ChainWriter("?")
        self._name = f"the SQLite event store {datastore.pool.db_name}"

    def construct_create_table_statements(self) -> list[str]:
        """The events table and the chain."""
        return [*super().construct_create_table_statements(), SQLITE_CHAIN_DDL]

    def create_table(self) -> None:
        """Create the tables; chain the events of a store that predates the chain (once)."""
        # Opening errors (a corrupt file) are left to the caller, which names the store's URL.
        with self.datastore.transaction(commit=True) as c:
            self._create_table(c)
            self.chain.adopt(
                c,
                f"SELECT rowid AS notification_id, originator_id, originator_version, topic, "
                f"state FROM {self.events_table_name} ORDER BY rowid",
            )

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = super()._insert_events(c, stored_events, **kwargs)
        assert ids is not None
        self.chain.append(c, stored_events, ids)
        return ids

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert events and their chain block in one transaction."""
        with store_errors(self._name):
            return super().insert_events(stored_events, **kwargs)

    def select_events(self, originator_id: UUID | str, **kwargs: Any) -> Sequence[StoredEvent]:
        """One aggregate's events."""
        with store_errors(self._name):
            return super().select_events(originator_id, **kwargs)

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """A page of the log."""
        with store_errors(self._name):
            return super().select_notifications(
                start, limit, stop, topics, inclusive_of_start=inclusive_of_start
            )

    def max_notification_id(self) -> int:
        """The log's head."""
        with store_errors(self._name):
            return super().max_notification_id()


WRITE_LOCK = 4242001
"""Advisory lock key every writer of the events table takes for its transaction."""

LAST_STORED_BATCH = 1000
"""Aggregate ids per query reading their last stored events (sealing a run)."""

CHUNK_BYTES = 1_000_000
"""Largest save (state bytes) sent as one INSERT; larger saves go by binary COPY."""


class ChunkedPostgresApplicationRecorder(ChainReader, PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL recorder with the ledger chain, sending large saves by COPY.

    Every commit appends its chain block under the writers' lock (below), so chain order is
    notification order across processes.

    eventsourcing 9.5.6 sends a whole save as one composite-array parameter in pipeline mode;
    with psycopg 3.3 that statement never completes once it passes a few MB (measured here:
    imports of ~550 generated cases hang, 400 pass), and encoding the array is a third of a
    large import. A small save goes as one INSERT, a larger one by binary `COPY`, under the
    writers' lock in one transaction, so a save stays atomic and its notification ids stay
    contiguous (the lock keeps every other writer out until commit).
    """

    def __init__(
        self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"
    ) -> None:
        # Before super() opens the pool: every connection gets the timeouts.
        pool: Any = datastore.pool
        pool.kwargs.update(connect_timeout=CONNECT_TIMEOUT, options=POSTGRES_OPTIONS)
        pool.reconnect_timeout = RECONNECT_TIMEOUT
        kwargs = pool.kwargs
        self._name = f"PostgreSQL at {kwargs['host']}:{kwargs['port']}/{kwargs['dbname']}"
        # Open the pool's first connection before using it: a use racing the opening would
        # grow the pool to two connections in a process that needs one. (Only here: a waiting
        # open that times out later, in an outage, closes the pool for good.) Opening errors
        # are left to the caller, which names the store's URL.
        pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        super().__init__(datastore, events_table_name=events_table_name)
        self.chain = ChainWriter("%s", f'"{datastore.schema}".{CHAIN_TABLE}')
        # Writers serialise on a transaction-scoped advisory lock instead of eventsourcing's
        # `LOCK TABLE … IN EXCLUSIVE MODE`, which needs UPDATE/DELETE privileges the app role
        # must not have. Same effect: one inserting transaction at a time, so notification
        # order is commit order and the chain's last block is the one this commit follows.
        self.lock_table_statements = [
            self.lock_table_statements[0],  # SET LOCAL lock_timeout
            SQL("SELECT pg_advisory_xact_lock({0})").format(WRITE_LOCK),
        ]

    def _guarded(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call an eventsourcing method without its 10 × retry; one retry on fresh connections.

        eventsourcing retries connection errors 10 times, each waiting for the pool: minutes
        when the server is down. One retry after dropping broken idle connections is enough to
        ride over a restart; after that the store is reported down (503 / exit 3) in seconds.
        """
        func = getattr(method, "__wrapped__", method)
        with store_errors(self._name):
            try:
                return func(self, *args, **kwargs)
            except (OperationalError, InterfaceError):
                self.datastore.pool.check()
                return func(self, *args, **kwargs)

    def select_events(self, originator_id: UUID | str, **kwargs: Any) -> Sequence[StoredEvent]:
        """One aggregate's events."""
        return self._guarded(PostgresApplicationRecorder.select_events, originator_id, **kwargs)

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """A page of the log."""
        return self._guarded(
            PostgresApplicationRecorder.select_notifications,
            start,
            limit,
            stop,
            topics,
            inclusive_of_start=inclusive_of_start,
        )

    def max_notification_id(self) -> int | None:
        """The log's head."""
        head: int | None = self._guarded(PostgresApplicationRecorder.max_notification_id)
        return head

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert events and their chain block atomically (one transaction)."""
        ids: list[int] = self._guarded(ChunkedPostgresApplicationRecorder._insert, stored_events)
        return ids

    def _insert(self, stored_events: Sequence[StoredEvent]) -> list[int]:
        # Not eventsourcing's pipelined insert: it catches an error raised after the INSERT
        # (in the chain's step) and commits the transaction before re-raising it.
        with self.datastore.transaction(commit=True) as curs:
            self._lock_table(curs)
            self._notify_channel(curs)
            if sum(len(e.state) for e in stored_events) <= CHUNK_BYTES:
                rows = [
                    self.construct_pg_stored_event(
                        e.originator_id, e.originator_version, e.topic, e.state
                    )
                    for e in stored_events
                ]
                curs.execute(self.insert_events_statement, (rows,))
                ids = [row["notification_id"] for row in curs.fetchall()]
            else:
                ids = self._copy(curs, stored_events)
            self.chain.append(curs, stored_events, ids)
        return ids

    def _copy(self, curs: Any, stored_events: Sequence[StoredEvent]) -> list[int]:
        """A large save by binary COPY (a third of a large import went to encoding the array)."""
        table = SQL("{schema}.{table}").format(
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name)
        )
        # Under the writers' lock nobody else inserts: every id above this one is ours.
        curs.execute(SQL("SELECT max(notification_id) AS last FROM {t}").format(t=table))
        row = curs.fetchone()
        last = (row["last"] if row is not None else None) or 0
        copy_sql = SQL(
            "COPY {t} (originator_id, originator_version, topic, state) FROM STDIN (FORMAT BINARY)"
        ).format(t=table)
        with curs.copy(copy_sql) as copy:
            copy.set_types([self.datastore.originator_id_type, "int8", "text", "bytea"])
            for e in stored_events:
                copy.write_row((e.originator_id, e.originator_version, e.topic, e.state))
        curs.execute(
            SQL(
                "SELECT notification_id FROM {t} WHERE notification_id > %s "
                "ORDER BY notification_id"
            ).format(t=table),
            (last,),
        )
        ids = [r["notification_id"] for r in curs.fetchall()]
        if len(ids) != len(stored_events):
            raise RuntimeError(f"COPY stored {len(ids)} of {len(stored_events)} events")
        return ids

    def last_stored(self, originator_ids: Sequence[UUID]) -> dict[UUID, tuple[str, bytes]]:
        """(topic, state) of the last stored event of each aggregate, a query per batch of ids."""
        table = SQL("{schema}.{table}").format(
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name)
        )
        query = SQL(
            "SELECT DISTINCT ON (originator_id) originator_id, topic, state FROM {t} "
            "WHERE originator_id = ANY(%s) ORDER BY originator_id, originator_version DESC"
        ).format(t=table)
        found: dict[UUID, tuple[str, bytes]] = {}
        ids = list(originator_ids)
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            for start in range(0, len(ids), LAST_STORED_BATCH):
                curs.execute(query, (ids[start : start + LAST_STORED_BATCH],))
                for row in curs.fetchall():
                    oid = row["originator_id"]
                    key = oid if isinstance(oid, UUID) else UUID(str(oid))
                    found[key] = (row["topic"], bytes(row["state"]))
        return found

    def create_chain(self) -> None:
        """Create the chain table; chain the events of a store that predates it (once)."""
        schema = self.datastore.schema
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(postgres_chain_ddl(schema))
            self.chain.adopt(
                curs,
                "SELECT notification_id, originator_id, originator_version, topic, state "
                f'FROM "{schema}"."{self.events_table_name}" ORDER BY notification_id',
            )


# -- PostgreSQL schema: migrations (DDL, triggers, grants) and the start-up check ---------------

MIGRATION_LOCK = 4242000
"""Advisory lock serialising concurrent migrations (start-ups of a single-role set-up)."""


def _immutable_tables(recorder: ChunkedPostgresApplicationRecorder) -> tuple[str, str]:
    return (recorder.events_table_name, CHAIN_TABLE)


def connect_postgres(env: dict[str, str], **kwargs: Any) -> Any:
    """A plain psycopg connection to the store named by `events_env` (outside the pool)."""
    import psycopg

    return psycopg.connect(
        dbname=env["POSTGRES_DBNAME"],
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        user=env["POSTGRES_USER"],
        password=env["POSTGRES_PASSWORD"] or None,
        **{"connect_timeout": int(env.get("POSTGRES_CONNECT_TIMEOUT", "5")), **kwargs},
    )


def postgres_schema_exists(recorder: ChunkedPostgresApplicationRecorder) -> bool:
    """Whether the events table and the chain are there (created by a migration)."""
    schema = recorder.datastore.schema
    with recorder.datastore.transaction(commit=False) as curs:
        curs.execute(
            "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL AS ready",
            (f'"{schema}"."{recorder.events_table_name}"', f'"{schema}".{CHAIN_TABLE}'),
        )
        row = curs.fetchone()
    return bool(row is not None and row["ready"])


def migrate_postgres(
    recorder: ChunkedPostgresApplicationRecorder, env: dict[str, str], app_role: str | None = None
) -> None:
    """Create the events table and the chain, make both append-only, grant the app role.

    Runs as the migration role, which owns the tables and the trigger function; the app role
    gets SELECT and INSERT on the two tables (and the sequence), nothing else.
    """
    try:
        _migrate(recorder, env, app_role)
    except (ProgrammingError, psycopg.errors.InsufficientPrivilege) as e:
        raise InfrastructureError(
            f"{recorder._name}: this role cannot create or repair the ledger's tables "
            f"({_first_line(e)}); run `evaledger migrate` as the database owner"
        ) from e


def _migrate(
    recorder: ChunkedPostgresApplicationRecorder, env: dict[str, str], app_role: str | None
) -> None:
    schema = recorder.datastore.schema
    with connect_postgres(env, autocommit=True) as lock_conn:
        lock_conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            recorder.create_table()
            recorder.create_chain()
            with recorder.datastore.transaction(commit=True) as curs:
                curs.execute(
                    "CREATE OR REPLACE FUNCTION evaledger_refuse_change() RETURNS trigger "
                    "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION "
                    "'evaledger events are immutable: % refused on %', TG_OP, TG_TABLE_NAME; "
                    "END $$"
                )
                for table in _immutable_tables(recorder):
                    for name, op, level in _triggers(table):
                        curs.execute(
                            f'DROP TRIGGER IF EXISTS {name} ON "{schema}"."{table}"; '
                            f'CREATE TRIGGER {name} BEFORE {op} ON "{schema}"."{table}" '
                            f"FOR EACH {level} EXECUTE FUNCTION evaledger_refuse_change()"
                        )
                if app_role:
                    role = quote_role(app_role)
                    curs.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
                    for table in _immutable_tables(recorder):
                        curs.execute(f'GRANT SELECT, INSERT ON "{schema}"."{table}" TO {role}')
                    curs.execute(
                        f'GRANT USAGE ON SEQUENCE "{schema}"."{recorder.events_table_name}'
                        f'_notification_id_seq" TO {role}'
                    )
        finally:
            lock_conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def _triggers(table: str) -> list[tuple[str, str, str]]:
    return [
        (f"{table}_immutable_row", "UPDATE OR DELETE", "ROW"),
        (f"{table}_immutable_truncate", "TRUNCATE", "STATEMENT"),
    ]


def quote_role(name: str) -> str:
    """A role name as a quoted SQL identifier (refusing names that could escape it)."""
    if not name or '"' in name or "\x00" in name:
        raise ValidationError(f"--app-role: not a role name: {name!r}", field="app_role")
    return f'"{name}"'


def check_append_only(recorder: ChunkedPostgresApplicationRecorder) -> None:
    """Refuse to serve unless every immutability trigger exists and is enabled."""
    from evaledger.domain.errors import InfrastructureError

    schema = recorder.datastore.schema
    tables = _immutable_tables(recorder)
    expected = {name: table for table in tables for name, _, _ in _triggers(table)}
    with store_errors(recorder._name), recorder.datastore.transaction(commit=False) as curs:
        curs.execute(
            "SELECT t.tgname AS name, t.tgenabled AS enabled FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = ANY(%s) AND NOT t.tgisinternal",
            (schema, list(tables)),
        )
        # 'O' fires in normal sessions, 'A' always; 'D' is disabled, 'R' fires only on replicas.
        enabled = {row["name"] for row in curs.fetchall() if row["enabled"] in ("O", "A")}
    missing = sorted(name for name in expected if name not in enabled)
    if missing:
        raise InfrastructureError(
            f"the events store is not append-only: trigger {missing[0]} on "
            f"{expected[missing[0]]} is missing or disabled; refusing to serve "
            "(re-run `evaledger migrate` as the migration role)"
        )
