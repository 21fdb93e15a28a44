"""The client sends cases in batches (issue 32): one request and one transaction per batch.

A batch goes when it is full, when its first case has waited `flush_interval`, and when the run
ends; nothing is lost on a normal exit; a batch refused as a whole stores its good cases one by
one and raises the bad one's error. SQLite, PostgreSQL and a live server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import evaledger
from evaledger.api.bootstrap import Settings, build_services
from evaledger.client.batches import CaseBatches
from evaledger.domain.errors import ConflictError, ValidationError
from tests.client.conftest import Target


def commits_and_cases(db: str) -> tuple[int, int]:
    """(commits in the ledger chain, cases opened) of a store."""
    services = build_services(Settings(db=db))
    try:
        blocks = services.ledger.chain_blocks(-(2**62), 10_000)
        opened = sum(
            1
            for n in services.ledger.notifications(1, 100_000)
            if n.topic.startswith("evaledger.case.opened")
        )
        return len(blocks), opened
    finally:
        services.close()


def test_cases_go_in_batches_and_the_rest_when_the_run_ends(target: Target) -> None:
    base, _ = commits_and_cases(target.db)  # a server's token was issued in its own commit
    with evaledger.run(
        "batched", agent="bot", key="batched-1", batch_size=3, **target.kwargs
    ) as run:
        for i in range(7):
            with run.case(f"c{i}") as case:
                case.turn("assistant", f"answer {i}", latency_ms=5)
                case.score("accuracy", i / 7)
        # Two full batches went; the seventh case waits for the run's end.
        assert commits_and_cases(target.db) == (base + 2 + 2, 6)
    # create, start, three batches, complete: one transaction each.
    assert commits_and_cases(target.db) == (base + 6, 7)
    with evaledger.open(**target.kwargs) as reader:
        report = reader.show("batched-1")
    assert report.run.status == "completed"
    assert [c.test_case_key for c in report.cases] == [f"c{i}" for i in range(7)]
    assert run.case_ids == [c.case_id for c in report.cases]


def test_a_waiting_batch_is_sent_after_the_flush_interval(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    with evaledger.run(
        "timed", agent="bot", key="timed-1", db=db, batch_size=100, flush_interval=0.2
    ) as run:
        with run.case("a") as case:
            case.turn("assistant", "a", latency_ms=5)
        assert commits_and_cases(db)[1] == 0  # buffered
        deadline = time.monotonic() + 30
        while commits_and_cases(db)[1] == 0:
            assert time.monotonic() < deadline, "the timer never sent the batch"
            time.sleep(0.1)
        assert commits_and_cases(db) == (3, 1)


SCRIPT = """
import sys, evaledger
run = evaledger.run("exit", agent="bot", key="exit-1", db=sys.argv[1], batch_size=100).start()
for key in ("a", "b", "c"):
    with run.case(key) as case:
        case.turn("assistant", key, latency_ms=5)
# The run is never ended: the process exits with its cases buffered.
"""


def test_nothing_buffered_is_lost_on_a_normal_exit(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, db], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert commits_and_cases(db) == (3, 3)
    with evaledger.open(db) as reader:
        report = reader.show("exit-1")
    assert report.run.status == "running"  # never ended, but every case recorded
    assert sorted(c.test_case_key for c in report.cases) == ["a", "b", "c"]


def test_a_refused_case_stores_the_rest_of_its_batch_and_fails_the_run(target: Target) -> None:
    def again() -> None:
        with evaledger.run(
            "dups", agent="bot", key="dups-b2", batch_size=2, **target.kwargs
        ) as run:
            with run.case("same") as case:
                case.score("accuracy", 0.5)
            with run.case("good") as case:
                case.score("accuracy", 0.5)
            with run.case("same") as case:  # the same case with other facts
                case.score("accuracy", 0.9)
            with run.case("also-good") as case:
                case.score("accuracy", 0.5)

    with pytest.raises(ConflictError) as refused:
        again()
    assert refused.value.field == "case.key"
    assert "case 'same' (repetition 0) is already recorded in run 'dups-b2'" in str(refused.value)
    with evaledger.open(**target.kwargs) as reader:
        report = reader.show("dups-b2")
    assert report.run.status == "failed"
    assert sorted(c.test_case_key for c in report.cases) == ["also-good", "good", "same"]
    assert [c.named_scores for c in report.cases if c.test_case_key == "same"] == [
        {"accuracy": 0.5}
    ]


def test_batch_options_are_checked_by_name(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/store/"
    with pytest.raises(ValidationError) as size:
        evaledger.run("s", agent="bot", db=db, batch_size=0)
    assert size.value.field == "batch_size"
    with pytest.raises(ValidationError) as interval:
        evaledger.run("s", agent="bot", db=db, batch_size=10, flush_interval=float("nan"))
    assert interval.value.field == "flush_interval"
    with pytest.raises(ValueError, match="at least one case"):
        CaseBatches(lambda cases: None, size=0)
