"""Storing events: orjson transcoder, a mapper with stable topics and upcasting, storage URLs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlparse
from uuid import UUID

import orjson
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg.sql import SQL, Identifier

from evaledger.domain.errors import ValidationError
from evaledger.domain.events import BY_TOPIC_NAME, DomainEvent, split_topic, stored_hash

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

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
        return StoredEvent(
            originator_id=event.originator_id,
            originator_version=event.originator_version,
            topic=type(event).topic(),
            # The bytes the hash chain was computed over (same orjson encoding as the transcoder).
            state=event.stored_state(),
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
            "POSTGRES_POOL_SIZE": "5",
            "POSTGRES_MAX_OVERFLOW": "10",
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


CHUNK_BYTES = 1_000_000
"""Largest save (state bytes) sent through eventsourcing's pipelined statement; larger: COPY."""


class ChunkedPostgresApplicationRecorder(PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL recorder, sending large saves with binary COPY.

    eventsourcing 9.5.6 sends a whole save as one composite-array parameter in pipeline mode;
    with psycopg 3.3 that statement never completes once it passes a few MB (measured here:
    imports of ~550 generated cases hang, 400 pass), and encoding the array is a third of a
    large import. Small saves keep the pipelined path; large ones are streamed with binary
    `COPY` under the same table lock, in one transaction, so a save stays atomic and its
    notification ids stay contiguous (the lock keeps every other writer out until commit).
    """

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert events atomically; large saves by binary COPY."""
        if sum(len(e.state) for e in stored_events) <= CHUNK_BYTES or kwargs.get("tracking"):
            small: Sequence[int] | None = super().insert_events(stored_events, **kwargs)
            return small
        table = SQL("{schema}.{table}").format(
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name)
        )
        with self.datastore.transaction(commit=True) as curs:
            self._lock_table(curs)
            self._notify_channel(curs)
            # Under the EXCLUSIVE lock nobody else inserts: every id above this one is ours.
            curs.execute(SQL("SELECT max(notification_id) AS last FROM {t}").format(t=table))
            row = curs.fetchone()
            last = (row["last"] if row is not None else None) or 0
            copy_sql = SQL(
                "COPY {t} (originator_id, originator_version, topic, state) "
                "FROM STDIN (FORMAT BINARY)"
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
