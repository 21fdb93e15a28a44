"""The one import of the composition root: a local store's wired services."""

from __future__ import annotations

from evaledger.api.bootstrap import Services, Settings, build_services

__all__ = ["Services", "Settings", "build_services", "open_services"]


def open_services(db: str | None = None) -> Services:
    """The store at `db`, else EVALEDGER_DB, else the CLI's default (`sqlite:///.evaledger/`)."""
    return build_services(Settings.from_env(db))
