"""Read-model rows the projections and the queries share: upsert, loaders, the inputs marker.

Here, not in `projectors`, so that the read side (`queries`) loads none of the projections'
folding code (start-up, issue 19: `evaledger runs` on a caught-up store needs none of it).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson
from pydantic import TypeAdapter
from sqlalchemy import Connection, Table, select

from evaledger.projections.tables import cases
from evaledger.scoring.models import CaseScore

if TYPE_CHECKING:
    from evaledger.scoring.facts import CaseFacts
    from evaledger.scoring.models import CaseScore as Score

CASE_SCORES = TypeAdapter(list[CaseScore])


@functools.cache
def case_facts() -> TypeAdapter[list[CaseFacts]]:
    """The validator of a list of case facts, built on first use.

    (The facts' models load every event class, which listing runs never needs.)
    """
    # lazy: the facts' models load every event class, which listing runs never needs
    from evaledger.scoring.facts import CaseFacts

    return TypeAdapter(list[CaseFacts])


def closed_inputs_marker(summary_position: int) -> str:
    """The `rescore_inputs_v1.marker` of a closed run whose summary is at `summary_position`.

    The one definition: the projection writes it at close, `ReadModels` compares it on read.
    The inputs' format and the cases table's versioned name are part of it, so new code or a
    new projection version never reads inputs an older one stored.
    """
    # lazy: the columnar rescore and the case rules under it, which listing runs never needs
    from evaledger.scoring.rescore import INPUTS_FORMAT

    return f"{INPUTS_FORMAT} {cases.name} summary {summary_position}"


def case_graders(facts: CaseFacts) -> str:
    """The `graders` column of a case: what judged it, every verdict recorded (issue 35).

    A JSON list of distinct `[kind, provider, model, version, template_hash]` lists, sorted
    (`None` sorts as ""): the comparability guard and the calibration gate read these instead
    of replaying the case's events. Invalidated and error verdicts count: they were recorded.
    """
    found = {
        (v.judge_kind, v.judge_provider, v.judge_model, v.judge_version, v.template_hash)
        for v in facts.verdicts
    }
    ordered = sorted(found, key=lambda g: tuple(x or "" for x in g))
    return orjson.dumps([list(g) for g in ordered]).decode()


def case_columns(facts: CaseFacts, score: Score) -> dict[str, Any]:
    """The columns of a case row read from its facts and score besides the JSON (cases_v6).

    `cached` and `graders` (issue 35's guard and calibration gate), the four score fields a run
    page's narrow rows read (`projections.case_pages.NARROW`), and the score's metric scores
    and named scores as small JSON objects (what its metric filter and named-score chart read).
    """
    return {
        "cached": facts.cached,
        "graders": case_graders(facts),
        "errored": score.errored,
        "judge_error": score.judge_error,
        "latency_p50_ms": score.latency_p50_ms,
        "cost_usd": score.cost_usd,
        "metric_scores": orjson.dumps({m.metric: m.score for m in score.metric_scores}).decode(),
        "named_scores": orjson.dumps(score.named_scores).decode(),
    }


def upsert(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert rows, replacing those with the same primary key (SQLite and PostgreSQL)."""
    if not rows:
        return
    keys = [c.name for c in table.primary_key.columns]
    if conn.dialect.name == "postgresql":
        # lazy: PostgreSQL's dialect (~0.1 s), never loaded by a SQLite store
        from sqlalchemy.dialects import postgresql

        pg = postgresql.insert(table)
        stmt: Any = pg.on_conflict_do_update(
            index_elements=keys,
            set_={c.name: pg.excluded[c.name] for c in table.columns if c.name not in keys},
        )
    else:
        # lazy: SQLite's dialect, only for a SQLite store
        from sqlalchemy.dialects import sqlite

        lite = sqlite.insert(table)
        stmt = lite.on_conflict_do_update(
            index_elements=keys,
            set_={c.name: lite.excluded[c.name] for c in table.columns if c.name not in keys},
        )
    conn.execute(stmt, list(rows))


def load_scores(conn: Connection, run_id: str) -> list[CaseScore]:
    """Every case score of a run under its own spec, in opening order."""
    texts = conn.scalars(
        select(cases.c.score).where(cases.c.run_id == run_id).order_by(cases.c.seq)
    ).all()
    if not texts:
        return []
    return CASE_SCORES.validate_json("[" + ",".join(texts) + "]")


def load_score_rows(conn: Connection, run_id: str) -> list[dict[str, Any]]:
    """Every case score of a run under its own spec as its stored JSON decoded, in opening order.

    For reads that take a few fields of every case (the statistics): decoding is a fifth of
    validating `CaseScore` models.
    """
    texts = conn.scalars(
        select(cases.c.score).where(cases.c.run_id == run_id).order_by(cases.c.seq)
    ).all()
    if not texts:
        return []
    rows: list[dict[str, Any]] = orjson.loads("[" + ",".join(texts) + "]")
    return rows


def load_facts(conn: Connection, run_id: str | UUID) -> list[CaseFacts]:
    """Every case's facts of a run, in opening order."""
    texts = conn.scalars(
        select(cases.c.facts).where(cases.c.run_id == str(run_id)).order_by(cases.c.seq)
    ).all()
    if not texts:
        return []
    return case_facts().validate_json("[" + ",".join(texts) + "]")
