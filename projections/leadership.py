"""Several `evaledger project --follow` on one PostgreSQL store: one leads, the others stand by.

The leader holds a session-level advisory lock on its own connection while it follows the log.
A leader that dies (kill -9, a lost machine) loses its session and so the lock: a standby takes
it at its next try (STANDBY_POLL_S). A leader whose lock connection breaks stops following at
once, so two projectors never apply pages side by side. API workers ask whether a leader holds
the lock (`projector_running`) and then wait for it instead of catching up inline.
SQLite has one writer at a time anyway: there the runner follows without a lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy import Connection, Engine, text

log = logging.getLogger(__name__)

LOCK_KEY = 0x65766C70  # "evlp": one advisory lock per store (database)
STANDBY_POLL_S = 1.0
"""How often a standby tries the lock (a dead leader is replaced within about this long)."""
LEADER_CHECK_S = 1.0
"""How often a leader checks its lock connection is still alive."""
SEEN_FOR_S = 2.0
"""An API worker remembers whether a projector leads this long (one query per interval)."""


def follow_as_leader(
    engine: Engine,
    stop: threading.Event,
    follow: Callable[[threading.Event], None],
) -> None:
    """Stand by until this process holds the lock; `follow` until `stop` or the lock is lost."""
    if engine.dialect.name != "postgresql":
        follow(stop)
        return
    announced = False
    while not stop.is_set():
        try:
            with engine.connect() as conn:
                if _try_lock(conn):
                    log.warning("projections: leading (advisory lock %d)", LOCK_KEY)
                    _lead(conn, stop, follow)
                    _unlock(conn)
                    continue
        except Exception as e:  # the store is away: wait and try again, never crash
            log.warning("projections: cannot reach the store for leadership: %s", e)
        if not announced:
            log.warning("projections: standing by (another projector leads)")
            announced = True
        stop.wait(STANDBY_POLL_S)


def _try_lock(conn: Connection) -> bool:
    try:
        got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": LOCK_KEY}).scalar()
        conn.commit()
    except Exception as e:  # the store is away: stand by and try again
        log.warning("projections: cannot reach the store for leadership: %s", e)
        return False
    return bool(got)


def _unlock(conn: Connection) -> None:
    try:
        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
        conn.commit()
    except Exception:  # the session is gone, and its lock with it
        conn.invalidate()


def _lead(
    conn: Connection, stop: threading.Event, follow: Callable[[threading.Event], None]
) -> None:
    """Follow on a thread while this one watches the lock's session."""
    lost = threading.Event()
    inner = threading.Event()
    worker = threading.Thread(target=follow, args=(inner,), name="projector", daemon=True)
    worker.start()
    while worker.is_alive():
        if stop.wait(LEADER_CHECK_S):
            break
        try:
            conn.execute(text("SELECT 1"))
            conn.commit()
        except Exception:
            log.warning("projections: lost the leadership's session; standing by")
            lost.set()
            break
    inner.set()
    worker.join()
    if lost.is_set():
        conn.invalidate()


class LeaderProbe:
    """Whether a projector leads on this store, asked at most once per SEEN_FOR_S."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._seen: tuple[float, bool] = (0.0, False)
        self._lock = threading.Lock()

    def projector_running(self) -> bool:
        """True when some process holds the projector lock (PostgreSQL only)."""
        if self.engine.dialect.name != "postgresql":
            return False
        with self._lock:
            at, running = self._seen
            if time.monotonic() - at < SEEN_FOR_S:
                return running
        with self.engine.connect() as conn:
            running = bool(
                conn.execute(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        "AND granted AND database = (SELECT oid FROM pg_database "
                        "WHERE datname = current_database()) "
                        "AND ((classid::bigint << 32) | objid::bigint) = :k"
                    ),
                    {"k": LOCK_KEY},
                ).scalar()
            )
        with self._lock:
            self._seen = (time.monotonic(), running)
        return running
