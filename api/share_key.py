"""The store's share key (issue 36): the HMAC key that signs share links, one per store.

Kept in `share_keys_v1` in the read-model database, beside the web sessions and with its own
metadata (a projection rebuild never drops it): made on first use (256 random bits; two
processes racing to make it keep the first one written), never logged, never shown. Deleting
the row voids every link signed so far (the next link makes a new key).
"""

from __future__ import annotations

import base64

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from evaledger.domain.errors import InfrastructureError
from evaledger.domain.sharing import new_share_key

KEY_NAME = "share-links"
metadata = sa.MetaData()
share_keys = sa.Table(
    "share_keys_v1",
    metadata,
    sa.Column("name", sa.String(32), primary_key=True),
    sa.Column("key_b64", sa.String(64), nullable=False),
)
_created: set[int] = set()


def _table(engine: Engine) -> sa.Table:
    if id(engine) not in _created:
        try:
            metadata.create_all(engine, checkfirst=True)
        except sa.exc.ProgrammingError as e:  # a two-role app role may not create tables
            raise InfrastructureError(
                f"{share_keys.name} is missing and this role cannot create it; run "
                "`evaledger migrate` as the database owner"
            ) from e
        _created.add(id(engine))
    return share_keys


def _read(engine: Engine, table: sa.Table) -> bytes | None:
    with engine.connect() as conn:
        value = conn.execute(sa.select(table.c.key_b64).where(table.c.name == KEY_NAME)).scalar()
    return None if value is None else base64.b64decode(value)


def share_key(engine: Engine) -> bytes:
    """The store's share key, made on first use."""
    table = _table(engine)
    found = _read(engine, table)
    if found is not None:
        return found
    fresh = base64.b64encode(new_share_key()).decode()
    try:
        with engine.begin() as conn:
            conn.execute(table.insert().values(name=KEY_NAME, key_b64=fresh))
    except sa.exc.IntegrityError:
        pass  # another process made it first: theirs is the key
    found = _read(engine, table)
    if found is None:  # pragma: no cover - written above or by the process that won
        raise InfrastructureError(f"{share_keys.name}: the share key could not be stored")
    return found


def migrate_share_keys(engine: Engine, app_role: str | None) -> None:
    """Create the share key table (as the owner) and let the app role read and add to it."""
    metadata.create_all(engine, checkfirst=True)
    if app_role is not None and engine.dialect.name == "postgresql":
        # lazy: psycopg and eventsourcing's recorder (domain/store/postgres), PostgreSQL only
        from evaledger.domain.store.postgres import quote_role

        with engine.begin() as conn:
            conn.execute(
                sa.text(f'GRANT SELECT, INSERT ON "{share_keys.name}" TO {quote_role(app_role)}')
            )
