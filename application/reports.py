"""The read use cases: runs and cases as listed and shown, grades, rollups, gates, agreement.

Every function reads; none writes an event. Each takes the wired store (`ports.Services`) and
answers a typed result built from the read models (`projections/queries.py`) and the reports
(`projections/reports.py`); the entry points (HTTP routes, CLI commands, the web report, the demo)
render it. Comparisons are in `application/compare.py`, the review queue's rules in
`application/review_queue.py`.

A use case that the entry point called after `services.sync()` is called the same way: the
entry point syncs (its dependency `SyncedDep`, or `services.sync()` in a CLI command) and the use
case reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

import orjson
import pydantic

from evaledger.application.runs import resolve_spec
from evaledger.domain.errors import NotFoundError, ValidationError
from evaledger.domain.spec import JudgeErrorPolicy, RunConfig, ScoringSpec
from evaledger.projections.queries import RunFilter, RunRow, StoredRescore, Summary
from evaledger.scoring.headline import Headline, run_headline
from evaledger.scoring.models import CaseScore, RunAggregate

if TYPE_CHECKING:
    from evaledger.application.ports import Services
    from evaledger.scoring.facts import CaseFacts

# ---------------------------------------------------------------------------------------------
# which run, which case, which spec


def project_of(services: Services, aggregate_id: UUID) -> str | None:
    """The project a run or case belongs to (None: no such run or case)."""
    return services.ledger.project_of(aggregate_id)


def require_in_project(
    services: Services, project: str | None, aggregate_id: UUID, what: str
) -> None:
    """Another project's run or case does not exist for a viewer of `project` (None: any)."""
    if project is not None and services.ledger.project_of(aggregate_id) not in (None, project):
        raise NotFoundError(f"no {what} {aggregate_id}")


def run_id_for(services: Services, project: str | None, value: str, field: str) -> UUID:
    """A run id or a run key (wherever a run id is accepted) within `project` (None: any).

    A key used in several projects is refused (name the run by its id); an id of another
    project's run is not found.
    """
    try:
        run_id = UUID(value)
    except ValueError:
        rows, total = services.reads.list_runs(RunFilter(project=project, key=value, limit=2))
        if total > 1:
            raise ValidationError(
                f"{field}: run key {value!r} is used in several projects; use the run id",
                field=field,
            ) from None
        if not rows:
            raise NotFoundError(f"{field}: no run with the id or key {value!r}") from None
        return rows[0].run_id
    require_in_project(services, project, run_id, "run")
    return run_id


def spec_from_query(
    services: Services, spec: str | None, project: str = "default"
) -> ScoringSpec | None:
    """`spec` is a run config as JSON, or the id of a spec stored by a rescore (None: none)."""
    if spec is None:
        return None
    if spec.lstrip().startswith("{"):
        try:
            config = RunConfig.model_validate(orjson.loads(spec))
        except (orjson.JSONDecodeError, pydantic.ValidationError) as e:
            raise ValidationError(f"spec: invalid spec: {e}", field="spec") from None
        return resolve_spec(services, config, project)
    stored = services.reads.stored_spec(spec, project)
    if stored is None:
        raise NotFoundError(f"spec: no stored spec {spec!r} (rescore a run with it first)")
    return stored


def run_summary(services: Services, run_id: UUID) -> Summary:
    """The run's summary (aggregate) under its own spec, as materialised by the projection."""
    return services.reads.summary(run_id)


def run_spec_of(services: Services, run_id: UUID) -> ScoringSpec:
    """The run's own spec (snapshotted at creation)."""
    return services.reads.run_spec(run_id)


def metric_names(services: Services, project: str) -> dict[str, str]:
    """The project's metrics, name → display name."""
    return {m.name: m.display_name for m in services.reads.available_metrics(project)}


# ---------------------------------------------------------------------------------------------
# runs


@dataclass(frozen=True)
class RunList:
    """A page of runs, newest first, and how many match the filter."""

    rows: list[RunRow]
    total: int


def list_runs(services: Services, f: RunFilter) -> RunList:
    """Runs, newest first, filtered and paginated."""
    rows, total = services.reads.list_runs(f)
    return RunList(list(rows), total)


def get_run(services: Services, run_id: UUID) -> RunRow:
    """A run's row: key, project, suite, agent, status, labels, config and spec."""
    return services.reads.get_run(run_id)


@dataclass(frozen=True)
class RunView:
    """A run as shown: its row, its summary under its own spec, its headline and its cost."""

    run: RunRow
    summary: Summary
    headline: Headline
    total_cost: float | None
    """The run's total cost; None ("—") when no case reported one."""

    @property
    def aggregate(self) -> RunAggregate:
        """The run's aggregate under its own spec."""
        return self.summary.aggregate


def run_cost(services: Services, run_id: UUID, aggregate: RunAggregate) -> float | None:
    """The run's total cost; None ("—") when no case reported one.

    The aggregate sums unknown costs as 0, so a zero total is asked of the cases' scores.
    """
    if aggregate.total_cost_usd or cost_reported(services, run_id):
        return aggregate.total_cost_usd
    return None


def show_run(services: Services, run_id: UUID) -> RunView:
    """A run: its row, its aggregate under its own spec, its headline and its total cost."""
    run = services.reads.get_run(run_id)
    summary = services.reads.summary(run_id)
    return RunView(
        run,
        summary,
        run_headline(summary.spec, summary.aggregate),
        run_cost(services, run_id, summary.aggregate),
    )


@dataclass(frozen=True)
class RunListing:
    """A page of runs with each run's figures (the web report's runs page)."""

    runs: list[RunView]
    total: int


def list_runs_shown(services: Services, f: RunFilter) -> RunListing:
    """A page of runs, each with its aggregate, headline and cost."""
    rows, total = services.reads.list_runs(f)
    return RunListing([show_run(services, r.run_id) for r in rows], total)


def recent_runs(services: Services, project: str | None, limit: int = 500) -> list[RunRow]:
    """The newest runs of a project (None: all), as the pickers offer them."""
    rows, _ = services.reads.list_runs(RunFilter(project=project, limit=limit))
    return list(rows)


def baseline_run(services: Services, agent: str, suite: str, project: str = "default") -> RunRow:
    """The approved baseline run of (agent, suite) in a project."""
    return services.reads.baseline(agent, suite, project)


def stored_rescores(services: Services, run_id: UUID) -> list[StoredRescore]:
    """The rescores stored beside the run's own scores."""
    return services.reads.stored_rescores(run_id)


# ---------------------------------------------------------------------------------------------
# cases


@dataclass(frozen=True)
class CaseList:
    """A page of a run's case scores (under its own spec) and how many match."""

    rows: list[CaseScore]
    total: int


def list_cases(
    services: Services,
    run_id: UUID,
    status: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> CaseList:
    """A page of the run's cases scored under the run's own spec, in opening order."""
    rows, total = services.reads.case_page(run_id, status, limit, offset)
    return CaseList(list(rows), total)


def case_scores(services: Services, run_id: UUID) -> list[CaseScore]:
    """Every case score of the run under its own spec, in opening order."""
    return services.reads.case_scores(run_id)


def cost_reported(services: Services, run_id: UUID) -> bool:
    """Whether any case of the run reported a cost (else its total is unknown, not $0)."""
    return services.reads.cost_reported(run_id)


def show_case(services: Services, case_id: UUID) -> tuple[CaseFacts, CaseScore]:
    """A case's facts and its score under its run's spec."""
    return services.reads.case_score(case_id)


def first_cases(
    services: Services, run_id: UUID, keys: Sequence[str]
) -> dict[tuple[str, str], UUID]:
    """(test case key, variant) → the first repetition's case id, in opening order."""
    return services.reads.first_cases(run_id, keys)


# ---------------------------------------------------------------------------------------------
# judge errors


@dataclass(frozen=True)
class JudgeErrors:
    """How many judge errors a run has and its policy for them (issue 22)."""

    count: int
    policy: JudgeErrorPolicy


def judge_errors(services: Services, run_id: UUID, *, kept: bool = False) -> JudgeErrors:
    """The run's judge errors and the policy its own figures count them under.

    `kept` (a compare, issue 32): the count (the database's JSON test of every case's stored
    score, 0.1-0.2 s for a 10k-case run) is kept per state of a closed run in the store's
    shared answers (`Reports.run_answer`), as the guard's graders are. Not for `show`, which
    would load the reports (numpy, the event classes) for it.
    """
    policy = services.reads.run_spec(run_id).judge_errors
    if not kept:
        return JudgeErrors(services.reads.judge_error_count(run_id), policy)

    def count() -> bytes:
        return str(services.reads.judge_error_count(run_id)).encode()

    return JudgeErrors(int(services.reports.run_answer(run_id, ("judge errors",), count)), policy)
