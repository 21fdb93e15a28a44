"""The read models' table names and projection names, imported by nothing.

`tables.py` defines the tables with SQLAlchemy Core from these names; the bare-driver reads of
`evaledger runs` (`bare_reads.py`, start-up: issue 32) name the same tables without importing
SQLAlchemy. One place for each name, so the two can never name different tables.
"""

from __future__ import annotations

TRACKING_TABLE = "projection_tracking"
"""Each projection's position in the log (its name, its position): on a store of several write
lanes, the sum of its lane positions (`LANE_TRACKING_TABLE`), which grows by one per event applied;
on a one-lane store (SQLite) its lane 0 position, which is the log position."""

LANE_TRACKING_TABLE = "projection_lanes"
"""Each projection's position in each write lane (name, lane, lane position): what the runner
reads each lane from (issue 32 item 1)."""

RUNS_PROJECTION = "runs_v4"
"""The runs projection's tracking name, also its runs table's name."""
CASES_PROJECTION = "cases_v6"
VOTES_PROJECTION = "judge_votes_v1"
METRICS_PROJECTION = "metrics_v1"
SEARCH_PROJECTION = "search_v1"
CASE_TIMES_PROJECTION = "case_times_v1"
DATASETS_PROJECTION = "datasets_v1"
PROJECTION_NAMES = (
    RUNS_PROJECTION,
    CASES_PROJECTION,
    VOTES_PROJECTION,
    METRICS_PROJECTION,
    SEARCH_PROJECTION,
    CASE_TIMES_PROJECTION,
    DATASETS_PROJECTION,
)
"""The tracking names of the projections the composition root runs (`all_projections()`):
whether reads are caught up is one query on their tracking rows, without loading the projectors
(start-up, issue 19)."""

RUN_SUMMARIES_TABLE = "run_summaries_v6"
"""Each closed run's aggregate under its own spec (the cases projection's)."""
