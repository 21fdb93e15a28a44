"""Read models derived from the ledger's events: facts, scores, summaries, rollups, grades."""
