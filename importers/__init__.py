"""Importers: peer result files (Inspect AI, promptfoo, tau-bench, Connexity) → ledger (§11)."""
