"""The composition root: settings in, a wired ledger + read side out."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine

from evaledger.domain.ledger import Ledger
from evaledger.domain.persistence import DEFAULT_DB_URL, StorageLocation, parse_db_url
from evaledger.projections.queries import ReadModels
from evaledger.projections.reports import Reports
from evaledger.projections.runner import ProjectionRunner
from evaledger.projections.store import make_engine
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
    auth: Literal["auto", "tokens", "open"] = Field(
        default="auto",
        description="tokens: every request needs a bearer token; open: none needed (loopback "
        "only); auto: tokens once any token was issued in the store, else open.",
    )
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1, description="Larger request bodies get 413."
    )

    @classmethod
    def from_env(cls, db: str | None = None, **overrides: str) -> Settings:
        """Settings from EVALEDGER_* environment variables, overridden by arguments."""
        values: dict[str, str] = {}
        if "EVALEDGER_DB" in os.environ:
            values["db"] = os.environ["EVALEDGER_DB"]
        for name in ("projections", "auth", "max_body_bytes"):
            if f"EVALEDGER_{name.upper()}" in os.environ:
                values[name] = os.environ[f"EVALEDGER_{name.upper()}"]
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

    def tokens_required(self) -> bool:
        """Whether requests must carry a token (decided once, when a server starts)."""
        if self.settings.auth == "auto":
            return self.ledger.has_tokens()
        return self.settings.auth == "tokens"

    def close(self) -> None:
        """Release connections."""
        if not self._closed:
            self._closed = True
            self.ledger.close()
            self.engine.dispose()


def build_ledger(settings: Settings) -> Services:
    """Open the store named by the settings and wire the ledger, projections and queries."""
    location = parse_db_url(settings.db)
    ledger = Ledger(location)
    engine = make_engine(location.views_url)
    runner = ProjectionRunner(ledger, engine, all_projections())
    reads = ReadModels(engine)
    return Services(settings, location, ledger, engine, runner, reads, Reports(reads))
