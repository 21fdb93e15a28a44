"""Issue 37 end to end: compare's corrected per-metric statistics, noise, plan, --noise-floor.

Runs are real bundles imported through the CLI into SQLite and PostgreSQL: 24 test cases × 3
repetitions, each judged by a panel of 2, drawn from a seeded model (case difficulty, the
agent's noise per repetition, the judge's per verdict). Two A/A runs of agent v1 and one run of
a worse v2.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from tests.api.test_cli import Cli
from tests.conftest import FIXTURES

CASES, REPS, JUDGES = 24, 3, 2
METRICS = ("tool_routing", "parameter_extraction", "result_interpretation", "grounding_fidelity")


def synthetic_bundle(key: str, version: str, seed: int, shift: float) -> dict[str, Any]:
    """The example bundle's run, with CASES × REPS cases judged by JUDGES judges each."""
    example = orjson.loads((FIXTURES / "run-bundle.example.json").read_bytes())
    template = example["cases"][0]
    rng = random.Random(seed)
    difficulty = random.Random(37)
    run = copy.deepcopy(example["run"])
    run["key"] = key
    run["agent"]["version"] = version
    cases = []
    for i in range(CASES):
        base = 2.0 + 2.5 * difficulty.random()
        for r in range(REPS):
            agent = base + shift + rng.gauss(0, 0.7)
            case = copy.deepcopy(template)
            case["test_case"]["key"] = f"case-{i:02d}"
            case["test_case"]["name"] = f"Case {i}"
            case["repetition"] = r
            verdicts = []
            for j in range(JUDGES):
                verdict = copy.deepcopy(template["verdicts"][0])
                verdict.pop("raw_output", None)
                verdict.pop("prompt", None)
                verdict["judge"]["model"] = f"judge-{j}"
                for m in verdict["metric_scores"]:
                    m["score"] = max(0, min(5, round(agent + rng.gauss(0, 0.4))))
                for o in verdict["expected_outcomes"]:
                    o["passed"] = agent + rng.gauss(0, 0.3) > 3.2
                verdicts.append(verdict)
            case["verdicts"] = verdicts
            cases.append(case)
    return {"format": example["format"], "run": run, "cases": cases}


def compared(cli: Cli, *args: str) -> Any:
    """`compare --json`: its answer, whether or not it found a regression (exit 0 or 1)."""
    code, out, err = cli("compare", *args, "--json")
    assert code in (0, 1), err
    return orjson.loads(out)


@pytest.fixture
def runs(
    store_url: str, store_services: Services, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> tuple[Cli, dict[str, str]]:
    cli = Cli(capsys, store_url)
    keys = {}
    for name, version, seed, shift in (
        ("a1", "1", 1, 0.0),
        ("a2", "1", 2, 0.0),
        ("worse", "2", 3, -0.6),
    ):
        path = tmp_path / f"{name}.json"
        path.write_bytes(orjson.dumps(synthetic_bundle(f"skeptic-{name}", version, seed, shift)))
        (row,) = cli.json("import", str(path))["imported"]
        keys[name] = row["run_id"]
    return cli, keys


def test_compare_reports_clustered_intervals_and_holm_adjusted_p_values(
    runs: tuple[Cli, dict[str, str]],
) -> None:
    cli, ids = runs
    out = compared(cli, ids["a1"], ids["worse"])
    sig = out["significance"]
    assert sig["correction"] == "holm" and "Holm" in sig["correction_name"]
    assert "test case" in sig["clustered_by"]
    by_metric = {m["metric"]: m for m in sig["metrics"]}
    assert {"pass_rate", "avg_score", *METRICS} <= by_metric.keys()
    raw = [m["p_value"] for m in sig["metrics"]]
    expected = multipletests(raw, method="holm")[1].tolist()
    assert [m["adjusted_p_value"] for m in sig["metrics"]] == pytest.approx(expected, rel=1e-12)
    for m in sig["metrics"]:
        d = m["difference"]
        # Clustered by test case: 24 clusters, not 72 executions; the method is named.
        assert d["clusters"] == CASES and d["df"] == CASES - 1
        assert "paired by test case" in d["method"]
        assert m["baseline"]["n"] == CASES * REPS and m["baseline"]["clusters"] == CASES
        assert "cluster-robust" in m["baseline"]["method"]
        assert m["adjusted_p_value"] >= m["p_value"]
    # A shift of -0.6 points of every metric: a regression the adjusted p-values still see.
    assert sig["verdict"] == "regression" and "avg_score" in sig["regressions"]
    assert by_metric["avg_score"]["difference"]["delta"] < 0
    assert sig["reading"].startswith(("pass_rate −", "avg_score −"))
    # The seeds' fields keep their meaning: the same statistics as the API's compare.
    assert out["statistics"]["verdict"] in {"regression", "no_significant_change"}
    assert set(out["verdict"]) == {"regression_detected", "reasons", "thresholds_used"}


@pytest.mark.parametrize("correction", ["none", "bh"])
def test_compare_takes_another_correction(
    runs: tuple[Cli, dict[str, str]], correction: str
) -> None:
    cli, ids = runs
    sig = compared(cli, ids["a1"], ids["worse"], "--correction", correction)["significance"]
    raw = [m["p_value"] for m in sig["metrics"]]
    adjusted = [m["adjusted_p_value"] for m in sig["metrics"]]
    if correction == "none":
        assert adjusted == raw
    else:
        assert adjusted == pytest.approx(multipletests(raw, method="fdr_bh")[1].tolist())
    code, _out, err = cli("compare", ids["a1"], ids["worse"], "--correction", "bonferroni")
    assert code == 2 and "--correction" in err


def test_noise_measures_a_a_runs_and_splits_the_variance(runs: tuple[Cli, dict[str, str]]) -> None:
    cli, ids = runs
    report = cli.json("noise", ids["a1"], ids["a2"])
    by_metric = {m["metric"]: m for m in report["metrics"]}
    for name in ("pass_rate", "avg_score", *METRICS):
        m = by_metric[name]
        assert m["noise_floor"] > 0 and m["mde"] > m["noise_floor"]
        assert len(m["run_means"]) == 2 and len(m["pair_deltas"]) == 1
        # The two A/A runs differ by less than the floor they define (a seeded draw).
        assert abs(m["pair_deltas"][0]) < m["noise_floor"]
    splits = {s["metric"]: s for s in report["variance_split"]}
    split = splits["tool_routing"]
    assert split["judge"] is not None and split["agent"] is not None and split["cases"] > 0
    assert split["shares"]["cases"] > split["shares"]["judge"]  # difficulty 0-2.5 vs judge 0.4
    assert split["verdicts"] == 2 * CASES * REPS * JUDGES
    # Two agent versions are no A/A pair.
    code, out, _err = cli("noise", ids["a1"], ids["worse"], "--json")
    assert code == 2 and json.loads(out)["error"]["field"] == "runs"


def test_noise_floor_turns_a_small_threshold_regression_into_noise(
    runs: tuple[Cli, dict[str, str]], tmp_path: Path
) -> None:
    cli, ids = runs
    code, out, _ = cli("noise", ids["a1"], ids["a2"], "--json")
    assert code == 0
    floors = tmp_path / "noise.json"
    floors.write_text(out)
    # Any drop of the pass rate or the score fails the thresholds of an A/A comparison ...
    strict = ("--max-pass-rate-drop", "0", "--max-avg-score-drop", "0", "--no-fail-on-thresholds")
    plain = cli.json("compare", ids["a1"], ids["a2"], *strict)
    for first, second in ((ids["a1"], ids["a2"]), (ids["a2"], ids["a1"])):
        code, _, _ = cli("compare", first, second, *strict)
        if code == 1:
            break
    assert code == 1, plain["verdict"]
    # ... unless the drop is within the noise floor measured on the same setup.
    for source in (str(floors), f"{ids['a1']},{ids['a2']}"):
        code, out, err = cli("compare", first, second, *strict, "--noise-floor", source, "--json")
        assert code == 0, err
        body = json.loads(out)
        assert body["verdict"]["regression_detected"] is True  # the seed's field: unchanged
        assert body["within_noise_reasons"] == body["verdict"]["reasons"]
        assert "pass_rate" in body["significance"]["within_noise"]
    # A real regression is not forgiven by that floor.
    code, _, _ = cli("compare", ids["a1"], ids["worse"], "--noise-floor", str(floors))
    assert code == 1


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b"not json", "noise_floor"),
        (b"[]", "noise_floor.metrics"),
        (b'{"metrics": [{"metric": "pass_rate", "noise_floor": -1}]}', "metrics[0].noise_floor"),
        (b'{"metrics": [{"metric": "pass_rate", "noise_floor": 1e999}]}', "noise_floor"),
        (b'{"metrics": [{"noise_floor": 0.1}]}', "metrics[0].metric"),
        (b"[" * 100_000 + b"]" * 100_000, "noise_floor"),
    ],
)
def test_a_bad_noise_floor_file_is_refused_naming_the_field(
    runs: tuple[Cli, dict[str, str]], tmp_path: Path, content: bytes, field: str
) -> None:
    cli, ids = runs
    path = tmp_path / "floor.json"
    path.write_bytes(content)
    code, out, _ = cli("compare", ids["a1"], ids["a2"], "--noise-floor", str(path), "--json")
    assert code == 2
    assert json.loads(out)["error"]["field"] == field
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 1_000_001)
    code, out, _ = cli("gate", ids["a1"], "--noise-floor", str(big), "--json")
    assert code == 2 and json.loads(out)["error"]["field"] == "noise_floor"


def test_gate_forgives_a_shortfall_within_noise(
    runs: tuple[Cli, dict[str, str]], tmp_path: Path
) -> None:
    cli, ids = runs
    pass_rate = cli.json("show", ids["a1"])["aggregate"]["pass_rate"]
    minimum = f"{min(1.0, pass_rate + 0.01):.4f}"
    code, out, _ = cli("gate", ids["a1"], "--min-pass-rate", minimum, "--json")
    assert code == 1 and "pass_rate" in json.loads(out)["failed"]
    floors = tmp_path / "noise.json"
    floors.write_text(json.dumps({"metrics": [{"metric": "pass_rate", "noise_floor": 0.05}]}))
    code, out, _ = cli(
        "gate", ids["a1"], "--min-pass-rate", minimum, "--noise-floor", str(floors), "--json"
    )
    body = json.loads(out)
    assert "pass_rate" in body["within_noise"] and "pass_rate" not in body["failed"]
    tight = tmp_path / "tight.json"
    tight.write_text(json.dumps({"metrics": [{"metric": "pass_rate", "noise_floor": 0.001}]}))
    code, out, _ = cli(
        "gate", ids["a1"], "--min-pass-rate", minimum, "--noise-floor", str(tight), "--json"
    )
    assert "pass_rate" in json.loads(out)["failed"]


def test_plan_sizes_a_run_and_reads_the_icc_from_runs(runs: tuple[Cli, dict[str, str]]) -> None:
    cli, ids = runs
    plan = cli.json("plan", "--metric", "pass_rate", "--baseline", "0.82", "--mde", "0.03")
    assert plan["plan"]["cases_needed"] == 2736 and plan["sizes"] == []
    with_icc = cli.json(
        "plan", "--metric", "avg_score", "--baseline", "70", "--mde", "5", "--sd", "20",
        "--repetitions", "3", "--icc", f"{ids['a1']},{ids['a2']}", "--run", ids["a1"],
    )  # fmt: skip
    icc = with_icc["icc"]
    assert 0 < icc["icc"] < 1 and icc["clusters"] == CASES and icc["n"] == 2 * CASES * REPS
    assert with_icc["plan"]["icc"] == icc["icc"]
    (size,) = with_icc["sizes"]
    assert size["cases"] == CASES and size["repetitions"] == REPS and size["mde"] > 0
    code, _, _ = cli("plan", "--baseline", "0.8", "--mde", "0.03", "--icc", "nope", "--json")
    assert code == 2  # "nope" is no number, so a run key: not found


def test_web_and_markdown_show_adjusted_p_values_and_the_noise_floor(
    runs: tuple[Cli, dict[str, str]], store_services: Services
) -> None:
    cli, ids = runs
    code, md, err = cli(
        "compare",
        ids["a1"],
        ids["worse"],
        "--markdown",
        "--noise-floor",
        f"{ids['a1']},{ids['a2']}",
    )
    assert code == 1, err
    assert "| Metric | Δ | 95% CI | p | adjusted p | noise floor |" in md
    assert "Holm (family-wise error rate)" in md and "noise floor from 2 A/A runs" in md
    with TestClient(create_app(services=store_services)) as client:
        q = f"baseline={ids['a1']}&candidate={ids['worse']}"
        page = client.get(f"/ui/compare?{q}&noise_floor={ids['a1']},{ids['a2']}").text
        assert 'data-field="adjusted_p_value"' in page and "Holm" in page
        assert 'data-field="noise_floor_source">2 A/A runs<' in page
        assert 'data-field="significance_reading"' in page and "noise floor" in page
        bh = client.get(f"/ui/compare?{q}&correction=bh").text
        assert "Benjamini-Hochberg" in bh
        bad = client.get(f"/ui/compare?{q}&correction=nope")
        assert bad.status_code == 422 and "correction" in bad.text
        text = client.get(f"/ui/compare.md?{q}&correction=none").text
        assert "none (raw p-values)" in text


def test_the_verdicts_rows_agree_with_a_reference_paired_t_test(
    runs: tuple[Cli, dict[str, str]],
) -> None:
    """The avg_score difference equals a paired t-test on per-case means of overall_score."""
    cli, ids = runs
    sig = compared(cli, ids["a1"], ids["worse"])["significance"]
    sides = []
    for run in (ids["a1"], ids["worse"]):
        rows = cli.json("show", run, "--all")["cases"]
        per_case: dict[str, list[float]] = {}
        for c in rows:
            if c["overall_score"] is not None:
                per_case.setdefault(c["test_case_key"], []).append(c["overall_score"])
        sides.append({k: float(np.mean(v)) for k, v in per_case.items()})
    keys = sorted(sides[0].keys() & sides[1].keys())
    ref = sps.ttest_rel([sides[1][k] for k in keys], [sides[0][k] for k in keys])
    (row,) = [m for m in sig["metrics"] if m["metric"] == "avg_score"]
    assert row["p_value"] == pytest.approx(ref.pvalue, rel=1e-6)


def test_the_api_answers_as_the_cli(
    runs: tuple[Cli, dict[str, str]], store_services: Services
) -> None:
    cli, ids = runs
    with TestClient(create_app(services=store_services)) as client:
        q = f"baseline_run_id={ids['a1']}&candidate_run_id={ids['worse']}"
        r = client.get(f"/statistics/significance?{q}&correction=bh")
        assert r.status_code == 200, r.text
        cli_sig = compared(cli, ids["a1"], ids["worse"], "--correction", "bh")["significance"]
        assert r.json() == cli_sig
        r = client.get(f"/statistics/noise?run_id={ids['a1']}&run_id={ids['a2']}")
        assert r.status_code == 200 and r.json() == cli.json("noise", ids["a1"], ids["a2"])
        r = client.get("/statistics/plan?baseline=0.82&mde=0.03")
        assert r.json()["plan"]["cases_needed"] == 2736
        r = client.get(f"/statistics/significance?{q}&correction=bonferroni")
        assert r.status_code == 422 and "correction" in r.text
        r = client.get(f"/statistics/noise?run_id={ids['a1']}&run_id={ids['worse']}")
        assert r.status_code == 422 and r.json()["field"] == "runs"


def test_two_result_files_are_compared_with_their_significance(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cli = Cli(capsys, f"sqlite:///{tmp_path}/unused/")
    paths = []
    for name, version, seed, shift in (("a1", "1", 1, 0.0), ("worse", "2", 3, -0.6)):
        path = tmp_path / f"{name}.json"
        path.write_bytes(orjson.dumps(synthetic_bundle(f"skeptic-{name}", version, seed, shift)))
        paths.append(str(path))
    body = compared(cli, *paths, "--correction", "none")
    sig = body["significance"]
    assert sig["correction"] == "none" and sig["verdict"] == "regression"
    assert all(m["adjusted_p_value"] == m["p_value"] for m in sig["metrics"])
    assert "within_noise_reasons" not in body
    floors = tmp_path / "floors.json"
    floors.write_text(json.dumps({"metrics": [{"metric": "avg_score", "noise_floor": 100}]}))
    body = compared(cli, *paths, "--noise-floor", str(floors))
    assert "avg_score" in body["significance"]["within_noise"]
    code, _, err = cli("compare", *paths, "--noise-floor", "RUN_A,RUN_B")
    assert code == 2 and "--noise-floor" in err
    assert not (tmp_path / "unused").exists()
