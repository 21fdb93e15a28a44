"""Judging over HTTP: start a judging pass as a background job, poll it, read agreement.

Thin adapters over `application/judging.py`: each route parses, calls one use case, returns it.
"""

from __future__ import annotations

import threading
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Request

from evaledger.api.agreement import agreement_of
from evaledger.api.deps import ContextDep, PrincipalDep, ServicesDep
from evaledger.api.jobs import job_queue
from evaledger.application.judging import (
    JobPage,
    JobRegistry,
    JobStatus,
    JudgeFailure,
    JudgeJob,
    JudgeReportOut,
    JudgeRequest,
    cancel_judge_job,
    enqueue_judging,
    get_judge_job,
    list_judge_jobs,
)
from evaledger.scoring.agreement import AgreementReport

__all__ = [
    "JobPage",
    "JobRegistry",
    "JobStatus",
    "JudgeBody",
    "JudgeFailure",
    "JudgeJob",
    "JudgeReportOut",
    "get_jobs",
    "job_queue",
    "router",
]

router = APIRouter(tags=["judging"])


class JudgeBody(JudgeRequest):
    """POST /runs/{id}/judge: what to judge and with which judges."""


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


@router.post("/runs/{run_id}/judge", status_code=202, operation_id="judge_run")
def judge_run(
    run_id: UUID, body: JudgeBody, services: ServicesDep, ctx: ContextDep, jobs: JobsDep
) -> JudgeJob:
    """Start judging the run's transcripts in the background; poll `GET /jobs/{job_id}`.

    The request is validated before the job starts (run, judges, keys, pairing, metrics,
    concurrency): a bad request is a 4xx and nothing is stored.
    """
    return enqueue_judging(services, jobs, run_id, body, ctx)


@router.get("/jobs/{job_id}", operation_id="get_job")
def get_job(
    job_id: UUID, jobs: JobsDep, services: ServicesDep, principal: PrincipalDep
) -> JudgeJob:
    """A background job's status, progress over cases and, once done, its report.

    A project token sees the jobs of its own project's runs only (others answer 404).
    """
    return get_judge_job(services, jobs, job_id, principal.project)


@router.get("/runs/{run_id}/agreement", operation_id="run_agreement")
def run_agreement(run_id: UUID, services: ServicesDep) -> AgreementReport:
    """Judge agreement: per metric and case pass/fail, κ (two judges), α (any), judge vs human."""
    return agreement_of(services, run_id)


@router.get("/jobs", operation_id="list_jobs")
def list_jobs(services: ServicesDep, principal: PrincipalDep, jobs: JobsDep) -> JobPage:
    """Judge jobs (a project token: its project's), newest first; progress on `GET /jobs/{id}`."""
    return list_judge_jobs(services, jobs, principal.project)


@router.post("/jobs/{job_id}/cancel", operation_id="cancel_job")
def cancel_job(job_id: UUID, services: ServicesDep, principal: PrincipalDep) -> JudgeJob:
    """Cancel a queued job, or stop a running one (verdicts written so far stay recorded).

    On SQLite, jobs run inside the server's process and cannot be canceled (400).
    """
    return cancel_judge_job(services, job_id, principal.project)
