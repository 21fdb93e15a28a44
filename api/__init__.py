"""evaledger interfaces: HTTP API (FastAPI), CLI, and the composition root."""
