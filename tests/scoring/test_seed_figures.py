"""Issue 29: the seed's run figures through a real store (SQLite and PostgreSQL), at the CLI.

An empty run has pass rate 0.0 with null flags; an all-errored candidate drops the pass rate to
0.0 and compares as the seed says ("pass_rate dropped 100% (1.00 → 0.00)"); the run's metric
mean is held against its threshold exactly (50.8889 fails 50.89, 54.1133 passes 54.1111), both
in the run's stored summary and in the columnar rescore. Text displays show "—" for a run with
no case decided, derived from its counts, and the web pages render such runs.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Settings, build_services
from tests.api.test_cli import Cli
from tests.helpers import bundle, case


@pytest.fixture
def cli(store_url: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys, store_url)


def _import(cli: Cli, tmp_path: Path, key: str, cases: list[dict[str, Any]], **run: Any) -> str:
    data = bundle(key=key, **run)
    data["cases"] = cases
    path = tmp_path / f"{key}.json"
    path.write_text(json.dumps(data))
    (row,) = cli.json("import", str(path))["imported"]
    return str(row["run_id"])


# ---------------------------------------------------------------------------------------------
# an empty run, an all-errored run


def test_an_empty_run_has_the_seeds_zero_pass_rate_and_null_flags(
    cli: Cli, tmp_path: Path, store_url: str
) -> None:
    run_id = _import(cli, tmp_path, "empty", [])
    agg = cli.json("show", run_id)["aggregate"]
    assert (agg["total_executions"], agg["passed_count"], agg["failed_count"]) == (0, 0, 0)
    assert agg["error_count"] == 0
    assert agg["pass_rate"] == 0.0  # DESIGN §3.2: "No executions → counts 0, pass_rate 0.0"
    assert (agg["metrics_passed"], agg["cases_passed"]) == (None, None)
    assert (agg["weighted_metrics_score_pct"], agg["cases_pass_rate_pct"]) == (None, None)
    code, out, err = cli("show", run_id)
    assert code == 0, err
    assert "  pass_rate                    —  (no case passed or failed)" in out.splitlines()
    _web_renders(store_url, run_id)
    seed = {
        "total_executions": 0,
        "passed_count": 0,
        "failed_count": 0,
        "error_count": 0,
        "pass_rate": 0.0,
        "metrics_passed": None,
        "cases_passed": None,
    }
    # The API's run and the comparison of two empty runs carry the same seed figures.
    services = build_services(Settings(db=store_url))
    try:
        with TestClient(create_app(services=services)) as client:
            api = client.get(f"/runs/{run_id}").json()["aggregate"]
    finally:
        services.close()
    assert {k: api[k] for k in seed} == seed
    other = _import(cli, tmp_path, "empty-2", [])
    result = cli.json("compare", run_id, other)
    for side in ("baseline_metrics", "candidate_metrics"):
        assert {k: result["aggregate"][side][k] for k in seed} == seed
    assert result["aggregate"]["pass_rate_delta"] == 0.0
    assert result["verdict"]["regression_detected"] is False


def test_an_all_errored_run_keeps_errored_cases_in_the_denominator(
    cli: Cli, tmp_path: Path, store_url: str
) -> None:
    errored = [case("a", status="errored"), case("b", status="errored")]
    run_id = _import(cli, tmp_path, "errored", errored)
    agg = cli.json("show", run_id)["aggregate"]
    assert (agg["total_executions"], agg["error_count"], agg["passed_count"]) == (2, 2, 0)
    assert (agg["pass_rate"], agg["cases_pass_rate_pct"], agg["cases_passed"]) == (0.0, 0.0, False)
    code, out, _ = cli("show", run_id)
    assert code == 0
    lines = out.splitlines()
    assert "  pass_rate                    —  (no case passed or failed: 2 errored)" in lines
    assert "  cases_pass_rate_pct          —" in lines
    _web_renders(store_url, run_id)


def _web_renders(store_url: str, run_id: str) -> None:
    """The run page and the runs list render the run, its pass rate shown as "—"."""
    services = build_services(Settings(db=store_url))
    try:
        with TestClient(create_app(services=services)) as client:
            for url in (f"/ui/runs/{run_id}", "/ui/"):
                page = client.get(url)
                assert page.status_code == 200, page.text[:2000]
                assert 'data-field="pass_rate">—<' in page.text
    finally:
        services.close()


# ---------------------------------------------------------------------------------------------
# compare: an all-errored candidate


def test_an_all_errored_candidate_compares_as_the_seed_says(cli: Cli, tmp_path: Path) -> None:
    base = _import(cli, tmp_path, "base", [case("a", 5), case("b", 5)])
    cand = _import(
        cli, tmp_path, "cand", [case("a", status="errored"), case("b", status="errored")]
    )
    code, out, err = cli("compare", base, cand, "--json")
    assert code == 1, err
    result = orjson.loads(out)
    agg = result["aggregate"]
    assert (agg["baseline_metrics"]["pass_rate"], agg["candidate_metrics"]["pass_rate"]) == (
        1.0,
        0.0,
    )
    assert agg["pass_rate_delta"] == -1.0
    assert result["verdict"]["regression_detected"] is True
    assert result["verdict"]["reasons"] == ["pass_rate dropped 100% (1.00 → 0.00)"]
    code, out, _ = cli("compare", base, cand)
    assert code == 1
    assert "  - pass_rate dropped 100% (1.00 → 0.00)" in out.splitlines()
    assert "unknown" not in out
    code, out, _ = cli("compare", base, cand, "--markdown")
    assert code == 1
    assert "| Pass rate | 100.0% | 0.0% | -100.0pt |" in out


# ---------------------------------------------------------------------------------------------
# the run mean against its threshold


def _weighted(w: float) -> dict[str, Any]:
    """A run config weighing tool_routing `w` and parameter_extraction `1 - w`."""
    return {
        "metrics_pass_threshold": 80.0,
        "cases_pass_threshold": 100.0,
        "judge": {
            "metrics": [
                {"metric": "tool_routing", "weight": w},
                {"metric": "parameter_extraction", "weight": round(1 - w, 4)},
            ],
            "pass_threshold": 75.0,
        },
    }


def _scored(key: str, tool_routing: int, parameter_extraction: int) -> dict[str, Any]:
    c = case(key)
    for m in c["verdicts"][0]["metric_scores"]:
        if m["metric"] == "tool_routing":
            m["score"] = tool_routing
        elif m["metric"] == "parameter_extraction":
            m["score"] = parameter_extraction
    return c


# (weight of tool_routing, cases' (tool_routing, parameter_extraction), their overall scores,
#  the threshold, the verdict). The overall scores' mean at 2 dp would reverse each verdict.
MEANS = [
    # 0 + 57.25 + 95.41 = 152.66 over 3: 50.8867, "50.89" at 2 dp, below 50.89.
    (0.0459, [(0, 0), (0, 3), (0, 5)], [0.0, 57.25, 95.41], 50.89, False),
    # 1.67 + 60.67 + 100 = 162.34 over 3: 54.1133, "54.11" at 2 dp, at least 54.1111.
    (0.0167, [(5, 0), (5, 3), (5, 5)], [1.67, 60.67, 100.0], 54.1111, True),
]


@pytest.mark.parametrize(("w", "scores", "overall", "threshold", "passed"), MEANS)
def test_the_run_mean_is_held_against_the_threshold_exactly(
    cli: Cli,
    tmp_path: Path,
    w: float,
    scores: list[tuple[int, int]],
    overall: list[float],
    threshold: float,
    passed: bool,
) -> None:
    config = _weighted(w) | {"metrics_pass_threshold": threshold}
    cases = [_scored(f"c{i}", *s) for i, s in enumerate(scores)]
    run_id = _import(cli, tmp_path, "crafted", cases, config=config)
    shown = cli.json("show", run_id)
    assert [c["overall_score"] for c in shown["cases"]] == overall
    agg = shown["aggregate"]
    assert agg["weighted_metrics_score_pct"] == float(sum(map(Fraction, map(str, overall))) / 3)
    assert agg["metrics_passed"] is passed
    # The columnar rescore (a spec of its own) holds the same rule.
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(config | {"cases_pass_threshold": 50.0}))
    after = cli.json("rescore", run_id, "--spec", str(spec))["after"]["aggregate"]
    assert after["weighted_metrics_score_pct"] == agg["weighted_metrics_score_pct"]
    assert after["metrics_passed"] is passed


# ---------------------------------------------------------------------------------------------
# summaries stored before issue 29


def test_a_summary_stored_with_a_null_pass_rate_reads_back_with_the_seeds_figures(
    cli: Cli, tmp_path: Path, store_url: str
) -> None:
    """Sessions before issue 29 stored null for a run no case decided: read as 0.0, not a 500."""
    from sqlalchemy import select, update

    from evaledger.projections.tables import run_summaries

    run_id = _import(cli, tmp_path, "errored", [case("a", status="errored"), case("b")])
    services = build_services(Settings(db=store_url))
    try:
        services.sync()  # the summary materialised, as a serving process would have it
        with services.engine.begin() as conn:
            stored = orjson.loads(conn.scalar(select(run_summaries.c.aggregate)) or "")
            assert (stored["passed_count"], stored["total_executions"]) == (1, 2)
            old = stored | {"passed_count": 0, "pass_rate": None, "cases_pass_rate_pct": None}
            conn.execute(update(run_summaries).values(aggregate=orjson.dumps(old).decode()))
    finally:
        services.close()
    agg = cli.json("show", run_id)["aggregate"]
    assert (agg["passed_count"], agg["pass_rate"], agg["cases_pass_rate_pct"]) == (0, 0.0, 0.0)
