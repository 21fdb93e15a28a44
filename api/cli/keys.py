"""Run keys and case keys read straight from the read-model tables: suggestions and completion.

Cheap on purpose: no ledger, no projection catch-up (a completion call must answer at once, and
a key it misses because the projections lag is typed by hand); a completion call gives up after
`COMPLETION_TIMEOUT_S` and prints nothing rather than an error.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

import orjson
from sqlalchemy import Connection, Engine, create_engine, event, select, text

from evaledger.domain.store.urls import parse_db_url
from evaledger.projections.tables import (
    CASES_PROJECTION,
    LANE_TRACKING_TABLE,
    cases,
    lane_tracking,
    runs,
    tracking,
)

# Start-up (issue 19): the parser imports this module, so the ledger and the event classes
# (whose topics name what is not projected yet) are imported by the functions that use them.

COMPLETION_TIMEOUT_S = 2
"""A completion that takes longer than this is worse than none."""

MAX_KEYS = 5000
"""Keys offered or compared at most (the newest runs)."""

RUN_ARGS = frozenset({"run", "runs"})
"""Positional arguments that name runs (by id or key)."""
CASE_REF_ARG = "case"
"""The `CASE | RUN TEST_CASE_KEY` positional: a run key first, then one of its case keys."""


def run_keys(engine: Engine, project: str, *, unprojected: bool = False) -> list[str]:
    """The project's run keys, newest first, from the read model.

    With `unprojected`, runs the projection has not reached yet come first (an engine of
    `read_only_views`, which sees the log too).
    """
    q = (
        select(runs.c.run_key)
        .where(runs.c.project == project)
        .order_by(runs.c.listed_at.desc())
        .limit(MAX_KEYS)
    )
    with engine.connect() as conn:
        keys = [r[0] for r in conn.execute(q)]
        fresh = _unprojected(conn, runs.name, "run_created") if unprojected else []
    return [*(e["run_key"] for e in fresh if e.get("project") == project), *keys]


def case_keys(engine: Engine, project: str, run_ref: str) -> list[str]:
    """The distinct test-case keys of the run with this key (or id), projected or not yet."""
    from evaledger.domain.aggregates import run_id_for  # lazy: the aggregates, for a run key

    run_id = str(run_id_for(project, run_ref)) if not _is_uuid(run_ref) else run_ref
    q = (
        select(cases.c.test_case_key)
        .where(cases.c.run_id == run_id)
        .distinct()
        .order_by(cases.c.test_case_key)
        .limit(MAX_KEYS)
    )
    with engine.connect() as conn:
        keys = {r[0] for r in conn.execute(q)}
        fresh = _unprojected(conn, CASES_PROJECTION, "case_opened")
    keys |= {e["test_case"]["key"] for e in fresh if e.get("run_id") == run_id}
    return sorted(keys)


SHORT_ID = re.compile(r"[0-9a-fA-F]{4,32}")
"""The start of a run id, as `runs` shows it (8 characters; at least 4, as git)."""


def run_ids_starting(engine: Engine, project: str, prefix: str) -> list[UUID]:
    """The ids (two at most) of the project's runs whose id starts with `prefix`."""
    if not SHORT_ID.fullmatch(prefix):
        return []
    q = (
        select(runs.c.run_id)
        .where((runs.c.project == project) & runs.c.run_id.startswith(prefix.lower()))
        .limit(2)
    )
    with engine.connect() as conn:
        return [UUID(r[0]) for r in conn.execute(q)]


def _is_uuid(ref: str) -> bool:
    try:
        UUID(ref)
    except ValueError:
        return False
    return True


def _unprojected(
    conn: Connection, projection: str, opening: Literal["run_created", "case_opened"]
) -> list[dict[str, Any]]:
    """A run's or a case's `opening` events the projection has not reached (an import not read).

    A range read on the log's position (indexed), so cheap however long the log is.
    """
    # lazy: the ledger and the event classes (their topics), only when keys are read
    from evaledger.application.projects import key_topics

    topics = key_topics()
    topic = getattr(topics, opening)
    found = conn.execute(select(tracking.c.position).where(tracking.c.name == projection))
    params: dict[str, Any] = {"p": found.scalar() or 0, "t": topic}
    if conn.dialect.name == "sqlite":
        # One lane: the projection's tracked number is its log position.
        q = text("SELECT state FROM events.stored_events WHERE rowid > :p AND topic = :t")
    elif (
        conn.scalar(select(lane_tracking.c.lane).where(lane_tracking.c.name == projection).limit(1))
        is None
    ):
        # Read models from before lanes (no runner has opened them since): a log position.
        q = text(
            f"SELECT state FROM {topics.events_table} WHERE notification_id > :p AND topic = :t"
        )
    else:
        # Several lanes: past the projection's position in each event's lane.
        q = text(
            f"SELECT e.state FROM {topics.events_table} e WHERE e.topic = :t AND "
            f"e.lane_position > coalesce((SELECT l.position FROM {LANE_TRACKING_TABLE} l "
            "WHERE l.name = :n AND l.lane = e.lane), 0)"
        )
        params = {"n": projection, "t": topic}
    return [orjson.loads(bytes(r[0])) for r in conn.execute(q, params)]


def read_only_views(db: str) -> Engine | None:
    """The read models of an existing store, opened read-only with a short timeout; else None."""
    if db.startswith("sqlite:///"):
        if ":memory:" in db:
            return None
        path = Path(db.removeprefix("sqlite:///"))
        # Never parse_db_url here: it creates the store's folder, and completing creates nothing.
        views = (
            path / "views.sqlite"
            if db.endswith("/") or path.is_dir()
            else path.with_name(f"{path.stem}.views{path.suffix or '.db'}")
        )
        if not views.is_file():
            return None
        engine = create_engine(
            f"sqlite:///file:{views.resolve()}?mode=ro&uri=true",
            connect_args={"timeout": COMPLETION_TIMEOUT_S},
        )
        events_file = views.with_name("events.sqlite") if views.name == "views.sqlite" else path

        @event.listens_for(engine, "connect")
        def _attach(dbapi_conn: Any, _record: object) -> None:
            # The log beside the read models, read-only, for runs not projected yet.
            dbapi_conn.execute(
                "ATTACH DATABASE ? AS events", (f"file:{events_file.resolve()}?mode=ro",)
            )

        return engine
    location = parse_db_url(db)
    timeout_ms = COMPLETION_TIMEOUT_S * 1000
    return create_engine(
        location.views_url,
        connect_args={
            "connect_timeout": COMPLETION_TIMEOUT_S,
            "options": f"-c statement_timeout={timeout_ms}",
        },
    )


def completion_candidates(
    parser: argparse.ArgumentParser, words: Sequence[str], default_db: str
) -> list[str]:
    """Run keys or case keys for the word after `words` (the command line typed so far).

    Empty when that word is not a run or case reference, or the store cannot be read at once.
    """
    command, positionals, options = _split(parser, words)
    if command is None:
        return []
    wanted = _wanted(command, len(positionals))
    if wanted is None:
        return []
    db = options.get("--db") or default_db
    project = options.get("--project") or "default"
    try:
        engine = read_only_views(db)
        if engine is None:
            return []
        try:
            if wanted == "runs":
                return run_keys(engine, project, unprojected=True)
            return case_keys(engine, project, positionals[0])
        finally:
            engine.dispose()
    except Exception:
        return []


def _split(
    parser: argparse.ArgumentParser, words: Sequence[str]
) -> tuple[argparse.ArgumentParser | None, list[str], dict[str, str]]:
    """The sub-command's parser, its positionals so far, and the values of its options."""
    current, command = parser, None
    positionals: list[str] = []
    options: dict[str, str] = {}
    pending: str | None = None
    for word in words:
        if pending is not None:
            options[pending], pending = word, None
        elif word.startswith("-"):
            name, eq, value = word.partition("=")
            action = current._option_string_actions.get(name)
            if eq:
                options[name] = value
            elif action is not None and action.nargs != 0:
                pending = name
        elif command is None or subcommands(command):
            sub = subcommands(current).get(word)
            if sub is None:
                positionals.append(word)
            else:
                current = command = sub
        else:
            positionals.append(word)
    return command, positionals, options


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-commands of `parser` by name (none: empty)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _wanted(command: argparse.ArgumentParser, given: int) -> str | None:
    """`runs` or `cases` for the next positional of `command` after `given` of them."""
    seen = 0
    for action in command._actions:
        if action.option_strings:
            continue
        many = action.nargs in ("+", "*")
        if given == seen or many:
            if action.dest in RUN_ARGS:
                return "runs"
            if action.dest == CASE_REF_ARG:
                return "runs" if given == seen else "cases" if given == seen + 1 else None
            return None
        seen += 1 if action.nargs in (None, "?") else int(action.nargs or 1)
    return None
