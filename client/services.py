"""The one import of the composition root: a local store's wired services."""

from __future__ import annotations

from evaledger.api.bootstrap import Services, Settings, build_ledger

__all__ = ["Services", "Settings", "build_ledger", "open_services"]


def open_services(db: str | None = None) -> Services:
    """The store at `db`, else EVALEDGER_DB, else the CLI's default (`sqlite:///.evaledger/`)."""
    return build_ledger(Settings.from_env(db))
