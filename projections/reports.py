"""Reports assembled from the read models: comparison, rollup, grade, explain."""

from __future__ import annotations

import functools
import hashlib
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

import orjson
import pydantic
from sqlalchemy import delete, select

from evaledger.domain import collector
from evaledger.domain import events as catalogue
from evaledger.domain.errors import StateError, ValidationError
from evaledger.domain.events import AgentSnapshot
from evaledger.domain.metrics import score_label
from evaledger.domain.spec import ScoringSpec
from evaledger.projections import queries
from evaledger.projections.queries import ReadModels, RunRow, Summary
from evaledger.projections.rows import upsert
from evaledger.projections.tables import compare_cache, run_summaries
from evaledger.scoring import case as scoring
from evaledger.scoring import clustered, means, models, named, stats
from evaledger.scoring import run as run_scoring
from evaledger.scoring.facts import CaseFacts
from evaledger.scoring.grading import Grade, GradingSpec, grade, grading_spec, load_preset
from evaledger.scoring.models import CaseScore, RunAggregate, TestCaseResult
from evaledger.scoring.rollups import CustomMetricSpec, Rollup, RollupInput, rollup

if TYPE_CHECKING:
    from evaledger.domain.events import DomainEvent
    from evaledger.scoring.comparison import (
        ComparedRun,
        CompareThresholds,
        Comparison,
        RunColumns,
        RunComparison,
    )
    from evaledger.scoring.comparison.engine import PairStatistics
    from evaledger.scoring.comparison.suites import Guard

COMPARE_CACHE_SIZE = 8
COLUMNS_CACHED = 16
"""Runs whose comparison columns this process keeps (as many as ReadModels' summaries)."""
COMPARE_SHARED = 16
"""Serialised answers kept in the store's shared `compare_cache_v1` (newest first)."""
SIDES_CACHED = 32
"""Closed runs whose row, spec and agent this process keeps per summary position (issue 32)."""
STATISTICS_CACHED = 64
"""Pairs of runs whose paired statistics (the bootstrap's interval) this process keeps."""
OPEN_STATUSES = frozenset({"created", "running"})
"""A run in these states is still being written: an interrupted import leaves one this way."""


def require_closed(run: RunRow, role: str = "run", field: str = "run_id") -> None:
    """Refuse a verdict on an open run: its cases so far are not the run (issue 24).

    An import interrupted mid-way (a killed process) leaves the run open with the chunks written
    so far; gate, grade and compare would otherwise judge that part as the whole.
    """
    if run.status in OPEN_STATUSES:
        raise StateError(
            f"{role} {run.run_id} ({run.run_key}) is incomplete: it is {run.status} with "
            f"{run.case_count} cases so far (an interrupted import leaves it so); re-run the "
            "import to complete it, or complete the run",
            field=field,
        )


@functools.cache
def code_fingerprint() -> str:
    """Digest of the code that computes a comparison: a shared answer from other code is stale."""
    # lazy: numpy (the comparison engine), with the first comparison
    from evaledger.scoring import comparison

    # Every module of the comparison package, found on disk so that a new one is not forgotten.
    package = sorted(Path(str(comparison.__file__)).parent.glob("*.py"))
    digest = hashlib.sha256()
    for module in (
        clustered,
        means,
        models,
        named,
        queries,
        run_scoring,
        scoring,
        stats,
        sys.modules[__name__],
    ):
        digest.update(Path(str(module.__file__)).read_bytes())
    for path in package:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def shared_key(*parts: Any) -> str:
    """The key of an entry of the shared `compare_cache_v1`: the code's fingerprint and `parts`."""
    return hashlib.sha256(orjson.dumps([code_fingerprint(), *(str(p) for p in parts)])).hexdigest()


class Side(NamedTuple):
    """A run as a comparison reads it: its row, and its own spec and agent validated once."""

    row: RunRow
    spec: ScoringSpec
    agent: AgentSnapshot


class Reports:
    """Comparisons (cached per run positions), rollups, grades and explanations."""

    def __init__(self, reads: ReadModels) -> None:
        self.reads = reads
        # key → comparison (this process); serialised answers are shared through the store.
        self._cache: OrderedDict[tuple[Any, ...], Comparison] = OrderedDict()
        # id(summary.test_cases) → (those results, their columns): a summary decoded once (kept
        # per run position by ReadModels) is turned into columns once.
        self._columns: OrderedDict[int, tuple[Any, RunColumns]] = OrderedDict()
        # (runs, their summary positions, spec) → their paired statistics: the bootstrap runs once
        # per pair of runs, whatever the thresholds, the page or the options of the request.
        self._statistics: OrderedDict[tuple[Any, ...], stats.PairedStatistics] = OrderedDict()
        # digest → an answer about a pair of runs (`pair_answer`), serialised.
        self._answers: OrderedDict[str, bytes] = OrderedDict()
        # (run, summary position) → the closed run as compared: what a comparison reads of a
        # closed run's row (created snapshot, status) stands while its summary position does.
        self._sides: OrderedDict[tuple[UUID, int], Side] = OrderedDict()
        self._lock = threading.Lock()

    # -- comparison --------------------------------------------------------------------------

    def _summary_positions(self, *run_ids: UUID) -> list[int]:
        """Each run's summary position (0 without a stored summary), in one query."""
        wanted = [str(r) for r in run_ids]
        with self.reads.engine.connect() as conn:
            rows = conn.execute(
                select(run_summaries.c.run_id, run_summaries.c.position).where(
                    run_summaries.c.run_id.in_(wanted)
                )
            ).all()
        found: dict[str, int | None] = {row.run_id: row.position for row in rows}
        return [int(found.get(r) or 0) for r in wanted]

    def _sides_at(self, *run_ids: UUID) -> tuple[list[Side], list[int]]:
        """Each run as compared, and its summary position, in one query for a kept closed run.

        A closed run's row is read and its spec and agent validated once per summary position
        (the position moves whenever the run's stored summary does; a closed run's creation
        snapshot and status never change); an open run or one without a summary every time.
        """
        positions = self._summary_positions(*run_ids)
        sides = []
        for run_id, position in zip(run_ids, positions, strict=True):
            with self._lock:
                side = self._sides.get((run_id, position))
                if side is not None:
                    self._sides.move_to_end((run_id, position))
            if side is None:
                row = self.reads.get_run(run_id)
                side = Side(
                    row,
                    ScoringSpec.model_validate(row.spec),
                    AgentSnapshot.model_validate(row.agent),
                )
                if position and row.status not in OPEN_STATUSES:
                    with self._lock:
                        self._sides[(run_id, position)] = side
                        while len(self._sides) > SIDES_CACHED:
                            self._sides.popitem(last=False)
            sides.append(side)
        return sides, positions

    def compared_run(self, side: Side, summary: Summary) -> ComparedRun:
        """A run as the comparison sees it."""
        # lazy: the comparison engine (and numpy under it) loads with the first comparison, not
        # with every CLI command that wires the services (issue 19: start-up).
        from evaledger.scoring.comparison import ComparedRun

        run = side.row
        return ComparedRun(
            run_id=str(run.run_id),
            status=run.status,
            suite_name=run.suite["name"],
            suite_version=run.suite.get("version"),
            agent=side.agent,
            config=run.config,
            judge=dict(run.config.get("judge") or {}),
            spec=side.spec,
            aggregate=summary.aggregate,
        )

    def compare(
        self,
        baseline_id: UUID,
        candidate_id: UUID,
        thresholds: CompareThresholds | None = None,
        spec: ScoringSpec | None = None,
        metric_deltas: bool = True,
        guard: Guard | None = None,
    ) -> RunComparison:
        """Compare two completed runs (404 when missing, 400 unless both are completed)."""
        return self.comparison(
            baseline_id, candidate_id, thresholds, spec, metric_deltas, guard
        ).model

    def comparison(
        self,
        baseline_id: UUID,
        candidate_id: UUID,
        thresholds: CompareThresholds | None = None,
        spec: ScoringSpec | None = None,
        metric_deltas: bool = True,
        guard: Guard | None = None,
    ) -> Comparison:
        """As `compare`, with the cases kept as columns.

        `Comparison.body` dumps them as JSON without a model per case; `.model` validates the
        whole answer on demand. A `guard` (issue 35) restricts both runs to its keys (each
        summarised again over those cases) and puts its `comparability` in the answer.
        """
        return self._compared(baseline_id, candidate_id, thresholds, spec, metric_deltas, guard)

    def compare_json(
        self,
        baseline_id: UUID,
        candidate_id: UUID,
        thresholds: CompareThresholds | None = None,
        spec: ScoringSpec | None = None,
        *,
        metric_deltas: bool = False,
        case_offset: int = 0,
        case_limit: int | None = None,
        guard: Guard | None = None,
        later: Callable[[Callable[[], None]], None] | None = None,
    ) -> bytes:
        """The comparison as JSON bytes, shared through the store by every serving process.

        Every total, verdict and statistic covers all matched cases; only the list of
        `test_case_comparisons` is paged (sorted by key). `later` runs the write of a new answer
        to the shared cache (a write transaction of the whole body): the HTTP route passes its
        response's background tasks, so the answer is sent first (issue 32); None writes now.
        """
        from evaledger.scoring.comparison import CompareThresholds  # lazy: numpy, see above

        thresholds = thresholds or CompareThresholds()
        runs, key = self._compare_key(
            baseline_id, candidate_id, thresholds, spec, metric_deltas, guard
        )
        digest = shared_key(*key, case_offset, case_limit)
        shared = self._shared(digest)
        if shared is not None:
            return shared
        result = self._entry(runs, key, thresholds, spec, metric_deltas, guard)
        # One dict per case, freed by refcount: no collector pass over the heap.
        with collector.paused():
            body = result.json(case_offset, case_limit)
        if later is None:
            self._share(digest, body)
        else:
            later(functools.partial(self._share, digest, body))
        return body

    def _shared(self, digest: str) -> bytes | None:
        """A body some serving process put in the store's shared cache (None: none)."""
        with self.reads.engine.connect() as conn:
            shared = conn.scalars(
                select(compare_cache.c.body).where(compare_cache.c.key == digest)
            ).first()
        return None if shared is None else bytes(shared)

    def _share(self, digest: str, body: bytes) -> None:
        """Put a body in the shared cache, keeping the newest `COMPARE_SHARED`."""
        with self.reads.engine.begin() as conn:
            upsert(conn, compare_cache, [{"key": digest, "body": body, "created_at": time.time()}])
            oldest_kept = (
                select(compare_cache.c.created_at)
                .order_by(compare_cache.c.created_at.desc())
                .offset(COMPARE_SHARED - 1)
                .limit(1)
                .scalar_subquery()
            )
            conn.execute(delete(compare_cache).where(compare_cache.c.created_at < oldest_kept))

    def run_answer(
        self, run_id: UUID, parts: tuple[Any, ...], compute: Callable[[], bytes]
    ) -> bytes:
        """An answer about one closed run as it stands, computed once and kept (its graders).

        Keyed like `pair_answer` by the run's summary position (it moves whenever a case of the
        run changes); a run without a stored summary (open) is computed every time.
        """
        (position,) = self._summary_positions(run_id)
        if not position:
            return compute()
        return self._kept(shared_key("run", run_id, position, *parts), compute)

    def _kept(self, digest: str, compute: Callable[[], bytes]) -> bytes:
        """The answer under `digest` from this process, the store's shared cache, or `compute`."""
        with self._lock:
            hit = self._answers.get(digest)
            if hit is not None:
                self._answers.move_to_end(digest)
                return hit
        body = self._shared(digest)
        if body is None:
            body = compute()
            self._share(digest, body)
        with self._lock:
            self._answers[digest] = body
            while len(self._answers) > STATISTICS_CACHED:
                self._answers.popitem(last=False)
        return body

    def pair_answer(
        self,
        baseline_id: UUID,
        candidate_id: UUID,
        parts: tuple[Any, ...],
        compute: Callable[[], bytes],
    ) -> bytes:
        """An answer about two runs as they stand, computed once and kept (the significance).

        Keyed by both runs' summary positions (they move whenever a run's scores can change),
        `parts` (what else the answer depends on) and the code's fingerprint; kept in this
        process and in the store's shared cache, so neither this process nor another serving
        one computes it again for the same runs.
        """
        positions = self._summary_positions(baseline_id, candidate_id)
        digest = shared_key("pair", baseline_id, positions[0], candidate_id, positions[1], *parts)
        return self._kept(digest, compute)

    def pair_statistics(self, pair: tuple[Any, ...]) -> PairStatistics:
        """The paired statistics of one pair of runs, computed once and kept.

        `pair` is (baseline id, its summary position, candidate id, its summary position, spec
        id, guard digest): the flips and score deltas the statistics read depend on nothing
        else (not the thresholds, the options or the page). Kept in this process and in the
        store's shared cache, so another serving process reads them rather than running the
        bootstrap again.
        """

        def statistics(b: int, c: int, deltas: list[float]) -> stats.PairedStatistics:
            with self._lock:
                hit = self._statistics.get(pair)
                if hit is not None:
                    self._statistics.move_to_end(pair)
                    return hit
            digest = shared_key("paired statistics", *pair)
            shared = self._shared(digest)
            if shared is not None:
                result = stats.PairedStatistics.model_validate_json(shared)
            else:
                result = stats.paired_statistics_of(b, c, deltas)
                self._share(digest, result.model_dump_json().encode())
            with self._lock:
                self._statistics[pair] = result
                while len(self._statistics) > STATISTICS_CACHED:
                    self._statistics.popitem(last=False)
            return result

        return statistics

    def _compare_key(
        self,
        baseline_id: UUID,
        candidate_id: UUID,
        thresholds: CompareThresholds,
        spec: ScoringSpec | None,
        metric_deltas: bool,
        guard: Guard | None = None,
    ) -> tuple[list[Side], tuple[Any, ...]]:
        """Both runs (400 unless completed) and the comparison's cache key."""
        # The summaries' positions move whenever a run's scores can change (overrides).
        sides, (base_position, cand_position) = self._sides_at(baseline_id, candidate_id)
        for role, run in zip(("baseline", "candidate"), (s.row for s in sides), strict=True):
            if run.status != "completed":
                again = " (re-run the import to complete it)" if run.status in OPEN_STATUSES else ""
                raise StateError(
                    f"{role} run {run.run_id} is {run.status}; only completed runs are "
                    f"compared{again}",
                    field=f"{role}_run_id",
                )
        key = (
            baseline_id,
            base_position,
            candidate_id,
            cand_position,
            thresholds.model_dump_json(),
            spec.spec_id if spec else None,
            metric_deltas,
            None if guard is None else guard.digest,
        )
        return sides, key

    def _compared(
        self,
        baseline_id: UUID,
        candidate_id: UUID,
        thresholds: CompareThresholds | None,
        spec: ScoringSpec | None,
        metric_deltas: bool = True,
        guard: Guard | None = None,
    ) -> Comparison:
        from evaledger.scoring.comparison import CompareThresholds  # lazy: numpy, see above

        thresholds = thresholds or CompareThresholds()
        runs, key = self._compare_key(
            baseline_id, candidate_id, thresholds, spec, metric_deltas, guard
        )
        return self._entry(runs, key, thresholds, spec, metric_deltas, guard)

    def _entry(
        self,
        runs: list[Side],
        key: tuple[Any, ...],
        thresholds: CompareThresholds,
        spec: ScoringSpec | None,
        metric_deltas: bool,
        guard: Guard | None = None,
    ) -> Comparison:
        from evaledger.scoring.comparison import compare_columns  # lazy: numpy, see above

        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        with collector.paused():
            keys = None if guard is None else guard.keys
            summaries = [self._summary(r, spec, keys) for r in runs]
            result = compare_columns(
                self.compared_run(runs[0], summaries[0]),
                self.compared_run(runs[1], summaries[1]),
                self._columns_of(summaries[0].test_cases),
                self._columns_of(summaries[1].test_cases),
                thresholds,
                spec,
                metric_deltas=metric_deltas,
                statistics=self.pair_statistics((*key[:4], key[5], key[7])),
            )
            if guard is not None:
                result.tail["comparability"] = guard.comparability
        with self._lock:
            self._cache[key] = result
            while len(self._cache) > COMPARE_CACHE_SIZE:
                self._cache.popitem(last=False)
        return result

    def _summary(
        self, side: Side, spec: ScoringSpec | None, keys: frozenset[str] | None
    ) -> Summary:
        """The run summarised under `spec` (its own: None), over the cases of `keys` only.

        Restricted, the run is summarised again over the kept case scores by the run-level
        rule (`summarize_run`) and its test cases reduced again: one aggregate definition.
        """
        run_id = side.row.run_id
        if keys is None:
            if spec:
                return self.reads.summary_under(run_id, spec)[0]
            return self.reads.summary(run_id, own=side.spec)
        whole, scores = self.reads.summary_under(run_id, spec)
        kept = [s for s in scores if s.test_case_key in keys]
        return Summary(
            whole.spec,
            scoring.summarize_run(kept, whole.spec),
            scoring.reduce_repetitions(kept, whole.spec),
        )

    def _columns_of(self, results: Sequence[TestCaseResult]) -> RunColumns:
        from evaledger.scoring.comparison import RunColumns  # lazy: numpy, see above

        with self._lock:
            hit = self._columns.get(id(results))
            if hit is not None:
                self._columns.move_to_end(id(results))
                return hit[1]
        columns = RunColumns(results)
        with self._lock:
            self._columns[id(results)] = (results, columns)
            while len(self._columns) > COLUMNS_CACHED:
                self._columns.popitem(last=False)
        return columns

    # -- rollups and grades ------------------------------------------------------------------

    def rollup_inputs(
        self, run_ids: Sequence[UUID], spec: ScoringSpec | None = None
    ) -> list[RollupInput]:
        """Every case of the runs as rollup input, scored under `spec` (each run's own if None)."""
        inputs: list[RollupInput] = []
        for run_id in run_ids:
            run = self.reads.get_run(run_id)
            facts = {f.case_id: f for f in self.reads.facts(run_id)}
            _, scores = self.reads.summary_under(run_id, spec)
            for s in scores:
                inputs.append(
                    RollupInput(
                        facts=facts[s.case_id],
                        score=s,
                        run_name=run.name or run.run_key,
                        agent=run.agent["name"],
                        suite=run.suite["name"],
                    )
                )
        return inputs

    def rollup(
        self,
        run_ids: Sequence[UUID],
        rows: Sequence[str],
        columns: Sequence[str],
        metrics: Sequence[str] = (),
    ) -> Rollup:
        """A Voxli pivot of one or several runs; `metrics` declare custom per-message metrics."""
        if not run_ids:
            raise ValidationError("run_id: give at least one run", field="run_id")
        declared = [parse_metric(m) for m in metrics]
        try:
            return rollup(self.rollup_inputs(run_ids), rows, columns, metrics=declared)
        except ValueError as e:
            raise ValidationError(f"rows/columns: {e}", field="rows") from None

    def grading_for(self, run_id: UUID, preset: str | None, min_score: float | None) -> GradingSpec:
        """The grading spec: a preset, else the run spec's `grading` section."""
        try:
            if preset:
                spec = load_preset(preset)
            else:
                section = self.reads.run_spec(run_id).grading
                if not section:
                    raise StateError(
                        f"run {run_id} has no grading section in its spec; give a preset "
                        "(e.g. ifixai-v1) or a spec with `grading`",
                        field="preset",
                    )
                spec = grading_spec(section)
        except ValueError as e:
            raise ValidationError(f"preset: {e}", field="preset") from None
        if min_score is not None:
            spec = spec.model_copy(update={"min_score": min_score})
        return spec

    def grade(
        self,
        run_id: UUID,
        grading: GradingSpec,
        *,
        strategic_only: bool = False,
        spec: ScoringSpec | None = None,
    ) -> Grade:
        """The run graded (iFixAi rules); an open (incomplete) run is refused."""
        require_closed(self.reads.get_run(run_id))
        facts = {f.case_id: f for f in self.reads.facts(run_id)}
        _, scores = self.reads.summary_under(run_id, spec)
        return grade(
            [(facts[s.case_id], s) for s in scores], grading, strategic_only=strategic_only
        )


def parse_metric(text: str) -> CustomMetricSpec:
    """`name[:unit[:agg,agg…]]`, e.g. `interruptions:count:avg,max,p95`."""
    name, _, rest = text.partition(":")
    unit, _, aggs = rest.partition(":")
    fields: dict[str, Any] = {"name": name, "unit": unit or None}
    if aggs:
        fields["aggregates"] = [a.strip() for a in aggs.split(",") if a.strip()]
    try:
        return CustomMetricSpec.model_validate(fields)
    except pydantic.ValidationError as e:
        raise ValidationError(
            f"metric: invalid declaration {text!r}: {e}", field="metric"
        ) from None


def explain_case(
    events: Sequence[DomainEvent],
    facts: CaseFacts,
    score: CaseScore,
    spec: ScoringSpec,
    summary: Summary,
    spec_source: str,
) -> dict[str, Any]:
    """From judge prompt → raw reply → parsed scores → weights → overall → gate → run aggregate."""
    weights = _weights(score, spec)
    return {
        "case_id": str(facts.case_id),
        "run_id": str(facts.run_id),
        "test_case_key": facts.test_case_key,
        "repetition": facts.repetition,
        "spec_id": spec.spec_id,
        "spec_source": spec_source,
        "panel_policy": spec.panel.value,
        "judge_errors_policy": spec.judge_errors.value,
        "verdicts": _verdict_trails(events, set(score.verdict_ids)),
        "weights": weights,
        "overall_score": {
            "value": score.overall_score,
            "formula": "round(100 × Σ (score / 5) × normalised_weight, 2); "
            "binary pass = 5, fail = 0",
            "sum_of_contributions": sum(w["contribution"] or 0.0 for w in weights)
            if score.metric_scores
            else None,
            "judge_error": score.judge_error,
            "judge_error_message": score.judge_error_message,
        },
        "gate": {
            "policy": spec.gate.value,
            "rule": score.gate.value,
            "passed": score.passed,
            "status": score.status.value,
            "reason": score.gate_reason,
            "pass_threshold": spec.pass_threshold,
            "outcome_results": [o.model_dump(mode="json") for o in score.outcome_results],
            "assertion_score": score.assertion_score,
            "blockers_passed": score.blockers_passed,
        },
        "run_aggregate": _place_in_run(score, summary.aggregate),
    }


def _corrections(events: Sequence[DomainEvent]) -> dict[UUID, list[dict[str, Any]]]:
    """Every override and invalidation, by the verdict it corrects, in order."""
    corrections: dict[UUID, list[dict[str, Any]]] = {}
    for e in events:
        if isinstance(e, catalogue.VerdictOverridden | catalogue.VerdictInvalidated):
            corrections.setdefault(e.verdict_id, []).append(
                {
                    "type": type(e).__name__,
                    "actor": e.actor,
                    "timestamp": e.timestamp.isoformat(),
                    "reason": e.reason,
                    "changes": e.model_dump(
                        mode="json",
                        include={"metric_scores", "expected_outcomes", "passed"},
                        exclude_none=True,
                    )
                    if isinstance(e, catalogue.VerdictOverridden)
                    else {},
                }
            )
    return corrections


def _verdict_trails(events: Sequence[DomainEvent], counted: set[UUID]) -> list[dict[str, Any]]:
    """Each verdict from prompt to parsed scores, whether it counts, and its corrections."""
    corrections = _corrections(events)
    return [
        {
            "verdict_id": str(e.verdict_id),
            "version": e.originator_version,
            "recorded_by": e.actor,
            "recorded_at": e.timestamp.isoformat(),
            "judge": e.judge.model_dump(mode="json"),
            "template_id": e.template_id,
            "template_hash": e.template_hash,
            "prompt": e.prompt,
            "raw_output": e.raw_output,
            "parse_status": e.parse_status.value,
            "error": e.error,
            "parsed_metric_scores": [m.model_dump(mode="json") for m in e.metric_scores],
            "parsed_expected_outcomes": [o.model_dump(mode="json") for o in e.expected_outcomes],
            "counted": e.verdict_id in counted,
            "corrections": corrections.get(e.verdict_id, []),
        }
        for e in events
        if isinstance(e, catalogue.JudgeVerdictRecorded)
    ]


def _weights(score: CaseScore, spec: ScoringSpec) -> list[dict[str, Any]]:
    """Each metric of the spec: its weights, the case's score and its contribution."""
    by_metric = {m.metric: m for m in score.metric_scores}
    weights = []
    for m in spec.metrics:
        result = by_metric.get(m.metric)
        weights.append(
            {
                "metric": m.metric,
                "score_type": m.score_type.value,
                "raw_weight": m.raw_weight,
                "normalised_weight": m.weight,
                "score": None if result is None else result.score,
                "label": None
                if result is None or result.score is None
                else score_label(int(result.score), m.score_type),
                "contribution": None if result is None else result.contribution,
            }
        )
    return weights


def _place_in_run(score: CaseScore, agg: RunAggregate) -> dict[str, Any]:
    """How the case counts in its run's aggregate, beside the aggregate's figures."""
    scored = agg.coverage.scored
    return {
        "counts_in_metric_mean": score.scored,
        "share_of_metric_mean": (score.overall_score or 0.0) / scored
        if score.scored and scored
        else None,
        "counts_as": "passed"
        if score.passed
        else "errored"
        if score.errored
        else "failed"
        if score.passed is False
        else "neither (not decided)",
        "weighted_metrics_score_pct": agg.weighted_metrics_score_pct,
        "metrics_pass_threshold": agg.metrics_pass_threshold,
        "metrics_passed": agg.metrics_passed,
        "cases_pass_rate_pct": agg.cases_pass_rate_pct,
        "cases_pass_threshold": agg.cases_pass_threshold,
        "cases_passed": agg.cases_passed,
        "scored_cases": scored,
        "total_executions": agg.total_executions,
    }
