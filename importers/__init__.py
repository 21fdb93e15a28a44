"""Importers: peer result files (Inspect AI, promptfoo, tau-bench, Connexity) → ledger (§11).

Each format module turns a file into a `PeerImport` (a run header and a re-openable stream of
bundle cases); `Ledger.import_stream` writes it in chunked transactions and seals it.
"""
