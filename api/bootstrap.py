"""The composition root: settings in, a wired ledger + read side out.

Start-up (issue 19): a read on a caught-up store needs the read models only, so this module
imports the ledger, the projections' runner and the reports when they are first used
(`Services.ledger`, `.runner`, `.reports`), and a database driver only for its own store
(PostgreSQL's through `sys.modules` in the error tuples: a driver not loaded raised nothing).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO
from urllib.parse import urlsplit

import sqlalchemy.exc as sa
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from evaledger.domain.errors import InfrastructureError
from evaledger.domain.store.permissions import private_files, warn_shared_store
from evaledger.domain.store.urls import (
    DEFAULT_DB_URL,
    KEY_ENV,
    StorageLocation,
    parse_db_url,
    sqlite_events_file,
)
from evaledger.projections.bare_reads import log_head
from evaledger.projections.leadership import LeaderProbe
from evaledger.projections.queries import ReadModels
from evaledger.projections.tables import make_engine

if TYPE_CHECKING:
    import psycopg
    from rich.progress import Progress, TaskID

    from evaledger.api.jobs import JobQueue
    from evaledger.domain.ledger import Ledger
    from evaledger.projections.reports import Reports
    from evaledger.projections.runner import ProjectionRunner

log = logging.getLogger(__name__)


class Settings(BaseModel):
    """Everything a process needs to know to open the ledger."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    db: str = Field(
        default=DEFAULT_DB_URL,
        description="sqlite:///relative/path, sqlite:////absolute/path or postgresql://...",
    )
    projections: Literal["inline", "external"] = Field(
        default="inline",
        description="inline: catch projections up in-process before reads (single-flight); "
        "external: an `evaledger project --follow` process does it, reads wait for it.",
    )
    default_actor: str = Field(default="anonymous", description="Actor when none is sent.")
    auth: Literal["auto", "tokens", "open"] = Field(
        default="auto",
        description="tokens: every request needs a bearer token; open: none needed (loopback "
        "only); auto: tokens once any token was issued in the store, else open.",
    )
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1, description="Larger request bodies get 413."
    )
    allowed_hosts: tuple[str, ...] = Field(
        default=(),
        description="Host names served besides the loopback names and the public URL's host "
        "(EVALEDGER_ALLOWED_HOSTS, comma-separated; `serve --allowed-hosts`). Every request's "
        "Host must be one of them, with or without tokens; `*` serves any Host.",
    )
    public_url: str | None = Field(
        default=None,
        description="Where people reach the server through a proxy (https://evals.example.com; "
        "EVALEDGER_PUBLIC_URL, `serve --public-url`): its origin passes the same-origin checks, "
        "its host the Host allow-list, and an https one marks the sign-in cookie Secure.",
    )
    verify_every_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds between the server's own checks of the log and the read models "
        "(what GET /verify?views=1 does); /health reports what the last one found. Off when "
        "unset (EVALEDGER_VERIFY_EVERY).",
    )
    trace_quiet_s: float = Field(
        default=30.0,
        ge=0,
        le=86_400,
        description="Seconds without a new span after which an OTLP trace whose root span "
        "has ended is complete and recorded as a case (EVALEDGER_TRACE_QUIET).",
    )
    alert_private_webhooks: bool = Field(
        default=False,
        description="Whether alert webhooks may point at loopback, private, link-local or "
        "reserved addresses (EVALEDGER_ALERT_PRIVATE_WEBHOOKS=1); refused by default (SSRF).",
    )
    checkpoint_key_file: str | None = Field(
        default=None,
        description="File holding the key that signs each commit of the ledger chain "
        "(HMAC-SHA256) and that `verify` checks; kept outside the database.",
    )
    seal_payloads: bool | None = Field(
        default=None,
        description="Whether a store created now seals: stores transcripts' messages, judges' "
        "prompts and replies and spans' message text encrypted under a per-case key, so "
        "`evaledger erase` can remove them without breaking the chain. Unset: a new store "
        "seals. The store records its choice at creation and keeps it; on a store from before "
        "that record, 1 turns sealing on (EVALEDGER_SEAL_PAYLOADS=0|1).",
    )

    @field_validator("public_url")
    @classmethod
    def _origin(cls, value: str | None) -> str | None:
        """The public URL as an origin: `scheme://host[:port]`, lower-cased, no path."""
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an http(s)://host[:port] address, got {value!r}")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"the server is served at the root of its host, got {value!r}")
        return f"{parts.scheme}://{parts.netloc.lower()}"

    @classmethod
    def from_env(cls, db: str | None = None, **overrides: str) -> Settings:
        """Settings from EVALEDGER_* environment variables, overridden by arguments."""
        values: dict[str, str] = {}
        if "EVALEDGER_DB" in os.environ:
            values["db"] = os.environ["EVALEDGER_DB"]
        for name in ("projections", "auth", "max_body_bytes"):
            if f"EVALEDGER_{name.upper()}" in os.environ:
                values[name] = os.environ[f"EVALEDGER_{name.upper()}"]
        if os.environ.get("EVALEDGER_VERIFY_EVERY"):
            values["verify_every_s"] = os.environ["EVALEDGER_VERIFY_EVERY"]
        if os.environ.get("EVALEDGER_TRACE_QUIET"):
            values["trace_quiet_s"] = os.environ["EVALEDGER_TRACE_QUIET"]
        if os.environ.get("EVALEDGER_ALERT_PRIVATE_WEBHOOKS"):
            values["alert_private_webhooks"] = os.environ["EVALEDGER_ALERT_PRIVATE_WEBHOOKS"]
        if os.environ.get(KEY_ENV):
            values["checkpoint_key_file"] = os.environ[KEY_ENV]
        if os.environ.get("EVALEDGER_SEAL_PAYLOADS"):
            values["seal_payloads"] = os.environ["EVALEDGER_SEAL_PAYLOADS"]
        if os.environ.get("EVALEDGER_PUBLIC_URL"):
            values["public_url"] = os.environ["EVALEDGER_PUBLIC_URL"]
        if db:
            values["db"] = db
        values.update(overrides)
        hosts = os.environ.get("EVALEDGER_ALLOWED_HOSTS", "")
        return cls.model_validate(
            {**values, "allowed_hosts": tuple(h.strip() for h in hosts.split(",") if h.strip())}
        )


PROGRESS_MIN_EVENTS = 5_000
"""A catch-up with at least this many events still to do after its first page shows progress."""


class CatchUpProgress:
    """The `progress` of a projection catch-up: a rich bar on a terminal when it is long.

    Nothing is shown for a short catch-up (every read does one) or when the stream is not a
    terminal; a long one off a terminal is logged once instead.
    """

    def __init__(
        self,
        label: str = "catching up read models",
        stream: TextIO | None = None,
        min_events: int | None = None,
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.min_events = PROGRESS_MIN_EVENTS if min_events is None else min_events
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._decided = False

    def __call__(self, position: int, target: int) -> None:
        """One page applied: `position` reached of `target`."""
        if not self._decided:
            self._decided = True
            if target - position < self.min_events:
                return
            if not self.stream.isatty():
                log.info("%s: %d events to project", self.label, target - position)
                return
            # lazy: rich's progress bar, drawn only for a long catch-up on a terminal
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=target)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=position, total=target)

    def close(self) -> None:
        """Take the bar down (a no-op when none was shown)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


@dataclass
class Services:
    """A wired ledger: commands, projections and queries over one store.

    The ledger, the projections' runner and the reports are built on first use: a read on a
    caught-up store (`sync` finds every projection at the log's head) needs none of them.
    """

    settings: Settings
    location: StorageLocation
    engine: Engine
    reads: ReadModels
    open_ledger: Callable[[], Ledger]
    """Opens the store's ledger (called once, by the first use of `ledger`)."""
    _closed: bool = field(default=False)
    leader: LeaderProbe = field(init=False)
    """Whether an `evaledger project --follow` leads on this store (then reads wait for it)."""
    _ledger: Ledger | None = field(default=None, init=False)
    _runner: ProjectionRunner | None = field(default=None, init=False)
    _reports: Reports | None = field(default=None, init=False)
    _job_queue: JobQueue | None = field(default=None, init=False)
    _building: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.leader = LeaderProbe(self.engine)

    @property
    def ledger(self) -> Ledger:
        """The ledger (commands, the log), opened on first use."""
        with self._building:
            if self._ledger is None:
                self._ledger = self.open_ledger()
            return self._ledger

    @property
    def runner(self) -> ProjectionRunner:
        """The projections' runner, built on first use (it loads every projector)."""
        ledger = self.ledger
        with self._building:
            if self._runner is None:
                # lazy: the projectors and their runner, which a caught-up read never builds
                from evaledger.projections.projectors import all_projections
                from evaledger.projections.runner import ProjectionRunner

                with infrastructure_errors(self.settings.db):
                    self._runner = ProjectionRunner(ledger, self.engine, all_projections())
            return self._runner

    @runner.setter
    def runner(self, runner: ProjectionRunner) -> None:
        """Run other projections (tests: the store's own and one more)."""
        self._runner = runner

    @property
    def job_queue(self) -> JobQueue | None:
        """The durable judge-job queue on PostgreSQL, built on first use; None on SQLite."""
        if self.location.kind != "postgresql":
            return None
        with self._building:
            if self._job_queue is None:
                # lazy: procrastinate and the judge runner, only for judge jobs (PostgreSQL)
                from evaledger.api.jobs import JobQueue

                self._job_queue = JobQueue(self, self.location)
            return self._job_queue

    @property
    def reports(self) -> Reports:
        """Comparisons, grades and roll-ups over the read models, built on first use."""
        with self._building:
            if self._reports is None:
                # lazy: the reports and the comparison rules, for the commands that print one
                from evaledger.projections.reports import Reports

                self._reports = Reports(self.reads)
            return self._reports

    def sync(self, position: int | None = None) -> None:
        """Make reads reflect writes up to `position` (or everything written so far).

        First one indexed query on each side (the log's head, the projections' tracking rows):
        caught up, the usual read, it returns without building the ledger or the runner.
        Inline, a long catch-up (the first read after a big import) shows its progress on
        stderr when that is a terminal (`CatchUpProgress`).
        """
        one_lane = self.location.kind == "sqlite"
        if self._runner is None and (position is None or one_lane):
            # No runner yet: its projections are the composition's (`PROJECTION_NAMES`). Their
            # tracked number is the sum of their lane positions (one lane: the log position).
            # Reaching the sum of the lanes' heads means every lane is folded; passing a given
            # log position means its events are folded on a one-lane store only.
            if position is not None:
                target = position
            else:
                target = self.log_head() if one_lane else sum(self.ledger.lane_heads().values())
            reached = self.reads.projected_position()
            if reached is not None and reached >= target:
                return
        # A position is a log position (`Written.position`): its lane's events up to it, and
        # every other lane's up to it, are waited for (`ProjectionRunner.target`).
        if self.settings.projections != "inline" or self.leader.projector_running():
            self.runner.wait_for(position, inline=False)
            return
        progress = CatchUpProgress()
        try:
            self.runner.catch_up(until=position, progress=progress)
        finally:
            progress.close()

    def log_head(self) -> int:
        """The last position in the log: the ledger's, or (not opened yet) a SQLite file's."""
        if self._ledger is None:
            head = sqlite_log_head(self.location)
            if head is not None:
                return head
        return self.ledger.position()

    def tokens_required(self) -> bool:
        """Whether requests must carry a token (decided once, when a server starts)."""
        if self.settings.auth == "auto":
            return self.ledger.has_tokens()
        return self.settings.auth == "tokens"

    def close(self) -> None:
        """Release connections."""
        if not self._closed:
            self._closed = True
            if self._job_queue is not None:
                self._job_queue.close()
            if self._ledger is not None:
                self._ledger.close()
            self.engine.dispose()


def sqlite_log_head(location: StorageLocation) -> int | None:
    """The head of a SQLite file store's log, read without opening the ledger; else None.

    The query of eventsourcing's own `max_notification_id` (`MAX(rowid)`, the primary key), on
    a read-only connection (`bare_reads.log_head`, which `evaledger runs` reads it by too).
    None for a PostgreSQL or in-memory store, or a file the query cannot read (the ledger,
    opened then, reports what is wrong with it).
    """
    if location.kind != "sqlite":
        return None
    return log_head(location.events_env.get("SQLITE_DBNAME", ""))


def build_services(settings: Settings, *, create: bool = True) -> Services:
    """Open the store named by the settings and wire the ledger, projections and queries.

    With `create=False` (read commands) a store that does not exist is an InfrastructureError
    instead of a new empty store. An unreachable, locked or corrupt store is one too. The
    ledger of a SQLite store is opened on first use; a PostgreSQL store's at once, because
    opening it checks the store is append-only (refusing to serve one that is not).
    """
    url = settings.db
    # A new SQLite store (folder, files, journals) is the owner's only: umask 077 while opening.
    with infrastructure_errors(url), private_files():
        if not create:
            require_existing_store(url)
        location = parse_db_url(url)
        if location.kind == "postgresql":
            probe_postgres(location)
        else:
            probe_sqlite(location)
        key = load_key(settings.checkpoint_key_file) if settings.checkpoint_key_file else None
        seal = settings.seal_payloads
        ledger = (
            _open_ledger(location, key, seal) if create or location.kind == "postgresql" else None
        )
        try:
            engine = make_engine(location.views_url)
            engine.connect().close()  # creates the views file now, under the umask
            warn_shared_store(location)
        except BaseException:
            if ledger is not None:
                ledger.close()
            raise

    def open_ledger() -> Ledger:
        with infrastructure_errors(url), private_files():
            return _open_ledger(location, key, seal)

    services = Services(settings, location, engine, ReadModels(engine), open_ledger)
    services._ledger = ledger
    return services


def _open_ledger(location: StorageLocation, key: bytes | None, seal: bool | None) -> Ledger:
    # lazy: the ledger and eventsourcing, opened on first use (a caught-up read needs neither)
    from evaledger.domain.ledger import Ledger

    return Ledger(location, checkpoint_key=key, seal_payloads=seal)


def load_key(path: str) -> bytes:
    """The chain's signing key from its file (`domain/store/chain.py`, imported when used)."""
    # lazy: the chain and eventsourcing's persistence, only when a key file is given
    from evaledger.domain.store.chain import load_key as load

    return load(path)


# ---------------------------------------------------------------------------------------------
# infrastructure errors: whatever the drivers raise becomes one InfrastructureError naming the cause

PROBE_TIMEOUT_S = 5
"""Seconds to reach PostgreSQL before giving up (eventsourcing's pool would wait 30 s)."""

_UNAVAILABLE = (
    ("sqlite3", "OperationalError"),
    ("psycopg", "OperationalError"),
    ("psycopg", "InterfaceError"),
    ("psycopg_pool", "PoolTimeout"),
    ("eventsourcing.persistence", "OperationalError"),
    ("eventsourcing.persistence", "InterfaceError"),
    ("eventsourcing.persistence", "ConnectionUnavailableError"),
    ("sqlalchemy.exc", "OperationalError"),
    ("sqlalchemy.exc", "InterfaceError"),
    ("sqlalchemy.exc", "TimeoutError"),
)
"""(module, class) of what a driver raises when the store is unavailable."""
# "file is not a database" / "disk image is malformed" are the base DatabaseError itself, while
# its subclasses (IntegrityError, ProgrammingError, ...) are bugs or conflicts, not the store.
_CORRUPT = (("sqlite3", "DatabaseError"), ("eventsourcing.persistence", "DatabaseError"))


def loaded_classes(names: tuple[tuple[str, str], ...]) -> tuple[type[BaseException], ...]:
    """The named exception classes of the modules loaded so far.

    Start-up: nothing is imported for this; a driver never loaded raised none of its exceptions.
    """
    return tuple(
        getattr(sys.modules[module], name) for module, name in names if module in sys.modules
    )


# (phrase in the driver's message, what it means), first match wins.
_CAUSES = (
    ("locked", "is locked by another process"),
    ("not a database", "is corrupt"),
    ("malformed", "is corrupt"),
    ("does not exist", "does not exist"),
    ("too many clients", "refuses connections (too many clients)"),
    ("password authentication failed", "refused the credentials"),
    ("connection refused", "is unreachable"),
    ("couldn't get a connection", "is unreachable"),
    ("timeout", "is unreachable"),
    ("could not translate host name", "is unreachable"),
    ("unable to open database file", "cannot be opened"),
)


def display_url(url: str) -> str:
    """The store URL without its password."""
    if url.startswith("postgres"):
        try:
            return make_url(url).render_as_string(hide_password=True)
        except sa.ArgumentError:
            return url.split("@")[-1]
    return url


def infrastructure_error(exc: BaseException, url: str) -> InfrastructureError | None:
    """The InfrastructureError behind a driver exception (its cause chain), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, InfrastructureError):
            return current
        driver = current.orig if isinstance(current, sa.DBAPIError) else current
        if isinstance(current, loaded_classes(_UNAVAILABLE)) or type(driver) in loaded_classes(
            _CORRUPT
        ):
            return InfrastructureError(describe_cause(driver or current, url))
        current = current.__cause__ or current.__context__
    return None


def describe_cause(exc: BaseException, url: str) -> str:
    """One line: which store, what is wrong with it, and the driver's own words."""
    words = " ".join(str(exc).split()) or type(exc).__name__
    lowered = words.lower()
    verdict = next((v for phrase, v in _CAUSES if phrase in lowered), "is unavailable")
    return f"store {display_url(url)} {verdict}: {words}"


@contextmanager
def infrastructure_errors(url: str) -> Iterator[None]:
    """Re-raise driver exceptions about the store as an InfrastructureError."""
    try:
        yield
    except InfrastructureError:
        raise
    except Exception as e:
        infra = infrastructure_error(e, url)
        if infra is None:
            raise
        raise infra from e


def require_existing_store(url: str) -> None:
    """Raise InfrastructureError when the store named by `url` holds no ledger yet."""
    events = sqlite_events_file(url)
    if events is not None:
        if not events.is_file():
            raise InfrastructureError(
                f"store {url} does not exist ({events} not found); "
                "import a run bundle first, or check --db / EVALEDGER_DB"
            )
        return
    location = parse_db_url(url)
    if location.kind == "postgresql":
        # lazy: the ledger and eventsourcing, only to name a PostgreSQL store's events table
        from evaledger.domain.ledger import LedgerApplication

        table = f"{LedgerApplication.name.lower()}_events"
        with _connect(location) as conn:
            found = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
        if found is None or found[0] is None:
            raise InfrastructureError(
                f"store {display_url(url)} does not exist (no {table} table); "
                "import a run bundle first, or check --db / EVALEDGER_DB"
            )


def probe_sqlite(location: StorageLocation) -> None:
    """Read the header of each existing SQLite file, so a corrupt one fails here, closed.

    (eventsourcing leaves its connection to a corrupt file open when its first PRAGMA fails.)
    """
    views = location.views_url[len("sqlite:///") :]
    for path in (location.events_env["SQLITE_DBNAME"], views):
        if Path(path).is_file():
            with closing(sqlite3.connect(path)) as conn:
                try:
                    conn.execute("PRAGMA schema_version")
                except sqlite3.DatabaseError as e:
                    if path != views:
                        raise  # named as the store itself by infrastructure_errors
                    # The same words as the read models' own error handler (projections/tables).
                    raise InfrastructureError(
                        f"the SQLite read models {views} is unavailable: {e}"
                    ) from None


def probe_postgres(location: StorageLocation) -> None:
    """Reach the database within PROBE_TIMEOUT_S, or raise InfrastructureError naming why."""
    with _connect(location):
        pass


def _connect(location: StorageLocation) -> psycopg.Connection[tuple[object, ...]]:
    # lazy: psycopg, only for a PostgreSQL store
    import psycopg

    from evaledger.domain.store.postgres import connect_postgres

    try:
        conn: psycopg.Connection[tuple[object, ...]] = connect_postgres(
            location.events_env, connect_timeout=PROBE_TIMEOUT_S, autocommit=True
        )
    except psycopg.OperationalError as e:
        raise InfrastructureError(describe_cause(e, location.url)) from None
    return conn
