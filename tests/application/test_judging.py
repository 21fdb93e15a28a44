"""The judging use cases called directly (issue 31): plan, run, rescore, jobs on SQLite and PostgreSQL.

The judges are the loopback fake providers (tests/fake_judges.py): never the internet.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import orjson
import pytest

import evaledger.application.judging as judging
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application.judging import (
    JobRegistry,
    JobStatus,
    JudgeJob,
    JudgeJobSpec,
    JudgeOptions,
    JudgeRequest,
    JudgingNotStarted,
    JudgingPreview,
    PlannedPrompt,
    cancel_judge_job,
    enqueue_judging,
    get_judge_job,
    judge_run,
    list_judge_jobs,
    plan_judging,
    rescore_judge_replies,
    run_judge_job,
)
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import NotFoundError, StateError, ValidationError
from evaledger.domain.events import JudgeVerdictRecorded, TokenScope
from evaledger.domain.ledger import Context
from evaledger.judging.rubric import JudgeRubric
from tests.fake_judges import FakeJudges, serve
from tests.helpers import event_count
from tests.judging.test_judging import unjudged_bundle

CTX = Context(actor="use-case-test")
OPENAI = ("openai:gpt-4.1",)
PANEL = ["openai:gpt-4.1", "anthropic:claude-sonnet-4-6"]


@pytest.fixture
def judges() -> Iterator[FakeJudges]:
    yield from serve()


def import_unjudged(services: Services) -> UUID:
    bundle = RunBundle.model_validate(unjudged_bundle())
    return services.ledger.import_bundle(bundle, CTX).run_id


def verdicts(services: Services, run_id: UUID) -> list[JudgeVerdictRecorded]:
    run = services.ledger.get_run(run_id)
    return [
        e
        for cid in run.case_ids
        for e in services.ledger.events_of(cid)
        if isinstance(e, JudgeVerdictRecorded)
    ]


def finished(services: Services, jobs: JobRegistry, job_id: UUID) -> JudgeJob:
    deadline = time.monotonic() + 30
    while (job := get_judge_job(services, jobs, job_id, None)).status is JobStatus.RUNNING:
        if time.monotonic() > deadline:
            pytest.fail("the in-process job did not finish")
        time.sleep(0.05)
    return job


# -- a pass in this process (SQLite) ----------------------------------------------------------


def test_plan_judging_previews_cases_calls_and_cost_and_calls_nothing(
    services: Services, judges: FakeJudges
) -> None:
    run_id = import_unjudged(services)
    before = event_count(services)
    preview = plan_judging(services, run_id, JudgeOptions(judges=OPENAI), judges.env())
    assert isinstance(preview, JudgingPreview)
    report = preview.report
    # Two cases have transcripts; the errored one has none and is skipped.
    assert (report.dry_run, report.cases, report.skipped, report.calls) == (True, 2, 1, 2)
    assert report.estimate is not None and report.estimate.prompt_tokens > 0
    assert [type(p) for p in preview.prompts] == [PlannedPrompt, PlannedPrompt]
    assert all(p.prompt.startswith("[system]\n") for p in preview.prompts)
    shown = preview.as_json()
    assert shown["exit_code"] == 0 and len(shown["prompts"]) == 2
    assert set(shown["prompts"][0]) == {
        "case_id",
        "test_case_key",
        "repetition",
        "prompt",
        "template_id",
        "estimate",
    }
    assert shown["prompts"][0]["estimate"]["is_estimate"] is True
    assert (judges.calls(), event_count(services)) == (0, before)


def test_judge_run_records_one_verdict_per_call_and_reports_them(
    services: Services, judges: FakeJudges
) -> None:
    run_id = import_unjudged(services)
    seen: list[tuple[int, int]] = []
    report = judge_run(
        services,
        run_id,
        JudgeOptions(judges=OPENAI),
        CTX,
        lambda done, total: seen.append((done, total)),
        judges.env(),
    )
    assert (report.cases, report.verdicts, report.parsed, report.errors) == (2, 2, 2, 0)
    assert report.exit_code() == 0 and seen[-1] == (2, 2)
    assert len(verdicts(services, run_id)) == 2 == judges.calls("openai")
    again = judge_run(
        services, run_id, JudgeOptions(judges=OPENAI, missing_only=True), CTX, env=judges.env()
    )
    assert (again.cases, again.skipped, again.verdicts) == (0, 3, 0)


def test_judge_run_refuses_a_bad_pass_before_any_call_or_event(
    services: Services, judges: FakeJudges
) -> None:
    run_id = import_unjudged(services)
    before = event_count(services)
    with pytest.raises(ValidationError, match="concurrency"):
        judge_run(services, run_id, JudgeOptions(judges=OPENAI, concurrency=0), CTX)
    with pytest.raises(ValidationError, match="same judge"):
        judge_run(services, run_id, JudgeOptions(judges=OPENAI * 2), CTX, env=judges.env())
    with pytest.raises(NotFoundError):
        judge_run(services, uuid4(), JudgeOptions(judges=OPENAI), CTX, env=judges.env())
    assert (judges.calls(), event_count(services)) == (0, before)


def test_a_ctrl_c_while_planning_is_judging_not_started(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    def wrapped(*args: Any) -> None:
        # Python 3.11 wraps a Ctrl-C that lands while a class is built in a RuntimeError.
        raise RuntimeError("class built") from KeyboardInterrupt()

    for planning in (interrupted, wrapped):
        monkeypatch.setattr(judging, "plan", planning)
        with pytest.raises(JudgingNotStarted):
            judge_run(services, uuid4(), JudgeOptions(), CTX, env={})
        with pytest.raises(JudgingNotStarted):
            plan_judging(services, uuid4(), JudgeOptions(), env={})

    def broken(*args: Any) -> None:
        raise RuntimeError("a bug, not a Ctrl-C")

    monkeypatch.setattr(judging, "plan", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        judge_run(services, uuid4(), JudgeOptions(), CTX, env={})


def test_rescore_judge_replies_reads_stored_replies_under_another_rubric(
    services: Services, judges: FakeJudges
) -> None:
    run_id = import_unjudged(services)
    asked = JudgeRubric.model_validate(
        {"metric": "tool_routing", "criteria": "The right tools.", "scale": {"kind": "1-5"}}
    )
    options = JudgeOptions(judges=OPENAI, metrics=("tool_routing",), rubrics=(asked,))
    assert judge_run(services, run_id, options, CTX, env=judges.env()).parsed == 2
    calls, before = judges.calls(), event_count(services)
    other = asked.model_copy(update={"scale": asked.scale.model_copy(update={"kind": "0-10"})})
    rescored = rescore_judge_replies(services, run_id, [other])
    assert [(r.metric, r.recorded) for r in rescored.rows] == [("tool_routing", 4)] * 2
    assert rescored.changed == sum(r.rescored != 4 for r in rescored.rows)
    shown = rescored.as_json()
    assert shown["run_id"] == str(run_id) and len(shown["rescored"]) == 2
    assert (judges.calls(), event_count(services)) == (calls, before)
    unjudged = JudgeRubric.model_validate(
        {"metric": "task_completion", "criteria": "Done.", "scale": {"kind": "binary"}}
    )
    with pytest.raises(ValidationError, match="no rubric verdict"):
        rescore_judge_replies(services, run_id, [unjudged])


# -- jobs in the server's process (SQLite) ------------------------------------------------------


def test_an_in_process_job_runs_is_listed_by_project_and_cannot_be_canceled(
    services: Services, judges: FakeJudges
) -> None:
    run_id = import_unjudged(services)
    jobs = JobRegistry()
    request = JudgeRequest(judges=list(OPENAI))
    job = enqueue_judging(services, jobs, run_id, request, CTX, judges.env())
    assert (job.status, job.cases_total, job.cases_done) == (JobStatus.RUNNING, 2, 0)
    done = finished(services, jobs, job.job_id)
    assert done.status is JobStatus.SUCCEEDED and done.finished_at is not None
    assert done.report is not None and (done.report.verdicts, done.cases_done) == (2, 2)
    assert len(verdicts(services, run_id)) == 2
    page = list_judge_jobs(services, jobs, None)
    assert (page.count, page.data[0].job_id) == (1, job.job_id)
    assert list_judge_jobs(services, jobs, "default").count == 1
    assert list_judge_jobs(services, jobs, "elsewhere").count == 0
    with pytest.raises(NotFoundError):
        get_judge_job(services, jobs, job.job_id, "elsewhere")
    with pytest.raises(NotFoundError):
        get_judge_job(services, jobs, uuid4(), None)
    with pytest.raises(StateError, match="cannot be canceled"):
        cancel_judge_job(services, job.job_id, None)


def test_a_bad_job_request_is_refused_before_anything_is_queued(
    services: Services, judges: FakeJudges
) -> None:
    run_id = import_unjudged(services)
    jobs = JobRegistry()
    with pytest.raises(ValidationError, match="unknown metric"):
        enqueue_judging(
            services, jobs, run_id, JudgeRequest(judges=list(OPENAI), metrics=["nope"]), CTX
        )
    assert jobs.all() == [] and judges.calls() == 0


def test_a_failing_in_process_job_says_why(services: Services, judges: FakeJudges) -> None:
    run_id = import_unjudged(services)
    jobs = JobRegistry()
    env = {**judges.env(), "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}  # nothing listens
    request = JudgeRequest(judges=list(OPENAI), max_retries=0, timeout_s=2)
    job = enqueue_judging(services, jobs, run_id, request, CTX, env)
    done = finished(services, jobs, job.job_id)
    # Every call failed to connect: error verdicts, recorded, and a report that says so.
    assert done.status is JobStatus.SUCCEEDED and done.report is not None
    assert (done.report.errors, done.report.reached_calls, done.report.exit_code) == (2, 0, 3)


# -- durable jobs (PostgreSQL) ------------------------------------------------------------------


@pytest.fixture
def pg_services(pg_url: str) -> Iterator[Services]:
    s = build_services(Settings(db=pg_url))
    try:
        yield s
    finally:
        s.close()


@pytest.mark.postgres
def test_a_durable_job_is_queued_run_once_per_judge_and_retried_without_a_second_verdict(
    pg_services: Services, judges: FakeJudges
) -> None:
    services = pg_services
    run_id = import_unjudged(services)
    jobs = JobRegistry()  # unused on PostgreSQL: the queue holds the jobs
    ctx = Context(actor="ci", project="default", scope=TokenScope.WRITE)
    request = JudgeRequest(judges=PANEL, concurrency=1)
    job = enqueue_judging(services, jobs, run_id, request, ctx, judges.env())
    assert (job.status, job.cases_total, job.cases_done, job.report) == (
        JobStatus.QUEUED,
        2,
        0,
        None,
    )
    assert jobs.all() == [] and judges.calls() == 0
    assert [j.job_id for j in list_judge_jobs(services, jobs, "default").data] == [job.job_id]
    assert list_judge_jobs(services, jobs, "elsewhere").count == 0
    with pytest.raises(NotFoundError):
        get_judge_job(services, jobs, job.job_id, "elsewhere")

    # What a worker does with the job's stored arguments.
    payload = {
        "job_id": str(job.job_id),
        "run_id": str(run_id),
        "body": request.model_dump(mode="json"),
        "actor": ctx.actor,
        "ctx_project": ctx.project,
        "scope": ctx.scope.value,
    }
    spec = JudgeJobSpec.from_payload(payload)
    assert (spec.request, spec.ctx) == (request, ctx)
    result = run_judge_job(services, spec, judges.env())
    shown = result.as_json()
    assert (shown["judges"], shown["cases"], shown["verdicts"], shown["exit_code"]) == (
        PANEL,
        2,
        4,
        0,
    )
    found = verdicts(services, run_id)
    assert len(found) == 4 and {v.judge.provider for v in found} == {"openai", "anthropic"}
    progress = get_judge_job(services, jobs, job.job_id, "default")
    assert progress.cases_done == 2  # read from the ledger: every judge has its verdicts

    # A retry (its worker died after writing) asks no judge again about a case it answered.
    calls = judges.calls()
    again = run_judge_job(services, spec, judges.env()).as_json()
    assert (again["verdicts"], again["cases"], judges.calls()) == (0, 2, calls)
    assert len(verdicts(services, run_id)) == 4


@pytest.mark.postgres
def test_a_queued_durable_job_is_canceled_and_a_bad_one_never_queued(
    pg_services: Services, judges: FakeJudges
) -> None:
    services = pg_services
    run_id = import_unjudged(services)
    jobs = JobRegistry()
    job = enqueue_judging(
        services, jobs, run_id, JudgeRequest(judges=list(OPENAI)), CTX, judges.env()
    )
    with pytest.raises(NotFoundError):
        cancel_judge_job(services, job.job_id, "elsewhere")
    canceled = cancel_judge_job(services, job.job_id, None)
    assert canceled.status is JobStatus.CANCELED and canceled.finished_at is not None
    with pytest.raises(ValidationError, match="judge"):
        enqueue_judging(services, jobs, run_id, JudgeRequest(judges=["nobody:x"]), CTX)
    assert list_judge_jobs(services, jobs, None).count == 1


def test_a_job_result_merges_its_judges_reports_into_the_stored_report(
    services: Services, judges: FakeJudges
) -> None:
    """`JudgeJobResult.as_json` on SQLite too: the job use case needs no queue to run."""
    run_id = import_unjudged(services)
    spec = JudgeJobSpec(uuid4(), run_id, JudgeRequest(judges=PANEL), CTX)
    result = run_judge_job(services, spec, judges.env())
    assert [r.judges for r in result.reports] == [[PANEL[0]], [PANEL[1]]]
    shown = result.as_json()
    assert shown["judges"] == PANEL and shown["calls"] == 4 and shown["parsed"] == 4
    assert orjson.loads(orjson.dumps(shown)) == shown  # plain JSON, as the queue stores it
    keys: set[Any] = {
        k for cid in services.ledger.get_run(run_id).case_ids
        for k in services.ledger.get_case(cid).idempotency
    }  # fmt: skip
    assert {f"judge-job:{spec.job_id}:{j}" for j in PANEL} <= keys
