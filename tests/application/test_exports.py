"""A run exported as CSV, Parquet, JUnit XML and JSON lines (application/exports.py, issue 36).

Each format is read back with the reader its users have (Python's `csv`, `pyarrow`,
`junitparser`, a JSON parser) and must say what `show` says: the same cases, statuses, scores,
named scores and counts, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from evaledger.api.bootstrap import Services
from evaledger.application import exports, reports, runs
from evaledger.application.export_formats import EXPORT_FORMATS, csv_cell, xml_text
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context
from evaledger.scoring.models import CaseScore, RunAggregate
from tests.helpers import bundle, case

CTX = Context(actor="test")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROMPTFOO = FIXTURES / "promptfoo" / "baseline.json"
INSPECT = FIXTURES / "peers" / "inspect_ai" / "eval-logs"


def example_run(services: Services) -> UUID:
    """The example bundle: one passed, one failed, one errored case, judged on 8 metrics."""
    run_id = runs.import_run(services, RunBundle.model_validate(bundle()), CTX).run_id
    services.sync()
    return run_id


def peer_run(services: Services, path: Path) -> UUID:
    """A peer file imported (named scores, variants or scorer metrics)."""
    run_id = runs.import_files(services, [path], CTX)[0].run.run_id
    services.sync()
    return run_id


def shown(services: Services, run_id: UUID) -> tuple[RunAggregate, list[CaseScore]]:
    """What `show` reads: the run's aggregate and every case score under its own spec."""
    return reports.run_summary(services, run_id).aggregate, reports.case_scores(services, run_id)


def read_csv(content: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(content.decode(), newline="")))


def number(cell: str) -> float | None:
    return None if cell == "" else float(cell)


def assert_counts(statuses: list[str], aggregate: RunAggregate) -> None:
    counts = Counter(statuses)
    assert counts["passed"] == aggregate.passed_count
    assert counts["failed"] == aggregate.failed_count
    assert counts["errored"] == aggregate.error_count
    assert counts["skipped"] == aggregate.skipped_count
    assert counts["canceled"] == aggregate.canceled_count
    assert counts["pending"] == aggregate.coverage.pending


# -- CSV --------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["example", "promptfoo"])
def test_csv_reads_back_with_the_cases_of_show(store_services: Services, source: str) -> None:
    s = store_services
    run_id = example_run(s) if source == "example" else peer_run(s, PROMPTFOO)
    aggregate, scores = shown(s, run_id)
    exported = exports.export_run_file(s, run_id, "csv")
    assert exported.media_type.startswith("text/csv") and exported.filename.endswith(".csv")
    rows = read_csv(exported.content)
    assert len(rows) == len(scores) == exported.cases
    assert_counts([r["status"] for r in rows], aggregate)
    for row, score in zip(rows, scores, strict=True):
        assert row["case_id"] == str(score.case_id)
        assert row["test_case_key"] == score.test_case_key
        assert int(row["repetition"]) == score.repetition
        assert row["status"] == score.status.value
        assert row["gate"] == score.gate.value
        assert row["passed"] == {True: "true", False: "false", None: ""}[score.passed]
        assert number(row["overall_score"]) == score.overall_score
        assert {m.metric: m.score for m in score.metric_scores} == {
            k.removeprefix("metric."): number(v) for k, v in row.items() if k.startswith("metric.")
        } or not score.metric_scores
        named = {
            k.removeprefix("score."): number(v) for k, v in row.items() if k.startswith("score.")
        }
        assert {k: v for k, v in named.items() if v is not None} == score.named_scores
    if source == "promptfoo":
        assert aggregate.named_score_means and any(r["variant"] for r in rows)
    else:
        failed = next(r for r in rows if r["status"] == "failed")
        assert failed["judge_summary"] and failed["gate_reason"]
        errored = next(r for r in rows if r["status"] == "errored")
        assert errored["error"]


def test_a_csv_cell_a_spreadsheet_would_run_is_quoted_as_text(services: Services) -> None:
    hostile = '=HYPERLINK("http://evil.example","x")'
    data = bundle(key="hostile-run")
    data["cases"] = [case("-2+3"), case("@SUM(A1)", 1)]
    data["cases"][1]["verdicts"][0]["metric_scores"][0]["justification"] = hostile
    run_id = runs.import_run(services, RunBundle.model_validate(data), CTX).run_id
    services.sync()
    rows = read_csv(exports.export_run_file(services, run_id, "csv").content)
    assert [r["test_case_key"] for r in rows] == ["'-2+3", "'@SUM(A1)"]
    assert hostile not in rows[1]["judge_summary"].splitlines()[0].partition(": ")[0]
    assert all(not v.startswith(("=", "+", "@")) for r in rows for v in r.values())
    # Numbers are never prefixed: a negative number stays a number.
    assert csv_cell(-1.5) == "-1.5" and csv_cell("-1.5") == "'-1.5" and csv_cell(None) == ""


# -- Parquet ----------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["example", "promptfoo"])
def test_parquet_reads_back_with_pyarrow(store_services: Services, source: str) -> None:
    s = store_services
    run_id = example_run(s) if source == "example" else peer_run(s, PROMPTFOO)
    aggregate, scores = shown(s, run_id)
    exported = exports.export_run_file(s, run_id, "parquet")
    table = pq.read_table(pa.BufferReader(exported.content))
    assert table.num_rows == len(scores)
    assert table.schema.field("repetition").type == pa.int64()
    assert table.schema.field("overall_score").type == pa.float64()
    assert table.schema.field("passed").type == pa.bool_()
    rows = table.to_pylist()
    assert_counts([r["status"] for r in rows], aggregate)
    assert [r["case_id"] for r in rows] == [str(x.case_id) for x in scores]
    for row, score in zip(rows, scores, strict=True):
        assert row["passed"] is score.passed and row["overall_score"] == score.overall_score
        for name, value in score.named_scores.items():
            assert row[f"score.{name}"] == value
        for m in score.metric_scores:
            assert row[f"metric.{m.metric}"] == m.score
    meta = orjson.loads(table.schema.metadata[b"evaledger.run"])
    assert meta["record"] == "run" and meta["run_id"] == str(run_id)
    assert meta["pass_rate"] == aggregate.pass_rate
    assert (meta["passed_count"], meta["failed_count"], meta["error_count"]) == (
        aggregate.passed_count,
        aggregate.failed_count,
        aggregate.error_count,
    )
    assert meta["named_score_means"] == aggregate.named_score_means


def test_parquet_keeps_an_inspect_runs_scorer_metrics(services: Services) -> None:
    log = INSPECT / "2025-02-11T15-18-04-05-00_popularity_mj7khqpMM4GBCfVQozKgzB.eval"
    run_id = peer_run(services, log)
    aggregate, scores = shown(services, run_id)
    assert aggregate.scorer_metrics  # the source's own figures, recomputed
    table = pq.read_table(
        pa.BufferReader(exports.export_run_file(services, run_id, "parquet").content)
    )
    meta = orjson.loads(table.schema.metadata[b"evaledger.run"])
    assert meta["scorer_metrics"] == aggregate.scorer_metrics
    assert meta["headline"]["metric"] == "match/accuracy"
    assert meta["scorer_metrics"]["match/accuracy"] == 0.8  # as Inspect reported it
    assert table.num_rows == len(scores)


# -- JUnit XML --------------------------------------------------------------------------------


def junit_cases(content: bytes) -> tuple[Any, list[Any]]:
    xml = JUnitXml.fromstring(content.decode())
    suites = list(xml)
    assert len(suites) == 1
    return suites[0], list(suites[0])


@pytest.mark.parametrize("source", ["example", "promptfoo"])
def test_junit_reads_back_with_junitparser(store_services: Services, source: str) -> None:
    s = store_services
    run_id = example_run(s) if source == "example" else peer_run(s, PROMPTFOO)
    aggregate, scores = shown(s, run_id)
    exported = exports.export_run_file(s, run_id, "junit")
    suite, cases = junit_cases(exported.content)
    assert suite.tests == len(cases) == len(scores)
    assert suite.failures == aggregate.failed_count
    assert suite.errors == aggregate.error_count
    assert (
        suite.skipped
        == len(scores) - aggregate.passed_count - aggregate.failed_count - aggregate.error_count
    )
    names = [c.name for c in cases]
    assert len(set(names)) == len(names)  # one test case per case, each its own name
    for tc, score in zip(cases, scores, strict=True):
        results = tc.result
        if score.status.value == "passed":
            assert results == []
        elif score.status.value == "failed":
            (failure,) = results
            assert isinstance(failure, Failure)
            assert failure.message == score.gate_reason and failure.type == score.gate.value
        elif score.status.value == "errored":
            assert isinstance(results[0], Error)
        else:
            assert isinstance(results[0], Skipped)
    props = {p.name: p.value for p in suite.properties()}
    assert float(props["pass_rate"]) == aggregate.pass_rate
    assert props["run_id"] == str(run_id)


def test_junit_failure_carries_the_judge_summary(services: Services) -> None:
    run_id = example_run(services)
    _, cases = junit_cases(exports.export_run_file(services, run_id, "junit").content)
    failed = [tc for tc in cases if tc.result and isinstance(tc.result[0], Failure)]
    assert failed
    text = failed[0].result[0].text
    # The judge that decided and what it said of a metric and of the failed expected outcome.
    assert "anthropic/claude-sonnet-4-5" in text and "FAILED" in text


def test_junit_survives_characters_xml_cannot_hold(services: Services) -> None:
    data = bundle(key="control-run")
    data["cases"] = [case("ctl", 1)]
    data["cases"][0]["verdicts"][0]["metric_scores"][0]["justification"] = "bell\x07 and \x1b[31m"
    run_id = runs.import_run(services, RunBundle.model_validate(data), CTX).run_id
    services.sync()
    _, cases = junit_cases(exports.export_run_file(services, run_id, "junit").content)
    (failure,) = cases[0].result
    assert "bell\ufffd and \ufffd[31m" in failure.text
    assert xml_text("a\x00b\ud800c") == "a\ufffdb\ufffdc"


# -- JSON lines -------------------------------------------------------------------------------


def test_jsonl_is_the_run_then_each_case(store_services: Services) -> None:
    s = store_services
    run_id = peer_run(s, PROMPTFOO)
    aggregate, scores = shown(s, run_id)
    lines = exports.export_run_file(s, run_id, "jsonl").content.splitlines()
    records = [orjson.loads(line) for line in lines]
    head, cases = records[0], records[1:]
    assert head["record"] == "run" and head["pass_rate"] == aggregate.pass_rate
    assert head["named_score_means"] == aggregate.named_score_means
    assert [c["record"] for c in cases] == ["case"] * len(scores)
    assert [c["named_scores"] for c in cases] == [x.named_scores for x in scores]
    assert_counts([c["status"] for c in cases], aggregate)


# -- the bundle and bad input -----------------------------------------------------------------


def test_bundle_is_the_run_bundle_route(services: Services) -> None:
    run_id = example_run(services)
    exported = exports.export_run_file(services, run_id, "bundle")
    assert orjson.loads(exported.content)["format"] == "evaledger.run-bundle/1"
    assert exported.cases == 3 and exported.media_type == "application/json"


def test_an_unknown_format_is_refused_naming_the_field(services: Services) -> None:
    run_id = example_run(services)
    with pytest.raises(ValidationError) as e:
        exports.export_run_file(services, run_id, "xlsx")
    assert e.value.field == "format" and "xlsx" in str(e.value)
    assert set(EXPORT_FORMATS) == {"bundle", "csv", "parquet", "junit", "jsonl"}
