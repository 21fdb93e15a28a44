"""What a store's driver raises about the store itself, as the ledger's InfrastructureError."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from eventsourcing.persistence import (
    DatabaseError,
    InterfaceError,
    InternalError,
    OperationalError,
    PersistenceError,
)

from evaledger.domain.errors import InfrastructureError

STATEMENT_ERRORS: tuple[type[Exception], ...] = (PersistenceError, sqlite3.Error, psycopg.Error)
"""Whatever a driver raises for a statement (a missing privilege, a read-only store)."""


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
    except (
        OperationalError,
        InterfaceError,
        InternalError,
        psycopg.OperationalError,
        sqlite3.OperationalError,  # raised raw while eventsourcing opens a connection
    ) as e:
        raise InfrastructureError(f"{store} is unavailable: {first_line(e)}") from e
    except (DatabaseError, sqlite3.DatabaseError) as e:
        if type(e) not in (DatabaseError, sqlite3.DatabaseError):
            raise
        raise InfrastructureError(f"{store} is unreadable: {first_line(e)}") from e
