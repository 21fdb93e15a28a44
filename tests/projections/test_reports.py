"""Comparison, gate, baselines, rollups, grades, explain and rescore through HTTP and the CLI."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select, update

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.api.cli import main
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.projections.queries import ReadModels
from evaledger.projections.reports import COMPARE_SHARED, Reports
from evaledger.projections.tables import compare_cache, runs
from evaledger.scoring.comparison import CompareThresholds
from tests.helpers import bundle as example_bundle
from tests.helpers import event_count

TWO_METRICS = {
    "judge": {
        "metrics": [
            {"metric": "tool_routing", "weight": 1},
            {"metric": "parameter_extraction", "weight": 1},
        ]
    }
}


def run_bundle(
    key: str,
    cases: Sequence[tuple[str, int, int, bool | None, int]],
    status: str = "completed",
    agent_version: str = "1",
) -> dict[str, Any]:
    """A run whose cases are (key, tool_routing, parameter_extraction, outcome passed, latency).

    overall_score = 10 × (tool_routing + parameter_extraction) under TWO_METRICS.
    """
    return {
        "format": "evaledger.run-bundle/1",
        "run": {
            "key": key,
            "suite": {"name": "anchors", "version": 1},
            "agent": {
                "name": "agent",
                "version": agent_version,
                "provider": "openai",
                "model": "m",
                "system_prompt": f"v{agent_version}",
            },
            "config": TWO_METRICS,
            "status": status,
            "created_at": "2026-11-20T00:00:00Z",
        },
        "cases": [
            {
                "test_case": {
                    "key": k,
                    "expected_outcomes": [] if passed is None else ["it works"],
                },
                "transcript": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a", "latency_ms": latency},
                ],
                "verdicts": [
                    {
                        "judge": {"provider": "anthropic", "model": "j"},
                        "metric_scores": [
                            {"metric": "tool_routing", "score": s1},
                            {"metric": "parameter_extraction", "score": s2},
                        ],
                        "expected_outcomes": []
                        if passed is None
                        else [{"statement": "it works", "passed": passed}],
                        "prompt": f"judge {k}",
                        "raw_output": "{}",
                    }
                ],
            }
            for k, s1, s2, passed, latency in cases
        ],
    }


def uniform(
    key: str, n: int, s1: int, s2: int, passed: bool | None = True, latency: int = 500, **kw: Any
) -> dict[str, Any]:
    return run_bundle(key, [(f"c{i:02d}", s1, s2, passed, latency) for i in range(n)], **kw)


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


def imported(client: TestClient, body: dict[str, Any]) -> str:
    r = client.post("/bundles", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def compare(client: TestClient, base: str, cand: str, **params: Any) -> dict[str, Any]:
    r = client.get(
        "/runs/compare", params={"baseline_run_id": base, "candidate_run_id": cand, **params}
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_pass_rate_drop_of_ten_percent_is_a_regression(client: TestClient) -> None:
    base = imported(client, uniform("base", 10, 4, 4))
    cand_cases = [(f"c{i:02d}", 4, 4, i != 9, 500) for i in range(10)]
    cand = imported(client, run_bundle("cand", cand_cases))
    result = compare(client, base, cand)
    assert result["verdict"]["regression_detected"] is True
    assert result["verdict"]["reasons"] == ["pass_rate dropped 10% (1.00 → 0.90)"]
    assert result["aggregate"]["pass_rate_delta"] == -0.1
    assert result["aggregate"]["total_regressions"] == 1
    assert [c["status"] for c in result["test_case_comparisons"]].count("unchanged") == 9


def test_avg_score_drop_of_exactly_5_is_tolerated_and_10_is_not(client: TestClient) -> None:
    base = imported(client, uniform("base", 10, 4, 4))  # 80
    half = [(f"c{i:02d}", 4, 4 if i < 5 else 3, True, 500) for i in range(10)]  # 80 / 70 → 75
    minus5 = imported(client, run_bundle("minus5", half))
    result = compare(client, base, minus5)
    assert result["aggregate"]["avg_score_delta"] == -5.0
    assert result["verdict"]["regression_detected"] is False
    lower = [
        (f"c{i:02d}", 4 if i < 5 else 3, 4 if i < 5 else 3, True, 500) for i in range(10)
    ]  # 80 / 60 → 70
    minus10 = imported(client, run_bundle("minus10", lower))
    result = compare(client, base, minus10)
    assert result["verdict"]["reasons"] == ["avg_score dropped 10.0pt (80.0 → 70.0)"]
    # 70 - 80 = -10 on half the cases: beyond the 5-point case delta
    assert result["aggregate"]["total_regressions"] == 5


def test_latency_increase_of_exactly_20_percent_is_tolerated_and_40_is_not(
    client: TestClient,
) -> None:
    base = imported(client, uniform("base", 4, 4, 4, latency=500))
    plus20 = imported(client, uniform("plus20", 4, 4, 4, latency=600))
    plus40 = imported(client, uniform("plus40", 4, 4, 4, latency=700))
    assert compare(client, base, plus20)["verdict"]["regression_detected"] is False
    result = compare(client, base, plus40)
    assert result["verdict"]["reasons"] == ["avg_latency increased 40% (500ms → 700ms)"]
    assert result["aggregate"]["latency_avg_delta_ms"] == 200.0
    # Overridable per request: 0.5 tolerates +40%
    assert (
        compare(client, base, plus40, max_latency_increase_pct=0.5)["verdict"][
            "regression_detected"
        ]
        is False
    )


def test_a_case_moving_by_exactly_5_points_is_unchanged(client: TestClient) -> None:
    base = imported(
        client, run_bundle("base", [("a", 4, 4, None, 500), ("b", 4, 4, None, 500)])
    )  # 80, 80
    cand = imported(client, run_bundle("cand", [("a", 4, 4, None, 500), ("b", 4, 4, None, 500)]))
    # Same scores: both unchanged; now one case at exactly -5 via a per-request delta of 0.0 vs 5.0
    statuses = {
        c["test_case_key"]: c["status"]
        for c in compare(client, base, cand)["test_case_comparisons"]
    }
    assert statuses == {"a": "unchanged", "b": "unchanged"}
    lower = imported(
        client, run_bundle("lower", [("a", 4, 4, None, 500), ("b", 4, 3, None, 500)])
    )  # b: 80 → 70, fails 75
    result = compare(client, base, lower, case_score_delta=10.0)
    b = next(c for c in result["test_case_comparisons"] if c["test_case_key"] == "b")
    assert (b["status"], b["score_delta"], b["baseline_passed"], b["candidate_passed"]) == (
        "regression",
        -10.0,
        True,
        False,
    )


def test_missing_run_is_404_and_incomplete_run_is_400(client: TestClient) -> None:
    base = imported(client, uniform("base", 2, 4, 4))
    running = imported(client, uniform("running", 2, 4, 4, status="running"))
    r = client.get(
        "/runs/compare",
        params={
            "baseline_run_id": base,
            "candidate_run_id": "00000000-0000-0000-0000-000000000001",
        },
    )
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = client.get("/runs/compare", params={"baseline_run_id": base, "candidate_run_id": running})
    assert r.status_code == 400 and r.json()["code"] == "bad_state"
    assert "candidate" in r.json()["detail"]


def test_disjoint_case_sets_are_listed(client: TestClient) -> None:
    base = imported(
        client, run_bundle("base", [("a", 4, 4, None, 500), ("only-base", 4, 4, None, 500)])
    )
    cand = imported(
        client, run_bundle("cand", [("a", 4, 4, None, 500), ("only-cand", 4, 4, None, 500)])
    )
    result = compare(client, base, cand)
    assert result["baseline_only_test_cases"] == ["only-base"]
    assert result["candidate_only_test_cases"] == ["only-cand"]
    assert [c["test_case_key"] for c in result["test_case_comparisons"]] == ["a"]


def test_compare_pages_cases_and_metric_deltas_are_opt_in(client: TestClient) -> None:
    base = imported(client, uniform("base", 5, 4, 4))
    cases = [(f"c{i:02d}", 4, 3 if i == 3 else 4, True, 500) for i in range(5)]
    cand = imported(client, run_bundle("cand", cases))
    full = compare(client, base, cand, metric_deltas=True)
    assert [c["test_case_key"] for c in full["test_case_comparisons"]] == [
        "c00",
        "c01",
        "c02",
        "c03",
        "c04",
    ]
    c03 = full["test_case_comparisons"][3]
    assert {m["metric"]: m["delta"] for m in c03["metric_deltas"]} == {
        "tool_routing": 0.0,
        "parameter_extraction": -1.0,
    }
    slim = compare(client, base, cand)
    assert all(c["metric_deltas"] == [] for c in slim["test_case_comparisons"])
    assert (
        slim["aggregate"]["per_metric_aggregate_deltas"]
        == full["aggregate"]["per_metric_aggregate_deltas"]
    )
    page = compare(client, base, cand, case_offset=2, case_limit=2)
    assert [c["test_case_key"] for c in page["test_case_comparisons"]] == ["c02", "c03"]
    assert page["test_case_comparisons"][1]["score_delta"] == -10.0
    # Totals, verdict and statistics still cover every matched case.
    assert page["aggregate"]["total_regressions"] == 1
    assert page["aggregate"]["total_unchanged"] == 4
    assert page["statistics"] == slim["statistics"]
    assert page["verdict"] == slim["verdict"]
    assert compare(client, base, cand, case_offset=5)["test_case_comparisons"] == []
    r = client.get(
        "/runs/compare",
        params={"baseline_run_id": base, "candidate_run_id": cand, "case_offset": -1},
    )
    assert r.status_code == 422 and r.json()["code"] == "invalid"
    assert "case_offset" in r.json()["detail"]


def test_compare_answers_are_shared_by_every_process_serving_the_store(
    store_services: Services,
) -> None:
    s = store_services
    ctx = Context(actor="t")
    base = s.ledger.import_bundle(RunBundle.model_validate(uniform("base", 3, 4, 4)), ctx)
    cand = s.ledger.import_bundle(RunBundle.model_validate(uniform("cand", 3, 4, 3)), ctx)
    s.sync()
    first = s.reports.compare_json(base.run_id, cand.run_id)
    assert orjson.loads(first)["aggregate"]["avg_score_delta"] == -10.0
    with s.reads.engine.begin() as conn:
        # The answer, and apart from it the pair's paired statistics (kept per pair of runs).
        entries = conn.execute(select(compare_cache.c.key, compare_cache.c.body)).all()
        (key,) = [k for k, body in entries if b"test_case_comparisons" in body]
        assert len(entries) == 2
        # Mark the stored answer: another process must serve it instead of computing its own.
        conn.execute(
            update(compare_cache).where(compare_cache.c.key == key).values(body=b'{"shared":true}')
        )
    other = Reports(ReadModels(s.reads.engine))
    assert other.compare_json(base.run_id, cand.run_id) == b'{"shared":true}'
    # Another page, threshold or option is another answer, computed and shared in turn.
    page = other.compare_json(base.run_id, cand.run_id, case_limit=1)
    assert [c["test_case_key"] for c in orjson.loads(page)["test_case_comparisons"]] == ["c00"]
    for i in range(COMPARE_SHARED + 3):
        other.compare_json(base.run_id, cand.run_id, CompareThresholds(case_score_delta=i))
    with s.reads.engine.connect() as conn:
        keys = conn.scalars(select(compare_cache.c.key)).all()
    assert len(keys) == COMPARE_SHARED and key not in keys  # the oldest went first


def test_a_new_compare_answer_is_shared_after_it_is_sent(store_services: Services) -> None:
    # Issue 32: the HTTP route hands the shared write to its background tasks, run once the
    # answer is sent; until then the store holds only the pair's statistics.
    s = store_services
    ctx = Context(actor="t")
    base = s.ledger.import_bundle(RunBundle.model_validate(uniform("base", 3, 4, 4)), ctx)
    cand = s.ledger.import_bundle(RunBundle.model_validate(uniform("cand", 3, 4, 3)), ctx)
    s.sync()

    def answers() -> list[bytes]:
        with s.reads.engine.connect() as conn:
            bodies = conn.scalars(select(compare_cache.c.body)).all()
        return [bytes(b) for b in bodies if b"test_case_comparisons" in bytes(b)]

    deferred: list[Any] = []
    body = s.reports.compare_json(base.run_id, cand.run_id, later=deferred.append)
    assert len(deferred) == 1 and answers() == []
    deferred[0]()
    assert answers() == [body]
    # Over HTTP the write has run by the time the client holds the answer (TestClient waits
    # for the background tasks): another threshold, another shared answer, the same bytes.
    with TestClient(create_app(services=s)) as client:
        r = client.get(
            "/runs/compare",
            params={
                "baseline_run_id": str(base.run_id),
                "candidate_run_id": str(cand.run_id),
                "case_score_delta": 0.5,
            },
        )
    assert r.status_code == 200
    assert sorted(answers()) == sorted([body, r.content])


def test_a_closed_runs_row_and_spec_are_read_once_per_summary_position(
    store_services: Services,
) -> None:
    # Issue 32: a new comparison of kept runs reads no run row (one positions query says the
    # kept ones stand); an override moves the position, and the answer follows it.
    s = store_services
    ctx = Context(actor="t")
    base = s.ledger.import_bundle(RunBundle.model_validate(uniform("base", 3, 4, 4)), ctx)
    cand = s.ledger.import_bundle(RunBundle.model_validate(uniform("cand", 3, 4, 3)), ctx)
    s.sync()
    reports = Reports(ReadModels(s.reads.engine))
    statements: list[str] = []

    def seen(*args: Any) -> None:
        statements.append(str(args[2]))

    reports.compare_json(base.run_id, cand.run_id)
    event.listen(s.reads.engine, "before_cursor_execute", seen)
    try:
        again = reports.compare_json(
            base.run_id, cand.run_id, CompareThresholds(case_score_delta=1)
        )
    finally:
        event.remove(s.reads.engine, "before_cursor_execute", seen)
    assert statements and not [q for q in statements if f"FROM {runs.name} " in q]
    fresh = Reports(ReadModels(s.reads.engine))
    assert again == fresh.compare_json(
        base.run_id, cand.run_id, CompareThresholds(case_score_delta=1)
    )
    # An override moves the candidate's summary position: its side is read again.
    case_id = s.reads.case_scores(cand.run_id)[0].case_id
    facts, _ = s.reads.case_score(case_id)
    s.ledger.override_verdict(
        case_id,
        Context(actor="qa"),
        verdict_id=facts.verdicts[0].verdict_id,
        passed=False,
        reason="x",
    )
    s.sync()
    after = orjson.loads(reports.compare_json(base.run_id, cand.run_id))
    assert after == orjson.loads(
        Reports(ReadModels(s.reads.engine)).compare_json(base.run_id, cand.run_id)
    )
    assert after["aggregate"] != orjson.loads(again)["aggregate"]


def _write(tmp_path: Path, name: str, body: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(body))
    return str(path)


def test_cli_compare_exit_codes(
    services: Services, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = services.settings.db
    files = [
        _write(tmp_path, "base.json", uniform("base", 10, 4, 4)),
        _write(tmp_path, "same.json", uniform("same", 10, 4, 4)),
        _write(
            tmp_path,
            "worse.json",
            run_bundle("worse", [(f"c{i:02d}", 4, 4, i != 9, 500) for i in range(10)]),
        ),
        _write(
            tmp_path, "lowscore.json", uniform("lowscore", 10, 4, 3, passed=None)
        ),  # 70 < 75: all fail, vs 80 pass
    ]
    assert main(["import", *files, "--db", db]) == 0
    assert main(["compare", "base", "same", "--db", db]) == 0
    assert main(["compare", "base", "worse", "--db", db]) == 1
    assert "pass_rate dropped 10% (1.00 → 0.90)" in capsys.readouterr().out
    # A candidate failing its own cases threshold (100%) fails the build unless told not to.
    assert main(["compare", "worse", "worse", "--db", db]) == 1
    assert main(["compare", "worse", "worse", "--no-fail-on-thresholds", "--db", db]) == 0
    capsys.readouterr()
    assert main(["compare", "base", "lowscore", "--json", "--db", db]) == 1
    out = orjson.loads(capsys.readouterr().out)
    assert out["verdict"]["regression_detected"] is True
    for argv in (
        ["compare", "base"],
        ["compare", "base", "nope"],
        ["compare", "base", "same", "--max-avg-score-drop", "x"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--db", db])
        assert exit_.value.code == 2


def test_cli_gate_exit_codes(services: Services, tmp_path: Path) -> None:
    db = services.settings.db
    assert (
        main(
            [
                "import",
                _write(tmp_path, "good.json", uniform("good", 3, 5, 5)),
                _write(tmp_path, "bad.json", uniform("bad", 3, 2, 2, passed=None)),
                "--db",
                db,
            ]
        )
        == 0
    )
    assert main(["gate", "good", "--db", db]) == 0
    assert main(["gate", "bad", "--db", db]) == 1


def test_baselines_are_events_and_compare_against_them(
    services: Services, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = services.settings.db
    main(
        [
            "import",
            _write(tmp_path, "b.json", uniform("base", 5, 4, 4)),
            _write(tmp_path, "c.json", uniform("cand", 5, 4, 4, agent_version="1")),
            "--db",
            db,
        ]
    )
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "cand", "--against-baseline", "--db", db])
    assert exit_.value.code == 2  # no baseline approved yet
    assert (
        main(
            ["baseline", "approve", "base", "--reason", "release 1", "--actor", "lead", "--db", db]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(["baseline", "show", "--agent", "agent", "--suite", "anchors", "--json", "--db", db])
        == 0
    )
    assert orjson.loads(capsys.readouterr().out)["run_key"] == "base"
    assert main(["compare", "cand", "--against-baseline", "--db", db]) == 0
    assert main(["baseline", "revoke", "base", "--reason", "bad data", "--db", db]) == 0
    base = services.ledger.find_run("default", "base")
    assert base is not None
    history = [e.__class__.__name__ for e in services.ledger.events_of(base.id)]
    assert history[-2:] == ["BaselineApproved", "BaselineRevoked"]


def test_markdown_report_on_the_demo_runs(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    db = services.settings.db
    assert main(["demo", "--db", db]) == 0
    capsys.readouterr()
    code = main(
        [
            "compare",
            "cs-agent-v1-nightly-2026-09-14",
            "cs-agent-v2-pr-218-2026-09-15",
            "--markdown",
            "--no-fail-on-thresholds",
            "--db",
            db,
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "red-team-jailbreak-attempt" in out and "normal-refund-request" in out
    assert "McNemar" in out or "mcnemar" in out.lower()


def test_rollup_over_two_runs_and_grade_exit_codes(
    client: TestClient, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    a = imported(client, uniform("run-a", 2, 4, 4))
    b = imported(client, run_bundle("run-b", [("c00", 5, 5, None, 500), ("c01", 3, 3, None, 500)]))
    r = client.get("/rollups", params={"run_id": [a, b], "rows": "run", "columns": "test"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["summary"]["results"] == 4
    # A result's score is its weighted assertion score when it has outcomes (run-a: 100, 100),
    # else its overall score (run-b: 100, 60).
    assert body["summary"]["score"] == pytest.approx((100 + 100 + 100 + 60) / 4)
    db = services.settings.db
    assert main(["demo", "--db", db]) == 0
    assert (
        main(["grade", "governance-audit-2026-11-01", "--db", db]) == 1
    )  # capped at 0.60 < 0.85 (DESIGN §6: exit 1)
    assert main(["grade", "governance-audit-2026-11-01", "--min-score", "0.6", "--db", db]) == 0
    capsys.readouterr()
    assert main(["grade", "governance-audit-2026-11-01", "--json", "--strategic", "--db", db]) == 1
    out = orjson.loads(capsys.readouterr().out)
    assert set(out["overall"]) >= {
        "score",
        "grade",
        "passed",
        "score_before_cap",
        "cap_applied",
        "strategic_score",
    }
    run_id = services.ledger.find_run("default", "governance-audit-2026-11-01").id  # type: ignore[union-attr]
    r = client.get(f"/runs/{run_id}/grade")
    assert r.status_code == 200
    graded = r.json()["overall"]
    assert (graded["score"], graded["grade"], graded["cap_applied"]) == (0.6, "D", True)
    assert graded["score_before_cap"] == pytest.approx(0.9326, abs=1e-4)


def test_rescore_calls_no_judge_and_writes_no_event(
    client: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = imported(client, example_bundle())
    client.get(f"/runs/{run_id}")  # projections caught up before the network is cut
    before = event_count(services)

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a judge (or anything) tried to open a network connection")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    r = client.post(
        f"/runs/{run_id}/rescore", json={"judge": {"pass_threshold": 40}, "gate": "blockers"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert event_count(services) == before
    assert body["judge_calls"] == 0 and body["events_written"] == 0
    # blockers gate: refund-above-limit's only outcome is a failed blocker → still fails;
    # refund-late-delivery passes; store-hours errored.
    assert body["before"]["aggregate"]["passed_count"] == 1
    assert body["after"]["aggregate"]["passed_count"] == 1
    assert body["spec_id"] != body["own_spec_id"]
    r = client.post(f"/runs/{run_id}/rescore", json={"judge": {"metrics": [{"metric": "charm"}]}})
    assert r.status_code == 422 and "config.judge.metrics[0].metric" in r.json()["detail"]


def test_explain_walks_from_prompt_to_aggregate(client: TestClient) -> None:
    run_id = imported(client, example_bundle())
    cases = client.get(f"/runs/{run_id}/cases").json()["data"]
    late = next(c for c in cases if c["test_case_key"] == "refund-late-delivery")
    body = client.get(f"/cases/{late['case_id']}/explain").json()
    assert body["verdicts"][0]["prompt"].startswith("[system]\nYou are an expert evaluator")
    assert body["verdicts"][0]["raw_output"].startswith('{"tool_routing"')
    weights = {w["metric"]: w for w in body["weights"]}
    assert weights["tool_routing"]["contribution"] == pytest.approx(15.0)
    assert weights["grounding_fidelity"]["normalised_weight"] == pytest.approx(0.125)
    assert body["overall_score"]["value"] == 88.5
    assert body["gate"]["rule"] == "expected_outcomes" and body["gate"]["passed"] is True
    assert body["run_aggregate"]["share_of_metric_mean"] == pytest.approx(88.5 / 2)
    other = client.get(
        f"/cases/{late['case_id']}/explain",
        params={"spec": '{"judge": {"metrics": [{"metric": "tool_routing", "weight": 1}]}}'},
    ).json()
    assert other["spec_source"] == "given" and other["overall_score"]["value"] == 100.0


def test_rollup_custom_per_message_metric_is_declared_with_unit_and_aggregates(
    client: TestClient,
) -> None:
    body = uniform("custom", 2, 4, 4)
    body["cases"][0]["transcript"][1]["metrics"] = {"interruptions": 1}
    body["cases"][1]["transcript"][0]["metrics"] = {"interruptions": 2}
    body["cases"][1]["transcript"][1]["metrics"] = {"interruptions": 6}
    run_id = imported(client, body)
    r = client.get("/rollups", params={"run_id": run_id, "metric": "interruptions:count:avg,max"})
    assert r.status_code == 200, r.text
    custom = r.json()["summary"]["custom_metrics"]["interruptions"]
    assert custom["unit"] == "count"
    # Over every message in scope: (1 + 2 + 6) / 3, max 6
    assert custom["values"]["avg"] == pytest.approx(3.0) and custom["values"]["max"] == 6.0
    bad = client.get(
        "/rollups", params={"run_id": run_id, "metric": "interruptions:count:median-ish"}
    )
    assert bad.status_code == 422 and bad.json()["code"] == "invalid"
