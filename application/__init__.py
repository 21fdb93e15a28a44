"""The application layer: one named use case per thing a user does (issue 31).

It sits between the entry points and the core (DESIGN §1).

Every entry point — the HTTP routes, the CLI commands, the web forms, the Python client's local
backend, the pytest plugin, the Inspect hook and the judge jobs — parses its input, calls **one**
use case here and renders the typed result. The use cases call the domain's named commands
(`Ledger.record_verdict`, `Ledger.import_bundle`, …), the read models (read-only) and the rules
(`scoring/`); they raise the domain's typed errors (`evaledger.domain.errors`).

Modules, one per area:

- `runs`: import, create, record case by case, close, baselines, rescore; the one place an entry
  point resolves a scoring spec (`resolve_spec`);
- `cases`: verdicts, overrides, labels, flags, outcomes, claims and the other case facts;
- `judging`: plan, run and queue judge passes, and what a queued job does;
- `projects`: tokens, who is asking, the catalogue;
- `verification`: verify the log and the read models, adopt a chain, health and projection lag;
- `audit`: a case's or run's history, a case at a version, explain;
- the reads: `reports` (runs, cases, specs), `compare`, `grades` (gate, grades, rollups,
  agreement), `review_queue`, `transcripts` (export, transcripts, chain links);
- `demo`: the shipped demo runs loaded and judged by replay.

`ports.Services` is what a use case is given: the wired store (`api/bootstrap.build_services`, the
composition root, builds it).
"""
