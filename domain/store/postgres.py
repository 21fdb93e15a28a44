"""The PostgreSQL event store: the chained recorder, the schema's migration and its check.

Batches go by binary COPY, a few events by one binary INSERT; the migration creates the
tables, the append-only triggers and grants.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    InterfaceError,
    Notification,
    OperationalError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier
from psycopg_pool import PoolTimeout

from evaledger.domain.errors import InfrastructureError, ValidationError
from evaledger.domain.store.chain import (
    CHAIN_TABLE,
    CHECKPOINTS_TABLE,
    VERIFIED_TABLE,
    ChainWriter,
    postgres_chain_ddl,
    unextendable,
)
from evaledger.domain.store.errors import first_line, store_errors
from evaledger.domain.store.lanes import (
    LANES,
    LANES_TABLE,
    lanes_ready,
    migrate_lanes,
    read_pins,
)
from evaledger.domain.store.liveness import WATCHDOG, BoundedConnection, bounded_getconn
from evaledger.domain.store.payloads import (
    KEYS_TABLE,
    PAYLOADS_TABLE,
    SETTINGS_TABLE,
    PayloadVault,
    postgres_payload_ddl,
)
from evaledger.domain.store.recorder import LaneRow, LedgerRecorder, LogRow
from evaledger.domain.store.urls import (
    CONNECT_TIMEOUT,
    POSTGRES_CONNECT_KWARGS,
    RECONNECT_TIMEOUT,
)

T = TypeVar("T")
log = logging.getLogger("evaledger")

WRITE_LOCK = 4242001
"""Advisory lock key every writer of the events table takes for its transaction."""

LAST_STORED_BATCH = 1000
"""Aggregate ids per query reading their last stored events (sealing a run)."""

COPY_ABOVE = 8
"""Saves of more events than this go by binary COPY; smaller ones by one binary INSERT ..."""

CHUNK_BYTES = 1_000_000
"""... unless their states pass this many bytes (then COPY too)."""


def _lane_reads(table: Any) -> tuple[Any, Any, Any]:
    """The lane reads: a page of one lane, every lane's head, each lane's prefix up to a position.

    The heads and prefixes probe the (lane, lane_position) index once per lane, read backwards.
    """
    page = SQL(
        "SELECT notification_id, originator_id::text, originator_version, topic, state, "
        "lane_position FROM {t} WHERE lane = %s AND lane_position > %s "
        "ORDER BY lane_position LIMIT %s"
    ).format(t=table)
    heads = SQL(
        "SELECT l.lane, (SELECT max(lane_position) FROM {t} WHERE lane = l.lane) AS head "
        "FROM generate_series(0, %s) AS l(lane)"
    ).format(t=table)
    upto = SQL(
        "SELECT l.lane, (SELECT e.lane_position FROM {t} e WHERE e.lane = l.lane "
        "AND e.notification_id <= %s ORDER BY e.lane_position DESC LIMIT 1) AS head "
        "FROM generate_series(0, %s) AS l(lane)"
    ).format(t=table)
    return page, heads, upto


class ChunkedPostgresApplicationRecorder(LedgerRecorder, PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL recorder with the ledger chain, sending large saves by COPY.

    Every commit appends its chain block under the writers' lock (below), so chain order is
    notification order across processes.

    eventsourcing 9.5.6 sends a whole save as one composite-array parameter in pipeline mode;
    with psycopg 3.3 that statement never completes once it passes a few MB (measured here:
    imports of ~550 generated cases hang, 400 pass), and encoding the array is a third of a
    large import (its text encoding escapes every byte of every state: a third of a batch of
    cases through `record_cases`). A save of a few events goes as one INSERT of binary arrays,
    a batch by binary `COPY`, under the writers' lock in one transaction, so a save stays
    atomic and its notification ids stay contiguous (the lock keeps every other writer out
    until commit).
    """

    def __init__(
        self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"
    ) -> None:
        # Before super() opens the pool: every connection gets the time bounds.
        pool: Any = datastore.pool
        pool.kwargs.update(POSTGRES_CONNECT_KWARGS)
        pool.connection_class = BoundedConnection
        pool.reconnect_timeout = RECONNECT_TIMEOUT
        bounded_getconn(pool)
        kwargs = pool.kwargs
        self._name = f"PostgreSQL at {kwargs['host']}:{kwargs['port']}/{kwargs['dbname']}"
        # Open the pool's first connection before using it: a use racing the opening would
        # grow the pool to two connections in a process that needs one. (Only here: a waiting
        # open that times out later, in an outage, closes the pool for good.) Opening errors
        # are left to the caller, which names the store's URL.
        pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        super().__init__(datastore, events_table_name=events_table_name)
        self.select_log = (
            "SELECT notification_id, originator_id::text, originator_version, topic, state"
            f' FROM "{datastore.schema}"."{events_table_name}"'
            " WHERE notification_id >= %s ORDER BY notification_id LIMIT %s"
        )
        self.vault = PayloadVault("%s", f'"{datastore.schema}".')
        self.chain = ChainWriter(
            "%s",
            f'"{datastore.schema}"."{events_table_name}"',
            "notification_id",
            f'"{datastore.schema}".{CHAIN_TABLE}',
        )
        # Chain rows go through the owner's checking function: the app role has no INSERT.
        self.chain.insert = (
            f'SELECT "{datastore.schema}".{CHAIN_APPEND}(%s, %s, %s, %s, %s, %s) AS appended'
        )
        # Writers serialise on a transaction-scoped advisory lock instead of eventsourcing's
        # `LOCK TABLE … IN EXCLUSIVE MODE`, which needs UPDATE/DELETE privileges the app role
        # must not have. Same effect: one inserting transaction at a time, so notification
        # order is commit order and the chain's last block is the one this commit follows.
        self.lock_table_statements = [
            self.lock_table_statements[0],  # SET LOCAL lock_timeout
            SQL("SELECT pg_advisory_xact_lock({0})").format(WRITE_LOCK),
        ]
        # Sent as one simple query (no parameters): the statements above, then NOTIFY.
        self.begin_write = SQL("; ").join(
            [*self.lock_table_statements, SQL("NOTIFY {0}").format(Identifier(self.channel_name))]
        )
        table = SQL("{schema}.{table}").format(
            schema=Identifier(datastore.schema), table=Identifier(events_table_name)
        )
        columns = SQL(
            "{t} (originator_id, originator_version, topic, state, lane, lane_position)"
        ).format(t=table)
        # The lane's next positions follow its last (its index's last entry), read in the same
        # statement: under the writers' lock nobody else writes to the lane meanwhile.
        self.insert_rows = SQL(
            "INSERT INTO {c} SELECT u.o, u.v, u.t, u.s, %b::int2, h.p + u.n FROM "
            "unnest(%b::{o}[], %b::int8[], %b::text[], %b::bytea[]) WITH ORDINALITY "
            "AS u(o, v, t, s, n), (SELECT coalesce(max(lane_position), 0) AS p FROM {t} "
            "WHERE lane = %b::int2) AS h ORDER BY u.n RETURNING notification_id"
        ).format(c=columns, o=SQL(datastore.originator_id_type), t=table)
        self.copy_rows = SQL("COPY {c} FROM STDIN (FORMAT BINARY)").format(c=columns)
        self.select_head = SQL(
            "SELECT max(notification_id) AS last, (SELECT coalesce(max(lane_position), 0) "
            "FROM {t} WHERE lane = %s::int2) AS lane_last FROM {t}"
        ).format(t=table)
        self.select_lanes = SQL(
            "SELECT notification_id, lane, lane_position FROM {t} WHERE notification_id >= %s "
            "ORDER BY notification_id LIMIT %s"
        ).format(t=table)
        self.lanes = LANES
        self.select_lane_log, self.select_lane_heads, self.select_lanes_upto = _lane_reads(table)
        self.select_lane_topics = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state, "
            "lane_position FROM {t} WHERE lane = %s AND lane_position > %s "
            "AND topic = ANY(%s) ORDER BY lane_position LIMIT %s"
        ).format(t=table)
        self.select_after = SQL(
            "SELECT notification_id FROM {t} WHERE notification_id > %s ORDER BY notification_id"
        ).format(t=table)

    def _guarded(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call an eventsourcing method without its 10 × retry; one retry on fresh connections.

        eventsourcing retries connection errors 10 times, each waiting for the pool: minutes
        when the server is down. One retry after dropping broken idle connections is enough to
        ride over a restart; after that the store is reported down (503 / exit 3) in seconds.
        No retry when the liveness watchdog has just found the server hung.
        """
        func = getattr(method, "__wrapped__", method)
        with store_errors(self._name):
            try:
                return func(self, *args, **kwargs)
            except (OperationalError, InterfaceError) as e:
                if WATCHDOG.saw_hang() or isinstance(e.__cause__, PoolTimeout):
                    # The watchdog broke the call, or the pool found no server: a retry would
                    # only wait again.
                    raise
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

    def log_rows(self, start: int, limit: int) -> list[LogRow]:
        """Up to `limit` events from `start`, in log order, as plain tuples (one cursor)."""
        rows: list[LogRow] = self._guarded(
            ChunkedPostgresApplicationRecorder._log_rows, start, limit
        )
        return rows

    def _log_rows(self, start: int, limit: int) -> list[LogRow]:
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(self.select_log, (start, limit), prepare=True)
            return cast(list[LogRow], curs.fetchall())

    def max_notification_id(self) -> int | None:
        """The log's head."""
        head: int | None = self._guarded(PostgresApplicationRecorder.max_notification_id)
        return head

    def insert_events(
        self, stored_events: Sequence[StoredEvent], *, lane: int | None = None, **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert events in `lane` and their chain block atomically (one transaction).

        The lane is required (`LedgerStore._save` gives its project's): a write without one
        would land in no lane.
        """
        if lane is None or not 0 <= lane < self.lanes:
            raise ValueError(f"insert_events: a write lane in 0..{self.lanes - 1} is required")
        ids: list[int] = self._guarded(
            ChunkedPostgresApplicationRecorder._insert, stored_events, lane
        )
        return ids

    def lane_rows(self, start: int, limit: int) -> list[LaneRow]:
        """(position, lane, lane position) from position `start`, in log order."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            curs.execute(self.select_lanes, (start, limit))
            return [(r["notification_id"], r["lane"], r["lane_position"]) for r in curs.fetchall()]

    def lane_heads(self) -> dict[int, int]:
        """The last lane position of every lane holding events."""
        return self._lane_query(self.select_lane_heads, (self.lanes - 1,))

    def lanes_upto(self, position: int) -> dict[int, int]:
        """Per lane, the last lane position of its events at log positions up to `position`."""
        return self._lane_query(self.select_lanes_upto, (position, self.lanes - 1))

    def _lane_query(self, query: Any, params: tuple[int, ...]) -> dict[int, int]:
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            curs.execute(query, params)
            return {int(r["lane"]): int(r["head"]) for r in curs.fetchall() if r["head"]}

    def lane_log_rows(self, lane: int, after: int, limit: int) -> tuple[list[LogRow], list[int]]:
        """Up to `limit` events of `lane` after lane position `after`, in the lane's order."""
        found: tuple[list[LogRow], list[int]] = self._guarded(
            ChunkedPostgresApplicationRecorder._lane_log_rows, lane, after, limit
        )
        return found

    def _lane_log_rows(self, lane: int, after: int, limit: int) -> tuple[list[LogRow], list[int]]:
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(self.select_lane_log, (lane, after, limit), prepare=True)
            fetched = curs.fetchall()
        return [cast(LogRow, r[:5]) for r in fetched], [r[5] for r in fetched]

    def lane_notifications(
        self, lane: int, after: int, topics: Sequence[str], limit: int
    ) -> list[tuple[int, Any]]:
        """Up to `limit` events of `lane` with these topics after lane position `after`."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            curs.execute(self.select_lane_topics, (lane, after, list(topics), limit))
            return [
                (
                    int(r["lane_position"]),
                    Notification(
                        id=r["notification_id"],
                        originator_id=r["originator_id"],
                        originator_version=r["originator_version"],
                        topic=r["topic"],
                        state=bytes(r["state"]),
                    ),
                )
                for r in curs.fetchall()
            ]

    def read_pins(self) -> dict[str, int]:
        """The stored pins (projects that existed before lanes: lane 0)."""
        with store_errors(self._name), self.datastore.transaction(commit=False) as curs:
            return read_pins(curs, self.datastore.schema)

    def _insert(self, stored_events: Sequence[StoredEvent], lane: int) -> list[int]:
        # Not eventsourcing's pipelined insert: it catches an error raised after the INSERT
        # (in the chain's step) and commits the transaction before re-raising it.
        with self.datastore.transaction(commit=True) as curs:
            # The lock's timeout, the writers' lock and the listeners' wake-up: one round trip.
            curs.execute(self.begin_write)
            if (
                len(stored_events) > COPY_ABOVE
                or sum(len(e.state) for e in stored_events) > CHUNK_BYTES
            ):
                ids = self._copy(curs, stored_events, lane)
            else:
                ids = self._insert_rows(curs, stored_events, lane)
            try:
                self.chain.append(curs, stored_events, ids)
            except psycopg.errors.RaiseException as e:
                raise _refused_by_chain_function(e) from None
            self.vault.put(curs, stored_events)
        return ids

    def _insert_rows(self, curs: Any, stored_events: Sequence[StoredEvent], lane: int) -> list[int]:
        """A small save: one INSERT of four binary arrays, returning the positions in order."""
        curs.execute(
            self.insert_rows,
            (
                lane,
                [e.originator_id for e in stored_events],
                [e.originator_version for e in stored_events],
                [e.topic for e in stored_events],
                [e.state for e in stored_events],
                lane,
            ),
            binary=True,
        )
        return [row["notification_id"] for row in curs.fetchall()]

    def _copy(self, curs: Any, stored_events: Sequence[StoredEvent], lane: int) -> list[int]:
        """A batch by binary COPY (encoding a text array of composites was a third of a save)."""
        # Under the writers' lock nobody else inserts: every id above this one is ours.
        curs.execute(self.select_head, (lane,))
        row = curs.fetchone()
        last = (row["last"] if row is not None else None) or 0
        lane_last = int(row["lane_last"]) if row is not None else 0
        with curs.copy(self.copy_rows) as copy:
            copy.set_types(
                [self.datastore.originator_id_type, "int8", "text", "bytea", "int2", "int8"]
            )
            for i, e in enumerate(stored_events, start=lane_last + 1):
                copy.write_row((e.originator_id, e.originator_version, e.topic, e.state, lane, i))
        curs.execute(self.select_after, (last,))
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

    def prepare(self, env: dict[str, str], *, migrate: bool, app_role: str | None) -> None:
        """Migrate when asked, or when the tables are missing; then check they are append-only.

        Without a migration role (development) the app creates what it needs.
        """
        if migrate or not postgres_schema_exists(self):
            migrate_postgres(self, env, app_role)
        else:
            self.create_vault()
        check_append_only(self)
        self.pins = self.read_pins()

    def check_append_only(self) -> None:
        """Refuse to serve unless every immutability trigger exists and is enabled."""
        check_append_only(self)

    def create_chain(self) -> None:
        """Create the chain table (never adopting events: `evaledger chain adopt` does)."""
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(postgres_chain_ddl(self.datastore.schema))
        self.create_vault()

    def create_vault(self) -> None:
        """Create the payload vault's tables when missing (a store from before issue 34).

        A role that may not create them (the app role of a store not yet migrated) leaves it to
        `evaledger migrate`; sealing then fails at its first write, naming the table.
        """
        schema = self.datastore.schema
        try:
            with self.datastore.transaction(commit=True) as curs:
                curs.execute(
                    "SELECT to_regclass(%s) IS NOT NULL AS present",
                    (f'"{schema}".{SETTINGS_TABLE}',),  # the vault's last table
                )
                row = curs.fetchone()
                if row is not None and row["present"]:
                    return
                curs.execute(postgres_payload_ddl(schema))
        except (ProgrammingError, psycopg.errors.InsufficientPrivilege) as e:
            log.info("payload vault not created: %s", first_line(e))


# -- PostgreSQL schema: migrations (DDL, triggers, grants) and the start-up check ---------------

MIGRATION_LOCK = 4242000
"""Advisory lock serialising concurrent migrations (start-ups of a single-role set-up)."""


def _immutable_tables(recorder: ChunkedPostgresApplicationRecorder) -> tuple[str, ...]:
    return (recorder.events_table_name, CHAIN_TABLE, LANES_TABLE)


def connect_postgres(env: dict[str, str], **kwargs: Any) -> Any:
    """A plain psycopg connection to the store named by `events_env` (outside the pool)."""
    return BoundedConnection.connect(
        dbname=env["POSTGRES_DBNAME"],
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        user=env["POSTGRES_USER"],
        password=env["POSTGRES_PASSWORD"] or None,
        **{
            **POSTGRES_CONNECT_KWARGS,
            "connect_timeout": int(env.get("POSTGRES_CONNECT_TIMEOUT", "5")),
            **kwargs,
        },
    )


def postgres_schema_exists(recorder: ChunkedPostgresApplicationRecorder) -> bool:
    """Whether the events table, the chain and the checkpoints are there (made by a migration).

    A store migrated before a table existed (the checkpoints, issue 34) is migrated again on
    open by a role that may; the app role alone is told to run `evaledger migrate`.
    """
    schema = recorder.datastore.schema
    with recorder.datastore.transaction(commit=False) as curs:
        curs.execute(
            "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL "
            "AND to_regclass(%s) IS NOT NULL AND to_regprocedure(%s) IS NOT NULL "
            "AND to_regclass(%s) IS NOT NULL AS ready",
            (
                f'"{schema}"."{recorder.events_table_name}"',
                f'"{schema}".{CHAIN_TABLE}',
                f'"{schema}".{VERIFIED_TABLE}',
                f'"{schema}".{CHAIN_APPEND}({CHAIN_APPEND_ARGS})',
                f'"{schema}".{CHECKPOINTS_TABLE}',
            ),
        )
        row = curs.fetchone()
        ready = bool(row is not None and row["ready"])
        return ready and lanes_ready(curs, schema, recorder.events_table_name)


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
            f"({first_line(e)}); run `evaledger migrate` as the database owner"
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
                    f"LANGUAGE plpgsql AS $${REFUSE_BODY}$$"
                )
                curs.execute(chain_append_ddl(schema, recorder.events_table_name))
                curs.execute(
                    f'REVOKE ALL ON FUNCTION "{schema}".{CHAIN_APPEND}({CHAIN_APPEND_ARGS}) '
                    "FROM PUBLIC"
                )
                events = recorder.events_table_name
                migrate_lanes(curs, schema, events)
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
                    for table in _immutable_tables(recorder)[:2]:
                        curs.execute(f'GRANT SELECT, INSERT ON "{schema}"."{table}" TO {role}')
                    # Pins are the migration's alone: the app role reads them.
                    curs.execute(f'GRANT SELECT ON "{schema}".{LANES_TABLE} TO {role}')
                    # Chain rows only through the owner's checking function (SECURITY DEFINER):
                    # a row the app role wrote itself could block every later writer.
                    curs.execute(
                        f'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON "{schema}".{CHAIN_TABLE} '
                        f"FROM {role}"
                    )
                    curs.execute(f'GRANT SELECT, INSERT ON "{schema}".{VERIFIED_TABLE} TO {role}')
                    curs.execute(
                        f'GRANT SELECT, INSERT ON "{schema}".{CHECKPOINTS_TABLE} TO {role}'
                    )
                    # The vault is not append-only: erasure destroys keys and ciphertexts.
                    for table in (KEYS_TABLE, PAYLOADS_TABLE):
                        curs.execute(
                            f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{schema}".{table} TO {role}'
                        )
                    # Whether the store seals: recorded once (`LedgerRecorder.sealing`), never
                    # changed by the app role (turning it on is `migrate --seal-payloads`).
                    curs.execute(f'GRANT SELECT, INSERT ON "{schema}".{SETTINGS_TABLE} TO {role}')
                    curs.execute(
                        f'GRANT EXECUTE ON FUNCTION "{schema}".{CHAIN_APPEND}'
                        f"({CHAIN_APPEND_ARGS}) TO {role}"
                    )
                    # Positions come from the sequence only: the app role may not choose one
                    # (a row forged at position 0 would sit before the chain's first block).
                    curs.execute(f'REVOKE INSERT ON "{schema}"."{events}" FROM {role}')
                    curs.execute(
                        "GRANT INSERT (originator_id, originator_version, topic, state, lane, "
                        "lane_position) "
                        f'ON "{schema}"."{events}" TO {role}'
                    )
                    curs.execute(
                        f'GRANT USAGE ON SEQUENCE "{schema}"."{recorder.events_table_name}'
                        f'_notification_id_seq" TO {role}'
                    )
        finally:
            lock_conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


REFUSE_BODY = (
    " BEGIN RAISE EXCEPTION "
    "'evaledger events are immutable: % refused on %', TG_OP, TG_TABLE_NAME; END "
)
"""The trigger function's body; start-up compares the stored body with it (a no-op swap shows)."""


CHAIN_APPEND = "evaledger_chain_append"
CHAIN_APPEND_ARGS = "bigint, bigint, integer, text, text, boolean"


def chain_append_body(schema: str, events_table: str) -> str:
    """The body of the function every chain row is written by (the owner's, SECURITY DEFINER).

    A row must cover exactly events this transaction inserted (an adopted block: every event
    before them, over an empty chain), after the last row; a signed row may follow unsigned
    ones only when the owner writes it. So the app role cannot write a row that blocks others:
    no row ahead of the sequence, none without its events, no signature on an unsigned chain.
    A commit's events are in one lane, at the lane positions that follow the lane's last
    (`store/lanes.py`); an adoption, which chains whatever was stored, is exempt.
    """
    chain, events = f'"{schema}".{CHAIN_TABLE}', f'"{schema}"."{events_table}"'
    return f"""
DECLARE prev_last bigint; prev_mac text; stored bigint; mine bigint; lo bigint; hi bigint;
  lanes bigint; unlaned bigint; the_lane smallint; lane_lo bigint; lane_hi bigint;
BEGIN
  SELECT last_position, mac INTO prev_last, prev_mac FROM {chain}
    ORDER BY last_position DESC LIMIT 1;
  IF p_first < 1 OR p_first > p_last OR p_first <= coalesce(prev_last, 0) THEN
    RAISE EXCEPTION 'evaledger chain: positions % to % do not follow the last commit (%)',
      p_first, p_last, prev_last;
  END IF;
  SELECT count(*), count(*) FILTER (WHERE xmin = pg_current_xact_id()::xid),
    min(notification_id), max(notification_id), count(DISTINCT lane),
    count(*) FILTER (WHERE lane IS NULL OR lane_position IS NULL), min(lane),
    min(lane_position), max(lane_position)
    INTO stored, mine, lo, hi, lanes, unlaned, the_lane, lane_lo, lane_hi
    FROM {events} WHERE notification_id BETWEEN p_first AND p_last;
  IF stored <> p_events OR stored < 1 OR lo <> p_first OR hi <> p_last THEN
    RAISE EXCEPTION 'evaledger chain: % events claimed, % stored at positions % to %',
      p_events, stored, p_first, p_last;
  END IF;
  IF p_adopted THEN
    IF prev_last IS NOT NULL OR EXISTS (SELECT 1 FROM {events} WHERE notification_id < p_first)
    THEN
      RAISE EXCEPTION 'evaledger chain: an adoption covers every event over an empty chain';
    END IF;
  ELSIF mine <> stored THEN
    RAISE EXCEPTION 'evaledger chain: positions % to % were not written by this transaction',
      p_first, p_last;
  END IF;
  IF prev_last IS NOT NULL AND prev_mac IS NULL AND p_mac IS NOT NULL
     AND session_user <> current_user THEN
    RAISE EXCEPTION 'evaledger chain: only the owner signs a commit after unsigned ones';
  END IF;
  IF NOT p_adopted AND (unlaned > 0 OR lanes <> 1 OR lane_hi - lane_lo + 1 <> stored
     OR lane_lo <> 1 + coalesce((SELECT max(lane_position) FROM {events}
                                 WHERE lane = the_lane AND lane_position < lane_lo), 0)) THEN
    RAISE EXCEPTION 'evaledger chain: positions % to % are not the next positions of one lane',
      p_first, p_last;
  END IF;
  INSERT INTO {chain} (first_position, last_position, events, link, mac, adopted)
    VALUES (p_first, p_last, p_events, p_link, p_mac, p_adopted);
  RETURN true;
END
"""


def chain_append_ddl(schema: str, events_table: str) -> str:
    """Create (or repair) the chain's writing function."""
    return (
        f'CREATE OR REPLACE FUNCTION "{schema}".{CHAIN_APPEND}(p_first bigint, p_last bigint, '
        "p_events integer, p_link text, p_mac text, p_adopted boolean) RETURNS boolean "
        "LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp "
        f"AS $${chain_append_body(schema, events_table)}$$"
    )


SIGNS_AFTER_UNSIGNED = "only the owner signs a commit after unsigned ones"


def _refused_by_chain_function(e: psycopg.errors.RaiseException) -> Exception:
    """The chain function's refusal as the one-line infrastructure error (issue 29)."""
    message = first_line(e)
    if not message.startswith("evaledger chain: "):
        return e
    reason = message.removeprefix("evaledger chain: ")
    if reason == SIGNS_AFTER_UNSIGNED:
        reason = (
            "its last commit is unsigned although the ledger is signed (written without the "
            "checkpoint key), and only the migration role may sign after it"
        )
    return unextendable(reason)


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
        # Every trigger must call the one function, whose body must be the migration's.
        curs.execute(
            "SELECT count(*) AS n FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc p ON p.oid = t.tgfoid "
            "WHERE n.nspname = %s AND c.relname = ANY(%s) AND NOT t.tgisinternal "
            "AND (p.proname <> 'evaledger_refuse_change' OR p.prosrc <> %s)",
            (schema, list(tables), REFUSE_BODY),
        )
        row = curs.fetchone()
        swapped = bool(row is not None and row["n"])
        curs.execute(
            "SELECT p.prosrc AS body, p.prosecdef AS definer FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s "
            "AND p.proname = %s",
            (schema, CHAIN_APPEND),
        )
        appends = curs.fetchall()
    body = chain_append_body(schema, recorder.events_table_name)
    if [(r["body"], r["definer"]) for r in appends] != [(body, True)]:
        raise InfrastructureError(
            f"the ledger chain's writing function {CHAIN_APPEND} is missing or was replaced "
            "(its body is not the migration's); refusing to serve (re-run `evaledger migrate` "
            "as the migration role)"
        )
    if swapped:
        raise InfrastructureError(
            "the events store is not append-only: the immutability trigger function was "
            "replaced (its body is not the migration's); refusing to serve (re-run `evaledger "
            "migrate` as the migration role)"
        )
    missing = sorted(name for name in expected if name not in enabled)
    if missing:
        raise InfrastructureError(
            f"the events store is not append-only: trigger {missing[0]} on "
            f"{expected[missing[0]]} is missing or disabled; refusing to serve "
            "(re-run `evaledger migrate` as the migration role)"
        )
