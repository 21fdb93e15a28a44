"""evaledger domain: events, aggregates, scoring spec and the ledger application service."""
