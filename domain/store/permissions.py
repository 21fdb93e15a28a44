"""Who may read a store's files and the checkpoint key: the owner only (0700 folders, 0600 files).

SQLite stores are created under umask 077; an existing store that other users can read is
reported once per open (a warning on stderr), not changed behind the owner's back. A checkpoint
key file that group or others may read or write is refused, as ssh refuses a private key
(issue 29): whoever can read it can re-sign a rewritten log.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evaledger.domain.store.urls import StorageLocation

log = logging.getLogger("evaledger")


@contextmanager
def private_files() -> Iterator[None]:
    """Files and folders created inside are the owner's only (umask 077)."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def shared_mode(path: str | Path) -> int | None:
    """The permission bits of a file or folder group or others may use; None if private."""
    try:
        mode = stat.S_IMODE(Path(path).stat().st_mode)
    except OSError:
        return None  # missing or unreadable: whoever opens it reports that
    return mode if mode & 0o077 else None


def warn_if_shared(path: str | Path, what: str) -> bool:
    """Warn when a file or folder is readable or writable by group or others; True if so."""
    mode = shared_mode(path)
    if mode is None:
        return False
    tight = "700" if Path(path).is_dir() else "600"
    log.warning(
        "%s %s is open to other users (mode %o): chmod %s %s", what, path, mode, tight, path
    )
    return True


def warn_shared_store(location: StorageLocation) -> None:
    """Warn about a SQLite store (folder, events, views) that other users can read."""
    if location.kind != "sqlite" or "mode=memory" in location.events_env["SQLITE_DBNAME"]:
        return
    events = Path(location.events_env["SQLITE_DBNAME"])
    views = Path(location.views_url.removeprefix("sqlite:///"))
    if events.parent == views.parent and events.name == "events.sqlite":
        warn_if_shared(events.parent, "the store folder")
    for path in (events, views):
        warn_if_shared(path, "the store file")
