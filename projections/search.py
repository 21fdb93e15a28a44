"""`search_v1`: the searchable text of every case, and the full-text query over it (issue 36).

The projection writes one row per (event, field) of a case's text: its key and name (`key`), its
tags (`tag`), each recorded transcript (`transcript`), the judges' replies (`judge`), their
justifications and the reviewers' reasons (`justification`), the outcome statements (`outcome`).
Rows are only ever added, keyed by the event's log position, so catching up and rebuilding write
the same rows, and a case's later events (a new verdict) add their text as they come. The engine
index over the text is the database's own: FTS5 kept by triggers on SQLite, a GIN expression
index on PostgreSQL (`projections/tables.py`). `forget_case` removes a case from the index.

Sealed text (a sealing store's transcripts and judges' replies, issue 34) is indexed as
plaintext: the stored state holds `SEALED_TEXT` in its place, so the projection reads the strings
through the store's vault (`Decoded.opened`, the runner's `Ledger.opened`). Erasure purges it:
on `PayloadErased` the case's rows of the sealed fields (`SEALED_SEARCH_FIELDS`) are deleted, and
an erased payload (a rebuild after the erasure) is never indexed, nor is its tombstone wording, so
catch-up and rebuild leave the same rows. On SQLite the deleted text would otherwise outlive the
erasure in the file (free cells, FTS5's old segments, the WAL): the delete runs with
`secure_delete`, the FTS5 index is merged (`optimize`), and `settle` vacuums the file and
truncates its WAL after the page is committed. On PostgreSQL the deleted rows are dead tuples
until vacuum (never in a `pg_dump`), as the vault's own deleted ciphertexts are.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Table, delete, select, text
from sqlalchemy.exc import OperationalError

from evaledger.domain.events import (
    CaseOpened,
    ClaimsVerified,
    HumanLabelRecorded,
    JudgeVerdictRecorded,
    NamedScoresRecorded,
    OutcomeEvaluated,
    PayloadErased,
    RunCreated,
    TranscriptRecorded,
    VerdictOverridden,
)
from evaledger.domain.payloads import PAYLOAD_KEY, SEALED_TEXT
from evaledger.projections.decode import DecodedBatch
from evaledger.projections.search_syntax import FIELDS, SearchQuery, highlight, snippet
from evaledger.projections.tables import (
    SEARCH_FTS,
    SEARCH_PROJECTION,
    SEARCH_TSVECTOR,
    search_cases,
    search_docs,
    search_runs,
)

log = logging.getLogger(__name__)
MAX_DOC_CHARS = 200_000
"""Text indexed of one event's field (PostgreSQL's tsvector holds at most 1 MB)."""
FIELD_NUMBER = {name: i for i, name in enumerate(FIELDS)}
_TOPICS = frozenset(
    {
        RunCreated,
        CaseOpened,
        TranscriptRecorded,
        JudgeVerdictRecorded,
        OutcomeEvaluated,
        ClaimsVerified,
        NamedScoresRecorded,
        VerdictOverridden,
        HumanLabelRecorded,
        PayloadErased,
    }
)
SEALED_SEARCH_FIELDS = ("transcript", "judge")
"""The fields whose text is sealed (turns' contents; judges' and graders' replies, `texts_of`):
what an erasure removes from the index. `tests/application/test_search_sealed.py` checks that a
sealed state's placeholders give none of them and its plaintext gives both."""


def _join(parts: Iterable[Any]) -> str:
    """The strings of a field, one a line; a sealed string's placeholder is not text."""
    return "\n".join(p for p in parts if isinstance(p, str) and p.strip() and p != SEALED_TEXT)[
        :MAX_DOC_CHARS
    ]


def texts_of(cls: type[Any], data: dict[str, Any]) -> dict[str, str]:
    """The searchable text of one case event's state, by field (empty fields left out)."""
    out: dict[str, str] = {}
    if cls is CaseOpened:
        tc = data["test_case"]
        out["key"] = _join([tc["key"], tc.get("name")])
        out["tag"] = _join(tc.get("tags") or [])
    elif cls is TranscriptRecorded:
        out["transcript"] = _join(t.get("content") for t in data["turns"])
    elif cls is JudgeVerdictRecorded or cls is ClaimsVerified:
        out["judge"] = _join([data.get("raw_output")])
        scores = data.get("metric_scores") or []
        results = data.get("expected_outcomes") or []
        out["justification"] = _join(s.get("justification") for s in [*scores, *results])
        out["outcome"] = _join(r.get("statement") for r in results)
    elif cls is OutcomeEvaluated:
        results = data["results"]
        out["outcome"] = _join(r.get("statement") for r in results)
        out["justification"] = _join(r.get("justification") for r in results)
    elif cls is NamedScoresRecorded:
        out["judge"] = _join([data.get("raw_output")])
        out["justification"] = _join([data.get("explanation")])
    elif cls is VerdictOverridden:
        out["justification"] = _join([data.get("reason")])
    elif cls is HumanLabelRecorded:
        out["justification"] = _join([data.get("comment")])
    return {k: v for k, v in out.items() if v}


class SearchProjection:
    """Folds runs' projects and case text into `search_v1` (from state dicts, append-only)."""

    name = SEARCH_PROJECTION
    tables: Sequence[Table] = (search_docs, search_cases, search_runs)

    def __init__(self) -> None:
        self._projects: dict[str, str] = {}
        self._cases: dict[str, tuple[str, str]] = {}
        self._scrub = False
        """A page erased text: `settle` scrubs SQLite's file once it is committed."""

    def reset(self) -> None:
        """Forget the cached run → project and case → (run, project) maps."""
        self._projects.clear()
        self._cases.clear()
        self._scrub = False

    def settle(self, engine: Engine) -> None:
        """After a committed page that erased text, on SQLite: rebuild the file, empty the WAL.

        The delete zeroed its cells (`secure_delete`) but the pages as they were stay in the
        write-ahead log and its checkpoints; `VACUUM` and a truncating checkpoint leave no copy.
        """
        if not self._scrub:
            return
        if engine.dialect.name != "sqlite":
            self._scrub = False
            return
        try:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM")
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        except OperationalError as e:
            # The page is committed: a busy file must not fail it. The next page applied retries.
            log.error("search: erased text not yet scrubbed from the file (%s); will retry", e)
            return
        self._scrub = False

    def process(self, conn: Connection, batch: DecodedBatch) -> None:
        """Insert the text of each case event (batched), under its case's run and project."""
        new_runs: list[dict[str, Any]] = []
        new_cases: list[dict[str, Any]] = []
        docs: list[dict[str, Any]] = []
        for position, decoded in batch:
            cls = decoded.cls
            if cls not in _TOPICS:
                continue
            if cls is PayloadErased:
                docs = [d for d in docs if not _erased(d, decoded.oid)]
                self._forget_sealed(conn, decoded.oid)
                continue
            data = decoded.data
            if PAYLOAD_KEY in data:
                # Erased (or not opening): only its text that was never sealed is indexed.
                data = decoded.opened() or data
            if cls is RunCreated:
                project = data.get("project") or "default"
                self._projects[decoded.oid] = project
                new_runs.append({"run_id": decoded.oid, "project": project})
                continue
            if cls is CaseOpened:
                run_id = str(data["run_id"])
                project = self._project(conn, run_id)
                self._cases[decoded.oid] = (run_id, project)
                new_cases.append(
                    {
                        "case_id": decoded.oid,
                        "run_id": run_id,
                        "project": project,
                        "test_case_key": data["test_case"]["key"],
                        "repetition": data["repetition"],
                    }
                )
            texts = texts_of(cls, data)
            if not texts:
                continue
            run_id, project = self._case(conn, decoded.oid)
            docs.extend(
                {
                    "position": position * 8 + FIELD_NUMBER[field],
                    "case_id": decoded.oid,
                    "run_id": run_id,
                    "project": project,
                    "field": field,
                    "body": body,
                }
                for field, body in texts.items()
            )
        for table, rows in (
            (search_runs, new_runs),
            (search_cases, new_cases),
            (search_docs, docs),
        ):
            if rows:
                conn.execute(table.insert(), rows)

    def _forget_sealed(self, conn: Connection, case_id: str) -> None:
        """Delete the case's rows of sealed text, leaving no copy in SQLite's index or cells."""
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            conn.exec_driver_sql("PRAGMA secure_delete = ON")
        done = conn.execute(
            delete(search_docs).where(
                search_docs.c.case_id == case_id, search_docs.c.field.in_(SEALED_SEARCH_FIELDS)
            )
        )
        if sqlite and done.rowcount:
            conn.exec_driver_sql(f"INSERT INTO {SEARCH_FTS}({SEARCH_FTS}) VALUES ('optimize')")
            self._scrub = True

    def _project(self, conn: Connection, run_id: str) -> str:
        found = self._projects.get(run_id)
        if found is None:
            found = conn.execute(
                select(search_runs.c.project).where(search_runs.c.run_id == run_id)
            ).scalar_one_or_none()
            found = found or "default"
            self._projects[run_id] = found
        return found

    def _case(self, conn: Connection, case_id: str) -> tuple[str, str]:
        found = self._cases.get(case_id)
        if found is None:
            row = conn.execute(
                select(search_cases.c.run_id, search_cases.c.project).where(
                    search_cases.c.case_id == case_id
                )
            ).one()
            found = (row.run_id, row.project)
            self._cases[case_id] = found
        return found


def _erased(doc: dict[str, Any], case_id: str) -> bool:
    return doc["case_id"] == case_id and doc["field"] in SEALED_SEARCH_FIELDS


def forget_case(conn: Connection, case_id: str) -> int:
    """Remove every indexed text of one case (erasure); returns how many rows went.

    The engine index follows (SQLite: the delete trigger; PostgreSQL: the expression index).
    The case's run and key stay in `search_v1_cases` (they are not its text).
    """
    done = conn.execute(delete(search_docs).where(search_docs.c.case_id == case_id))
    return int(done.rowcount or 0)


@dataclass(frozen=True)
class SearchHit:
    """One case whose text matched, in one field: where, how well, and the text around the hit."""

    case_id: str
    run_id: str
    test_case_key: str
    repetition: int
    field: str
    rank: float
    """Higher is better (FTS5's bm25 negated on SQLite, ts_rank on PostgreSQL)."""
    snippet: str
    """The text around the first hit (`…` where it was cut)."""
    marks: list[tuple[int, int]]
    """Where the hits are in `snippet` (start, end), in order."""
    snippet_html: str
    """The snippet escaped as HTML, each hit inside `<mark>`."""


def search(
    engine: Engine,
    query: SearchQuery,
    project: str | None,
    run_id: str | None = None,
    field: str | None = None,
    limit: int = 20,
) -> list[SearchHit]:
    """The best hits of `query` in `project` (None: every project), one per (case, field)."""
    postgres = engine.dialect.name == "postgresql"
    where = []
    params: dict[str, Any] = {"fetch": limit * 4}
    if project is not None:
        where.append("d.project = :project")
        params["project"] = project
    if run_id is not None:
        where.append("d.run_id = :run_id")
        params["run_id"] = run_id
    if field is not None:
        where.append("d.field = :field")
        params["field"] = field
    extra = "".join(f" AND {w}" for w in where)
    cols = "d.case_id, d.run_id, d.field, d.body, c.test_case_key, c.repetition"
    joined = f"JOIN {search_cases.name} c ON c.case_id = d.case_id"
    if postgres:
        params["q"] = query.tsquery()
        sql = (
            f"SELECT {cols}, ts_rank({SEARCH_TSVECTOR.replace('body', 'd.body')}, q) AS rank "
            f"FROM {SEARCH_PROJECTION} d {joined}, to_tsquery('simple'::regconfig, :q) q "
            f"WHERE {SEARCH_TSVECTOR.replace('body', 'd.body')} @@ q{extra} "
            "ORDER BY rank DESC, d.position LIMIT :fetch"
        )
    else:
        params["q"] = query.fts5_match()
        sql = (
            f"SELECT {cols}, -bm25({SEARCH_FTS}) AS rank FROM {SEARCH_FTS} "
            f"JOIN {SEARCH_PROJECTION} d ON d.position = {SEARCH_FTS}.rowid {joined} "
            f"WHERE {SEARCH_FTS} MATCH :q{extra} ORDER BY rank DESC, d.position LIMIT :fetch"
        )
    hits: list[SearchHit] = []
    seen: set[tuple[str, str]] = set()
    with engine.connect() as conn:
        for row in conn.execute(text(sql), params):
            if (row.case_id, row.field) in seen:
                continue
            seen.add((row.case_id, row.field))
            shown, spans = snippet(row.body, query)
            hits.append(
                SearchHit(
                    case_id=row.case_id,
                    run_id=row.run_id,
                    test_case_key=row.test_case_key,
                    repetition=row.repetition,
                    field=row.field,
                    rank=round(float(row.rank), 6),
                    snippet=shown,
                    marks=spans,
                    snippet_html=highlight(shown, query),
                )
            )
            if len(hits) == limit:
                break
    return hits
