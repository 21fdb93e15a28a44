"""Compare two result files (run bundles or peer logs) with no store to keep: CI between jobs."""

from __future__ import annotations

from pathlib import Path

from evaledger.api.file_compare import compare_files as compare_stored_files
from evaledger.client.validation import build
from evaledger.scoring.comparison import CompareThresholds, RunComparison


def compare_files(
    baseline: str | Path,
    candidate: str | Path,
    *,
    max_pass_rate_drop: float | None = None,
    max_avg_score_drop: float | None = None,
    max_latency_increase_pct: float | None = None,
    case_score_delta: float | None = None,
) -> RunComparison:
    """Import both files into a scratch SQLite store and compare their runs (baseline first).

    Each file holds one run, in any format `evaledger import` reads. Two files of the same run
    key are told apart by a suffix on the candidate's key.
    """
    thresholds = build(
        CompareThresholds,
        "thresholds",
        max_pass_rate_drop=max_pass_rate_drop,
        max_avg_score_drop=max_avg_score_drop,
        max_latency_increase_pct=max_latency_increase_pct,
        case_score_delta=case_score_delta,
    )
    return compare_stored_files(baseline, candidate, thresholds)
