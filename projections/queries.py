"""Read-side queries: runs, cases, summaries, baselines, metrics, and rescoring under a new spec.

Queries read read-model tables only; they never replay aggregates.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from uuid import UUID

from pydantic import TypeAdapter
from sqlalchemy import Connection, Engine, and_, cast, func, select

from evaledger.domain import collector
from evaledger.domain.errors import NotFoundError
from evaledger.domain.metrics import BUILTIN_METRICS, MetricDefinition
from evaledger.domain.spec import ScoringSpec, keep_source_scorers
from evaledger.projections import encoding
from evaledger.projections.rows import (
    closed_inputs_marker,
    load_facts,
    load_score_rows,
    load_scores,
)
from evaledger.projections.run_rows import LABEL_PATTERN as LABEL_PATTERN
from evaledger.projections.run_rows import RunFilter as RunFilter
from evaledger.projections.run_rows import RunRow as RunRow
from evaledger.projections.run_rows import run_row
from evaledger.projections.tables import (
    CASES_PROJECTION,
    PROJECTION_NAMES,
    baselines,
    cases,
    custom_metrics,
    rescore_inputs,
    rescores,
    run_summaries,
    runs,
    tracking,
)
from evaledger.scoring.models import CaseScore, RunAggregate, TestCaseResult

if TYPE_CHECKING:
    from evaledger.scoring.facts import CaseFacts
    from evaledger.scoring.rescore import RunInputs

# Start-up (issue 19): listing and showing runs read stored rows; the scoring rules (and through
# them every event class) are imported by the queries that score or rescore.

TEST_CASES = TypeAdapter(list[TestCaseResult])
SUMMARIES_CACHED = 16
"""Decoded materialised run summaries kept in memory (a 10,000-case run's is ~10 MB)."""

INPUTS_CACHED = 4
ScoreFlag = Literal["judge_error", "cost_usd"]
"""A case score field counted in SQL: a judge error verdict; a reported cost."""
COUNTS_CACHED = 256
"""Per-run counts kept in memory (a few ints each): a page of runs and their compares."""
"""Runs whose rescore inputs are kept in memory (a 10,000-case run's are ~20 MB)."""
SPECS_CACHED = 256
"""Runs whose own spec is kept in memory for rescores."""


class StoredRescore(NamedTuple):
    """A rescore stored beside the run's own scores."""

    spec_id: str
    aggregate: RunAggregate
    created_at: str


class CasesMarker(NamedTuple):
    """What changes whenever a case of a run changes, and whether the run is closed."""

    marker: str
    closed: bool


@dataclass(frozen=True)
class Summary:
    """A run summarised under one spec."""

    spec: ScoringSpec
    aggregate: RunAggregate
    test_cases: list[TestCaseResult]


class ReadModels:
    """Queries over the projections' tables."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._summaries: OrderedDict[tuple[str, int, str], Summary] = OrderedDict()
        self._inputs: OrderedDict[str, tuple[str, RunInputs]] = OrderedDict()
        self._specs: OrderedDict[str, ScoringSpec] = OrderedDict()
        self._counts: OrderedDict[tuple[str, str], tuple[str, int]] = OrderedDict()
        """Per (run, flag): the cases' state (`_cases_state`) and the count."""
        self._lock = threading.Lock()

    # -- runs --------------------------------------------------------------------------------

    def list_runs(self, f: RunFilter) -> tuple[list[RunRow], int]:
        """Runs matching the filter, newest first, with the total count."""
        conds = []
        if f.project:
            conds.append(runs.c.project == f.project)
        if f.key:
            conds.append(runs.c.run_key == f.key)
        if f.suite:
            conds.append(runs.c.suite_name == f.suite)
        if f.agent:
            conds.append(runs.c.agent_name == f.agent)
        if f.status:
            conds.append(runs.c.status == f.status)
        if f.created_from:
            conds.append(runs.c.listed_at >= _iso(f.created_from))
        if f.created_to:
            conds.append(runs.c.listed_at <= _iso(f.created_to))
        where = and_(*conds) if conds else None
        q = select(runs).order_by(runs.c.listed_at.desc(), runs.c.run_id)
        cq = select(func.count()).select_from(runs)
        if where is not None:
            q, cq = q.where(where), cq.where(where)
        with self.engine.connect() as conn:
            if f.label:
                # Labels live in a JSON column: filter in Python, paginate after.
                k, _, v = f.label.partition("=")
                rows = [r for r in conn.execute(q) if encoding.loads(r.labels).get(k) == v]
                total = len(rows)
                rows = rows[f.offset : f.offset + f.limit]
            else:
                total = conn.execute(cq).scalar_one()
                rows = list(conn.execute(q.limit(f.limit).offset(f.offset)))
        return [run_row(r) for r in rows], total

    def projected_position(self) -> int | None:
        """The position every projection has reached; None while one has no tracking row yet.

        One query on `projection_tracking` (its primary key), with no projector loaded: how a
        read finds the read models caught up with the log (`Services.sync`). A failed
        projection's row stays behind the log, so a read that finds it behind retries it.
        """
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(tracking.c.name, tracking.c.position).where(
                    tracking.c.name.in_(PROJECTION_NAMES)
                )
            ).all()
        if len(rows) < len(PROJECTION_NAMES):
            return None
        return min(int(position) for _, position in rows)

    def get_run(self, run_id: UUID) -> RunRow:
        """One run, or NotFoundError."""
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == str(run_id))).first()
        if row is None:
            raise NotFoundError(f"no run {run_id}")
        return run_row(row)

    def run_dataset(self, run_id: UUID) -> dict[str, Any] | None:
        """The dataset reference the run ran (`DatasetRef` as JSON; None: none), or NotFoundError.

        Kept by the runs read model since v4, so a comparison's guard reads neither the log
        nor the dataset use cases to say whether two runs ran the same version (issue 32).
        """
        with self.engine.connect() as conn:
            created = conn.scalar(select(runs.c.created).where(runs.c.run_id == str(run_id)))
        if created is None:
            raise NotFoundError(f"no run {run_id}")
        found: dict[str, Any] | None = encoding.loads(created).get("dataset")
        return found

    def run_spec(self, run_id: UUID) -> ScoringSpec:
        """The run's own spec (snapshotted at creation)."""
        return ScoringSpec.model_validate(self.get_run(run_id).spec)

    def baseline(self, agent: str, suite: str, project: str = "default") -> RunRow:
        """The approved baseline run of (agent, suite) in a project."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(baselines.c.run_id).where(
                    baselines.c.project == project,
                    baselines.c.agent == agent,
                    baselines.c.suite == suite,
                )
            ).first()
        if row is None:
            raise NotFoundError(
                f"no approved baseline for agent {agent!r} and suite {suite!r} "
                f"in project {project!r}"
            )
        return self.get_run(UUID(row.run_id))

    # -- cases and summaries -----------------------------------------------------------------

    def case_scores(self, run_id: UUID) -> list[CaseScore]:
        """Case scores under the run's own spec, in opening order."""
        self.get_run(run_id)
        with self.engine.connect() as conn:
            return load_scores(conn, str(run_id))

    def case_score_rows(self, run_id: UUID) -> list[dict[str, Any]]:
        """As `case_scores`, each score its stored JSON decoded (no models)."""
        self.get_run(run_id)
        with self.engine.connect() as conn:
            return load_score_rows(conn, str(run_id))

    def first_cases(self, run_id: UUID, keys: Iterable[str]) -> dict[tuple[str, str], UUID]:
        """(test case key, variant) → its first-opened case id, for the keys given, in that order.

        Per variant: a promptfoo test's providers and prompts are each a case of their own. A
        page showing a few test cases of a 10k-case run reads those rows, not every score.
        """
        found: dict[tuple[str, str], UUID] = {}
        wanted = sorted(set(keys))
        with self.engine.connect() as conn:
            for chunk in (wanted[i : i + 500] for i in range(0, len(wanted), 500)):
                rows = conn.execute(
                    select(cases.c.test_case_key, cases.c.variant, cases.c.case_id)
                    .where(cases.c.run_id == str(run_id), cases.c.test_case_key.in_(chunk))
                    .order_by(cases.c.seq)
                )
                for key, variant, case_id in rows:
                    found.setdefault((key, variant), UUID(case_id))
        return found

    def case_score_objects(self, run_id: UUID) -> list[dict[str, Any]]:
        """Case scores under the run's own spec as plain JSON objects, in opening order.

        For listing every case of a large run (the web report's cases table): decoding without
        model validation is an order of magnitude faster than `case_scores`.
        """
        self.get_run(run_id)
        with self.engine.connect() as conn:
            texts = conn.scalars(
                select(cases.c.score).where(cases.c.run_id == str(run_id)).order_by(cases.c.seq)
            ).all()
        return [encoding.loads(t) for t in texts]

    def judge_error_count(self, run_id: UUID) -> int:
        """How many of the run's cases count a judge error verdict under its own spec."""
        return self._score_count(run_id, "judge_error")

    def cost_reported(self, run_id: UUID) -> bool:
        """Whether any case of the run reported a cost (else its total is unknown, not $0)."""
        return self._score_count(run_id, "cost_usd") > 0

    def _score_count(self, run_id: UUID, name: ScoreFlag) -> int:
        """How many of the run's case scores have `name` true (a flag) or given (a value).

        Counted by the database from the stored scores (no row decoded here), and kept per
        state of the run's cases: a page about a 10k-case run reads no score to say it.
        """
        key = str(run_id)
        with self.engine.connect() as conn:
            marker = _cases_state(conn, key)
            with self._lock:
                hit = self._counts.get((key, name))
            if hit is not None and hit[0] == marker:
                return hit[1]
            condition = _json_test(conn, cases.c.score, name)
            count = int(
                conn.scalar(
                    select(func.count()).select_from(cases).where(cases.c.run_id == key, condition)
                )
                or 0
            )
        with self._lock:
            self._counts[(key, name)] = (marker, count)
            while len(self._counts) > COUNTS_CACHED:
                self._counts.popitem(last=False)
        return count

    def case_page(
        self, run_id: UUID, status: str | None = None, limit: int | None = None, offset: int = 0
    ) -> tuple[list[CaseScore], int]:
        """A page of a run's case scores (opening order, one status or all) and how many match.

        A page of a 10k-case run reads only that page's rows.
        """
        self.get_run(run_id)
        where = [cases.c.run_id == str(run_id)]
        if status is not None:
            where.append(cases.c.status == status)
        page = select(cases.c.score).where(*where).order_by(cases.c.seq).offset(offset)
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(cases).where(*where)).scalar_one()
            texts = conn.scalars(page if limit is None else page.limit(limit)).all()
        return [CaseScore.model_validate_json(t) for t in texts], total

    def case_score(self, case_id: UUID) -> tuple[CaseFacts, CaseScore]:
        """One case's facts and own-spec score."""
        # lazy: the facts' models (every event class), only to read one case's facts
        from evaledger.scoring.facts import CaseFacts

        with self.engine.connect() as conn:
            row = conn.execute(
                select(cases.c.facts, cases.c.score).where(cases.c.case_id == str(case_id))
            ).first()
        if row is None:
            raise NotFoundError(f"no case {case_id}")
        return CaseFacts.model_validate_json(row.facts), CaseScore.model_validate_json(row.score)

    def facts(self, run_id: UUID) -> list[CaseFacts]:
        """Every case's facts of a run."""
        self.get_run(run_id)
        with self.engine.connect() as conn:
            return load_facts(conn, run_id)

    def scoring_facts(self, run_id: UUID) -> list[CaseFacts]:
        """Every case's facts of a run, to score under another spec.

        `score_case` reads what it needs of them (`cases_v6` stores no cut-down copy).
        """
        self.get_run(run_id)
        with self.engine.connect() as conn:
            return load_facts(conn, run_id)

    def summary(self, run_id: UUID, own: ScoringSpec | None = None) -> Summary:
        """The run summarised under its own spec (materialised once the run is closed).

        Decoded materialised summaries are kept per (run, summary position): the position
        moves whenever the stored summary changes, so a hit is always current. `own`: the
        run's own spec when the caller holds it (else read from the run).
        """
        spec = own if own is not None else self.run_spec(run_id)
        with self.engine.connect() as conn:
            head = conn.execute(
                select(run_summaries.c.spec_id, run_summaries.c.position).where(
                    run_summaries.c.run_id == str(run_id)
                )
            ).first()
            if head is not None and head.spec_id == spec.spec_id:
                key = (str(run_id), head.position, spec.spec_id)
                with self._lock:
                    hit = self._summaries.get(key)
                    if hit is not None:
                        self._summaries.move_to_end(key)
                        return hit
                row = conn.execute(
                    select(run_summaries.c.aggregate, run_summaries.c.test_cases).where(
                        run_summaries.c.run_id == str(run_id),
                        run_summaries.c.position == head.position,
                    )
                ).first()
                if row is not None:
                    found = Summary(
                        spec,
                        RunAggregate.model_validate_json(row.aggregate),
                        TEST_CASES.validate_json(row.test_cases),
                    )
                    with self._lock:
                        self._summaries[key] = found
                        while len(self._summaries) > SUMMARIES_CACHED:
                            self._summaries.popitem(last=False)
                    return found
            scores = load_scores(conn, str(run_id))
        # An open run (no materialised summary): summarised here, by the scoring rules.
        # lazy: the scoring rules (every event class under them), only to score or rescore
        from evaledger.scoring.case import reduce_repetitions, summarize_run

        return Summary(spec, summarize_run(scores, spec), reduce_repetitions(scores, spec))

    def summary_under(
        self, run_id: UUID, spec: ScoringSpec | None
    ) -> tuple[Summary, list[CaseScore]]:
        """The run summarised under `spec` (its own when None), with the case scores."""
        with collector.paused():
            return self._summary_under(run_id, spec)

    def _summary_under(
        self, run_id: UUID, spec: ScoringSpec | None
    ) -> tuple[Summary, list[CaseScore]]:
        # lazy: the scoring rules (every event class under them), only to score or rescore
        from evaledger.scoring.case import reduce_repetitions, score_case, summarize_run

        own = self.run_spec(run_id)
        spec = None if spec is None else keep_source_scorers(spec, own)
        if spec is None or spec.spec_id == own.spec_id:
            scores = self.case_scores(run_id)
            return Summary(own, summarize_run(scores, own), reduce_repetitions(scores, own)), scores
        scores = [score_case(f, spec) for f in self.scoring_facts(run_id)]
        return Summary(spec, summarize_run(scores, spec), reduce_repetitions(scores, spec)), scores

    # -- rescore -----------------------------------------------------------------------------

    def rescore(self, run_id: UUID, spec: ScoringSpec) -> Rescoring:
        """Re-derive every case score and the summary under `spec`, beside the run's own.

        Reads facts from the read model only: no judge is called and nothing is written. What a
        rescore keeps (the result beside the old, the inputs it built) is written by the use
        case (`application.runs.rescore_run`) through `projections.rescore_store`.
        """
        with collector.paused():
            return self._rescore(run_id, spec)

    def _rescore(self, run_id: UUID, spec: ScoringSpec) -> Rescoring:
        # Before: the (materialised) summary; after: the columnar scorer over the run's inputs,
        # decoded once per state of its cases (`_run_inputs`).
        from evaledger.scoring.case import score_case, summarize_run  # lazy: the scoring rules
        from evaledger.scoring.rescore import rescore_run  # lazy: the columnar rescore

        own = self._own_spec(run_id)
        spec = keep_source_scorers(spec, own)
        before = self._stored_own_aggregate(run_id, own)
        inputs, built = self._run_inputs(run_id)
        if before is None:
            # An open run has no stored summary: its own-spec aggregate from the same inputs.
            under_own = rescore_run(inputs, own)
            before = (
                under_own.aggregate if under_own is not None else self.summary(run_id).aggregate
            )
        columnar = rescore_run(inputs, spec)
        if columnar is not None:
            cases_under = RescoredCases(
                inputs.case_ids,
                inputs.test_case_keys,
                inputs.repetitions,
                inputs.old,
                columnar.decisions,
            )
            after = columnar.aggregate
        else:
            # A spec selecting no metric or one twice: the reference path, over fresh facts.
            scores = [score_case(f, spec) for f in self.scoring_facts(run_id)]
            stored = dict(zip(inputs.case_ids, inputs.old, strict=True))
            case_ids = [str(s.case_id) for s in scores]
            cases_under = RescoredCases(
                case_ids,
                [s.test_case_key for s in scores],
                [s.repetition for s in scores],
                [stored.get(case_id, (None, None, None)) for case_id in case_ids],
                [(s.overall_score, s.passed, s.status.value) for s in scores],
            )
            after = summarize_run(scores, spec)
        return Rescoring(run_id, spec, own.spec_id, before, after, cases_under, built)

    def _run_inputs(self, run_id: UUID) -> tuple[RunInputs, BuiltInputs | None]:
        """The run's rescore inputs, decoded once per state of its cases.

        Kept in memory; a closed run's are also read from their stored row
        (`rescore_inputs_v1`), so that a new process reads one compact row instead of every
        case's facts. Inputs of a closed run built here from the facts are returned beside, for
        the use case to store. The marker is read before the rows: rows newer than their marker
        only cause a rebuild later, never a stale hit.
        """
        # lazy: the columnar rescore's inputs (the scoring rules), only to rescore
        from evaledger.scoring.rescore import RunInputs

        key = str(run_id)
        built: BuiltInputs | None = None
        with self.engine.connect() as conn:
            marker, closed = _cases_marker(conn, key)
            with self._lock:
                hit = self._inputs.get(key)
                if hit is not None and hit[0] == marker:
                    self._inputs.move_to_end(key)
                    return hit[1], None
            found = None
            if closed:
                data = conn.scalar(
                    select(rescore_inputs.c.inputs).where(
                        rescore_inputs.c.run_id == key, rescore_inputs.c.marker == marker
                    )
                )
                found = RunInputs.from_bytes(data) if data is not None else None
            if found is None:
                old = {
                    row.case_id: (row.overall_score, row.passed, row.status)
                    for row in conn.execute(
                        select(
                            cases.c.case_id, cases.c.overall_score, cases.c.passed, cases.c.status
                        ).where(cases.c.run_id == key)
                    )
                }
                found = RunInputs.build(load_facts(conn, run_id), old)
                if closed:
                    built = BuiltInputs(key, marker, found)
        with self._lock:
            self._inputs[key] = (marker, found)
            self._inputs.move_to_end(key)
            while len(self._inputs) > INPUTS_CACHED:
                self._inputs.popitem(last=False)
        return found, built

    def _own_spec(self, run_id: UUID) -> ScoringSpec:
        """`run_spec`, kept per run: a run's spec is snapshotted at its creation, never changed."""
        key = str(run_id)
        with self._lock:
            hit = self._specs.get(key)
        if hit is None:
            hit = self.run_spec(run_id)
            with self._lock:
                self._specs[key] = hit
                while len(self._specs) > SPECS_CACHED:
                    self._specs.popitem(last=False)
        return hit

    def _stored_own_aggregate(self, run_id: UUID, own: ScoringSpec) -> RunAggregate | None:
        """The run's stored aggregate under its own spec, as `summary(run_id).aggregate`.

        Reads only the aggregate (not the per-test-case results) when the summary is not in
        memory; None when no summary is stored (an open run).
        """
        with self.engine.connect() as conn:
            head = conn.execute(
                select(run_summaries.c.spec_id, run_summaries.c.position).where(
                    run_summaries.c.run_id == str(run_id)
                )
            ).first()
            if head is None or head.spec_id != own.spec_id:
                return None
            with self._lock:
                hit = self._summaries.get((str(run_id), head.position, own.spec_id))
            if hit is not None:
                return hit.aggregate
            text = conn.scalar(
                select(run_summaries.c.aggregate).where(
                    run_summaries.c.run_id == str(run_id),
                    run_summaries.c.position == head.position,
                )
            )
        return None if text is None else RunAggregate.model_validate_json(text)

    def stored_rescores(self, run_id: UUID) -> list[StoredRescore]:
        """Rescores stored side by side for a run."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(rescores.c.spec_id, rescores.c.aggregate, rescores.c.created_at).where(
                    rescores.c.run_id == str(run_id)
                )
            )
            return [
                StoredRescore(
                    r.spec_id, RunAggregate.model_validate_json(r.aggregate), r.created_at
                )
                for r in rows
            ]

    def stored_spec(self, spec_id: str, project: str | None = None) -> ScoringSpec | None:
        """A spec stored by an earlier rescore, by its id (of a run of `project`, if given)."""
        q = select(rescores.c.spec).where(rescores.c.spec_id == spec_id)
        if project is not None:
            q = q.join(runs, runs.c.run_id == rescores.c.run_id).where(runs.c.project == project)
        with self.engine.connect() as conn:
            text = conn.scalars(q.limit(1)).first()
        return None if text is None else ScoringSpec.model_validate_json(text)

    # -- metrics -----------------------------------------------------------------------------

    def available_metrics(self, project: str = "default") -> list[MetricDefinition]:
        """Built-in metrics then the project's custom ones."""
        with self.engine.connect() as conn:
            texts = conn.scalars(
                select(custom_metrics.c.definition)
                .where(custom_metrics.c.project == project)
                .order_by(custom_metrics.c.name)
            ).all()
        return [*BUILTIN_METRICS, *(MetricDefinition.model_validate_json(t) for t in texts)]


def _json_test(conn: Connection, column: Any, name: ScoreFlag) -> Any:
    """SQL: the JSON text in `column` has `name` true (judge_error) or not null (cost_usd)."""
    if conn.dialect.name == "postgresql":
        # lazy: the PostgreSQL dialect's types (~0.1 s), only for a PostgreSQL store.
        from sqlalchemy.dialects.postgresql import JSONB

        text = cast(column, JSONB)[name].astext
        return text == "true" if name == "judge_error" else text.is_not(None)
    value = func.json_extract(column, f"$.{name}")  # SQLite: true is 1, null is NULL
    return value == 1 if name == "judge_error" else value.is_not(None)


def _cases_marker(conn: Connection, run_id: str) -> CasesMarker:
    """Something that changes whenever a case of the run changes, and whether the run is closed.

    A closed run's summary row is rewritten, at a new position, by every event that changes one
    of its cases; an open run has no summary row, so the projection's tracking position stands
    in. The inputs' format and the cases table's versioned name are part of it: new code or a
    new projection version never reads inputs an older one stored.
    """
    # lazy: the columnar rescore (the scoring rules), only once a run's cases are keyed
    from evaledger.scoring.rescore import INPUTS_FORMAT

    state = _cases_state(conn, run_id)
    if state.startswith("summary "):
        return CasesMarker(closed_inputs_marker(int(state.split()[1])), closed=True)
    return CasesMarker(f"{INPUTS_FORMAT} {cases.name} {state}", closed=False)


def _cases_state(conn: Connection, run_id: str) -> str:
    """What changes whenever a case of the run changes: `summary P` or `tracking P`.

    P is a closed run's summary position, else the cases projection's tracking position. The
    key of the per-run counts; `_cases_marker` adds the inputs' format (which loads the scoring
    rules) to it.
    """
    position = conn.scalar(select(run_summaries.c.position).where(run_summaries.c.run_id == run_id))
    if position is not None:
        return f"summary {position}"
    tracked = conn.scalar(select(tracking.c.position).where(tracking.c.name == CASES_PROJECTION))
    return f"tracking {tracked or 0}"


class RescoredCases(NamedTuple):
    """Every case of a rescored run, in opening order: its decision before and after."""

    case_ids: Sequence[str]
    test_case_keys: Sequence[str]
    repetitions: Sequence[int]
    before: Sequence[tuple[float | None, bool | None, str | None]]
    """Per case (overall_score, passed, status) under the run's own spec, as stored."""
    decisions: Sequence[tuple[float | None, bool | None, str | None]]
    """Per case (overall_score, passed, status) under the new spec."""

    def changed(self) -> list[dict[str, Any]]:
        """The cases whose decision changed (a case without a stored one is not listed).

        Each decision as {overall_score, passed, status}, built as literals: thousands of cases
        change under a new threshold, and a NamedTuple's `_asdict` per case was a fifth of a warm
        rescore.
        """
        return [
            {
                "case_id": self.case_ids[i],
                "test_case_key": self.test_case_keys[i],
                "repetition": self.repetitions[i],
                "before": {"overall_score": was[0], "passed": was[1], "status": was[2]},
                "after": {"overall_score": now[0], "passed": now[1], "status": now[2]},
            }
            for i, (now, was) in enumerate(zip(self.decisions, self.before, strict=True))
            if now != was and was[2] is not None
        ]


class BuiltInputs(NamedTuple):
    """A closed run's rescore inputs built from its facts: worth storing for the next process."""

    run_id: str
    marker: str
    """The run's cases marker the inputs are valid for (`rescore_inputs_v1.marker`)."""
    inputs: RunInputs


@dataclass(frozen=True)
class Rescoring:
    """A run re-derived under another spec, beside its own: what `ReadModels.rescore` reads.

    Typed, and cheap to build (the cases stay as columns); `to_json()` is the JSON object the
    API (`POST /runs/{id}/rescore`, `Rescored`) and `evaledger rescore --json` answer. Indexing
    it reads that object (`rescoring["after"]["aggregate"]`), as scripts did before it was typed.
    """

    run_id: UUID
    spec: ScoringSpec
    """The spec replayed under (the run's source scorers kept: `keep_source_scorers`)."""
    own_spec_id: str
    before: RunAggregate
    """The run under its own spec."""
    after: RunAggregate
    """The run under `spec`."""
    cases: RescoredCases
    built_inputs: BuiltInputs | None = None
    """Inputs this read built from the facts of a closed run (None when read or in memory)."""

    @property
    def spec_id(self) -> str:
        """The id of the spec replayed under."""
        return self.spec.spec_id

    def to_json(self) -> dict[str, Any]:
        """The rescore as the API and the CLI answer it: before and after side by side."""
        return self._json

    @functools.cached_property
    def _json(self) -> dict[str, Any]:
        return {
            "run_id": str(self.run_id),
            "spec_id": self.spec.spec_id,
            "own_spec_id": self.own_spec_id,
            "before": {
                "spec_id": self.own_spec_id,
                "aggregate": self.before.model_dump(mode="json"),
            },
            "after": {
                "spec_id": self.spec.spec_id,
                "aggregate": self.after.model_dump(mode="json"),
            },
            "changed_cases": self.cases.changed(),
            "judge_calls": 0,
            "events_written": 0,
        }

    def __getitem__(self, key: str) -> Any:
        """A key of `to_json()`."""
        return self._json[key]


def _iso(dt: datetime) -> str:
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
