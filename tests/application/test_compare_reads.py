"""What a compare reads beside the two summaries (issue 32), on SQLite and PostgreSQL.

Each run's dataset reference comes from the runs read model (`runs_v4`), equal to what the
log's first event of the run says; the dataset use cases load only for runs of two
references; the judge-error counts kept per closed run state equal the database's count.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import compare
from evaledger.application.reports import judge_errors
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import NotFoundError
from evaledger.domain.ledger import Context
from tests.helpers import bundle, case

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def wired(store_url: str) -> Iterator[Services]:
    services = build_services(Settings(db=store_url))
    try:
        yield services
    finally:
        services.close()


def _import(services: Services, key: str, cases: list[dict[str, Any]], **run: Any) -> str:
    data = bundle(key=key, **run)
    data["cases"] = cases
    done = services.ledger.import_bundle(RunBundle.model_validate(data), Context(actor="t"))
    services.sync()
    return str(done.run_id)


def _errored_verdict(c: dict[str, Any]) -> dict[str, Any]:
    """The case with its one verdict an error verdict (no scores)."""
    c["verdicts"][0].update(metric_scores=[], error="judge timed out", raw_output=None)
    return c


def test_the_runs_read_model_keeps_each_runs_dataset_reference(wired: Services) -> None:
    named = _import(
        wired,
        "named",
        [case("a"), case("b")],
        dataset={"name": "qa", "hash": "ab" * 32},
    )
    plain = _import(wired, "plain", [case("a")])
    for run_id in (named, plain):
        logged = wired.ledger.run_dataset(UUID(run_id))
        kept = wired.reads.run_dataset(UUID(run_id))
        assert kept == (None if logged is None else logged.model_dump(mode="json"))
    assert wired.reads.run_dataset(UUID(named)) == {
        "name": "qa",
        "version": None,
        "hash": "ab" * 32,
    }
    assert wired.reads.run_dataset(UUID(plain)) is None
    with pytest.raises(NotFoundError, match="no run"):
        wired.reads.run_dataset(UUID(int=7))
    # Rebuilt from the log, the runs read model says the same.
    wired.runner.rebuild("runs_v4")
    rebuilt = wired.reads.run_dataset(UUID(named))
    assert rebuilt is not None and rebuilt["hash"] == "ab" * 32


def test_runs_of_one_reference_compare_without_the_dataset_use_cases(
    wired: Services, store_url: str
) -> None:
    same = {"dataset": {"name": "qa", "hash": "cd" * 32}}
    ids = [_import(wired, f"r{i}", [case("a", 4), case("b", 2 + i)], **same) for i in range(2)]
    other = _import(wired, "r-other", [case("a", 3)], dataset={"name": "qa", "hash": "ef" * 32})
    ran = compare.run_datasets(wired, UUID(ids[0]), UUID(ids[1]))
    assert (ran.differing, ran.difference) == (None, None)
    assert ran.baseline == ran.candidate and ran.baseline is not None
    differ = compare.run_datasets(wired, UUID(ids[0]), UUID(other))
    assert differ.difference is not None and "different dataset versions" in differ.difference
    # A fresh process: a compare of two runs of one reference never imports the use cases.
    probe = (
        "import sys\n"
        "from evaledger.api import cli\n"
        f"code = cli.main(['compare', {ids[0]!r}, {ids[1]!r}, '--json', '--db', {store_url!r}])\n"
        "assert code in (0, 1), code\n"
        "print('LOADED' if 'evaledger.application.datasets' in sys.modules else 'NOT LOADED')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("NOT LOADED")
    assert orjson.loads(out.stdout.rstrip().rsplit("\n", 1)[0])["aggregate"]


def test_kept_judge_error_counts_are_the_databases_count(wired: Services) -> None:
    run_id = UUID(
        _import(
            wired,
            "errors",
            [_errored_verdict(case("a")), _errored_verdict(case("b")), case("c")],
        )
    )
    assert wired.reads.judge_error_count(run_id) == 2
    first = judge_errors(wired, run_id, kept=True)
    again = judge_errors(wired, run_id, kept=True)  # kept: the same answer
    assert first.count == again.count == 2
    assert first.policy == wired.reads.run_spec(run_id).judge_errors
    clean = UUID(_import(wired, "clean", [case("a"), case("b")]))
    assert judge_errors(wired, clean, kept=True).count == 0 == judge_errors(wired, clean).count
