"""Importers: peer result files (Inspect AI, promptfoo, tau-bench, Connexity) into the ledger (DESIGN §11)."""
