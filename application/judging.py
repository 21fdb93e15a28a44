"""Judging use cases (issue 31): plan a pass, run it, queue it as a job, read jobs, rescore replies.

Every entry point that judges calls one of these: `evaledger judge` (`plan_judging` for a dry run,
`judge_run`, `rescore_judge_replies` for `--rescore`), `POST /runs/{id}/judge` (`enqueue_judging`),
the job routes (`get_judge_job`, `list_judge_jobs`, `cancel_judge_job`) and the durable queue's
task (`run_judge_job`, which `evaledger worker` runs). The rules of a pass (selection, pairing,
budget, prompts, parsing) stay in `judging/`; the queue's plumbing (procrastinate on PostgreSQL)
stays in `api/jobs.py` and reaches these use cases through the `JudgeQueue` port.

On SQLite a job runs in a thread of the server's process (`JobRegistry`: jobs live as long as
the process, docs/decisions.md); on PostgreSQL it is durable (`services.job_queue`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol
from uuid import UUID, uuid4

from pydantic import BaseModel, Field

from evaledger.application.ports import Services
from evaledger.domain.errors import EvaledgerError, NotFoundError, StateError
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from evaledger.domain.model import FrozenModel
from evaledger.judging.providers import environment
from evaledger.judging.report import FailureKind, JudgeReport, PlannedPrompt
from evaledger.judging.rescore import Rescored, rescore_run
from evaledger.judging.rubric import JudgeRubric
from evaledger.judging.runner import (
    JudgeOptions,
    JudgingInterrupted,
    Plan,
    dry_run_prompts,
    plan,
    run_plan,
)

__all__ = [
    "JobPage",
    "JobRegistry",
    "JobStatus",
    "JudgeFailure",
    "JudgeJob",
    "JudgeJobResult",
    "JudgeJobSpec",
    "JudgeOptions",
    "JudgeQueue",
    "JudgeReport",
    "JudgeReportOut",
    "JudgeRequest",
    "JudgingInterrupted",
    "JudgingNotStarted",
    "JudgingPreview",
    "PlannedPrompt",
    "QueuedJob",
    "RescoredReplies",
    "cancel_judge_job",
    "enqueue_judging",
    "get_judge_job",
    "job_key",
    "judge_job_cases_done",
    "judge_run",
    "list_judge_jobs",
    "plan_judging",
    "rescore_judge_replies",
    "run_judge_job",
]

Progress = Callable[[int, int], None]
"""Called with (cases done, cases planned) as a pass goes."""


# -- inputs ----------------------------------------------------------------------------------


class JudgeRequest(FrozenModel):
    """What to judge and with which judges (the HTTP body; a durable job's stored payload)."""

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
        """The runner's options for this request."""
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


@dataclass(frozen=True)
class JudgeJobSpec:
    """One durable job as a worker runs it: the pass asked for, by whom, under which job id."""

    job_id: UUID
    run_id: UUID
    request: JudgeRequest
    ctx: Context

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> JudgeJobSpec:
        """The job of a queued task's arguments (`api/jobs.JobQueue.enqueue` writes them)."""
        return cls(
            job_id=UUID(str(payload["job_id"])),
            run_id=UUID(str(payload["run_id"])),
            request=JudgeRequest.model_validate(payload["body"]),
            ctx=Context(
                actor=str(payload["actor"]),
                project=payload.get("ctx_project"),
                scope=TokenScope(payload["scope"]),
            ),
        )


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgingPreview:
    """What a pass would do (nothing called, nothing stored): its plan's report and prompts."""

    report: JudgeReport
    """A dry-run report: cases, skipped, calls, notes and the estimate of tokens and cost."""
    prompts: list[PlannedPrompt]

    def as_json(self) -> dict[str, Any]:
        """The preview as `judge --dry-run --json` prints it."""
        return {**self.report.as_json(), "prompts": [p.as_json() for p in self.prompts]}


@dataclass(frozen=True)
class RescoredReplies:
    """A run's stored rubric replies read under other rubrics (no judge call, nothing stored)."""

    run_id: UUID
    rows: list[Rescored]

    @property
    def changed(self) -> int:
        """Scores that read differently under the new rubrics."""
        return sum(r.rescored != r.recorded for r in self.rows)

    def as_json(self) -> dict[str, Any]:
        """As `judge --rescore --json` prints it."""
        return {"run_id": str(self.run_id), "rescored": [r.as_json() for r in self.rows]}


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


class JobPage(BaseModel):
    """Judge jobs, newest first."""

    data: list[JudgeJob]
    count: int


@dataclass(frozen=True)
class JudgeJobResult:
    """What a durable job did, judge by judge; its JSON is the one report the job stores."""

    planned_cases: int
    """Cases of the whole pass (not only those the last attempt still had to do)."""
    skipped: int
    reports: tuple[JudgeReport, ...]
    """One pass per judge (a retried job skips what an earlier attempt recorded)."""

    def as_json(self) -> dict[str, Any]:
        """One report: counts added, lists joined, flags or-ed (the job's stored report)."""
        total = dict(self.reports[0].as_json())
        for report in (r.as_json() for r in self.reports[1:]):
            for name, value in report.items():
                mine = total[name]
                if isinstance(value, bool):
                    total[name] = mine or value
                elif isinstance(value, int | float) and isinstance(mine, int | float):
                    highest = name in ("position", "exit_code")
                    total[name] = max(mine, value) if highest else mine + value
                elif isinstance(value, list) and name != "metrics":
                    total[name] = mine + value
                elif isinstance(value, dict):
                    total[name] = {k: mine.get(k, 0) + value.get(k, 0) for k in {*mine, *value}}
        # Of the whole pass, not of what the last attempt still had to do.
        total.update(cases=self.planned_cases, skipped=self.skipped)
        return total


# -- the durable queue's port ------------------------------------------------------------------


class QueuedJob(BaseModel):
    """A durable job as the queue holds it."""

    job_id: UUID
    run_id: UUID
    project: str
    status: str = Field(description="queued, running, succeeded, failed or canceled.")
    judges: list[str] = Field(description="The judges of the pass (provider:model).")
    cases_total: int
    created_at: datetime
    attempts: int = Field(description="Times a worker started it (a retry after a crash adds one).")
    report: dict[str, Any] | None = None
    error: str | None = None
    finished_at: datetime | None = Field(
        default=None, description="When it succeeded, failed or was canceled; null before."
    )


class JudgeQueue(Protocol):
    """The durable judge-job queue (`api/jobs.JobQueue`, procrastinate on PostgreSQL)."""

    def enqueue(
        self,
        body: dict[str, Any],
        run_id: UUID,
        judges: list[str],
        cases_total: int,
        ctx: Context,
        project: str,
    ) -> QueuedJob:
        """Queue a validated pass (its request as JSON, its plan's judges and cases)."""

    def get(self, job_id: UUID) -> QueuedJob:
        """A job (NotFoundError when there is none)."""

    def listed(self, project: str | None) -> list[QueuedJob]:
        """Every job (of one project), newest first."""

    def cancel(self, job_id: UUID) -> QueuedJob:
        """Cancel a queued job, or ask a running one to stop."""

    def enqueue_online(self, payload: dict[str, str]) -> None:
        """Queue one online rule's judgment of one case (`OnlineJudgment.as_payload()`)."""


def job_key(job_id: UUID, judge: str) -> str:
    """The idempotency key of one judge's verdicts in one job."""
    return f"judge-job:{job_id}:{judge}"


def _queue(services: Services) -> JudgeQueue | None:
    queue: JudgeQueue | None = services.job_queue
    return queue


# -- the in-process jobs (SQLite) --------------------------------------------------------------


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


def _now() -> datetime:
    return datetime.now(UTC)


def _run_in_process(
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


# -- the use cases: a pass in this process -----------------------------------------------------


class JudgingNotStarted(KeyboardInterrupt):
    """Ctrl-C landed while the pass was planned: no judge was called, nothing was recorded."""


def _plan(
    services: Services, run_id: UUID, options: JudgeOptions, env: Mapping[str, str] | None
) -> Plan:
    """The validated plan; a Ctrl-C while planning is `JudgingNotStarted`."""
    try:
        return plan(services.ledger, run_id, options, environment() if env is None else env)
    except (KeyboardInterrupt, RuntimeError) as e:
        # Python 3.11 wraps a Ctrl-C that lands while a class is built (the SDKs load lazily
        # here) in a RuntimeError.
        if not isinstance(e, KeyboardInterrupt) and not isinstance(e.__cause__, KeyboardInterrupt):
            raise
        raise JudgingNotStarted("interrupted before any judge call") from e


def plan_judging(
    services: Services,
    run_id: UUID,
    options: JudgeOptions,
    env: Mapping[str, str] | None = None,
) -> JudgingPreview:
    """What a pass would judge and cost (a dry run): cases, skips, notes, estimate and prompts.

    Validates the pass as `judge_run` does (ValidationError / NotFoundError); calls no judge
    and stores nothing. `env` holds the providers' keys and URLs (default: the environment).
    """
    planned = _plan(services, run_id, dataclasses.replace(options, dry_run=True), env)
    report = run_plan(services.ledger, planned, Context())
    return JudgingPreview(report, dry_run_prompts(planned))


def judge_run(
    services: Services,
    run_id: UUID,
    options: JudgeOptions,
    ctx: Context,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
) -> JudgeReport:
    """Judge a run's transcripts now, in this process; every call is recorded as a verdict.

    Raises ValidationError / NotFoundError before any call, `JudgingNotStarted` on a Ctrl-C
    while planning and `JudgingInterrupted` (its report counts what stays recorded) on one while
    judging. A dry run (`options.dry_run`) calls nothing and reports an estimate.
    """
    planned = _plan(services, run_id, options, env)
    return run_plan(services.ledger, planned, ctx, progress)


def rescore_judge_replies(
    services: Services, run_id: UUID, rubrics: Sequence[JudgeRubric]
) -> RescoredReplies:
    """A run's stored rubric replies read under `rubrics`: no judge call, nothing stored."""
    return RescoredReplies(run_id, rescore_run(services.ledger, run_id, rubrics))


# -- the use cases: jobs -----------------------------------------------------------------------


def enqueue_judging(
    services: Services,
    jobs: JobRegistry,
    run_id: UUID,
    request: JudgeRequest,
    ctx: Context,
    env: Mapping[str, str] | None = None,
) -> JudgeJob:
    """Start a pass as a background job: durable on PostgreSQL, in this process on SQLite.

    The pass is validated first (run, judges, keys, pairing, metrics, concurrency): a bad
    request raises and nothing is queued or stored.
    """
    planned = plan(
        services.ledger, run_id, request.options(), environment() if env is None else env
    )
    queue = _queue(services)
    if queue is not None:
        project = services.ledger.project_of(run_id) or "default"
        judges = [j.ref.label for j in planned.judges]
        body = request.model_dump(mode="json")
        queued = queue.enqueue(body, run_id, judges, len(planned.cases), ctx, project)
        return _from_queue(services, queued)
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
        target=_run_in_process,
        args=(services, jobs, job.job_id, planned, ctx),
        name=f"judge-{job.job_id}",
        daemon=True,
    ).start()
    return job


def get_judge_job(
    services: Services, jobs: JobRegistry, job_id: UUID, project: str | None
) -> JudgeJob:
    """A job's status, progress over cases and, once done, its report.

    `project` (a project token's) sees the jobs of its own project's runs only: another's is
    NotFoundError.
    """
    queue = _queue(services)
    if queue is not None:
        queued = queue.get(job_id)
        if project not in (None, queued.project):
            raise NotFoundError(f"no job {job_id}")
        return _from_queue(services, queued, progress=True)
    job = jobs.get(job_id)
    if project is not None and services.ledger.project_of(job.run_id) not in (None, project):
        raise NotFoundError(f"no job {job_id}")
    return job


def list_judge_jobs(services: Services, jobs: JobRegistry, project: str | None) -> JobPage:
    """Judge jobs (of `project`, when given), newest first."""
    queue = _queue(services)
    if queue is None:
        found = jobs.all()
        if project is not None:
            found = [j for j in found if services.ledger.project_of(j.run_id) == project]
    else:
        found = [_from_queue(services, q) for q in queue.listed(project)]
    return JobPage(data=found, count=len(found))


def cancel_judge_job(services: Services, job_id: UUID, project: str | None) -> JudgeJob:
    """Cancel a queued job, or stop a running one (its verdicts so far stay recorded).

    StateError on SQLite: jobs run in the server's process there and cannot be canceled.
    """
    queue = _queue(services)
    if queue is None:
        raise StateError(
            "jobs run in the server's process on SQLite and cannot be canceled; "
            "use PostgreSQL for durable, cancelable jobs"
        )
    queued = queue.get(job_id)
    if project not in (None, queued.project):
        raise NotFoundError(f"no job {job_id}")
    return _from_queue(services, queue.cancel(job_id))


def run_judge_job(
    services: Services, job: JudgeJobSpec, env: Mapping[str, str] | None = None
) -> JudgeJobResult:
    """Run (or finish) a durable job's pass, judge by judge (what `evaledger worker` does).

    Every verdict carries the idempotency key `judge-job:<job>:<judge>`, recorded on the case
    itself: a retry after a worker died asks no judge again about a case it already answered.
    """
    ledger = services.ledger
    planned = plan(ledger, job.run_id, job.request.options(), environment() if env is None else env)
    reports = []
    for judge in planned.judges:
        key = job_key(job.job_id, judge.ref.label)
        todo = [c for c in planned.cases if key not in ledger.get_case(c.case_id).idempotency]
        one = dataclasses.replace(planned, judges=[judge], cases=todo)
        keyed = dataclasses.replace(job.ctx, idempotency_key=key)
        reports.append(run_plan(ledger, one, keyed))
    return JudgeJobResult(len(planned.cases), planned.skipped, tuple(reports))


def judge_job_cases_done(services: Services, job: QueuedJob) -> int:
    """Cases every judge of a durable job has a verdict of this job for (from the ledger)."""
    keys = [job_key(job.job_id, j) for j in job.judges]
    run = services.ledger.get_run(job.run_id)
    return sum(
        all(k in services.ledger.get_case(cid).idempotency for k in keys) for cid in run.case_ids
    )


def _from_queue(services: Services, queued: QueuedJob, progress: bool = False) -> JudgeJob:
    """A durable job as the API shows it; `progress` counts its cases done (from the ledger)."""
    report = None
    if queued.report is not None:
        report = JudgeReportOut.model_validate(queued.report)
    done = judge_job_cases_done(services, queued) if progress and report is None else 0
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
