"""Importers (DESIGN §11): every peer format into the ledger, with the peers' own figures.

Golden tests read each real file twice: once the way the peer does (its own summary: Inspect's
accuracy metric, promptfoo's stats, tau-bench's rewards, Connexity's aggregate) and once through
`evaledger import`; the imported pass rate must equal the peer's figure. Bad input (a truncated
file, a wrong `--from`, an unknown output version) exits 2 / answers 422 and stores nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import zipfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.aggregates import run_id_for
from evaledger.domain.bundle import BundleCase, BundleRun
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import (
    JudgeVerdictRecorded,
    NamedScore,
    NamedScoresRecorded,
    ScoreScale,
    TestCaseSnapshot,
)
from evaledger.domain.ledger import Context
from evaledger.domain.verify import verify
from evaledger.importers.base import Format, ImportFormatError
from evaledger.importers.detect import detect
from evaledger.importers.load import import_all, open_imports
from tests.api.test_cli import Cli as CliBase
from tests.conftest import FIXTURES
from tests.helpers import event_count

PEERS = FIXTURES / "peers"
INSPECT = PEERS / "inspect_ai"
PROMPTFOO = PEERS / "promptfoo"
TAU = PEERS / "tau-bench" / "gpt-4o-airline.tasks-1-12-41.json"
CONNEXITY = PEERS / "connexity"
README = PEERS / "README.md"
SCORED_EVAL = (
    INSPECT / "eval-logs" / "2025-02-11T15-18-04-05-00_popularity_mj7khqpMM4GBCfVQozKgzB.eval"
)
UNSCORED_EVAL = (
    INSPECT / "eval-logs" / "2025-02-11T15-17-00-05-00_popularity_dPiJifoWeEQBrfWsAopzWr.eval"
)
FRENCH = PROMPTFOO / "french-greeting-test.output.json"


class Cli(CliBase):
    """`evaledger` through `main([...])` against one store, counting its stored events."""

    def events(self) -> int:
        path = Path(self.db.removeprefix("sqlite:///")) / "events.sqlite"
        if not path.exists():
            return 0
        with closing(sqlite3.connect(path)) as conn:
            (n,) = conn.execute("SELECT count(*) FROM stored_events").fetchone()
        return int(n)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> Cli:
    return Cli(capsys, sqlite_url)


# ---------------------------------------------------------------------------------------------
# The peers' own figures, read without the importers


def inspect_header(path: Path) -> dict[str, Any]:
    if path.suffix == ".eval":
        with zipfile.ZipFile(path) as z:
            header: dict[str, Any] = json.loads(z.read("header.json"))
            header["_samples"] = sum(n.startswith("samples/") for n in z.namelist())
            return header
    data: dict[str, Any] = json.loads(path.read_text())
    data["_samples"] = len(data.get("samples") or []) or len(
        data["reductions"][0]["samples"] if data.get("reductions") else []
    )
    return data


def inspect_accuracy(path: Path) -> float | None:
    scores = (inspect_header(path).get("results") or {}).get("scores") or []
    return float(scores[0]["metrics"]["accuracy"]["value"]) if scores else None


def promptfoo_figures(path: Path) -> tuple[int, float]:
    results = json.loads(path.read_text())["results"]
    stats = results["stats"]
    total = stats["successes"] + stats["failures"] + stats["errors"]
    assert total == len(results["results"])
    return total, stats["successes"] / total


def imported(cli: Cli, *paths: Path, extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = cli.json("import", *map(str, paths), *extra)["imported"]
    return out


def shown(cli: Cli, run_id: str) -> dict[str, Any]:
    data: dict[str, Any] = cli.json("show", run_id)
    return data


# ---------------------------------------------------------------------------------------------
# Detection


DETECTED = {
    "inspect_ai/eval-logs/log_streaming.eval": Format.INSPECT,
    f"inspect_ai/eval-logs/{SCORED_EVAL.name}": Format.INSPECT,
    f"inspect_ai/eval-logs/{UNSCORED_EVAL.name}": Format.INSPECT,
    "inspect_ai/json-logs/2025-05-12T20-28-26-04-00_security-guide.json": Format.INSPECT,
    "inspect_ai/json-logs/2025-05-12T20-28-13-04-00_no-samples.json": Format.INSPECT,
    "promptfoo/sample-export.json": Format.PROMPTFOO,
    "promptfoo/french-greeting-test.output.json": Format.PROMPTFOO,
    "tau-bench/gpt-4o-airline.tasks-1-12-41.json": Format.TAU_BENCH,
}
REFUSED = {
    "connexity/api-schema/openapi.eval-schemas.subset.json": "detected an OpenAPI document",
    "connexity/eval-configs/voice-smoke.json": "detected a Connexity eval config",
    "connexity/docs-examples/test-case-schema-example.json": "legacy schema",
    "connexity/docs-examples/agent-contract-2-tool-call.response.json": "chat request/response",
    "connexity/docs-examples/available-metrics.response.json": "list response",
    "promptfoo/transcripts/conversation-replay.production-logs.first-11-sessions.jsonl": (
        "per-turn conversation log"
    ),
}


@pytest.mark.parametrize(("name", "fmt"), DETECTED.items())
def test_the_format_is_detected_from_content(name: str, fmt: Format, tmp_path: Path) -> None:
    path = PEERS / name
    # A misleading name changes nothing: content decides.
    renamed = tmp_path / "results.txt"
    renamed.write_bytes(path.read_bytes())
    assert detect(renamed) is fmt


@pytest.mark.parametrize(("name", "what"), REFUSED.items())
def test_a_file_of_another_kind_is_refused_naming_what_it_is(name: str, what: str) -> None:
    path = PEERS / name
    with pytest.raises(ImportFormatError, match=what):
        detect(path)


# ---------------------------------------------------------------------------------------------
# Golden imports, one per format


INSPECT_LOGS = {
    # file: (cases, events)
    "eval-logs/log_streaming.eval": (4, 15),
    f"eval-logs/{SCORED_EVAL.name}": (10, 33),
    f"eval-logs/{UNSCORED_EVAL.name}": (10, 23),
    "json-logs/2024-11-05T13-31-45-05-00_input-task_8zXjbRzCWrL9GXiXo2vus9.json": (1, 6),
    "json-logs/2025-05-12T20-28-13-04-00_no-samples.json": (3, 9),
    "json-logs/2025-05-12T20-28-13-04-00_popularity.json": (3, 12),
    "json-logs/2025-05-12T20-28-26-04-00_security-guide.json": (3, 12),
}


@pytest.mark.parametrize(("name", "expected"), INSPECT_LOGS.items())
def test_an_inspect_log_imports_with_its_own_accuracy_as_the_pass_rate(
    cli: Cli, name: str, expected: tuple[int, int]
) -> None:
    path = INSPECT / name
    header = inspect_header(path)
    (row,) = imported(cli, path)
    assert (row["format"], row["cases"], row["events"]) == ("inspect", *expected)
    assert row["cases"] == header["_samples"]
    # Older logs have no stored eval_id; Inspect's reader derives a stable one.
    from inspect_ai.log import read_eval_log

    assert row["run_key"] == f"inspect-{read_eval_log(str(path), header_only=True).eval.eval_id}"
    agg = shown(cli, row["run_id"])["aggregate"]
    accuracy = inspect_accuracy(path)
    if accuracy is None:
        # Run without scorers: every case waits for a verdict; pending cases stay in the
        # denominator, so the seed's pass rate is 0.0 (issue 29; displays show "—").
        assert (agg["pass_rate"], agg["coverage"]["pending"]) == (0.0, row["cases"])
        assert (agg["passed_count"], agg["failed_count"]) == (0, 0)
        assert "named_score_means" not in agg
    else:
        assert agg["pass_rate"] == pytest.approx(accuracy, abs=1e-12)
        scorer = header["results"]["scores"][0]["name"]
        assert agg["named_score_means"] == {scorer: pytest.approx(accuracy, abs=1e-12)}


def test_inspect_epochs_become_repetitions_and_scores_keep_their_grades(cli: Cli) -> None:
    (row,) = imported(cli, INSPECT / "eval-logs" / "log_streaming.eval")
    cases = shown(cli, row["run_id"])["cases"]
    assert [(c["test_case_key"], c["repetition"], c["passed"]) for c in cases] == [
        ("1", 0, False),
        ("1", 1, True),
        ("2", 0, True),
        ("2", 1, True),
    ]
    assert [c["named_scores"] for c in cases] == [{"match": 0.0}] + [{"match": 1.0}] * 3
    assert {c["gate"] for c in cases} == {"score_gate"}
    services = build_services(Settings(db=cli.db))
    try:
        events = services.ledger.events_of(UUID(cases[0]["case_id"]))
        (scored,) = [e for e in events if isinstance(e, NamedScoresRecorded)]
        assert scored.scorer == "match"
        assert scored.scores == [NamedScore(name="match", value="I", scale=ScoreScale.GRADE)]
        assert (scored.answer, scored.metadata) == ("No", {"target": " Yes", "epoch": 1})
        summary = services.reads.summary(UUID(row["run_id"]))
        assert summary.spec.reducers.k == 2
        assert [(t.test_case_key, t.pass_at_k, t.pass_hat_k) for t in summary.test_cases] == [
            ("1", 1.0, 0.0),
            ("2", 1.0, 1.0),
        ]
    finally:
        services.close()


def test_a_model_graded_inspect_score_keeps_the_graders_prompt_and_reply(cli: Cli) -> None:
    path = INSPECT / "json-logs" / "2025-05-12T20-28-26-04-00_security-guide.json"
    (row,) = imported(cli, path)
    sample = json.loads(path.read_text())["samples"][0]
    grading = sample["scores"]["model_graded_fact"]["metadata"]["grading"]
    services = build_services(Settings(db=cli.db))
    try:
        services.sync()
        first = services.reads.case_scores(UUID(row["run_id"]))[0]
        events = services.ledger.events_of(first.case_id)
        (scored,) = [e for e in events if isinstance(e, NamedScoresRecorded)]
        assert scored.scores[0].value == "C"
        assert scored.explanation == sample["scores"]["model_graded_fact"]["explanation"]
        assert scored.prompt == grading[0]["content"]
        assert scored.raw_output == grading[1]["content"]
        assert scored.explanation is not None and scored.explanation.rstrip().endswith("GRADE: C")
    finally:
        services.close()


PROMPTFOO_FILES = {
    # file: (events, named score means)
    "french-greeting-test.output.json": (
        7,
        {
            "Correctness": 1.0,
            "Performance": 0.5,
            "Tone": 1.0,
            "Topicality": 0.6015003324002018,
            "score": 0.8203000664800403,
            "success": 0.0,
        },
    ),
    "sample-export.json": (19, {"score": 0.6458333333333333, "success": 0.0}),
    "conversation-replay.simple-replay.json": (19, {"score": 1.0, "success": 1.0}),
}


@pytest.mark.parametrize(("name", "expected"), PROMPTFOO_FILES.items())
def test_a_promptfoo_output_imports_with_its_own_pass_rate(
    cli: Cli, name: str, expected: tuple[int, dict[str, float]]
) -> None:
    path = PROMPTFOO / name
    total, pass_rate = promptfoo_figures(path)
    (row,) = imported(cli, path)
    assert (row["format"], row["cases"], row["events"]) == ("promptfoo", total, expected[0])
    agg = shown(cli, row["run_id"])["aggregate"]
    assert agg["pass_rate"] == pass_rate
    assert agg["named_score_means"] == expected[1]


def test_promptfoo_assertions_become_outcome_results_with_their_reasons(cli: Cli) -> None:
    (row,) = imported(cli, FRENCH)
    (case,) = shown(cli, row["run_id"])["cases"]
    assert case["gate"] == "score_gate"
    outcomes = [(o["statement"], o["passed"]) for o in case["outcome_results"]]
    # The assert-set (cost OR latency, threshold 0.5) passes though its latency member fails.
    assert outcomes == [
        ("contains 'Bonjour' [Correctness]", True),
        ("llm-rubric 'Tone is friendly and the text is in French.' [Tone]", True),
        ("answer-relevance (threshold 0.8) [Topicality]", False),
        ("assert-set (threshold 0.5) [Performance]", True),
        ("cost (threshold 0.0008)", True),
        ("latency (threshold 150)", False),
    ]
    assert case["outcome_results"][2]["severity"] == "blocker"
    services = build_services(Settings(db=cli.db))
    try:
        events = services.ledger.events_of(UUID(case["case_id"]))
        (scored,) = [e for e in events if isinstance(e, NamedScoresRecorded)]
        assert scored.explanation == "Aggregate score 0.82 < 0.9 threshold"
        # The llm-rubric judge prompt, rendered, is kept verbatim.
        assert scored.prompt is not None and "Tone is friendly" in scored.prompt
        assert scored.usage is not None and scored.usage.prompt_tokens == 589
    finally:
        services.close()


def test_promptfoo_providers_become_configurations(cli: Cli) -> None:
    (row,) = imported(cli, PROMPTFOO / "sample-export.json")
    services = build_services(Settings(db=cli.db))
    try:
        services.sync()
        facts = services.reads.facts(UUID(row["run_id"]))
        assert sorted((f.test_case_key, f.configuration) for f in facts) == [
            ("test-0", "openai:gpt-5"),
            ("test-0", "openai:gpt-5-mini"),
            ("test-1", "openai:gpt-5"),
            ("test-1", "openai:gpt-5-mini"),
        ]
        assert services.reads.get_run(UUID(row["run_id"])).agent["name"] == (
            "openai:gpt-5, openai:gpt-5-mini"
        )
    finally:
        services.close()


def test_tau_bench_trials_become_repetitions_and_pass_hat_k_is_reported(cli: Cli) -> None:
    records = json.loads(TAU.read_text())
    (row,) = imported(cli, TAU)
    assert (row["format"], row["cases"], row["events"]) == ("tau-bench", 12, 51)
    agg = shown(cli, row["run_id"])["aggregate"]
    assert agg["pass_rate"] == sum(r["reward"] for r in records) / len(records) == 7 / 12
    assert agg["named_score_means"] == {"reward": 7 / 12}
    services = build_services(Settings(db=cli.db))
    try:
        summary = services.reads.summary(UUID(row["run_id"]))
        assert [(t.test_case_key, t.passes, t.pass_hat_k) for t in summary.test_cases] == [
            ("task-1", 1, 0.0),
            ("task-12", 4, 1.0),
            ("task-41", 2, 0.0),
        ]
        run = services.ledger.get_run(UUID(row["run_id"]))
        assert run.created.agent.system_prompt == records[0]["traj"][0]["content"]
        first = services.ledger.get_case(run.case_ids[0])
        assert first.opened.test_case.key == "task-1"
        assert first.turn_count == len(records[0]["traj"]) - 1  # the system message is the agent's
    finally:
        services.close()


def connexity_schema_validator(name: str) -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    path = CONNEXITY / "api-schema" / "openapi.eval-schemas.subset.json"
    document = Resource.from_contents(json.loads(path.read_text()), DRAFT202012)
    registry = Registry().with_resource("urn:connexity", document)
    return jsonschema.Draft202012Validator(
        {"$ref": f"urn:connexity#/components/schemas/{name}"}, registry=registry
    )


CONNEXITY_RUNS = {
    "run.completed.json": ("test-cases", 6, 21),
    "run.rev-210b6dc.json": ("test-cases-rev-210b6dc", 3, 12),
}


@pytest.mark.parametrize(("name", "expected"), CONNEXITY_RUNS.items())
def test_the_connexity_fixtures_follow_its_api_schemas(
    name: str, expected: tuple[str, int, int]
) -> None:
    data = json.loads((CONNEXITY / name).read_text())
    connexity_schema_validator("RunPublic").validate(data["run"])
    connexity_schema_validator("TestCaseResultsPublic").validate(data["results"])


@pytest.mark.parametrize(("name", "expected"), CONNEXITY_RUNS.items())
def test_a_connexity_run_imports_with_its_own_aggregate(
    cli: Cli, name: str, expected: tuple[str, int, int]
) -> None:
    folder, cases, events = expected
    data = json.loads((CONNEXITY / name).read_text())
    files = sorted((CONNEXITY / folder).glob("*.json"))
    (row,) = imported(cli, CONNEXITY / name, *files)
    assert (row["format"], row["cases"], row["events"]) == ("connexity", cases, events)
    agg = shown(cli, row["run_id"])["aggregate"]
    theirs = data["run"]["aggregate_metrics"]
    for field in ("pass_rate", "passed_count", "failed_count", "error_count", "total_executions"):
        assert agg[field] == theirs[field], field
    services = build_services(Settings(db=cli.db))
    try:
        run = services.ledger.get_run(UUID(row["run_id"]))
        by_name = {json.loads(f.read_text())["name"]: json.loads(f.read_text()) for f in files}
        for case_id in run.case_ids:
            snapshot = services.ledger.get_case(case_id).opened.test_case
            source = by_name[str(snapshot.name)]
            # The test-case file is the snapshot of the case it names.
            assert [o.statement for o in snapshot.expected_outcomes] == source["expected_outcomes"]
            assert snapshot.tags == [*source["tags"], f"difficulty:{source['difficulty']}"]
    finally:
        services.close()


def test_connexity_verdicts_keep_scores_failure_codes_and_turns(cli: Cli) -> None:
    files = sorted((CONNEXITY / "test-cases").glob("*.json"))
    (row,) = imported(cli, CONNEXITY / "run.completed.json", *files)
    cases = shown(cli, row["run_id"])["cases"]
    edge = next(c for c in cases if c["test_case_key"].endswith("0002"))
    assert edge["overall_score"] == 46.5
    assert edge["passed"] is False
    assert [o["passed"] for o in edge["outcome_results"]] == [False, False, True]
    services = build_services(Settings(db=cli.db))
    try:
        (verdict,) = [
            e
            for e in services.ledger.events_of(UUID(edge["case_id"]))
            if isinstance(e, JudgeVerdictRecorded)
        ]
        grounding = next(m for m in verdict.metric_scores if m.metric == "grounding_fidelity")
        assert (grounding.score, grounding.failure_code, grounding.turns) == (
            1,
            "hallucinated_refund",
            [1],
        )
        assert (verdict.judge.provider, verdict.judge.model) == ("anthropic", "claude-sonnet-4-5")
        assert verdict.usage is not None and verdict.usage.prompt_tokens == 2100
    finally:
        services.close()


def test_connexity_test_case_files_alone_are_refused(cli: Cli) -> None:
    before = cli.events()
    code, _, err = cli("import", str(CONNEXITY / "test-cases" / "normal-refund-request.json"))
    assert code == 2
    assert "give exactly one Connexity run file with them (got 0)" in err
    assert cli.events() == before


# ---------------------------------------------------------------------------------------------
# Idempotency, bad input


@pytest.mark.parametrize(
    "path",
    [SCORED_EVAL, FRENCH, TAU, INSPECT / "json-logs" / "2025-05-12T20-28-13-04-00_popularity.json"],
    ids=lambda p: p.name,
)
def test_the_same_file_twice_writes_nothing_new(cli: Cli, path: Path) -> None:
    (first,) = imported(cli, path)
    stored = cli.events()
    assert stored == first["events"] > 0
    (second,) = imported(cli, path)
    assert (second["events"], second["new_cases"], second["cases"]) == (0, 0, first["cases"])
    assert cli.events() == stored
    code, out, _ = cli("import", str(path))
    assert code == 0
    assert out.endswith("(already imported, nothing written)\n")


def truncated(path: Path, tmp_path: Path, fraction: float = 0.6) -> Path:
    data = path.read_bytes()
    cut = tmp_path / path.name
    cut.write_bytes(data[: int(len(data) * fraction)])
    return cut


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (SCORED_EVAL, "damaged or truncated"),
        (FRENCH, "promptfoo output that is not valid JSON"),
        (PROMPTFOO / "sample-export.json", "promptfoo output that is not valid JSON"),
        (TAU, "tau-bench file is cut off or not valid JSON"),
        (
            INSPECT / "json-logs" / "2025-05-12T20-28-26-04-00_security-guide.json",
            "cannot be read",
        ),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else "",
)
def test_a_truncated_file_is_refused_and_nothing_is_stored(
    cli: Cli, tmp_path: Path, path: Path, message: str
) -> None:
    cut = truncated(path, tmp_path)
    code, out, err = cli("import", str(cut))
    assert code == 2, err
    assert out == ""
    assert message in err
    assert "Traceback" not in err
    assert cli.events() == 0


def test_a_truncated_file_among_good_ones_stores_nothing(cli: Cli, tmp_path: Path) -> None:
    code, _, err = cli("import", str(FRENCH), str(truncated(TAU, tmp_path)))
    assert code == 2
    assert "tau-bench file is cut off" in err
    assert cli.events() == 0


def test_a_wrong_from_names_the_detected_format(cli: Cli) -> None:
    code, _, err = cli("import", str(SCORED_EVAL), "--from", "promptfoo")
    assert code == 2
    assert err == (
        f"evaledger: error: {SCORED_EVAL.name}: detected inspect output, not promptfoo "
        "(use --from inspect)\n"
    )
    code, _, err = cli("import", str(FRENCH), "--from", "csv")
    assert code == 2
    assert "unknown format 'csv'" in err
    assert cli.events() == 0


def test_an_unknown_promptfoo_output_version_is_refused(cli: Cli, tmp_path: Path) -> None:
    data = json.loads(FRENCH.read_text())
    data["results"]["version"] = 9
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    code, _, err = cli("import", str(path))
    assert code == 2
    assert err == (
        "evaledger: error: future.json: promptfoo results version 9 is not supported "
        "(this importer reads versions 2, 3)\n"
    )
    assert cli.events() == 0


def test_an_unknown_inspect_log_version_is_refused(cli: Cli, tmp_path: Path) -> None:
    data = json.loads(
        (INSPECT / "json-logs" / "2025-05-12T20-28-13-04-00_popularity.json").read_text()
    )
    data["version"] = 99
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    code, _, err = cli("import", str(path))
    assert code == 2
    assert err == (
        "evaledger: error: future.json: Inspect log format version 99 is not supported "
        "(this importer reads versions 1, 2, 3)\n"
    )
    assert cli.events() == 0


def test_run_key_and_project_name_the_run(cli: Cli) -> None:
    (row,) = imported(cli, TAU, extra=("--run-key", "airline-gpt4o", "--project", "sierra"))
    assert row["run_key"] == "airline-gpt4o"
    assert row["run_id"] == str(run_id_for("sierra", "airline-gpt4o"))
    code, _, err = cli("import", str(TAU), str(FRENCH), "--run-key", "one")
    assert code == 2
    assert "--run-key: names one run, but 2 runs are imported" in err


# ---------------------------------------------------------------------------------------------
# Comparison and scoring specs over named scores


def test_compare_two_imported_inspect_logs(cli: Cli) -> None:
    (unscored,) = imported(cli, UNSCORED_EVAL)
    (scored,) = imported(cli, SCORED_EVAL)
    code, out, err = cli(
        "compare", unscored["run_id"], scored["run_id"], "--json", "--no-fail-on-thresholds"
    )
    assert code == 0, err
    result = orjson.loads(out)
    assert len(result["test_case_comparisons"]) == 10
    # The unscored log decided no case: the seed's pass rate 0.0 (issue 29), a delta of +0.8.
    agg = result["aggregate"]
    assert (agg["baseline_metrics"]["pass_rate"], agg["candidate_metrics"]["pass_rate"]) == (
        0.0,
        0.8,
    )
    assert agg["pass_rate_delta"] == 0.8
    assert result["baseline_only_test_cases"] == result["candidate_only_test_cases"] == []
    (named,) = result["named_scores"]
    assert (named["name"], named["baseline_mean"], named["candidate_mean"]) == ("match", None, 0.8)
    assert (named["mean_delta"], named["paired"]["n"], named["verdict"]) == (
        None,
        0,
        "insufficient_data",
    )
    # The same scored log again, under its own key: same named scores, zero delta.
    (again,) = imported(cli, SCORED_EVAL, extra=("--run-key", "popularity-again"))
    result = cli.json("compare", scored["run_id"], again["run_id"], "--no-fail-on-thresholds")
    (named,) = result["named_scores"]
    assert (named["baseline_mean"], named["candidate_mean"], named["mean_delta"]) == (
        0.8,
        0.8,
        0.0,
    )
    assert (named["paired"]["n"], named["paired"]["low"], named["paired"]["high"]) == (10, 0.0, 0.0)
    assert named["verdict"] == "no_significant_change"
    code, out, _ = cli("compare", scored["run_id"], again["run_id"], "--no-fail-on-thresholds")
    assert code == 0
    assert "named score match: 0.8000 → 0.8000 (Δ 0.0000; paired Δ [0.0000, 0.0000], n=10)" in out


def test_a_scoring_spec_can_gate_on_a_named_score(cli: Cli, tmp_path: Path) -> None:
    (row,) = imported(cli, FRENCH)
    tone = tmp_path / "tone.json"
    tone.write_text(json.dumps({"score_gates": [{"score": "Tone", "op": ">=", "value": 0.8}]}))
    both = tmp_path / "both.json"
    both.write_text(
        json.dumps(
            {
                "score_gates": [
                    {"score": "Tone", "op": ">=", "value": 0.8},
                    {"score": "Topicality", "op": ">=", "value": 0.8},
                ]
            }
        )
    )
    assert shown(cli, row["run_id"])["aggregate"]["pass_rate"] == 0.0
    passing = cli.json("rescore", row["run_id"], "--spec", str(tone))
    failing = cli.json("rescore", row["run_id"], "--spec", str(both))
    assert passing["after"]["aggregate"]["pass_rate"] == 1.0
    assert failing["after"]["aggregate"]["pass_rate"] == 0.0
    assert (passing["before"]["aggregate"]["pass_rate"], passing["judge_calls"]) == (0.0, 0)


# ---------------------------------------------------------------------------------------------
# Streaming: chunks, interruption, atomic rejection


def _case(key: str, metric: str = "tool_routing") -> BundleCase:
    return BundleCase.model_validate(
        {
            "test_case": {"key": key},
            "transcript": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ],
            "named_scores": [
                {
                    "scorer": "exact",
                    "scores": [{"name": "exact", "value": True, "scale": "boolean"}],
                }
            ],
            "verdicts": [{"metric_scores": [{"metric": metric, "score": 4}]}],
        }
    )


def _run(key: str = "streamed") -> BundleRun:
    return BundleRun.model_validate(
        {
            "key": key,
            "suite": {"name": "s"},
            "agent": {"name": "a"},
            "created_at": "2026-11-20T00:00:00Z",
            "config": {"judge": {"metrics": [{"metric": "tool_routing"}]}},
        }
    )


class Interrupted(Exception):
    pass


def test_an_interrupted_import_completes_on_a_rerun_without_duplicates(
    store_services: Services,
) -> None:
    services = store_services
    cases = [_case(f"k{i}") for i in range(7)]
    ctx = Context(actor="importer")

    def stop_after_two_chunks(done: int, total: int) -> None:
        if total and done >= 4:  # in the write pass (the check pass reports a total of 0)
            raise Interrupted

    with pytest.raises(Interrupted):
        services.ledger.import_stream(
            _run(), lambda: iter(cases), ctx, chunk_size=2, progress=stop_after_two_chunks
        )
    run_id = run_id_for("default", "streamed")
    partial = services.ledger.get_run(run_id)
    assert (partial.status.value, len(partial.case_ids)) == ("created", 4)
    written = event_count(services)
    seen: list[tuple[int, int]] = []
    result = services.ledger.import_stream(
        _run(), lambda: iter(cases), ctx, chunk_size=2, progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(2, 0), (4, 0), (6, 0), (7, 0), (2, 7), (4, 7), (6, 7), (7, 7)]
    assert (result.cases, result.new_cases) == (7, 3)
    run = services.ledger.get_run(run_id)
    assert (run.status.value, len(run.case_ids), len(set(run.case_ids))) == ("completed", 7, 7)
    # Three new cases (opened, transcript, verdict, named scores) + their attachment + the seal.
    assert event_count(services) == written + 3 * 4 + 2 + 1
    assert verify(services.ledger).ok


def test_a_bad_case_anywhere_in_a_stream_stores_nothing(store_services: Services) -> None:
    services = store_services
    cases = [_case("k0"), _case("k1"), _case("k2"), _case("k3", metric="no_such_metric")]
    before = event_count(services)
    with pytest.raises(
        ValidationError, match=r"cases\[3\]\.verdicts\[0\]\.metric_scores\[0\]\.metric"
    ):
        services.ledger.import_stream(_run(), lambda: iter(cases), Context(), chunk_size=1)
    assert event_count(services) == before
    with pytest.raises(ValidationError, match=r"cases\[2\]: test case 'k0' .* appears twice"):
        services.ledger.import_stream(
            _run(), lambda: iter([_case("k0"), _case("k1"), _case("k0")]), Context(), chunk_size=1
        )
    assert event_count(services) == before


def test_an_imported_run_exports_to_a_bundle_that_reimports_identically(
    cli: Cli, tmp_path: Path
) -> None:
    (row,) = imported(cli, FRENCH)
    exported = tmp_path / "french.bundle.json"
    code, _, err = cli("export", row["run_id"], "-o", str(exported))
    assert code == 0, err
    # Into the same store: every case is already there with the same content.
    (again,) = imported(cli, exported)
    assert (again["format"], again["events"], again["run_id"]) == ("bundle", 0, row["run_id"])


# ---------------------------------------------------------------------------------------------
# Named scores


@pytest.mark.parametrize(
    ("value", "scale", "number"),
    [
        ("C", ScoreScale.GRADE, 1.0),
        ("P", ScoreScale.GRADE, 0.5),
        ("I", ScoreScale.GRADE, 0.0),
        (True, ScoreScale.BOOLEAN, 1.0),
        (0.25, ScoreScale.FRACTION, 0.25),
        (17.5, ScoreScale.NUMBER, 17.5),
        ("blue", ScoreScale.LABEL, None),
    ],
)
def test_a_named_score_reads_as_a_number_on_its_scale(
    value: Any, scale: ScoreScale, number: float | None
) -> None:
    assert NamedScore(name="s", value=value, scale=scale).number == number


@pytest.mark.parametrize(
    ("value", "scale"),
    [
        ("X", ScoreScale.GRADE),
        (1.5, ScoreScale.FRACTION),
        (1.0, ScoreScale.BOOLEAN),
        (True, ScoreScale.NUMBER),
    ],
)
def test_a_named_score_must_fit_its_scale(value: Any, scale: ScoreScale) -> None:
    with pytest.raises(ValueError, match=f"is not a {scale.value} score"):
        NamedScore(name="s", value=value, scale=scale)


def test_named_scores_are_snapshotted_on_the_test_case_key() -> None:
    # The case key of an Inspect sample is its id as text (ints and strings alike).
    assert TestCaseSnapshot(key="1").key == "1"


# ---------------------------------------------------------------------------------------------
# HTTP


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


def test_post_imports_takes_multipart_files(client: TestClient, services: Services) -> None:
    files = [
        CONNEXITY / "run.rev-210b6dc.json",
        *sorted((CONNEXITY / "test-cases-rev-210b6dc").glob("*.json")),
    ]
    response = client.post(
        "/imports", files=[("file", (p.name, p.read_bytes(), "application/json")) for p in files]
    )
    assert response.status_code == 200, response.text
    (row,) = response.json()["imported"]
    assert (row["file"], row["format"], row["cases"], row["events"], row["new_cases"]) == (
        "run.rev-210b6dc.json",
        "connexity",
        3,
        12,
        3,
    )
    assert row["position"] == event_count(services)


def test_post_imports_takes_a_json_body_or_an_eval_archive(client: TestClient) -> None:
    response = client.post(
        "/imports", content=FRENCH.read_bytes(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["imported"][0]["format"] == "promptfoo"
    response = client.post(
        "/imports?run_key=popularity-scored&project=inspect",
        content=SCORED_EVAL.read_bytes(),
        headers={"Content-Type": "application/zip"},
    )
    assert response.status_code == 200, response.text
    (row,) = response.json()["imported"]
    assert (row["format"], row["run_key"], row["cases"]) == ("inspect", "popularity-scored", 10)
    assert row["run_id"] == str(run_id_for("inspect", "popularity-scored"))
    again = client.post(
        "/imports?run_key=popularity-scored&project=inspect",
        content=SCORED_EVAL.read_bytes(),
        headers={"Content-Type": "application/zip"},
    )
    assert again.json()["imported"][0]["events"] == 0


def test_post_imports_refuses_bad_input_with_422_and_stores_nothing(
    client: TestClient, services: Services, tmp_path: Path
) -> None:
    before = event_count(services)
    wrong = client.post(
        "/imports?from=tau-bench",
        content=FRENCH.read_bytes(),
        headers={"Content-Type": "application/json"},
    )
    assert wrong.status_code == 422
    assert wrong.json()["code"] == "unsupported_format"
    assert "detected promptfoo output, not tau-bench" in wrong.json()["detail"]
    cut = client.post(
        "/imports",
        content=truncated(TAU, tmp_path).read_bytes(),
        headers={"Content-Type": "application/json"},
    )
    assert cut.status_code == 422
    assert "tau-bench file is cut off" in cut.json()["detail"]
    empty = client.post("/imports", files=[])
    assert empty.status_code == 422
    assert event_count(services) == before


# ---------------------------------------------------------------------------------------------
# Every supported third-party file, the copies held to their checksums, and PostgreSQL

WRITTEN_HERE = {"connexity/run.completed.json", "connexity/run.rev-210b6dc.json"}
"""Peer files hand-built for the tests (tests/fixtures/peers/README.md), not third-party copies."""


def recorded_checksums() -> dict[str, str]:
    """The `| `file` | `sha256` |` rows of tests/fixtures/peers/README.md."""
    rows = re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", README.read_text(), re.MULTILINE)
    return dict(rows)


def test_every_third_party_copy_is_the_recorded_one() -> None:
    checksums = recorded_checksums()
    assert len(checksums) == 30  # the copies of four upstream repositories
    for name, digest in checksums.items():
        assert hashlib.sha256((PEERS / name).read_bytes()).hexdigest() == digest, name
    on_disk = {
        p.relative_to(PEERS).as_posix()
        for p in PEERS.rglob("*")
        if p.is_file() and p.name != "README.md"
    }
    assert on_disk == checksums.keys() | WRITTEN_HERE


def supported_third_party_files() -> list[Path]:
    found = []
    for name in sorted(recorded_checksums()):
        path = PEERS / name
        if path.suffix in (".json", ".eval"):
            try:
                detect(path)
            except ImportFormatError:
                continue
            found.append(path)
    return found


def test_every_supported_third_party_file_imports(cli: Cli) -> None:
    files = supported_third_party_files()
    assert len(files) == 11  # 7 Inspect logs, 3 promptfoo outputs, 1 tau-bench file
    rows = imported(cli, *files)
    assert len(rows) == 11
    assert sorted({r["format"] for r in rows}) == ["inspect", "promptfoo", "tau-bench"]
    assert sum(r["cases"] for r in rows) == 34 + 9 + 12
    (again) = imported(cli, *files)
    assert sum(r["events"] for r in again) == 0


@pytest.mark.postgres
def test_imports_on_postgresql(pg_url: str) -> None:
    services = build_services(Settings(db=pg_url))
    try:
        imports = open_imports([SCORED_EVAL, FRENCH, TAU])
        done = import_all(services.ledger, imports, Context(actor="pg"))
        services.sync()
        rates = [services.reads.summary(d.result.run_id).aggregate.pass_rate for d in done]
        assert rates == [0.8, 0.0, 7 / 12]
        written = event_count(services)
        again = import_all(services.ledger, open_imports([SCORED_EVAL, FRENCH, TAU]), Context())
        assert [d.result.events for d in again] == [0, 0, 0]
        assert event_count(services) == written
        assert verify(services.ledger).ok
    finally:
        services.close()


def test_the_progress_bar_counts_cases_on_a_terminal(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    from evaledger.api.console import Progress

    cases = [_case(f"k{i}") for i in range(3)]
    progress = Progress("importing cases", enabled=True)
    services.ledger.import_stream(
        _run(), lambda: iter(cases), Context(), chunk_size=2, progress=progress
    )
    progress.done()
    err = capsys.readouterr().err
    assert "importing cases" in err
    assert "3/3" in err
    quiet = Progress("importing cases", enabled=False)
    quiet(1, 1)
    quiet.done()
    assert capsys.readouterr().err == ""


def test_a_bundle_can_come_on_standard_input(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import io

    from tests.conftest import EXAMPLE_BUNDLE

    stdin = io.TextIOWrapper(io.BytesIO(EXAMPLE_BUNDLE.read_bytes()))
    monkeypatch.setattr("sys.stdin", stdin)
    (row,) = imported(cli, Path("-"))
    assert (row["file"], row["format"], row["cases"], row["events"]) == ("-", "bundle", 3, 13)


def test_promptfoo_output_version_2_imports(cli: Cli, tmp_path: Path) -> None:
    # Version 2 (older releases): no `prompts` summary, a `table`, rows without testCase/testIdx.
    data = json.loads((PROMPTFOO / "sample-export.json").read_text())
    results = data["results"]
    results["version"] = 2
    del results["prompts"]
    results["table"] = {"head": {"prompts": [], "vars": ["riddle"]}, "body": [{"outputs": []}]}
    for row in results["results"]:
        del row["testCase"], row["testIdx"]
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(data))
    (row,) = imported(cli, path)
    assert (row["format"], row["cases"]) == ("promptfoo", 4)
    assert shown(cli, row["run_id"])["aggregate"]["pass_rate"] == 0.0
    services = build_services(Settings(db=cli.db))
    try:
        services.sync()
        facts = services.reads.facts(UUID(row["run_id"]))
        # Without a test index the vars name the test: two riddles, each on both providers.
        keys = [f.test_case_key for f in facts]
        assert len(set(keys)) == 2 and all(keys.count(k) == 2 for k in keys)
        assert all(k.startswith("vars-") for k in keys)
        run = services.reads.get_run(UUID(row["run_id"]))
        assert run.agent["name"] == "openai:gpt-5, openai:gpt-5-mini"
    finally:
        services.close()
