"""Compare two result files with no store to keep (CI jobs that share no database).

Both files are imported, in any format `evaledger import` reads, into a scratch SQLite store that
is deleted afterwards, and compared there: the same rules and the same answer as two stored runs.
The use case is `application.compare.compare_files`; this adapter gives it the scratch store,
wired by the composition root.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import compare, statistics
from evaledger.application.statistics import Correction, NoiseFloor
from evaledger.scoring.comparison import CompareThresholds, RunComparison


@contextmanager
def scratch_store(db: str) -> Iterator[Services]:
    """A wired store at `db` for the block, closed after it."""
    services = build_services(Settings(db=db))
    try:
        yield services
    finally:
        services.close()


def compare_files(
    baseline: str | Path,
    candidate: str | Path,
    thresholds: CompareThresholds | None = None,
    *,
    allow_different_suites: bool = True,
    allow_different_datasets: bool = False,
    exclude_cached: bool = False,
    correction: Correction | None = None,
    noise: NoiseFloor | None = None,
) -> RunComparison:
    """Import both files into a scratch SQLite store and compare their runs (baseline first).

    Each file holds one run. Two files of the same run key are told apart by a suffix on the
    candidate's key. Without `allow_different_suites`, runs of two suites are refused
    (`scoring.comparison.suites`) before anything is imported; runs of two dataset versions
    are compared over their common items unless `allow_different_datasets`. With a `correction`, the
    comparison carries its per-metric significance (issue 37), held against `noise` if given.
    """
    found = None
    if correction is not None:
        found = partial(statistics.significance_between, correction=correction, noise=noise)
    with tempfile.TemporaryDirectory(prefix="evaledger-compare-") as scratch:
        return compare.compare_files(
            baseline,
            candidate,
            scratch_store,
            scratch,
            thresholds,
            allow_different_suites=allow_different_suites,
            allow_different_datasets=allow_different_datasets,
            exclude_cached=exclude_cached,
            significance=found,
        )
