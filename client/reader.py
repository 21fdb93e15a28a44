"""`evaledger.open(...)`: read a store or a server back, as typed results."""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from evaledger.client.backends import Backend, HttpBackend, connect
from evaledger.client.recorder import RunRecorder
from evaledger.client.validation import build
from evaledger.domain.aggregates import RunStatus, run_id_for
from evaledger.domain.errors import NotFoundError, ValidationError
from evaledger.domain.spec import RunConfig
from evaledger.projections.queries import RunFilter, RunRow
from evaledger.scoring.comparison import CompareThresholds, RunComparison
from evaledger.scoring.models import CaseScore, RunAggregate

RunRef = UUID | str | RunRecorder
"""A run: its id, its key (in the reader's project), or the recorder that recorded it."""


class RunReport(BaseModel):
    """A run with its aggregate and every case, scored under the run's own spec."""

    model_config = ConfigDict(frozen=True)

    run: RunRow = Field(description="The run as listed (key, suite, agent, status, config).")
    aggregate: RunAggregate = Field(description="The run's aggregate under its own spec.")
    cases: list[CaseScore] = Field(description="Every case in opening order.")


class SpecOutcome(BaseModel):
    """A case's score, pass/fail and status under one spec."""

    overall_score: float | None
    passed: bool | None
    status: str


class ChangedCase(BaseModel):
    """A case whose score, pass/fail or status differs under the new spec."""

    case_id: UUID
    test_case_key: str
    repetition: int
    before: SpecOutcome
    after: SpecOutcome


class SpecAggregate(BaseModel):
    """A run aggregate under one spec."""

    spec_id: str
    aggregate: RunAggregate


class Rescore(BaseModel):
    """A run replayed under another spec: before and after side by side (nothing written)."""

    run_id: UUID
    spec_id: str = Field(description="Id of the spec replayed under.")
    own_spec_id: str = Field(description="Id of the run's own spec.")
    before: SpecAggregate
    after: SpecAggregate
    changed_cases: list[ChangedCase]


class Reader:
    """Reads of a store or server: `runs()`, `show(run)`, `compare(a, b)`, `rescore(run, spec)`."""

    def __init__(self, backend: Backend, project: str = "default") -> None:
        self.backend = backend
        self.project = project

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the connection."""
        self.backend.close()

    def run_id(self, run: RunRef) -> UUID:
        """The id of a run given by id, key or recorder."""
        if isinstance(run, RunRecorder):
            return run.id
        if isinstance(run, UUID):
            return run
        try:
            return UUID(run)
        except ValueError:
            return run_id_for(self.project, run)

    def runs(
        self,
        *,
        suite: str | None = None,
        agent: str | None = None,
        status: str | None = None,
        label: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> builtins.list[RunRow]:
        """Runs of the project, newest first."""
        if status is not None and status not in set(RunStatus):
            # Checked here as the server checks it: a typo is an error, not an empty list.
            allowed = ", ".join(RunStatus)
            raise ValidationError(f"runs.status: one of {allowed}", field="runs.status")
        f = build(
            RunFilter,
            "runs",
            project=self.project,
            suite=suite,
            agent=agent,
            status=status,
            label=label,
            limit=limit,
            offset=offset,
        )
        return self.backend.list_runs(f)

    def show(self, run: RunRef) -> RunReport:
        """A run, its aggregate and its cases."""
        run_id = self.run_id(run)
        with self._naming(run):
            row, aggregate = self.backend.find_run(run_id)
        return RunReport(run=row, aggregate=aggregate, cases=self.backend.case_scores(run_id))

    @contextmanager
    def _naming(self, *runs: RunRef) -> Iterator[None]:
        """A run not found is named as the caller named it (its key, not the id derived)."""
        try:
            yield
        except NotFoundError as e:
            for run in runs:
                if isinstance(run, str) and str(self.run_id(run)) in str(e):
                    raise NotFoundError(
                        f"no run with id or key {run!r} in project {self.project!r}", field="run"
                    ) from None
            raise

    def compare(
        self,
        baseline: RunRef,
        candidate: RunRef,
        *,
        max_pass_rate_drop: float | None = None,
        max_avg_score_drop: float | None = None,
        max_latency_increase_pct: float | None = None,
        case_score_delta: float | None = None,
    ) -> RunComparison:
        """Compare two completed runs (thresholds default to the candidate's spec's)."""
        thresholds = build(
            CompareThresholds,
            "thresholds",
            max_pass_rate_drop=max_pass_rate_drop,
            max_avg_score_drop=max_avg_score_drop,
            max_latency_increase_pct=max_latency_increase_pct,
            case_score_delta=case_score_delta,
        )
        with self._naming(baseline, candidate):
            return self.backend.compare(self.run_id(baseline), self.run_id(candidate), thresholds)

    def rescore(self, run: RunRef, spec: RunConfig | Mapping[str, Any]) -> Rescore:
        """The run re-scored under another config: no judge call, no event written.

        On a server this is `POST /runs/{id}/rescore`, which takes a token of the write scope.
        """
        config = spec if isinstance(spec, RunConfig) else build(RunConfig, "spec", **dict(spec))
        with self._naming(run):
            return Rescore.model_validate(self.backend.rescore(self.run_id(run), config))


def open(
    db: str | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    project: str | None = None,
) -> Reader:
    """A reader of a local store (`db=`, default as the CLI) or a server (`url=`, `token=`).

    Without `project` it reads the token's project (asked of the server, `GET /whoami`), else
    "default". Reading never creates a store: a missing one is an InfrastructureError, as for
    the CLI.
    """
    backend = connect(db=db, url=url, token=token, create=False)
    if project is None:
        try:
            project = backend.token_project() if isinstance(backend, HttpBackend) else "default"
        except BaseException:
            backend.close()
            raise
    return Reader(backend, project)
