"""The composition root: settings in, a wired ledger + read side out."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine

from evaledger.domain.chain import KEY_ENV, load_key
from evaledger.domain.ledger import Ledger
from evaledger.domain.persistence import DEFAULT_DB_URL, StorageLocation, parse_db_url
from evaledger.projections.queries import ReadModels
from evaledger.projections.reports import Reports
from evaledger.projections.runner import ProjectionRunner
from evaledger.projections.store import grant_read_models, make_engine
from evaledger.projections.views import all_projections


class Settings(BaseModel):
    """Everything a process needs to know to open the ledger."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    db: str = Field(default=DEFAULT_DB_URL, description="sqlite:///path or postgresql://...")
    projections: Literal["inline", "external"] = Field(
        default="inline",
        description="inline: catch projections up in-process before reads (single-flight); "
        "external: an `evaledger project --follow` process does it, reads wait for it.",
    )
    default_actor: str = Field(default="anonymous", description="Actor when none is sent.")
    checkpoint_key_file: str | None = Field(
        default=None,
        description="File holding the key that signs each commit of the ledger chain "
        "(HMAC-SHA256) and that `verify` checks; kept outside the database.",
    )

    @classmethod
    def from_env(cls, db: str | None = None, **overrides: str) -> Settings:
        """Settings from EVALEDGER_* environment variables, overridden by arguments."""
        values: dict[str, str] = {}
        if "EVALEDGER_DB" in os.environ:
            values["db"] = os.environ["EVALEDGER_DB"]
        if "EVALEDGER_PROJECTIONS" in os.environ:
            values["projections"] = os.environ["EVALEDGER_PROJECTIONS"]
        if os.environ.get(KEY_ENV):
            values["checkpoint_key_file"] = os.environ[KEY_ENV]
        if db:
            values["db"] = db
        values.update(overrides)
        return cls.model_validate(values)


@dataclass
class Services:
    """A wired ledger: commands, projections and queries over one store."""

    settings: Settings
    location: StorageLocation
    ledger: Ledger
    engine: Engine
    runner: ProjectionRunner
    reads: ReadModels
    reports: Reports
    _closed: bool = field(default=False)

    def sync(self, position: int | None = None) -> None:
        """Make reads reflect writes up to `position` (or everything written so far)."""
        target = self.ledger.position() if position is None else position
        self.runner.wait_for(target, inline=self.settings.projections == "inline")

    def close(self) -> None:
        """Release connections."""
        if not self._closed:
            self._closed = True
            self.ledger.close()
            self.engine.dispose()


def build_ledger(settings: Settings) -> Services:
    """Open the store named by the settings and wire the ledger, projections and queries."""
    location = parse_db_url(settings.db)
    key = load_key(settings.checkpoint_key_file) if settings.checkpoint_key_file else None
    ledger = Ledger(location, checkpoint_key=key)
    engine = make_engine(location.views_url)
    runner = ProjectionRunner(ledger, engine, all_projections())
    reads = ReadModels(engine)
    return Services(settings, location, ledger, engine, runner, reads, Reports(reads))


def migrate_store(settings: Settings, app_role: str | None = None) -> None:
    """Create or repair every table, trigger and grant, as the store's owner (migration role).

    On PostgreSQL `app_role` then gets SELECT and INSERT on the events and the chain, and
    SELECT, INSERT, UPDATE, DELETE on the read models; nothing else (no DDL, no ownership).
    """
    location = parse_db_url(settings.db)
    Ledger(location, migrate=True, app_role=app_role).close()
    engine = make_engine(location.views_url)
    try:
        if app_role and location.kind == "postgresql":
            with engine.begin() as conn:
                grant_read_models(conn, app_role)
    finally:
        engine.dispose()
