"""`evaledger migrate`: every table, trigger and grant of a store, made as its owner.

Apart from the composition root (api/bootstrap.py) because it reaches the web sessions and the
job queue's tables, whose modules import the root (no import circle).
"""

from __future__ import annotations

from evaledger.api.bootstrap import Settings
from evaledger.api.job_schema import ensure_job_schema
from evaledger.api.share_key import migrate_share_keys
from evaledger.api.web.session import migrate_sessions
from evaledger.domain.ledger import Ledger
from evaledger.domain.store.urls import parse_db_url
from evaledger.projections.tables import grant_read_models, make_engine


def migrate_store(
    settings: Settings, app_role: str | None = None, *, seal_payloads: bool = False
) -> None:
    """Create or repair every table, trigger and grant, as the store's owner (migration role).

    On PostgreSQL `app_role` then gets SELECT and INSERT on the events and the chain, and
    SELECT, INSERT, UPDATE, DELETE on the read models, the web sessions and the job queue;
    nothing else (no DDL, no ownership). Every table the app uses is made here (issue 29): the
    app role cannot create one on first use. `seal_payloads` turns sealing on for good, for a
    store that predates sealing by default (a new store decides at creation).
    """
    location = parse_db_url(settings.db)
    ledger = Ledger(location, migrate=True, app_role=app_role, seal_payloads=settings.seal_payloads)
    try:
        if seal_payloads:
            ledger.recorder.turn_sealing_on("evaledger migrate --seal-payloads")
    finally:
        ledger.close()
    engine = make_engine(location.views_url)
    try:
        migrate_sessions(engine, app_role if location.kind == "postgresql" else None)
        migrate_share_keys(engine, app_role if location.kind == "postgresql" else None)
        if location.kind == "postgresql":
            ensure_job_schema(location.events_env, app_role)
            if app_role:
                with engine.begin() as conn:
                    grant_read_models(conn, app_role)
    finally:
        engine.dispose()
