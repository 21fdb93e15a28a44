"""The application layer: one named use case per thing a user does (issue 31).

It sits between the entry points and the core (DESIGN §1).

Every entry point — the HTTP routes, the CLI commands, the web forms, the Python client's local
backend, the pytest plugin, the Inspect hook and the judge jobs — parses its input, calls **one**
use case here and renders the typed result. The use cases call the domain's named commands
(`Ledger.record_verdict`, `Ledger.import_bundle`, …), the read models (read-only) and the rules
(`scoring/`); they raise the domain's typed errors (`evaledger.domain.errors`).

Modules, one per area:

- `runs`: import, record, close, rescore, compare, export a run; the one place a scoring spec is
  resolved;
- `cases`: verdicts, overrides, labels, flags, outcomes, claims and the other case facts;
- `judging`: plan, run and queue judge passes;
- `projects`: projects, tokens and who is asking;
- `verification`: verify the log, audit a verdict, adopt a chain;
- `reports`: the read use cases (show, list, grades, rollups, agreement, review queues).

`ports.Services` is what a use case is given: the wired store (`api/bootstrap.build_services`, the
composition root, builds it).
"""
