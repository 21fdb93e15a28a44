"""What a store's driver raises about the store itself, as the ledger's InfrastructureError.

No driver is imported here (start-up, issue 19: a SQLite store never loads psycopg): the
PostgreSQL driver's exceptions are looked up in `sys.modules`. A driver that is not loaded has
raised nothing, so leaving its classes out of a tuple changes no outcome.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from eventsourcing.persistence import (
    DatabaseError,
    InterfaceError,
    InternalError,
    OperationalError,
    PersistenceError,
)

from evaledger.domain.errors import InfrastructureError


def loaded_driver_errors(*names: str) -> tuple[type[Exception], ...]:
    """The classes `psycopg.<name>` for each name, when psycopg is loaded; else none."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None:
        return ()
    return tuple(getattr(psycopg, name) for name in names)


def statement_errors() -> tuple[type[Exception], ...]:
    """Whatever a driver raises for a statement (a missing privilege, a read-only store)."""
    return (PersistenceError, sqlite3.Error, *loaded_driver_errors("Error"))


def _unavailable() -> tuple[type[Exception], ...]:
    return (
        OperationalError,
        InterfaceError,
        InternalError,
        sqlite3.OperationalError,  # raised raw while eventsourcing opens a connection
        *loaded_driver_errors("OperationalError"),
    )


def first_line(e: BaseException) -> str:
    """The first line of an error's message (drivers add context on later lines)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


@contextmanager
def store_errors(store: str) -> Iterator[None]:
    """Report an unreachable, locked or corrupt store as InfrastructureError (503 / exit 3).

    Conflicts (IntegrityError) and bad statements keep their own types.
    """
    try:
        yield
    except _unavailable() as e:  # evaluated when an exception is raised: the drivers loaded then
        raise InfrastructureError(f"{store} is unavailable: {first_line(e)}") from e
    except (DatabaseError, sqlite3.DatabaseError) as e:
        if type(e) not in (DatabaseError, sqlite3.DatabaseError):
            raise
        raise InfrastructureError(f"{store} is unreadable: {first_line(e)}") from e
