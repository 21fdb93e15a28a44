"""Judging over HTTP: start a judging pass as a background job, poll it, read agreement."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated
from uuid import UUID, uuid4

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from evaledger.api.agreement import agreement_of
from evaledger.api.bootstrap import Services
from evaledger.api.deps import ContextDep, PrincipalDep, ServicesDep
from evaledger.api.jobs import JobQueue, QueuedJob
from evaledger.domain.errors import EvaledgerError, NotFoundError, StateError
from evaledger.domain.ledger import Context
from evaledger.domain.model import FrozenModel
from evaledger.judging.providers import environment
from evaledger.judging.report import FailureKind
from evaledger.judging.rubric import JudgeRubric
from evaledger.judging.runner import JudgeOptions, Plan, plan, run_plan
from evaledger.scoring.agreement import AgreementReport

router = APIRouter(tags=["judging"])


class JudgeBody(FrozenModel):
    """POST /runs/{id}/judge: what to judge and with which judges."""

    judges: list[str] = Field(
        default_factory=list,
        description="PROVIDER:MODEL (openai, anthropic, replay); several make a panel of distinct "
        "vendors. Empty: the first keyed provider of another vendor than the agent's.",
    )
    metrics: list[str] = Field(
        default_factory=list, description="Metric ids to score; empty: the run's spec."
    )
    missing_only: bool = Field(
        default=False, description="Only cases without a valid verdict yet (none, or only errors)."
    )
    panel: bool = Field(
        default=False, description="Full mode: every keyed provider of a distinct vendor judges."
    )
    concurrency: int = Field(default=4, description="Judge calls in flight (at least 1).")
    dry_run: bool = Field(default=False, description="Plan only: no call, no event.")
    allow_self_judge: bool = Field(
        default=False, description="Allow a judge of the agent's own vendor (flagged)."
    )
    temperature: float | None = Field(default=None, description="Sampling temperature (0.2).")
    timeout_s: float = Field(default=60.0, gt=0, description="Seconds per call.")
    max_retries: int = Field(default=3, ge=0, le=10, description="Retries on 429/5xx/timeouts.")
    claims: str | None = Field(
        default=None,
        description="grounding or attribution: check atomic claims (ClaimsVerified) instead of "
        "scoring metrics.",
    )
    retry_errors: bool = Field(
        default=False,
        description="Only cases whose counted verdict is an error (new verdicts added, old kept).",
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        description="Stop before the pass's cost would exceed this (USD; estimated per call).",
    )
    rubrics: list[JudgeRubric] = Field(
        default_factory=list,
        description="Judge rubrics as data for metrics of this pass (format evaledger.rubric/1).",
    )

    def options(self) -> JudgeOptions:
        """The runner's options for this body."""
        return JudgeOptions(
            judges=tuple(self.judges),
            metrics=tuple(self.metrics),
            missing_only=self.missing_only,
            panel=self.panel,
            concurrency=self.concurrency,
            dry_run=self.dry_run,
            allow_self_judge=self.allow_self_judge,
            temperature=self.temperature,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            claims=self.claims,
            retry_errors=self.retry_errors,
            max_cost_usd=self.max_cost_usd,
            rubrics=tuple(self.rubrics),
        )


class JobStatus(StrEnum):
    """Where a background job is."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


class JudgeFailure(BaseModel):
    """A judge call that ended in an error verdict."""

    case_id: UUID
    test_case_key: str
    judge: str
    error: str
    kind: FailureKind = Field(description="unparseable, missing_metrics, provider_error, timeout…")


class JudgeReportOut(BaseModel):
    """What a judging pass did."""

    run_id: UUID
    judges: list[str] = Field(description="The judges used (provider:model).")
    metrics: list[str] = Field(description="The metrics scored.")
    cases: int = Field(description="Cases judged.")
    skipped: int = Field(description="Cases skipped (no transcript, or already judged).")
    calls: int = Field(description="Judge calls (cases x judges).")
    dry_run: bool
    self_judged: bool = Field(description="A judge is of the agent's own vendor.")
    verdicts: int = Field(description="Verdicts recorded, error verdicts included.")
    parsed: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float = Field(description="Cost of the priced calls, USD.")
    unpriced_calls: int = Field(description="Calls whose model has no price.")
    claims: int = Field(description="Atomic claims recorded (claim checks).")
    claim_mode: str | None = Field(description="grounding or attribution; null for metrics.")
    position: int = Field(description="Log position of the last verdict written.")
    failures: list[JudgeFailure]
    error_counts: dict[str, int] = Field(description="Error verdicts by kind.")
    attempted_calls: int = Field(description="Calls sent to a provider.")
    reached_calls: int = Field(description="Calls the provider answered (any HTTP status).")
    rate_limit_waits: int = Field(description="429s waited out (Retry-After) before asking again.")
    max_cost_usd: float | None = Field(description="The budget of the pass, if any (USD).")
    budget_stopped: bool = Field(description="The budget stopped the pass; calls were left.")
    calls_not_made: int = Field(description="Calls left because of the budget.")
    notes: list[str] = Field(
        default_factory=list,
        description="What the new verdicts will not change (an earlier valid verdict counts under "
        "panel `first`) or will count as judge errors (the pass does not score the spec's "
        "metrics).",
    )
    exit_code: int = Field(
        description="As the CLI: 0 every case parsed, 1 an error verdict or the budget, 3 no call "
        "reached the provider."
    )


class JudgeJob(BaseModel):
    """A judging pass running in the background."""

    job_id: UUID
    kind: str = Field(default="judge", description="What the job does.")
    run_id: UUID
    status: JobStatus
    cases_total: int = Field(description="Cases the pass judges.")
    cases_done: int = Field(description="Cases fully judged so far.")
    created_at: datetime
    finished_at: datetime | None = None
    report: JudgeReportOut | None = Field(default=None, description="Set once succeeded.")
    error: str | None = Field(default=None, description="Why the job failed.")


class JobRegistry:
    """In-process job table: jobs live as long as the server process (docs/decisions.md)."""

    def __init__(self) -> None:
        self._jobs: dict[UUID, JudgeJob] = {}
        self._lock = threading.Lock()

    def put(self, job: JudgeJob) -> None:
        """Store or replace a job's state."""
        with self._lock:
            self._jobs[job.job_id] = job

    def update(self, job_id: UUID, **changes: object) -> None:
        """Change some fields of a job."""
        with self._lock:
            self._jobs[job_id] = self._jobs[job_id].model_copy(update=changes)

    def all(self) -> list[JudgeJob]:
        """Every job, newest first."""
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: j.created_at, reverse=True)

    def get(self, job_id: UUID) -> JudgeJob:
        """A job, or NotFoundError."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id}")
        return job


_REGISTRY_LOCK = threading.Lock()


def get_jobs(request: Request) -> JobRegistry:
    """The app's job registry (created on first use)."""
    with _REGISTRY_LOCK:
        jobs: JobRegistry | None = getattr(request.app.state, "judge_jobs", None)
        if jobs is None:
            jobs = JobRegistry()
            request.app.state.judge_jobs = jobs
    return jobs


JobsDep = Annotated[JobRegistry, Depends(get_jobs)]


def _run_job(
    services: Services, jobs: JobRegistry, job_id: UUID, planned: Plan, ctx: Context
) -> None:
    def progress(done: int, total: int) -> None:
        jobs.update(job_id, cases_done=done, cases_total=total)

    try:
        report = run_plan(services.ledger, planned, ctx, progress)
    except EvaledgerError as e:
        jobs.update(job_id, status=JobStatus.FAILED, error=e.detail, finished_at=_now())
    except Exception as e:
        jobs.update(
            job_id, status=JobStatus.FAILED, error=f"{type(e).__name__}: {e}", finished_at=_now()
        )
    else:
        jobs.update(
            job_id,
            status=JobStatus.SUCCEEDED,
            report=JudgeReportOut.model_validate(report.as_json()),
            cases_done=report.cases,
            finished_at=_now(),
        )


def _now() -> datetime:
    return datetime.now(UTC)


@router.post("/runs/{run_id}/judge", status_code=202, operation_id="judge_run")
def judge_run(
    run_id: UUID, body: JudgeBody, services: ServicesDep, ctx: ContextDep, jobs: JobsDep
) -> JudgeJob:
    """Start judging the run's transcripts in the background; poll `GET /jobs/{job_id}`.

    The request is validated before the job starts (run, judges, keys, pairing, metrics,
    concurrency): a bad request is a 4xx and nothing is stored.
    """
    planned = plan(services.ledger, run_id, body.options(), environment())
    queue = job_queue(services)
    if queue is not None:
        project = services.ledger.project_of(run_id) or "default"
        judges = [j.ref.label for j in planned.judges]
        body_json = body.model_dump(mode="json")
        queued = queue.enqueue(body_json, run_id, judges, len(planned.cases), ctx, project)
        return _from_queue(queue, queued)
    job = JudgeJob(
        job_id=uuid4(),
        run_id=run_id,
        status=JobStatus.RUNNING,
        cases_total=len(planned.cases),
        cases_done=0,
        created_at=_now(),
    )
    jobs.put(job)
    threading.Thread(
        target=_run_job,
        args=(services, jobs, job.job_id, planned, ctx),
        name=f"judge-{job.job_id}",
        daemon=True,
    ).start()
    return job


@router.get("/jobs/{job_id}", operation_id="get_job")
def get_job(
    job_id: UUID, jobs: JobsDep, services: ServicesDep, principal: PrincipalDep
) -> JudgeJob:
    """A background job's status, progress over cases and, once done, its report.

    A project token sees the jobs of its own project's runs only (others answer 404).
    """
    queue = job_queue(services)
    if queue is not None:
        queued = queue.get(job_id)
        if principal.project not in (None, queued.project):
            raise NotFoundError(f"no job {job_id}")
        return _from_queue(queue, queued, progress=True)
    job = jobs.get(job_id)
    if principal.project is not None and services.ledger.project_of(job.run_id) not in (
        None,
        principal.project,
    ):
        raise NotFoundError(f"no job {job_id}")
    return job


@router.get("/runs/{run_id}/agreement", operation_id="run_agreement")
def run_agreement(run_id: UUID, services: ServicesDep) -> AgreementReport:
    """Judge agreement: per metric and case pass/fail, κ (two judges), α (any), judge vs human."""
    return agreement_of(services, run_id)


def job_queue(services: Services) -> JobQueue | None:
    """The durable queue on PostgreSQL; None on SQLite (jobs run in the server's process)."""
    if services.location.kind != "postgresql":
        return None
    if services.job_queue is None:
        services.job_queue = JobQueue(
            services, lambda body: JudgeBody.model_validate(body).options()
        )
    queue: JobQueue = services.job_queue
    return queue


def _from_queue(queue: JobQueue, queued: QueuedJob, progress: bool = False) -> JudgeJob:
    """The API's view of a durable job; `progress` counts its cases done (from the ledger)."""
    report = None
    if queued.report is not None:
        report = JudgeReportOut.model_validate(queued.report)
    done = queue.cases_done(queued) if progress and report is None else 0
    return JudgeJob(
        job_id=queued.job_id,
        run_id=queued.run_id,
        status=JobStatus(queued.status),
        cases_total=queued.cases_total,
        cases_done=report.cases if report is not None else done,
        created_at=queued.created_at,
        finished_at=queued.finished_at,
        report=report,
        error=queued.error,
    )


class JobPage(BaseModel):
    """Judge jobs, newest first."""

    data: list[JudgeJob]
    count: int


@router.get("/jobs", operation_id="list_jobs")
def list_jobs(services: ServicesDep, principal: PrincipalDep, jobs: JobsDep) -> JobPage:
    """Judge jobs (a project token: its project's), newest first; progress on `GET /jobs/{id}`."""
    queue = job_queue(services)
    if queue is None:
        found = jobs.all()
        if principal.project is not None:
            found = [j for j in found if services.ledger.project_of(j.run_id) == principal.project]
    else:
        found = [_from_queue(queue, q) for q in queue.listed(principal.project)]
    return JobPage(data=found, count=len(found))


@router.post("/jobs/{job_id}/cancel", operation_id="cancel_job")
def cancel_job(job_id: UUID, services: ServicesDep, principal: PrincipalDep) -> JudgeJob:
    """Cancel a queued job, or stop a running one (verdicts written so far stay recorded).

    On SQLite, jobs run inside the server's process and cannot be canceled (400).
    """
    queue = job_queue(services)
    if queue is None:
        raise StateError(
            "jobs run in the server's process on SQLite and cannot be canceled; "
            "use PostgreSQL for durable, cancelable jobs"
        )
    queued = queue.get(job_id)
    if principal.project not in (None, queued.project):
        raise NotFoundError(f"no job {job_id}")
    return _from_queue(queue, queue.cancel(job_id))
