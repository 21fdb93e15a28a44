"""The Python client on SQLite, PostgreSQL and a live server: the issue's snippet, errors inside
`with` blocks, typed refusals that store nothing, retries that store nothing new, threads."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import evaledger
from evaledger.api.bootstrap import Settings, build_services
from evaledger.client.backends import connect
from evaledger.domain.aggregates import case_id_for
from evaledger.domain.errors import ConflictError, StateError, ValidationError
from tests.client.conftest import Target, run_cli

# The snippet of issue 20, verbatim.
SNIPPET = """\
import evaledger
with evaledger.run("qa-suite", agent="support-bot", agent_version="3", db="sqlite:///.evaledger/") as run:
    with run.case("refund-policy", input="Can I get a refund?") as case:
        case.turn("user", "Can I get a refund?")
        case.turn("assistant", "Yes, within 30 days.", latency_ms=840)
        case.score("exact_match", 1.0)            # a named score
        case.outcome("mentions 30 days", passed=True)
print(run.key, run.id)                           # completed and sealed on exit
"""


def stored_events(db: str) -> int:
    services = build_services(Settings(db=db))
    try:
        return services.ledger.position()
    finally:
        services.close()


def target_args(target: Target) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in target.kwargs.items())


def test_the_snippet_runs_as_written_and_show_lists_its_case(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    done = subprocess.run(
        [sys.executable, "-c", SNIPPET], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    key, run_id = done.stdout.split()
    shown = run_cli("show", key, "--db", f"sqlite:///{tmp_path}/.evaledger/")
    assert shown.returncode == 0, shown.stderr
    assert f"run {run_id}  {key}  [completed]" in shown.stdout
    assert "refund-policy" in shown.stdout


def test_the_snippet_on_every_target(target: Target) -> None:
    code = SNIPPET.replace('db="sqlite:///.evaledger/"', target_args(target))
    scope: dict[str, object] = {}
    exec(compile(code, "snippet", "exec"), scope)
    run = scope["run"]
    assert isinstance(run, evaledger.RunRecorder)
    with evaledger.open(**target.kwargs) as reader:
        report = reader.show(run.key)
        assert (report.run.run_id, report.run.status) == (run.id, "completed")
        assert [(c.test_case_key, c.status.value, c.passed) for c in report.cases] == [
            ("refund-policy", "passed", True)
        ]
        assert [r.run_key for r in reader.runs()] == [run.key]
        comparison = reader.compare(run, run.key)
        assert comparison.verdict.regression_detected is False
        rescored = reader.rescore(run, {"score_gates": [{"score": "exact_match", "value": 2}]})
        assert rescored.after.aggregate.pass_rate == 0.0
        assert [c.test_case_key for c in rescored.changed_cases] == ["refund-policy"]
    # One event per fact.
    services = build_services(Settings(db=target.db))
    try:
        events = services.ledger.events_of(case_id_for(run.id, "refund-policy", 0, ""))
    finally:
        services.close()
    assert [type(e).__name__ for e in events] == [
        "CaseOpened",
        "TranscriptRecorded",
        "NamedScoresRecorded",
        "OutcomeEvaluated",
    ]


def test_an_exception_in_a_case_is_recorded_errored_and_the_run_failed(target: Target) -> None:
    def record() -> None:
        with evaledger.run("errs", agent="bot", key="errs-1", **target.kwargs) as run:
            with run.case("ok") as case:
                case.turn("assistant", "fine", latency_ms=5)
            with run.case("boom") as case:
                case.turn("user", "hello")
                raise RuntimeError("tool crashed")

    with pytest.raises(RuntimeError, match="tool crashed"):
        record()
    with evaledger.open(**target.kwargs) as reader:
        report = reader.show("errs-1")
    assert (report.run.status, report.run.reason) == ("failed", "RuntimeError: tool crashed")
    by_key = {c.test_case_key: c for c in report.cases}
    assert by_key["boom"].status.value == "errored"
    assert by_key["ok"].status.value == "pending"  # ran, but nothing judged it yet


def test_an_interrupted_block_cancels_its_case_and_its_run(target: Target) -> None:
    """Ctrl-C (KeyboardInterrupt) is no failure of the agent: the case and the run are canceled."""

    def record() -> None:
        with evaledger.run("ctrl-c", agent="bot", key="ctrl-c-1", **target.kwargs) as run:
            with run.case("ran") as case:
                case.turn("assistant", "fine", latency_ms=5)
            with run.case("interrupted"):
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        record()
    with evaledger.open(**target.kwargs) as reader:
        report = reader.show("ctrl-c-1")
    assert (report.run.status, report.run.reason) == ("canceled", "KeyboardInterrupt")
    shown = run_cli("show", "ctrl-c-1", "--db", target.db)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[2] == "  reason: KeyboardInterrupt"  # why, under the header
    assert {c.test_case_key: c.status.value for c in report.cases} == {
        "ran": "pending",
        "interrupted": "canceled",
    }


def test_reads_refuse_a_typo_the_same_way_on_every_target(target: Target) -> None:
    run = evaledger.run("typos", agent="bot", key="typos-1", **target.kwargs)
    with run, run.case("c") as case:
        case.turn("assistant", "ok")
    with evaledger.open(**target.kwargs) as reader:
        with pytest.raises(evaledger.NotFoundError) as missing:
            reader.show("typo-1")
        assert str(missing.value) == "no run with id or key 'typo-1' in project 'default'"
        with pytest.raises(evaledger.NotFoundError, match="'typo-2'"):
            reader.compare("typos-1", "typo-2")
        with pytest.raises(ValidationError) as status:
            reader.runs(status="complete")
        assert (status.value.field or "").endswith("status")
        assert [r.run_key for r in reader.runs(status="completed")] == ["typos-1"]


def test_a_key_over_the_limit_is_refused_when_given_naming_its_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as suite:
        evaledger.run("s" * 201, agent="bot")
    assert str(suite.value) == "run.suite.name: at most 200 characters, got 201"
    assert len(evaledger.run("s" * 200, agent="bot").key) == 200  # the default key fits
    db = f"sqlite:///{tmp_path}/store/"
    with evaledger.run("s", agent="bot", key="long-1", db=db) as run:
        before = stored_events(db)
        with pytest.raises(ValidationError) as case:
            run.case("k" * 201)  # refused here, not when the block's work is done
        assert (case.value.field, str(case.value)) == (
            "case.test_case.key",
            "case.test_case.key: at most 200 characters, got 201",
        )
        assert stored_events(db) == before
    with pytest.raises(StateError, match="run 'long-1' is closed"):
        run.case("after-the-block")  # refused before any work, not at the block's end


def test_a_store_that_is_not_there_is_an_infrastructure_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-store"
    with pytest.raises(evaledger.InfrastructureError, match="does not exist"):
        evaledger.open(f"sqlite:///{missing}/")
    assert not missing.exists()  # reading never creates a store
    with pytest.raises(evaledger.InfrastructureError, match="cannot be created"):
        evaledger.run("s", agent="bot", db="sqlite:////proc/no-such-dir/store/").__enter__()
    with pytest.raises(ValidationError) as scheme:
        evaledger.run("s", agent="bot", db="mysql://host/db").__enter__()
    assert (scheme.value.field, str(scheme.value).split(":")[0]) == ("db", "db")


def test_bad_input_raises_a_typed_error_naming_the_field_and_stores_nothing(
    target: Target,
) -> None:
    with pytest.raises(ValidationError) as bad_agent:
        evaledger.run("s", agent="", **target.kwargs)
    assert bad_agent.value.field == "agent.name"
    with evaledger.run("s", agent="bot", key="bad-1", **target.kwargs) as run:
        before = stored_events(target.db)
        with run.case("c1") as case:
            with pytest.raises(ValidationError) as bad_turn:
                case.turn("robot", "hi")
            assert bad_turn.value.field == "turns[0].role"
            with pytest.raises(ValidationError) as bad_score:
                case.score("accuracy", float("nan"))
            assert bad_score.value.field == "scores[0].value"
            assert str(bad_score.value) == "scores[0].value: a finite number, got nan"
            with pytest.raises(evaledger.EvaledgerError) as bad_repetition:
                run.case("c2", repetition=-1)
            assert bad_repetition.value.field == "case.repetition"
            assert stored_events(target.db) == before  # nothing half-stored
            case.turn("assistant", "ok")
    with pytest.raises(StateError):
        evaledger.run("s", agent="bot", **target.kwargs).case("never")


def test_a_retried_write_stores_nothing_new_and_a_different_one_conflicts(
    target: Target,
) -> None:
    with evaledger.run("s", agent="bot", key="retry-1", **target.kwargs) as run:
        with run.case("c") as case:
            case.score("accuracy", 0.5)
        before = stored_events(target.db)
        bundle = case.written
        assert bundle is not None
        key = f"case-{case_id_for(run.id, 'c', 0, '')}"
        backend = connect(**target.kwargs)
        try:
            written = backend.record_case(run.id, bundle, key)  # the same write again
            assert stored_events(target.db) == before
            assert written == case.id
            changed = bundle.model_copy(update={"cost_usd": 1.0})
            with pytest.raises(ConflictError):
                backend.record_case(run.id, changed, key)
        finally:
            backend.close()
        assert stored_events(target.db) == before


def test_a_case_key_recorded_twice_in_a_run_is_a_conflict_naming_it(target: Target) -> None:
    with evaledger.run("dups", agent="bot", key="dups-1", **target.kwargs) as run:
        with run.case("same") as case:
            case.score("accuracy", 0.5)
        before = stored_events(target.db)
        with pytest.raises(ConflictError) as twice, run.case("same") as again:
            again.score("accuracy", 0.7)
        assert twice.value.field == "case.key"
        assert str(twice.value).startswith(
            "case 'same' (repetition 0) is already recorded in run 'dups-1' with other facts"
        )
        assert stored_events(target.db) == before
        with run.case("same", repetition=1) as retry:  # what the message suggests
            retry.score("accuracy", 0.7)


def test_threads_record_cases_of_one_run_concurrently(target: Target) -> None:
    errors: list[BaseException] = []
    with evaledger.run("threads", agent="bot", key="threads-1", **target.kwargs) as run:

        def worker(n: int) -> None:
            try:
                for i in range(5):
                    with run.case(f"t{n}-c{i}", repetition=0) as case:
                        case.turn("assistant", f"{n}/{i}", latency_ms=1 + i)
                        case.score("accuracy", i / 4)
            except BaseException as e:  # collected, so a failure is seen in the main thread
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    with evaledger.open(**target.kwargs) as reader:
        report = reader.show(run)
    assert report.run.status == "completed"
    assert sorted(c.test_case_key for c in report.cases) == sorted(
        f"t{n}-c{i}" for n in range(4) for i in range(5)
    )


def test_repetitions_verdicts_labels_and_thresholds(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    with evaledger.run(
        "s",
        agent="bot",
        key="rich-1",
        db=db,
        labels={"branch": "main"},
        config={"cases_pass_threshold": 50},
        thresholds={"accuracy": 0.5},
    ) as run:
        for rep, value in enumerate((1.0, 0.25)):
            with run.case("q", repetition=rep) as case:
                case.turn("assistant", "a", latency_ms=10)
                case.score("accuracy", value)
                case.verdict(
                    {"task_completion": True},
                    prompt="Grade this",
                    raw_reply='{"task_completion": true}',
                    judge_model="gpt-judge",
                )
    with evaledger.open(db) as reader:
        report = reader.show("rich-1")
    assert report.run.labels == {"branch": "main"}
    assert report.run.config["score_gates"] == [{"score": "accuracy", "op": ">=", "value": 0.5}]
    assert [(c.repetition, c.passed) for c in report.cases] == [(0, True), (1, False)]


def test_importing_evaledger_loads_the_client_only_when_used() -> None:
    code = (
        "import sys, evaledger; assert 'evaledger.client' not in sys.modules; "
        "evaledger.run; assert 'evaledger.client' in sys.modules; "
        "assert issubclass(evaledger.ValidationError, evaledger.EvaledgerError)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_rerunning_the_same_block_is_a_no_op_and_a_changed_one_conflicts(
    target: Target,
) -> None:
    def block(answer: str, score: float = 1.0) -> evaledger.RunRecorder:
        with (
            evaledger.run("qa", agent="bot", key="fixed-1", **target.kwargs) as run,
            run.case("c", input="Refund?") as case,
        ):
            case.turn("assistant", answer, latency_ms=5)
            case.score("accuracy", score)
        return run

    first = block("Yes.")
    before = stored_events(target.db)
    again = block("Yes.")  # later wall-clock times, the same content
    assert again.id == first.id
    assert stored_events(target.db) == before
    with pytest.raises(ConflictError):
        block("No.")
    with pytest.raises(ConflictError):
        block("Yes.", score=0.5)
    assert stored_events(target.db) == before
    with evaledger.open(**target.kwargs) as reader:
        report = reader.show("fixed-1")
    assert report.run.status == "completed"
    assert [(c.test_case_key, c.named_scores) for c in report.cases] == [("c", {"accuracy": 1.0})]


def test_rerunning_an_unfinished_run_adds_the_missing_cases(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"

    def block(keys: list[str]) -> None:
        with evaledger.run("qa", agent="bot", key="resume-1", db=db) as run:
            for key in keys:
                with run.case(key) as case:
                    case.turn("assistant", key, latency_ms=5)

    # A process that died after its first case: the run was created, never ended.
    died = evaledger.run("qa", agent="bot", key="resume-1", db=db).start()
    with died.case("a") as case:
        case.turn("assistant", "a", latency_ms=5)
    died.backend.close()
    with evaledger.open(db) as reader:
        assert reader.show("resume-1").run.status == "running"
    block(["a", "b"])
    with evaledger.open(db) as reader:
        report = reader.show("resume-1")
    assert report.run.status == "completed"
    assert [c.test_case_key for c in report.cases] == ["a", "b"]


def test_a_threshold_naming_no_recorded_score_is_refused_at_close(target: Target) -> None:
    """Issue 30: `thresholds={"exact_mach": 1.0}` (a typo) used to fail every case silently."""

    def record() -> None:
        with evaledger.run(
            "typo", agent="bot", key="typo-1", thresholds={"exact_mach": 1.0}, **target.kwargs
        ) as run:
            for key in ("a", "b"):
                with run.case(key) as case:
                    case.turn("assistant", "yes", latency_ms=5)
                    case.score("exact_match", 1.0)
                    case.score("f1", 0.5)

    with pytest.raises(ValidationError) as refused:
        record()
    message = (
        "thresholds: 'exact_mach' (did you mean 'exact_match'?) names no score this run's "
        "cases recorded (they recorded: 'exact_match', 'f1')"
    )
    assert (str(refused.value.detail), refused.value.field) == (message, "thresholds.exact_mach")
    with evaledger.open(**target.kwargs) as reader:
        report = reader.show("typo-1")
    # Failed with the reason, not completed as if its cases had been judged.
    assert (report.run.status, report.run.reason) == ("failed", message)


def test_thresholds_naming_recorded_scores_complete_the_run(target: Target) -> None:
    with evaledger.run(
        "ok", agent="bot", key="ok-1", thresholds={"exact_match": 1.0}, **target.kwargs
    ) as run:
        with run.case("a") as case:
            case.turn("assistant", "yes", latency_ms=5)
            case.score("exact_match", 1.0)
        with run.case("b") as case:  # a case without the score still fails on it
            case.turn("assistant", "no", latency_ms=5)
            case.score("f1", 0.2)
    with evaledger.open(**target.kwargs) as reader:
        report = reader.show("ok-1")
    assert report.run.status == "completed"
    assert [(c.test_case_key, c.passed) for c in report.cases] == [("a", True), ("b", False)]
