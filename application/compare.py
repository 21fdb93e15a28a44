"""The comparison use cases: two runs (ids, a run and its approved baseline), two result files.

Every comparison is the reports' (`projections/reports.py`, cached per run positions) under the
rules of `scoring/comparison/`; these use cases choose the runs, the spec and what the answer
carries besides the comparison: each side's run, judge errors and headline. They write nothing;
comparing two files imports them into a scratch store the caller opens and throws away.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson

from evaledger.application.reports import JudgeErrors, judge_errors, spec_from_query
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import DatasetRef
from evaledger.domain.spec import ScoringSpec, keep_source_scorers
from evaledger.domain.types import variant_label
from evaledger.projections.graders import run_case_graders
from evaledger.projections.queries import RunRow
from evaledger.scoring.comparison import CompareThresholds, Comparison, RunComparison
from evaledger.scoring.comparison.significance import ComparisonSignificance
from evaledger.scoring.comparison.suites import (
    Guard,
    RunDatasets,
    common_items,
    dataset_difference,
    grader_differences,
    require_same_suite,
)
from evaledger.scoring.headline import Headline, run_headline

if TYPE_CHECKING:
    from evaledger.application.ports import Services

SIDES = ("baseline", "candidate")


def compare_runs(
    services: Services,
    baseline_id: UUID,
    candidate_id: UUID,
    thresholds: CompareThresholds | None = None,
    spec: ScoringSpec | None = None,
    *,
    metric_deltas: bool = True,
) -> RunComparison:
    """Compare two completed runs (404 when missing, 400 unless both are completed)."""
    return services.reports.compare(
        baseline_id, candidate_id, thresholds, spec, metric_deltas=metric_deltas
    )


def compare_runs_json(
    services: Services,
    baseline_id: UUID,
    candidate_id: UUID,
    thresholds: CompareThresholds | None = None,
    spec: str | None = None,
    *,
    metric_deltas: bool = False,
    case_offset: int = 0,
    case_limit: int | None = None,
    allow_different_datasets: bool = False,
    exclude_cached: bool = False,
    later: Callable[[Callable[[], None]], None] | None = None,
) -> bytes:
    """The comparison as JSON bytes (`GET /runs/compare`), shared by every serving process.

    `spec` is a run config as JSON or a stored spec id, resolved in the candidate's project.
    Every total, verdict and statistic covers all matched cases; only the list of
    `test_case_comparisons` is paged (sorted by key). Runs of two dataset versions are
    compared over their common items unless `allow_different_datasets` (`comparability`).
    `later` runs the write of a new answer to the store's shared cache (None: now), so a
    server can send the answer first (`Reports.compare_json`).
    """
    project = services.reads.get_run(candidate_id).project
    _, guard = comparison_guard(
        services,
        baseline_id,
        candidate_id,
        restrict=not allow_different_datasets,
        exclude_cached=exclude_cached,
    )
    return services.reports.compare_json(
        baseline_id,
        candidate_id,
        thresholds,
        spec_from_query(services, spec, project),
        metric_deltas=metric_deltas,
        case_offset=case_offset,
        case_limit=case_limit,
        guard=guard,
        later=later,
    )


def comparison_guard(
    services: Services,
    baseline_id: UUID,
    candidate_id: UUID,
    *,
    restrict: bool,
    exclude_cached: bool = False,
) -> tuple[RunDatasets, Guard | None]:
    """The dataset versions two runs ran and the comparison's guard (None: nothing to say).

    Runs of two versions are compared over their common items when `restrict`
    (`scoring.comparison.suites.common_items`); test cases served from a cache are left out
    of both runs with `exclude_cached`.
    """
    ran = run_datasets(services, baseline_id, candidate_id)
    (b_graders, b_cached), (c_graders, c_cached) = (
        run_graders(services, run_id) for run_id in (baseline_id, candidate_id)
    )
    graders = grader_differences(b_graders, c_graders)
    if ran.difference is None and not graders and not (b_cached or c_cached):
        return ran, None
    keys = [
        {t.test_case_key for t in services.reads.summary(run_id).test_cases}
        for run_id in (baseline_id, candidate_id)
    ]
    guard = common_items(
        ran.baseline,
        ran.candidate,
        ran.differing,
        keys[0],
        keys[1],
        restrict=restrict,
        graders=graders,
        cached=(b_cached, c_cached),
        exclude_cached=exclude_cached,
    )
    return ran, guard


def run_datasets(services: Services, baseline_id: UUID, candidate_id: UUID) -> RunDatasets:
    """Whether two runs ran the same dataset version; the items that differ when they did not.

    Each run's reference is read from the runs read model; the dataset use cases (the
    versions' items) load only when the two references differ.
    """
    old, new = (
        None if ref is None else DatasetRef.model_validate(ref)
        for ref in map(services.reads.run_dataset, (baseline_id, candidate_id))
    )
    if old == new:  # one version, or neither names one: nothing differs
        return RunDatasets(old, new, None, None)
    # lazy: the dataset use cases (dataset commands, aggregates, the bundle), only for runs of
    # two dataset references (issue 32: ≈ 0.5 s of imports on every compare otherwise)
    from evaledger.application.datasets import differing_items

    project = services.reads.get_run(candidate_id).project
    differing = differing_items(services, project, old, new)
    return RunDatasets(old, new, differing, dataset_difference(old, new, differing))


def run_graders(services: Services, run_id: UUID) -> tuple[dict[str, set[str]], set[str]]:
    """What graded a run (`scoring.comparison.suites.GRADER_FIELDS`), and its cached keys.

    Read once per state of the run (one query of its case rows) and kept: every compare of the
    run asks.
    """

    def compute() -> bytes:
        found, cached = _read_graders(services, run_id)
        return orjson.dumps(
            {"found": {k: sorted(v) for k, v in found.items()}, "cached": sorted(cached)}
        )

    kept = orjson.loads(services.reports.run_answer(run_id, ("graders",), compute))
    return {k: set(v) for k, v in kept["found"].items()}, set(kept["cached"])


def _read_graders(services: Services, run_id: UUID) -> tuple[dict[str, set[str]], set[str]]:
    """`run_graders` read from the run's recorded config and its case rows (`cases_v6`).

    Its verdicts' judge models, template hashes and scorer versions, the rubric its config
    selects (`judge.metrics`), and the test case keys of its cases opened as `cached`.
    """
    cached: set[str] = set()
    judge_config = services.reads.get_run(run_id).config.get("judge") or {}
    rubric = judge_config.get("metrics")
    found: dict[str, set[str]] = {
        "judge model": set(),
        "judge template hash": set(),
        "rubric": set()
        if rubric is None
        else {orjson.dumps(rubric, option=orjson.OPT_SORT_KEYS).decode()},
        "scorer version": set(),
    }
    for case in run_case_graders(services.reads.engine, run_id):
        if case.cached:
            cached.add(case.test_case_key)
        for g in case.graders:
            name = g.judge
            if g.kind == "llm" and name != ":":
                found["judge model"].add(name)
            if g.version:
                found["scorer version"].add(f"{name}@{g.version}")
            if g.template_hash:
                found["judge template hash"].add(g.template_hash)
    return found, cached


def approved_baseline_of(services: Services, candidate_id: UUID) -> UUID:
    """The approved baseline of the candidate's (agent, suite) in its project (404 if none)."""
    row = services.reads.get_run(candidate_id)
    return services.reads.baseline(row.agent["name"], row.suite["name"], row.project).run_id


@dataclass(frozen=True)
class ComparisonReport:
    """A comparison with what each side's view shows beside it."""

    baseline_id: UUID
    candidate_id: UUID
    baseline_run: RunRow
    candidate_run: RunRow
    comparison: Comparison
    """The comparison, its cases as columns: `.body()` is its JSON without a model per case."""
    judge_errors: dict[str, JudgeErrors]
    """Per side ("baseline", "candidate"): its judge errors and the policy counting them."""
    headlines: dict[str, Headline]
    """Per side: its headline under the spec the comparison scored it with."""
    significance: ComparisonSignificance | None = None
    """Issue 37: every metric's clustered difference and corrected p-values, once asked for."""
    datasets: RunDatasets | None = None
    """Issue 35: the dataset versions the runs ran and, when they differ, why (a warning)."""

    @property
    def result(self) -> RunComparison:
        """The whole comparison as a validated model (built once), with any significance."""
        model = self.comparison.model
        if self.significance is None:
            return model
        return model.model_copy(update={"significance": self.significance})

    @property
    def runs(self) -> dict[str, UUID]:
        """Per side, the run's id."""
        return {"baseline": self.baseline_id, "candidate": self.candidate_id}


def compare_report(
    services: Services,
    baseline_id: UUID | None,
    candidate_id: UUID,
    thresholds: CompareThresholds | None = None,
    *,
    spec: Callable[[], ScoringSpec | None] | None = None,
    allow_different_suites: bool = True,
    allow_different_datasets: bool = False,
    exclude_cached: bool = False,
) -> ComparisonReport:
    """Compare the candidate with `baseline_id`, or with its approved baseline when None.

    Without `allow_different_suites`, runs of two suites are refused before anything is
    compared. Runs of two dataset versions are compared over their common items only, unless
    `allow_different_datasets` (everything); either way the comparison's `comparability`
    says so. `spec` loads the spec to compare under once the runs are checked (None: each
    run's own spec).
    """
    if baseline_id is None:
        baseline_id = approved_baseline_of(services, candidate_id)
    runs = {"baseline": baseline_id, "candidate": candidate_id}
    rows = {side: services.reads.get_run(run_id) for side, run_id in runs.items()}
    if not allow_different_suites:
        require_same_suite(rows["baseline"].suite["name"], rows["candidate"].suite["name"])
    ran, guard = comparison_guard(
        services,
        baseline_id,
        candidate_id,
        restrict=not allow_different_datasets,
        exclude_cached=exclude_cached,
    )
    under = spec() if spec is not None else None
    result = services.reports.comparison(baseline_id, candidate_id, thresholds, under, guard=guard)
    aggregates = {
        "baseline": result.aggregate.baseline_metrics,
        "candidate": result.aggregate.candidate_metrics,
    }
    heads = {}
    for side, run_id in runs.items():
        own = services.reads.run_spec(run_id)
        used = own if under is None else keep_source_scorers(under, own)
        heads[side] = run_headline(used, aggregates[side])
    return ComparisonReport(
        baseline_id=baseline_id,
        candidate_id=candidate_id,
        baseline_run=rows["baseline"],
        candidate_run=rows["candidate"],
        comparison=result,
        judge_errors={
            side: judge_errors(services, run_id, kept=True) for side, run_id in runs.items()
        },
        headlines=heads,
        datasets=ran,
    )


def compared_answers(
    services: Services, runs: Mapping[str, UUID], rows: Sequence[Any]
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(run side, test case key, variant label) → the first repetition's case id and answer.

    Only for the rows of one page (each a test case comparison: `test_case_key`, `variant`):
    each answer is read from its case's transcript event. Each variant (promptfoo provider ×
    prompt) is its own row, paired with the same variant's case.
    """
    # lazy: the transcripts' reads (votes, event decoding), only for a page that shows answers
    from evaledger.application.transcripts import final_answers

    keys = [t.test_case_key for t in rows]
    wanted = {(t.test_case_key, t.variant) for t in rows}
    found: dict[tuple[str, str, str], UUID] = {}
    for side, run_id in runs.items():
        # In opening order: a row matched by key alone (no variant) takes the key's first case.
        for (key, variant), case_id in services.reads.first_cases(run_id, keys).items():
            for label in (variant_label(variant), ""):
                if (key, label) in wanted and (side, key, label) not in found:
                    found[(side, key, label)] = case_id
    answers = final_answers(services, list(dict.fromkeys(found.values())))
    return {
        where: {"case_id": str(case_id), "answer": answers[case_id]}
        for where, case_id in found.items()
    }


ScratchStore = Callable[[str], AbstractContextManager["Services"]]
"""Opens a wired store at a database URL for the block it is used in (and closes it after)."""


def compare_files(
    baseline: str | Path,
    candidate: str | Path,
    scratch: ScratchStore,
    scratch_dir: str,
    thresholds: CompareThresholds | None = None,
    *,
    allow_different_suites: bool = True,
    allow_different_datasets: bool = False,
    exclude_cached: bool = False,
    significance: Callable[[Services, UUID, UUID], Any] | None = None,
) -> RunComparison:
    """Import both files into a scratch SQLite store under `scratch_dir` and compare their runs.

    Each file holds one run. Two files of the same run key are told apart by a suffix on the
    candidate's key. Without `allow_different_suites`, runs of two suites are refused
    (`scoring.comparison.suites`) before anything is imported; runs of two dataset versions
    are compared over their common items unless `allow_different_datasets`. `significance`
    (the runs → their `ComparisonSignificance`, issue 37) fills the comparison's while the
    store is open.
    """
    # lazy: the importers (YAML, ijson, every format) and the write side's context (the ledger's
    # aggregates, eventsourcing), only to compare two result files
    from evaledger.domain.writes import Context
    from evaledger.importers.load import import_all, open_imports

    imports = open_imports([baseline]) + open_imports([candidate])
    if len(imports) != 2:
        raise ValidationError("files: each file must hold exactly one run", field="files")
    first, second = imports
    if not allow_different_suites:
        require_same_suite(first.run.suite.name, second.run.suite.name)
    if first.run.key == second.run.key and first.run.project == second.run.project:
        second = second.with_run(key=f"{second.run.key}~candidate")
    with scratch(f"sqlite:///{scratch_dir}/store/") as services:
        done = import_all(services.ledger, [first, second], Context(actor="compare"))
        services.sync()
        runs = done[0].result.run_id, done[1].result.run_id
        _, guard = comparison_guard(
            services,
            *runs,
            restrict=not allow_different_datasets,
            exclude_cached=exclude_cached,
        )
        result = services.reports.compare(*runs, thresholds, guard=guard)
        if significance is not None:
            result = result.model_copy(update={"significance": significance(services, *runs)})
        return result
