"""Listing runs without opening the store: `evaledger runs` on a caught-up SQLite store.

Start-up (issue 32): the full path (`build_services`, `reports.list_runs`, `run_summary`)
imports SQLAlchemy, whose import alone is about three times the import of pydantic and orjson.
A caught-up SQLite store's page of runs is read here through the bare driver
(`projections/bare_reads.py`) and decoded by the same models (`run_rows.run_row`,
`RunAggregate`, `run_headline`); anything else answers None, and the caller takes the full path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evaledger.domain.errors import EvaledgerError
from evaledger.domain.spec import ScoringSpec
from evaledger.domain.store.permissions import warn_shared_store
from evaledger.domain.store.urls import parse_db_url, sqlite_events_file
from evaledger.projections import bare_reads
from evaledger.projections.run_rows import RunFilter, RunRow
from evaledger.scoring.headline import Headline, run_headline
from evaledger.scoring.models import RunAggregate


@dataclass(frozen=True)
class RunPage:
    """A page of runs with each run's aggregate and headline under its own spec."""

    rows: list[RunRow]
    total: int
    aggregates: list[RunAggregate]
    headlines: list[Headline]


def list_runs_unopened(db: str, f: RunFilter) -> RunPage | None:
    """The page `reports.list_runs` + `run_summary` + `run_headline` answer, else None.

    None for a PostgreSQL or in-memory store (opening PostgreSQL is where a store that is not
    append-only is refused), a store that does not exist or is behind its log, or a run whose
    summary is not materialised under its own spec (`bare_reads.list_runs`).
    """
    named = sqlite_events_file(db)
    if named is None or not named.is_file():
        return None  # not a SQLite file store, or none there (parsing the URL makes its folder)
    try:
        location = parse_db_url(db)
    except EvaledgerError:
        return None  # the full path names the bad URL
    events = location.events_env.get("SQLITE_DBNAME", "")
    if location.kind != "sqlite" or "mode=memory" in events or not Path(events).is_file():
        return None
    listed = bare_reads.list_runs(events, location.views_url.removeprefix("sqlite:///"), f)
    if listed is None:
        return None
    warn_shared_store(location)  # as opening the store warns
    aggregates = [RunAggregate.model_validate_json(a) for a in listed.aggregates]
    return RunPage(
        listed.rows,
        listed.total,
        aggregates,
        [
            run_headline(ScoringSpec.model_validate(r.spec), a)
            for r, a in zip(listed.rows, aggregates, strict=True)
        ],
    )
