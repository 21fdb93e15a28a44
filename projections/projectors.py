"""The projections: runs, cases (facts, own-spec scores, run summaries) and custom metrics."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, Table, select, update

from evaledger.domain.events import (
    BaselineApproved,
    BaselineRevoked,
    CaseEvent,
    CaseOpened,
    CasesAttached,
    DomainEvent,
    MetricRegistered,
    RunCanceled,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunStarted,
    SourceResultsRecorded,
)
from evaledger.domain.events.run import is_undated
from evaledger.domain.spec import ScoringSpec
from evaledger.projections import encoding
from evaledger.projections.case_times import CaseTimesProjection
from evaledger.projections.datasets import DatasetsProjection
from evaledger.projections.decode import Decoded, DecodedBatch
from evaledger.projections.fold import fold_event, open_case
from evaledger.projections.rows import (
    case_columns,
    closed_inputs_marker,
    load_scores,
    upsert,
)
from evaledger.projections.runner import Projection
from evaledger.projections.search import SearchProjection
from evaledger.projections.tables import (
    CASES_PROJECTION,
    METRICS_PROJECTION,
    baselines,
    case_runs,
    cases,
    custom_metrics,
    rescore_inputs,
    run_summaries,
    runs,
)
from evaledger.projections.votes import JudgeVotesProjection
from evaledger.scoring.case import reduce_repetitions, score_case
from evaledger.scoring.facts import CaseFacts
from evaledger.scoring.models import CaseScore
from evaledger.scoring.rescore import CasePart, RunInputs, case_part, rescore_run
from evaledger.scoring.run import summarize_run

IN_CHUNK = 500
MAX_CACHED_SCORES = 50_000
"""Case scores of open runs kept in memory for their summary at close (beyond: read back)."""
MAX_CACHED_FACTS = 20_000
"""Cases of open runs whose rescore-input parts (`scoring.rescore.CasePart`) are kept in memory
to store their run's rescore inputs at close (beyond: the run's first rescore builds them from
the facts, as before)."""


_STATUS_OF: dict[type[Any], str] = {
    RunStarted: "running",
    RunCompleted: "completed",
    RunCanceled: "canceled",
    RunFailed: "failed",
}
_RUN_TOPICS = frozenset(
    {
        RunCreated,
        CasesAttached,
        BaselineApproved,
        BaselineRevoked,
        SourceResultsRecorded,
        *_STATUS_OF,
    }
)


def _utc(dt: datetime) -> str:
    """ISO text in UTC, so that text order is time order in every database."""
    aware = dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat()


class RunsProjection:
    """`runs_v4`: one row per run (list and filter), plus the approved baselines per project.

    v3 added when each run was recorded and the time it is listed by (issue 25); v4 keeps the
    run's dataset reference in `created` (issue 32: the comparison guard's read).
    """

    name = runs.name
    tables: Sequence[Table] = (runs, baselines)

    def reset(self) -> None:
        """Nothing cached."""

    def process(self, conn: Connection, batch: DecodedBatch) -> None:
        """Fold run events into rows (case events are skipped undecoded)."""
        for position, decoded in batch:
            if decoded.cls not in _RUN_TOPICS:
                continue
            event = decoded.event
            if isinstance(event, RunCreated):
                _run_created(conn, decoded.oid, event, position)
            elif isinstance(event, CasesAttached):
                conn.execute(
                    update(runs)
                    .where(runs.c.run_id == decoded.oid)
                    .values(case_count=runs.c.case_count + len(event.case_ids), position=position)
                )
            elif isinstance(event, BaselineApproved):
                _baseline_approved(conn, decoded.oid, event, position)
            elif isinstance(event, BaselineRevoked):
                _baseline_revoked(conn, decoded.oid, event, position)
            elif isinstance(event, SourceResultsRecorded):
                _source_results(conn, decoded.oid, event, position)
            else:
                _run_status(conn, decoded.oid, event, position)


_CREATED_SNAPSHOT = {
    "agent",
    "suite",
    "config",
    "spec",
    "labels",
    "name",
    "run_key",
    "project",
    "dataset",
}
"""What of RunCreated the `created` column keeps (read back as a RunRow)."""


def _run_created(conn: Connection, run_id: str, event: RunCreated, position: int) -> None:
    suite_version = event.suite.version
    conn.execute(
        runs.insert().values(
            run_id=run_id,
            run_key=event.run_key,
            project=event.project,
            name=event.name,
            suite_name=event.suite.name,
            suite_version=None if suite_version is None else str(suite_version),
            agent_name=event.agent.name,
            agent_version=event.agent.version,
            status="created",
            labels=encoding.dumps(event.labels),
            created_at=_utc(event.created_at),
            recorded_at=_utc(event.timestamp),
            listed_at=_utc(event.timestamp if is_undated(event.created_at) else event.created_at),
            case_count=0,
            baseline=False,
            created=encoding.dumps(event.model_dump(mode="json", include=_CREATED_SNAPSHOT)),
            position=position,
        )
    )


def _source_results(
    conn: Connection, run_id: str, event: SourceResultsRecorded, position: int
) -> None:
    """The source's end: its labels over the run's, its scorers in the config and spec."""
    row = conn.execute(select(runs.c.labels, runs.c.created).where(runs.c.run_id == run_id)).one()
    labels = {**encoding.loads(row.labels), **event.labels}
    created = encoding.loads(row.created)
    created["labels"] = {**created.get("labels", {}), **event.labels}
    scorers = [s.model_dump(mode="json") for s in event.scorers]
    for part in ("config", "spec"):
        created[part] = {**created[part], "scorers": scorers}
    conn.execute(
        update(runs)
        .where(runs.c.run_id == run_id)
        .values(labels=encoding.dumps(labels), created=encoding.dumps(created), position=position)
    )


def _run_status(conn: Connection, run_id: str, event: DomainEvent, position: int) -> None:
    values: dict[str, Any] = {"status": _STATUS_OF[type(event)], "position": position}
    if isinstance(event, RunCompleted):
        values["completed_at"] = _utc(event.completed_at)
    if isinstance(event, RunCanceled | RunFailed):
        values["reason"] = event.reason
    conn.execute(update(runs).where(runs.c.run_id == run_id).values(**values))


def _baseline_approved(
    conn: Connection, run_id: str, event: BaselineApproved, position: int
) -> None:
    project = conn.execute(select(runs.c.project).where(runs.c.run_id == run_id)).scalar_one()
    approval = {
        "project": project,
        "agent": event.agent,
        "suite": event.suite,
        "run_id": run_id,
        "approved_at": _utc(event.timestamp),
        "actor": event.actor,
        "reason": event.reason,
    }
    upsert(conn, baselines, [approval])
    conn.execute(
        update(runs)
        .where(
            runs.c.project == project,
            runs.c.agent_name == event.agent,
            runs.c.suite_name == event.suite,
        )
        .values(baseline=False)
    )
    conn.execute(
        update(runs).where(runs.c.run_id == run_id).values(baseline=True, position=position)
    )


def _baseline_revoked(conn: Connection, run_id: str, event: BaselineRevoked, position: int) -> None:
    conn.execute(
        baselines.delete().where(
            baselines.c.agent == event.agent,
            baselines.c.suite == event.suite,
            baselines.c.run_id == run_id,
        )
    )
    conn.execute(
        update(runs).where(runs.c.run_id == run_id).values(baseline=False, position=position)
    )


CLOSED = frozenset({"completed", "canceled", "failed"})
"""Run statuses whose summary is materialised."""


class RunScoring(NamedTuple):
    """What scoring a run's cases needs of the run."""

    spec: ScoringSpec
    agent_provider: str | None
    status: str


class CasePage(NamedTuple):
    """The cases a page of events touches: their facts, opening sequence and last position."""

    facts: dict[str, CaseFacts]
    seqs: dict[str, int]
    touched: dict[str, int]
    """Case id → position of its last event in the page."""
    dirty_runs: dict[str, int]
    """Run id → position of the last event in the page that changes its summary."""


class CasesProjection:
    """`cases_v6`: per case its facts and its score under the run's own spec; run summaries.

    Summaries are materialised for closed runs (completed, canceled, failed) and recomputed
    when a closed run's cases change (overrides); open runs are summarised when read.
    v3 added the compact `scoring` column (what a rescore decodes); v4 dropped it again (issue
    32: a second copy of most of the facts' bytes on every case row, written by every catch-up).

    Case events are folded from their state dicts (`projections/fold.py`, no pydantic event),
    each touched case is scored once per page, and the scores of a run whose every case this
    instance has seen are kept until the run closes, so its summary does not read them back;
    so is each case's share of the run's rescore inputs (`scoring.rescore.CasePart`, issue 32),
    assembled into the inputs stored at close.
    """

    name = CASES_PROJECTION
    tables: Sequence[Table] = (run_summaries, cases, case_runs)

    def __init__(self) -> None:
        self._runs: dict[str, RunScoring] = {}
        self._seq: int | None = None
        # run id → case id → (seq, score), for runs created since the last reset (complete)
        self._scores: dict[str, dict[str, tuple[int, CaseScore]]] = {}
        self._cached = 0
        # run id → case id → its share of the run's rescore inputs, for the same runs: at close
        # they are assembled into the run's inputs, so its first rescore is a warm one (issue
        # 19); built when the case changes, no copy of its facts kept (issue 32)
        self._facts: dict[str, dict[str, CasePart]] = {}
        self._cached_facts = 0

    def reset(self) -> None:
        """Drop caches (they are rebuilt from the tables)."""
        self._runs.clear()
        self._seq = None
        self._scores.clear()
        self._cached = 0
        self._facts.clear()
        self._cached_facts = 0

    def _run(self, conn: Connection, run_id: str) -> RunScoring:
        found = self._runs.get(run_id)
        if found is None:
            row = conn.execute(select(case_runs).where(case_runs.c.run_id == run_id)).one()
            spec = ScoringSpec.model_validate_json(row.spec)
            found = RunScoring(spec, row.agent_provider, row.status)
            self._runs[run_id] = found
        return found

    def process(self, conn: Connection, batch: DecodedBatch) -> None:
        """Fold a page of events: load touched cases once, fold, rescore, write once."""
        if self._seq is None:
            self._seq = (
                conn.execute(select(cases.c.seq).order_by(cases.c.seq.desc()).limit(1)).scalar()
                or 0
            )
        page = _load_cases(conn, batch)
        for position, d in batch:
            cls = d.cls
            if cls is CaseOpened:
                provider = self._run(conn, d.data["run_id"]).agent_provider
                page.facts[d.oid] = open_case(d, provider)
                self._seq += 1
                page.seqs[d.oid] = self._seq
                page.touched[d.oid] = position
            elif issubclass(cls, CaseEvent):
                fold_event(page.facts[d.oid], d)
                page.touched[d.oid] = position
            elif cls is RunCreated:
                self._run_created(conn, d)
            elif cls is SourceResultsRecorded:
                self._source_results(conn, d, position, page.dirty_runs)
            elif cls in _STATUS_OF:
                self._run_status(conn, d.oid, _STATUS_OF[cls], position, page.dirty_runs)
        upsert(conn, cases, self._case_rows(conn, page))
        if self._cached > MAX_CACHED_SCORES:
            self._scores.clear()  # runs left open: their summaries read the scores back
            self._cached = 0
        if self._cached_facts > MAX_CACHED_FACTS or not self._scores:
            self._facts.clear()  # their first rescore builds the inputs from the table
            self._cached_facts = 0
        for run_id, last in sorted(page.dirty_runs.items()):
            self._write_summary(conn, run_id, last)

    def _run_created(self, conn: Connection, created: Decoded) -> None:
        event = created.event
        assert isinstance(event, RunCreated)
        run_id, provider = created.oid, event.agent.provider
        self._runs[run_id] = RunScoring(event.spec, provider, "created")
        self._scores[run_id] = {}
        self._facts[run_id] = {}
        conn.execute(
            case_runs.insert().values(
                run_id=run_id,
                spec=encoding.dumps(event.spec),
                agent_provider=provider,
                status="created",
            )
        )

    def _source_results(
        self, conn: Connection, d: Decoded, position: int, dirty: dict[str, int]
    ) -> None:
        event = d.event
        assert isinstance(event, SourceResultsRecorded)
        found = self._run(conn, d.oid)
        spec = found.spec.model_copy(update={"scorers": event.scorers})
        self._runs[d.oid] = found._replace(spec=spec)
        conn.execute(
            update(case_runs).where(case_runs.c.run_id == d.oid).values(spec=encoding.dumps(spec))
        )
        if found.status in CLOSED:
            dirty[d.oid] = max(position, dirty.get(d.oid, 0))

    def _run_status(
        self, conn: Connection, run_id: str, status: str, position: int, dirty: dict[str, int]
    ) -> None:
        self._runs[run_id] = self._run(conn, run_id)._replace(status=status)
        conn.execute(update(case_runs).where(case_runs.c.run_id == run_id).values(status=status))
        if status != "running":
            dirty[run_id] = max(position, dirty.get(run_id, 0))

    def _case_rows(self, conn: Connection, page: CasePage) -> list[dict[str, Any]]:
        """The touched cases' rows, each scored once; marks the closed runs they change."""
        rows: list[dict[str, Any]] = []
        dumps = encoding.dumps
        dirty_runs = page.dirty_runs
        for cid, position in page.touched.items():
            f = page.facts[cid]
            run_id = str(f.run_id)
            spec, _, status = self._run(conn, run_id)
            if status in CLOSED:
                dirty_runs[run_id] = max(position, dirty_runs.get(run_id, 0))
            score = score_case(f, spec)
            seq = page.seqs[cid]
            kept = self._scores.get(run_id)
            if kept is not None:
                if cid not in kept:
                    self._cached += 1
                kept[cid] = (seq, score)
            kept_facts = self._facts.get(run_id)
            if kept_facts is not None:
                if cid not in kept_facts:
                    self._cached_facts += 1
                kept_facts[cid] = case_part(f)
            rows.append(
                {
                    "case_id": cid,
                    "run_id": run_id,
                    "test_case_key": f.test_case_key,
                    "repetition": f.repetition,
                    "variant": f.variant,
                    "seq": seq,
                    "facts": dumps(f),
                    "score": dumps(score),
                    "status": score.status.value,
                    "overall_score": score.overall_score,
                    "passed": score.passed,
                    **case_columns(f, score),
                    "position": position,
                }
            )
        return rows

    def _write_summary(self, conn: Connection, run_id: str, last: int) -> None:
        spec, _, status = self._run(conn, run_id)
        kept = self._scores.get(run_id)
        inputs: RunInputs | None = None
        if kept is not None:
            ordered = sorted(kept.items(), key=_seq_of)
            scores = [score for _, (_, score) in ordered]
            if status in CLOSED:
                # Closed: later changes (overrides) are rare; they read the scores back.
                self._cached -= len(kept)
                del self._scores[run_id]
                inputs = self._store_inputs(conn, run_id, ordered, last)
        else:
            scores = load_scores(conn, run_id)
        # The run's aggregate column-wise from the inputs just built (the one decision ladder,
        # `summarize_run`'s figures; tests/scoring/test_fastscore.py holds them byte-equal),
        # else from the case scores.
        rescored = rescore_run(inputs, spec) if inputs is not None else None
        aggregate = rescored.aggregate if rescored is not None else summarize_run(scores, spec)
        summary = {
            "run_id": run_id,
            "spec_id": spec.spec_id,
            "aggregate": encoding.dumps(aggregate),
            "test_cases": encoding.dumps(
                [t.model_dump(mode="json") for t in reduce_repetitions(scores, spec)]
            ),
            "position": last,
        }
        upsert(conn, run_summaries, [summary])

    def _store_inputs(
        self,
        conn: Connection,
        run_id: str,
        ordered: list[tuple[str, tuple[int, CaseScore]]],
        last: int,
    ) -> RunInputs | None:
        """Store a closing run's rescore inputs from the parts and scores this instance kept.

        What `ReadModels` would build on the run's first rescore by decoding every case's
        facts, assembled here from each case's part (built when the case last changed); stored
        under the marker of the summary written at `last`, so the first rescore reads one row.
        Returned (None when not every case was seen here).
        """
        facts = self._facts.pop(run_id, None)
        if facts is None:
            return None
        self._cached_facts -= len(facts)
        if len(facts) != len(ordered):
            return None  # not every case was seen here (a restart mid-run): built on first rescore
        old = {
            cid: (score.overall_score, score.passed, score.status.value)
            for cid, (_, score) in ordered
        }
        inputs = RunInputs.assemble([facts[cid] for cid, _ in ordered], old)
        row = {"run_id": run_id, "marker": closed_inputs_marker(last), "inputs": inputs.to_bytes()}
        upsert(conn, rescore_inputs, [row])
        return inputs


def _load_cases(conn: Connection, batch: DecodedBatch) -> CasePage:
    """The facts and sequence of every case the page folds into but does not open."""
    facts: dict[str, CaseFacts] = {}
    seqs: dict[str, int] = {}
    opened = {d.oid for _, d in batch if d.cls is CaseOpened}
    wanted = sorted(
        {
            d.oid
            for _, d in batch
            if d.oid not in opened and issubclass(d.cls, CaseEvent) and d.cls is not CaseOpened
        }
    )
    for i in range(0, len(wanted), IN_CHUNK):
        found = conn.execute(
            select(cases.c.case_id, cases.c.facts, cases.c.seq).where(
                cases.c.case_id.in_(wanted[i : i + IN_CHUNK])
            )
        )
        for row in found:
            facts[row.case_id] = CaseFacts.model_validate_json(row.facts)
            seqs[row.case_id] = row.seq
    return CasePage(facts, seqs, {}, {})


def _seq_of(item: tuple[str, tuple[int, CaseScore]]) -> int:
    return item[1][0]


class CatalogueProjection:
    """`metrics_v1`: custom metrics per project."""

    name = METRICS_PROJECTION
    tables: Sequence[Table] = (custom_metrics,)

    def reset(self) -> None:
        """Nothing cached."""

    def process(self, conn: Connection, batch: DecodedBatch) -> None:
        """Record registered metrics."""
        rows: list[dict[str, Any]] = []
        for position, decoded in batch:
            if decoded.cls is MetricRegistered:
                event = decoded.event
                assert isinstance(event, MetricRegistered)
                rows.append(
                    {
                        "project": event.project,
                        "name": event.definition.name,
                        "definition": encoding.dumps(event.definition),
                        "position": position,
                    }
                )
        upsert(conn, custom_metrics, rows)


def all_projections() -> list[Projection]:
    """The projections a ledger's read side runs, in processing order."""
    return [
        RunsProjection(),
        CasesProjection(),
        CatalogueProjection(),
        JudgeVotesProjection(),
        SearchProjection(),
        CaseTimesProjection(),
        DatasetsProjection(),
    ]
