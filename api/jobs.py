"""Durable judge jobs on PostgreSQL: procrastinate's queue in the store's own database.

`POST /runs/{id}/judge` enqueues; `evaledger worker` (any number, any machine) runs jobs; a job
outlives the server that took it. A worker killed mid-job leaves its job `doing`; the living
workers retry jobs whose worker stopped beating (STALLED_AFTER_S), and the retry skips what is
done: every verdict of a job carries the idempotency key `judge-job:<job>:<judge>`, recorded on
the case aggregate itself, so the ledger refuses a second verdict of one job and judge on one
case, whichever worker writes it (per-case progress is the ledger's own idempotent write).
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import orjson
import procrastinate
from procrastinate.exceptions import AlreadyEnqueued
from procrastinate.jobs import Job
from procrastinate.types import JSONValue
from pydantic import TypeAdapter

from evaledger.api.job_schema import REPORTS, ensure_job_schema
from evaledger.application.alerts import check_alerts
from evaledger.application.judging import JudgeJobSpec, QueuedJob, job_key, run_judge_job
from evaledger.application.online_rules import OnlineJudgment, judge_online_case
from evaledger.application.ports import Services
from evaledger.application.traces import DEFAULT_QUIET_S, seal_online_runs
from evaledger.domain.errors import NotFoundError, StateError
from evaledger.domain.ledger import Context
from evaledger.domain.store.postgres import connect_postgres
from evaledger.domain.store.urls import POSTGRES_CONNECT_KWARGS, StorageLocation

log = logging.getLogger(__name__)

QUEUE = "judge"
TASK = "evaledger.judge"
ONLINE_TASK = "evaledger.online_judge"
"""One online rule applied to one trace's case (`application/online_rules.py`)."""
HEARTBEAT_S = 2.0
"""How often a worker says it is alive."""
STALLED_AFTER_S = 10.0
"""A worker silent this long is dead: its running jobs are retried by another."""
RECOVERY_CRON = "* * * * * */5"
"""Every 5 s a worker looks for stalled jobs (a dead worker's job restarts within seconds)."""

ONLINE_CRON = "*/5 * * * *"
"""Every 5 minutes a worker records the complete OTLP traces and seals the days that are over."""

ALERT_CRON = "* * * * *"
"""Every minute a worker checks the online alerts (application/alerts.py) and posts transitions."""

STATUS = {
    "todo": "queued",
    "doing": "running",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "canceled",
    "aborting": "canceled",
    "aborted": "canceled",
}


__all__ = ["JobQueue", "QueuedJob", "job_key", "job_queue"]

FINAL = frozenset({"succeeded", "failed", "canceled"})


class JobQueue:
    """The judge-job queue of one PostgreSQL store."""

    def __init__(self, services: Services, location: StorageLocation) -> None:
        self.services = services
        self.location = location
        # The store's own URL: procrastinate's tables live beside the events (no broker).
        connector = procrastinate.PsycopgConnector(
            conninfo=location.url,
            kwargs=dict(POSTGRES_CONNECT_KWARGS),
        )
        self.app = procrastinate.App(connector=connector)
        self.task = self.app.task(name=TASK, queue=QUEUE, pass_context=False)(self._run)
        self.app.periodic(cron=RECOVERY_CRON, periodic_id="recover")(
            self.app.task(name="evaledger.recover_stalled", queue=QUEUE)(self._recover)
        )
        self.online_task = self.app.task(name=ONLINE_TASK, queue=QUEUE, pass_context=False)(
            self._judge_online
        )
        self.app.periodic(cron=ONLINE_CRON, periodic_id="online")(
            self.app.task(name="evaledger.seal_online_runs", queue=QUEUE)(self._seal_online)
        )
        self.app.periodic(cron=ALERT_CRON, periodic_id="alerts")(
            self.app.task(name="evaledger.check_alerts", queue=QUEUE)(self._check_alerts)
        )
        self._opened = False
        self._in_worker = False

    # -- the schema --------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create procrastinate's tables and the reports table once (under an advisory lock)."""
        ensure_job_schema(self.location.events_env)

    def open(self) -> JobQueue:
        """Connect (synchronously, for the API's routes).

        Inside `run_worker` the worker has opened the app (asynchronously): a task that queues
        another job (an online rule's judgment, found while the worker completes traces) defers
        through that connection; opening it again synchronously raised NotImplementedError.
        """
        if self._in_worker:
            return self
        if not self._opened:
            self.ensure_schema()
            self.app.open()
            self._opened = True
        return self

    def close(self) -> None:
        """Release the queue's connections."""
        if self._opened:
            self.app.close()
            self._opened = False

    # -- the API side ------------------------------------------------------------------------

    def enqueue(
        self,
        body: dict[str, Any],
        run_id: UUID,
        judges: list[str],
        cases_total: int,
        ctx: Context,
        project: str,
    ) -> QueuedJob:
        """Put a validated judging pass (its HTTP body, its plan's judges) on the queue."""
        job_id = uuid4()
        created_at = datetime.now(UTC)
        self.open()
        try:
            self.task.configure(lock=str(job_id), queueing_lock=str(job_id)).defer(
                job_id=str(job_id),
                run_id=str(run_id),
                judges=list[JSONValue](judges),
                project=project,
                body=body,
                actor=ctx.actor,
                ctx_project=ctx.project,
                scope=ctx.scope.value,
                cases_total=cases_total,
                created_at=created_at.isoformat(),
            )
        except AlreadyEnqueued:  # a fresh uuid4: cannot happen twice
            raise StateError(f"job {job_id} is already queued") from None
        return self.get(job_id)

    def enqueue_online(self, payload: dict[str, str]) -> None:
        """Queue one online rule's judgment of one case (a worker runs it)."""
        self.open()
        self.online_task.defer(**payload)

    def _job(self, job_id: UUID) -> Job:
        self.open()
        found = self.app.job_manager.list_jobs(lock=str(job_id), task=TASK)
        if not found:
            raise NotFoundError(f"no job {job_id}")
        return found[0]

    def get(self, job_id: UUID) -> QueuedJob:
        """A job's state, and its report once finished."""
        return self._describe(self._job(job_id))

    def listed(self, project: str | None) -> list[QueuedJob]:
        """Every judge job (of one project), newest first."""
        self.open()
        jobs = [self._describe(j) for j in self.app.job_manager.list_jobs(task=TASK)]
        jobs = [j for j in jobs if project is None or j.project == project]
        return sorted(jobs, key=lambda j: j.created_at, reverse=True)

    def cancel(self, job_id: UUID) -> QueuedJob:
        """Cancel a queued job, or ask a running one to stop (between cases)."""
        job = self._job(job_id)
        assert job.id is not None
        if job.status in ("todo", "doing"):
            self.app.job_manager.cancel_job_by_id(job.id, abort=True)
            if job.status == "todo":  # never runs: canceled now (a running one ends later)
                self._save_report(job_id, None, None)
        return self.get(job_id)

    def pending(self) -> int:
        """Judge jobs queued or running."""
        self.open()
        return sum(
            len(self.app.job_manager.list_jobs(task=TASK, status=status))
            for status in ("todo", "doing")
        )

    def _describe(self, job: Job) -> QueuedJob:
        kwargs = job.task_kwargs
        job_id = UUID(str(kwargs["job_id"]))
        report, error, finished_at = self._report(job_id)
        status = STATUS.get(str(job.status), str(job.status))
        return QueuedJob(
            job_id=job_id,
            run_id=UUID(str(kwargs["run_id"])),
            project=str(kwargs["project"]),
            status=status,
            judges=[str(j) for j in kwargs["judges"]],  # type: ignore[union-attr]
            cases_total=int(str(kwargs["cases_total"])),
            created_at=datetime.fromisoformat(str(kwargs["created_at"])),
            attempts=job.attempts,
            report=report,
            error=error,
            # The last attempt's end: a job retried after its worker died ends on the retry.
            finished_at=finished_at if status in FINAL else None,
        )

    def _report(self, job_id: UUID) -> tuple[dict[str, Any] | None, str | None, datetime | None]:
        with connect_postgres(self.location.events_env, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT report, error, finished_at FROM {REPORTS} WHERE job_id = %s", (job_id,)
            ).fetchone()
        if row is None:
            return None, None, None
        return row[0], row[1], row[2]

    # -- the worker side ---------------------------------------------------------------------

    def _run(self, **kwargs: Any) -> None:
        """The task: the `run_judge_job` use case on the job's arguments; its report is kept."""
        job_id = UUID(kwargs["job_id"])
        try:
            result = run_judge_job(self.services, JudgeJobSpec.from_payload(kwargs))
        except Exception as e:
            self._save_report(job_id, None, f"{type(e).__name__}: {e}")
            raise
        self._save_report(job_id, result.as_json(), None)

    def _judge_online(self, **kwargs: Any) -> None:
        """The task: `judge_online_case` (once per rule and case, whichever worker runs it)."""
        done = judge_online_case(self.services, OnlineJudgment.from_payload(kwargs))
        what = "judged" if done.judged else f"skipped ({done.reason})"
        log.info("online rule %s: case %s %s", done.judgment.rule, done.judgment.case_id, what)

    def _save_report(self, job_id: UUID, report: dict[str, Any] | None, error: str | None) -> None:
        with connect_postgres(self.location.events_env, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {REPORTS} (job_id, report, error, finished_at) "
                "VALUES (%s, %s, %s, now()) "
                "ON CONFLICT (job_id) DO UPDATE SET report = excluded.report, "
                "error = excluded.error, finished_at = excluded.finished_at",
                (job_id, None if report is None else orjson.dumps(report).decode(), error),
            )

    async def _recover(self, timestamp: int) -> None:
        """Retry the jobs of workers that stopped beating (killed, or their machine lost)."""
        del timestamp
        stalled = await self.app.job_manager.get_stalled_jobs(
            queue=QUEUE, task_name=TASK, seconds_since_heartbeat=STALLED_AFTER_S
        )
        for job in stalled:
            log.warning("judge job %s: its worker stopped; retrying it", job.id)
            await self.app.job_manager.retry_job(job, retry_at=datetime.now(UTC) - timedelta(1))

    def _seal_online(self, timestamp: int) -> None:
        """Record the complete traces, then seal the online runs of days that are over."""
        del timestamp
        quiet = float(os.environ.get("EVALEDGER_TRACE_QUIET") or DEFAULT_QUIET_S)
        sealed = seal_online_runs(self.services, Context(actor="worker"), quiet_s=quiet)
        for run in sealed:
            log.info("sealed online run %s/%s", run.project, run.run_key)

    def _check_alerts(self, timestamp: int) -> None:
        """Evaluate every project's enabled alerts and post their transitions."""
        del timestamp
        # As `Settings.alert_private_webhooks` reads it (pydantic's bool), like the quiet period.
        private = TypeAdapter(bool).validate_python(
            os.environ.get("EVALEDGER_ALERT_PRIVATE_WEBHOOKS") or False
        )
        for r in check_alerts(self.services, Context(actor="worker"), allow_private=private):
            if r.transition:
                log.info(
                    "alert %s/%s %s (posted: %s)", r.project, r.name, r.transition, r.delivered
                )

    def run_worker(self, concurrency: int = 1) -> None:
        """Run jobs until SIGTERM / SIGINT (a running job finishes first: graceful)."""
        self.ensure_schema()
        self._in_worker = True
        self.app.run_worker(
            queues=[QUEUE],
            concurrency=concurrency,
            update_heartbeat_interval=HEARTBEAT_S,
            stalled_worker_timeout=STALLED_AFTER_S,
            delete_jobs="never",
        )


def job_queue(services: Services) -> JobQueue | None:
    """The store's durable queue (the composition root builds it); None on SQLite."""
    queue: JobQueue | None = services.job_queue
    return queue
