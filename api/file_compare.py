"""Compare two result files with no store to keep (CI jobs that share no database).

Both files are imported, in any format `evaledger import` reads, into a scratch SQLite store that
is deleted afterwards, and compared there: the same rules and the same answer as two stored runs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context
from evaledger.importers.load import import_all, open_imports
from evaledger.scoring.comparison import CompareThresholds, RunComparison
from evaledger.scoring.comparison.suites import require_same_suite


def compare_files(
    baseline: str | Path,
    candidate: str | Path,
    thresholds: CompareThresholds | None = None,
    *,
    allow_different_suites: bool = True,
) -> RunComparison:
    """Import both files into a scratch SQLite store and compare their runs (baseline first).

    Each file holds one run. Two files of the same run key are told apart by a suffix on the
    candidate's key. Without `allow_different_suites`, runs of two suites are refused
    (`scoring.comparison.suites`) before anything is imported.
    """
    imports = open_imports([baseline]) + open_imports([candidate])
    if len(imports) != 2:
        raise ValidationError("files: each file must hold exactly one run", field="files")
    first, second = imports
    if not allow_different_suites:
        require_same_suite(first.run.suite.name, second.run.suite.name)
    if first.run.key == second.run.key and first.run.project == second.run.project:
        second = second.with_run(key=f"{second.run.key}~candidate")
    with tempfile.TemporaryDirectory(prefix="evaledger-compare-") as scratch:
        services = build_services(Settings(db=f"sqlite:///{scratch}/store/"))
        try:
            done = import_all(services.ledger, [first, second], Context(actor="compare"))
            services.sync()
            return services.reports.compare(
                done[0].result.run_id, done[1].result.run_id, thresholds
            )
        finally:
            services.close()
