"""The event store's adapters, the only users of a database driver in the domain.

URLs, the bytes of stored events, the SQLite and PostgreSQL recorders with their migrations,
and the ledger-wide hash chain.
"""
