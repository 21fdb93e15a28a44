"""Where a ledger is stored: one URL parsed into the event store's settings and the read models'."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from evaledger.domain.errors import InfrastructureError, ValidationError

SQLITE_RECORDER_TOPIC = "evaledger.domain.store.sqlite:ChainedSQLiteApplicationRecorder"
POSTGRES_RECORDER_TOPIC = "evaledger.domain.store.postgres:ChunkedPostgresApplicationRecorder"
"""The recorders eventsourcing builds (by topic, so this module imports no driver)."""


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

KEY_ENV = "EVALEDGER_CHECKPOINT_KEY_FILE"
"""The environment variable naming the file of the key that signs the ledger chain (here, with
the store's other settings, so reading the settings loads no part of the chain)."""

CONNECT_TIMEOUT = 3
"""Seconds to open a PostgreSQL connection (or wait for a pooled one) before giving up."""
STATEMENT_TIMEOUT_MS = 60_000
"""Longest a PostgreSQL statement may run (a lost lock or a runaway query ends, not hangs)."""
IDLE_IN_TRANSACTION_TIMEOUT = 30
"""Seconds PostgreSQL lets an events-store session sit idle inside a transaction before ending
it (eventsourcing's default, 5 s, ended a test's session on a loaded CI machine)."""
RECONNECT_TIMEOUT = 5.0
"""The events pool gives up a reconnection attempt after this; the next request starts anew,
so recovery after an outage never waits on a long exponential backoff."""

POSTGRES_OPTIONS = f"-c statement_timeout={STATEMENT_TIMEOUT_MS}"

POSTGRES_CONNECT_KWARGS: dict[str, str | int] = {
    "connect_timeout": CONNECT_TIMEOUT,
    "options": POSTGRES_OPTIONS,
    # A peer that stops acknowledging (a host gone, a path black-holed) ends the connection in
    # ~10 s instead of the kernel's ~15 min; `domain/store/liveness.py` bounds the rest.
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 2,
    "tcp_user_timeout": 10_000,
}
"""libpq settings of every PostgreSQL connection: the time bounds (DESIGN §13, issue 24)."""


def _sqlite_files(url: str, path: str) -> tuple[Path, Path]:
    """The events and views files of a SQLite store, their folder made (owner-only) if new."""
    p = Path(path)
    folder = path.endswith("/") or p.is_dir()
    try:
        if folder:
            p.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InfrastructureError(
            f"store {url} cannot be created: {e.strerror or e} ({e.filename or p})"
        ) from None
    if folder:
        return p / "events.sqlite", p / "views.sqlite"
    return p, p.with_name(f"{p.stem}.views{p.suffix or '.db'}")


def sqlite_events_file(url: str) -> Path | None:
    """The events file a `sqlite:///` file URL names, its folder not made; None for others.

    How a read finds a store missing before `parse_db_url` makes its folder.
    """
    if not url.startswith("sqlite:///") or ":memory:" in url:
        return None
    path = Path(url.removeprefix("sqlite:///"))
    return path / "events.sqlite" if url.endswith("/") or path.is_dir() else path


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
                    "APPLICATION_RECORDER_TOPIC": SQLITE_RECORDER_TOPIC,
                },
                views_url=f"sqlite:///file:{name}-views?mode=memory&cache=shared&uri=true",
            )
        events, views = _sqlite_files(url, path)
        return StorageLocation(
            url=url,
            kind="sqlite",
            events_env={
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": str(events),
                "SQLITE_LOCK_TIMEOUT": "30",
                "APPLICATION_RECORDER_TOPIC": SQLITE_RECORDER_TOPIC,
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
            # The server ends a session left inside a transaction this long (eventsourcing's
            # default is 5 s): long enough that a process the machine descheduled mid-write is
            # not cut off (a CI run at load 4 on 2 cores was, stop 42), short enough that a hung
            # writer cannot hold its lane's lock for long (docs/decisions.md, session 12).
            "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": str(IDLE_IN_TRANSACTION_TIMEOUT),
            "APPLICATION_RECORDER_TOPIC": POSTGRES_RECORDER_TOPIC,
            # Tables are created by a migration (`evaledger migrate`, or the ledger's first
            # start-up in a single-role set-up), never by the recorder: the app role of a
            # two-role set-up may not run DDL.
            "CREATE_TABLE": "no",
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
