"""The read use cases called directly (no route, no command), on SQLite and on PostgreSQL."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import orjson
import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import compare, grades, reports, review_queue, transcripts
from evaledger.application.runs import approve_baseline, revoke_baseline
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import NotFoundError, StateError, ValidationError
from evaledger.domain.ledger import Context
from evaledger.projections.queries import RunFilter
from evaledger.scoring.comparison import CompareThresholds
from evaledger.scoring.comparison.suites import DifferentSuitesError
from tests.helpers import bundle, case

ADMIN = Context(actor="tester")


def _import(services: Services, data: dict[str, Any]) -> UUID:
    return services.ledger.import_bundle(RunBundle.model_validate(data), ADMIN).run_id


@pytest.fixture
def two_runs(store_services: Services) -> tuple[Services, UUID, UUID]:
    """A baseline (every case scores 4) and a candidate (one case drops to 1), synced."""
    base = bundle(key="base")
    base["cases"] = [case("a", 4), case("b", 4), case("c", 4)]
    cand = bundle(key="cand")
    cand["cases"] = [case("a", 4), case("b", 1), case("c", 4)]
    b, c = _import(store_services, base), _import(store_services, cand)
    store_services.sync()
    return store_services, b, c


# -- runs --------------------------------------------------------------------------------------


def test_list_show_and_find_runs(two_runs: tuple[Services, UUID, UUID]) -> None:
    services, b, c = two_runs
    listed = reports.list_runs(services, RunFilter(limit=1))
    assert listed.total == 2 and len(listed.rows) == 1
    shown = reports.list_runs_shown(services, RunFilter())
    assert {r.run.run_key for r in shown.runs} == {"base", "cand"} and shown.total == 2
    view = reports.show_run(services, c)
    assert view.run.run_key == "cand" and view.aggregate is view.summary.aggregate
    assert view.headline == reports.show_run(services, c).headline
    assert view.total_cost == reports.run_cost(services, c, view.aggregate)
    assert reports.get_run(services, b).run_key == "base"
    assert {r.run_key for r in reports.recent_runs(services, "default")} == {"cand", "base"}
    assert reports.run_id_for(services, None, "base", "run_id") == b
    assert reports.run_id_for(services, "default", str(c), "run_id") == c
    with pytest.raises(NotFoundError, match="no run with the id or key 'nope'"):
        reports.run_id_for(services, None, "nope", "run_id")
    with pytest.raises(NotFoundError):
        reports.run_id_for(services, "other", str(c), "run_id")
    assert reports.project_of(services, b) == "default"
    assert reports.project_of(services, uuid4()) is None
    reports.require_in_project(services, None, b, "run")
    reports.require_in_project(services, "default", b, "run")
    with pytest.raises(NotFoundError, match="no case"):
        reports.require_in_project(services, "other", b, "case")
    assert reports.stored_rescores(services, b) == []
    names = reports.metric_names(services, "default")
    assert names and all(isinstance(v, str) for v in names.values())
    assert reports.run_spec_of(services, c).spec_id == view.summary.spec.spec_id


def test_a_key_in_two_projects_asks_for_the_id(store_services: Services) -> None:
    _import(store_services, bundle(key="same"))
    _import(store_services, bundle(key="same", project="other"))
    store_services.sync()
    with pytest.raises(ValidationError, match="several projects"):
        reports.run_id_for(store_services, None, "same", "baseline")
    assert reports.run_id_for(store_services, "other", "same", "baseline")


def test_spec_from_query_reads_a_config_or_a_stored_spec(
    two_runs: tuple[Services, UUID, UUID],
) -> None:
    services, b, _ = two_runs
    assert reports.spec_from_query(services, None) is None
    config = reports.get_run(services, b).config
    spec = reports.spec_from_query(services, orjson.dumps(config).decode())
    assert spec is not None and spec.spec_id == reports.run_spec_of(services, b).spec_id
    with pytest.raises(ValidationError, match="spec: invalid spec"):
        reports.spec_from_query(services, "{not json")
    with pytest.raises(NotFoundError, match="no stored spec"):
        reports.spec_from_query(services, "0" * 64)


def test_baselines_approved_read_and_revoked(two_runs: tuple[Services, UUID, UUID]) -> None:
    services, b, c = two_runs
    approve_baseline(services, b, ADMIN, "good run")
    services.sync()
    row = reports.get_run(services, c)
    found = reports.baseline_run(services, row.agent["name"], row.suite["name"])
    assert found.run_id == b
    assert compare.approved_baseline_of(services, c) == b
    revoke_baseline(services, b, ADMIN, "superseded")
    services.sync()
    with pytest.raises(NotFoundError):
        reports.baseline_run(services, row.agent["name"], row.suite["name"])


# -- cases -------------------------------------------------------------------------------------


def test_cases_rows_answers_and_transcripts(two_runs: tuple[Services, UUID, UUID]) -> None:
    services, _, c = two_runs
    page = reports.list_cases(services, c, limit=2)
    assert page.total == 3 and [s.test_case_key for s in page.rows] == ["a", "b"]
    failed = reports.list_cases(services, c, "failed")
    assert all(s.status.value == "failed" for s in failed.rows)
    assert reports.case_scores(services, c) == reports.list_cases(services, c).rows
    assert reports.cost_reported(services, c) is any(
        s.cost_usd is not None for s in reports.case_scores(services, c)
    )
    facts, score = reports.show_case(services, page.rows[0].case_id)
    assert facts.case_id == score.case_id == page.rows[0].case_id
    firsts = reports.first_cases(services, c, ["a", "b"])
    assert set(firsts) == {("a", ""), ("b", "")}
    answers = transcripts.final_answers(services, list(firsts.values()))
    assert set(answers.values()) == {"bye"}
    t = transcripts.case_transcript(services, firsts[("a", "")])
    assert t.test_case_key == "a" and len(t.turns) == 4 and t.errors == []
    with pytest.raises(NotFoundError, match="no case"):
        transcripts.case_transcript(services, uuid4())
    exported = transcripts.export_run(services, c)
    assert exported.run.key == "cand" and len(exported.cases) == 3
    rows = review_queue.case_rows(services, c)
    assert [r.test_case_key for r in rows] == ["a", "b", "c"]
    cases = review_queue.run_cases(services, c)
    assert cases.rows == rows and cases.flaky == set()
    assert review_queue.case_flag(services, firsts[("a", "")]) is None
    errors = reports.judge_errors(services, c)
    assert errors.count == 0 and errors.policy == reports.run_spec_of(services, c).judge_errors


def test_the_review_queue_lists_what_needs_a_person(
    two_runs: tuple[Services, UUID, UUID],
) -> None:
    services, _, c = two_runs
    queue = review_queue.run_review_queue(services, c)
    assert all(item.reasons for item in queue)
    assert all(not item.reviewed for item in queue)


# -- gates, grades, rollups, agreement ---------------------------------------------------------


def test_gate_grade_rollup_and_agreement(two_runs: tuple[Services, UUID, UUID]) -> None:
    services, b, c = two_runs
    gate = grades.gate_run(services, c, {}, 0.9)
    assert gate.configured and "pass_rate" in gate.failed and not gate.passed
    assert (
        grades.gate_run(services, b, {}, None).thresholds_configured == gate.thresholds_configured
    )
    grading = grades.grading_for(services, c, "ifixai-v1", 0.5)
    assert grading.min_score == 0.5
    graded = grades.grade_run(services, c, grading)
    assert graded == grades.grade_run(services, c, preset="ifixai-v1", min_score=0.5)
    assert grades.has_grading_section(services, c) is False
    with pytest.raises(StateError, match="no grading section"):
        grades.grade_run(services, c)
    pivot = grades.rollup_runs(services, [b, c], ["run"], ["test"])
    assert len(pivot.rows) == 2
    with pytest.raises(ValidationError, match="at least one run"):
        grades.rollup_runs(services, [], ["run"], ["test"])
    report = grades.run_agreement(services, c)
    assert report == grades.run_agreement(services, c)


# -- comparisons -------------------------------------------------------------------------------


def test_compare_two_runs(two_runs: tuple[Services, UUID, UUID]) -> None:
    services, b, c = two_runs
    result = compare.compare_runs(services, b, c)
    assert result.verdict.regression_detected
    body = orjson.loads(compare.compare_runs_json(services, b, c, metric_deltas=True))
    assert body["verdict"] == result.model_dump(mode="json")["verdict"]
    report = compare.compare_report(services, b, c, CompareThresholds())
    assert report.result.verdict == result.verdict
    assert report.runs == {"baseline": b, "candidate": c}
    assert report.baseline_run.run_key == "base" and report.candidate_run.run_key == "cand"
    assert set(report.headlines) == set(report.judge_errors) == {"baseline", "candidate"}
    answers = compare.compared_answers(services, report.runs, result.test_case_comparisons)
    assert answers[("candidate", "b", "")]["answer"] == "bye"
    spec = reports.run_spec_of(services, c)
    under = compare.compare_report(services, b, c, spec=lambda: spec)
    assert under.result.verdict == result.verdict


def test_compare_refuses_other_suites_and_open_runs(store_services: Services) -> None:
    b = _import(store_services, bundle(key="one"))
    other = bundle(key="two")
    other["run"]["suite"] = {"name": "another-suite", "version": 1}
    c = _import(store_services, other)
    store_services.sync()
    with pytest.raises(DifferentSuitesError):
        compare.compare_report(store_services, b, c, allow_different_suites=False)
    assert compare.compare_report(store_services, b, c).result is not None
    with pytest.raises(NotFoundError):
        compare.compare_report(store_services, None, c)  # no approved baseline


def test_compare_files_through_a_scratch_store(tmp_path: Path) -> None:
    base, cand = bundle(key="base"), bundle(key="base")
    cand["cases"][0]["verdicts"][0]["metric_scores"] = [
        {**m, "score": 0} for m in cand["cases"][0]["verdicts"][0]["metric_scores"]
    ]
    (tmp_path / "b.json").write_bytes(orjson.dumps(base))
    (tmp_path / "c.json").write_bytes(orjson.dumps(cand))
    opened: list[str] = []

    @contextmanager
    def scratch(db: str) -> Iterator[Services]:
        opened.append(db)
        services = build_services(Settings(db=db))
        try:
            yield services
        finally:
            services.close()

    with tempfile.TemporaryDirectory() as where:
        result = compare.compare_files(tmp_path / "b.json", tmp_path / "c.json", scratch, where)
    assert opened == [f"sqlite:///{where}/store/"]
    assert result.baseline_run_id != result.candidate_run_id  # same key: told apart
    assert result.verdict.regression_detected
    other = bundle(key="x")
    other["run"]["suite"] = {"name": "another-suite", "version": 1}
    (tmp_path / "o.json").write_bytes(orjson.dumps(other))
    with pytest.raises(DifferentSuitesError):
        compare.compare_files(
            tmp_path / "b.json", tmp_path / "o.json", scratch, where, allow_different_suites=False
        )
    assert len(opened) == 1  # refused before anything was imported


def test_a_comparisons_significance_is_kept_per_pair_and_follows_an_override(
    two_runs: tuple[Services, UUID, UUID],
) -> None:
    """Computed once per pair of runs as they stand (issue 32): read again while neither run
    changed, computed again once an override moves a run's scores; always equal to the
    significance of the runs' case score models (the reference: `sample_rows` of the models)."""
    from evaledger.application import cases, statistics
    from evaledger.domain.events.values import MetricScore
    from evaledger.projections.tables import compare_cache
    from evaledger.scoring.comparison.significance import sample_rows, significance

    services, b, c = two_runs

    def fresh() -> Any:
        return significance(
            sample_rows(services.reads.case_scores(b)), sample_rows(services.reads.case_scores(c))
        )

    def kept() -> int:
        with services.reads.engine.connect() as conn:
            return len(conn.execute(compare_cache.select()).all())

    def found() -> Any:
        report = compare.compare_report(services, b, c, CompareThresholds())
        return statistics.significance_of(statistics.compare_significance(services, report))

    first = found()
    assert first == fresh()
    entries = kept()
    assert found() == first and kept() == entries  # read, not computed and stored again
    dropped = next(r for r in services.reads.case_scores(c) if r.test_case_key == "b")
    verdict_id = next(iter(services.ledger.get_case(dropped.case_id).verdict_ids))
    lifted = [MetricScore(metric=m.metric, score=5) for m in dropped.metric_scores]
    cases.override_verdict(
        services,
        dropped.case_id,
        ADMIN,
        verdict_id=verdict_id,
        reason="re-read",
        metric_scores=lifted,
    )
    services.sync()
    after = found()
    assert after == fresh() and after != first
    assert kept() > entries  # the new answer (and the new pair statistics) stored
