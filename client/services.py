"""The one import of the composition root: a local store's wired services."""

from __future__ import annotations

from evaledger.api.bootstrap import Services, Settings, build_services

__all__ = ["Services", "Settings", "build_services", "open_services"]


def open_services(db: str | None = None, *, create: bool = True) -> Services:
    """The store at `db`, else EVALEDGER_DB, else the CLI's default (`sqlite:///.evaledger/`).

    With `create=False` (reads) a store that does not exist is an InfrastructureError, as for
    the CLI's read commands, instead of a new empty store.
    """
    return build_services(Settings.from_env(db), create=create)
