"""promptfoo variants (provider × prompt) and `--repeat` in compare, and promptfoo's other outputs.

The fixtures are real promptfoo 0.121.20 outputs (tests/fixtures/promptfoo/README.md): two
providers × two prompts, three tests, `--repeat 2`, a baseline and a candidate eval whose
assertions differ. The expected classes and pass rates are computed here from promptfoo's own
rows (the reference), never from what the importer made of them.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
import yaml
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Settings, build_services
from evaledger.importers.promptfoo import repetition_places
from evaledger.scoring.case import variant_figures
from tests.api.test_cli import Cli
from tests.conftest import FIXTURES

HERE = FIXTURES / "promptfoo"
BASELINE, CANDIDATE = HERE / "baseline.json", HERE / "candidate.json"
CONFIG = HERE / "promptfooconfig.baseline.yaml"

Cell = tuple[str, str]
"""(test description, `provider | prompt`)."""


def promptfoo_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(path.read_text())["results"]["results"]
    return rows


def verdicts(path: Path) -> dict[Cell, list[bool]]:
    """Each test × variant's pass/fail per repetition, from promptfoo's own rows."""
    found: dict[Cell, list[bool]] = defaultdict(list)
    for r in promptfoo_rows(path):
        variant = f"{r['provider']['label']} | {r['prompt']['label']}"
        found[r["testCase"]["description"], variant].append(bool(r["success"]))
    return found


def expected_classes() -> dict[Cell, str]:
    base, cand = verdicts(BASELINE), verdicts(CANDIDATE)
    out = {}
    for cell in base:
        b, c = all(base[cell]), all(cand[cell])
        out[cell] = "unchanged" if b == c else ("improvement" if c else "regression")
    return out


def key_names(path: Path) -> dict[str, str]:
    """Our test case key → promptfoo's test description (a key is `test-<first testIdx>`)."""
    first: dict[str, int] = {}
    for r in promptfoo_rows(path):
        name = r["testCase"]["description"]
        first[name] = min(first.get(name, r["testIdx"]), r["testIdx"])
    return {f"test-{i}": name for name, i in first.items()}


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], store_url: str) -> Cli:
    return Cli(capsys, store_url)


def import_run(cli: Cli, path: Path) -> dict[str, Any]:
    row: dict[str, Any] = cli.json("import", str(path))["imported"][0]
    return row


def test_the_reference_has_flips_both_ways_and_providers_that_disagree() -> None:
    """The fixtures hold what the issue is about (else the tests below prove nothing)."""
    classes = expected_classes()
    assert sorted(classes.values()).count("improvement") == 3
    assert sorted(classes.values()).count("regression") == 1
    base = verdicts(BASELINE)
    # The providers disagree on a test (the old compare called it flaky) ...
    assert {all(v) for (test, _), v in base.items() if test == "cy"} == {True, False}
    # ... but no variant's two repetitions do.
    assert all(len(v) == 2 and len(set(v)) == 1 for v in base.values())


def test_compare_classifies_each_test_and_variant_without_false_flaky(cli: Cli) -> None:
    base = import_run(cli, BASELINE)["run_id"]
    cand = import_run(cli, CANDIDATE)["run_id"]
    code, out, err = cli("compare", base, cand, "--json")
    assert code == 1, err  # exit 1: the candidate regressed one cell
    result = orjson.loads(out)
    names = key_names(BASELINE)
    assert names == key_names(CANDIDATE)
    rows = result["test_case_comparisons"]
    got = {(names[t["test_case_key"]], t["variant"]): t["status"] for t in rows}
    assert got == expected_classes()
    assert len(rows) == 12  # 3 tests × 4 variants; repetitions are not test cases
    for t in rows:
        assert t["repetitions"] == {"baseline": 2, "candidate": 2}
        assert (t["baseline_flaky"], t["candidate_flaky"]) == (False, False)
    agg = result["aggregate"]
    assert (agg["total_regressions"], agg["total_improvements"], agg["total_unchanged"]) == (
        1,
        3,
        8,
    )
    assert not any("flaky" in w for w in result["warnings"])
    # Two evals of one config are scored alike: their scorers differ only in the figures
    # each eval reported (was: "runs are scored under different specs" on every compare).
    assert not any("different specs" in w for w in result["warnings"]), result["warnings"]
    # Nor is their config changed (was: "Changes: config: scorers", the reported figures).
    assert result["config_diff"]["config_changes"] == []
    # Each variant's pass rate is its own rows' passes over its rows, on both sides.
    for v in agg["per_variant"]:
        for side, path in (("baseline", BASELINE), ("candidate", CANDIDATE)):
            flat = [
                ok
                for (_, variant), oks in verdicts(path).items()
                if variant == v["variant"]
                for ok in oks
            ]
            assert v[f"{side}_executions"] == len(flat) == 6
            assert v[f"{side}_pass_rate"] == pytest.approx(sum(flat) / len(flat))
        cells = {c: s for c, s in expected_classes().items() if c[1] == v["variant"]}
        assert v["total_improvements"] == list(cells.values()).count("improvement")
        assert v["total_regressions"] == list(cells.values()).count("regression")
    assert {v["variant"] for v in agg["per_variant"]} == {c[1] for c in expected_classes()}
    # Named scores pair each test × variant with its own (was: keyed by test only, so one
    # variant per test stood for all: 0.6667 → 1.0 on n=3 where promptfoo says 14/24 → 18/24).
    success = next(n for n in result["named_scores"] if n["name"] == "success")
    means = {}
    for side, path in (("baseline", BASELINE), ("candidate", CANDIDATE)):
        shares = [sum(oks) / len(oks) for oks in verdicts(path).values()]
        means[side] = sum(shares) / len(shares)
    assert success["baseline_mean"] == pytest.approx(means["baseline"])  # 14/24
    assert success["candidate_mean"] == pytest.approx(means["candidate"])  # 18/24
    assert success["paired"]["n"] == 12

    code, out, err = cli("compare", base, cand)
    assert code == 1, err  # the candidate's regression of one cell
    assert "cases: 1 regression, 3 improvement, 8 unchanged, 0 error" in out
    regressed = next(c for c, s in expected_classes().items() if s == "regression")
    key = next(k for k, n in names.items() if n == regressed[0])
    assert re.search(rf"regression\s+{key} \[{re.escape(regressed[1])}\]\s+pass → fail", out)
    assert re.search(r"echo \| greet\s+0\.33\s+0\.67\s+0\.33\s+0\s+1\s+2\s+0", out)
    assert "flaky" not in out
    # The PR comment has the per-variant table too (was: only the run-wide figures).
    code, out, err = cli("compare", base, cand, "--markdown")
    assert code == 1, err
    assert "| echo \\| greet | 33.33% | 66.67% | +33.33pt | 0 | 1 | 2 | 0 |" in out, out


def test_web_compare_pairs_each_variant_with_its_own_answer(store_url: str, cli: Cli) -> None:
    base = import_run(cli, BASELINE)["run_id"]
    cand = import_run(cli, CANDIDATE)["run_id"]
    answers = {
        (r["testIdx"], f"{r['provider']['label']} | {r['prompt']['label']}"): r["response"][
            "output"
        ]
        for r in promptfoo_rows(BASELINE)
    }
    services = build_services(Settings(db=store_url))
    try:
        with TestClient(create_app(services=services), base_url="http://localhost") as client:
            r = client.get(f"/ui/compare?baseline={base}&candidate={cand}")
            matrix = client.get(f"/ui/runs/{base}/matrix")
    finally:
        services.close()
    assert r.status_code == 200, r.text[:500]
    page = r.text
    names = key_names(BASELINE)
    classes = expected_classes()
    shown = re.findall(
        r'<tr data-status="([^"]+)" data-key="([^"]+)" data-variant="([^"]+)">', page
    )
    assert {(names[k], v): s for s, k, v in shown} == classes
    assert "s-flaky" not in page
    # Each row's baseline answer is the same test's and the same variant's first repetition.
    for key, variant in {(k, v) for _, k, v in shown}:
        block = page.split(f'data-answers="{key}" data-variant="{variant}"', 1)[1]
        text = re.search(r'data-field="baseline_answer">([^<]*)<', block)
        assert text is not None
        first = int(key.removeprefix("test-"))
        assert text.group(1) == answers[first, variant]
    variants = page.split('id="variant-deltas"', 1)[1].split("</table>", 1)[0]
    row = re.search(r'<tr data-variant="echo \| greet">(.*?)</tr>', variants, re.S)
    assert row is not None
    assert 'data-field="total_improvements">1<' in row.group(1)
    grid = page.split('id="compare-matrix"', 1)[1].split("</table>", 1)[0]
    assert grid.count('data-status="regression"') == 1
    assert grid.count('data-status="improvement"') == 3
    # The run matrix: every variant's pass rate over its 6 executions.
    assert matrix.status_code == 200
    rates = re.findall(
        r'data-field="pass_rate">([^<]*)<span class="muted small">\((\d+)/(\d+)\)', matrix.text
    )
    assert [(int(p), int(n)) for _, p, n in rates] == [
        (sum(sum(v) for (_, var), v in verdicts(BASELINE).items() if var == label), 6)
        for label in ("echo | greet", "echo | hello", "shout | greet", "shout | hello")
    ]


def test_the_yaml_twin_of_a_json_output_is_the_same_run(cli: Cli) -> None:
    first = import_run(cli, BASELINE)
    again = import_run(cli, HERE / "baseline.yaml")
    assert again["run_id"] == first["run_id"]
    assert again["events"] == 0  # already imported: nothing written
    listed = cli.json("runs")["data"]
    assert [r["run_id"] for r in listed] == [first["run_id"]]


def _figures(store_url: str, run_id: str) -> dict[str, Any]:
    services = build_services(Settings(db=store_url))
    try:
        services.sync()
        summary = services.reads.summary(UUID(run_id))
        cases = services.reads.case_score_objects(UUID(run_id))
    finally:
        services.close()
    agg = summary.aggregate
    return {
        "pass_rate": agg.pass_rate,
        "counts": (agg.total_executions, agg.passed_count, agg.failed_count, agg.error_count),
        "tests": agg.unique_test_case_count,
        "variants": [
            (f.label, f.executions, f.passed_count, f.pass_rate)
            for f in variant_figures(summary.test_cases, summary.spec)
        ],
        "cases": sorted(
            (c["test_case_key"], c["variant"], c["repetition"], c["passed"]) for c in cases
        ),
    }


@pytest.mark.parametrize("output", ["baseline.csv", "baseline.jsonl"])
def test_csv_and_jsonl_outputs_import_with_the_json_figures(
    cli: Cli, store_url: str, output: str, tmp_path: Path
) -> None:
    from_json = _figures(store_url, import_run(cli, BASELINE)["run_id"])
    row = import_run(cli, HERE / output)
    assert (row["format"], row["cases"]) == ("promptfoo", 24)
    assert _figures(store_url, row["run_id"]) == from_json
    assert from_json["pass_rate"] == pytest.approx(14 / 24)  # promptfoo's stats: 14 successes
    assert len(from_json["variants"]) == 4
    # A copy (another name, another modification time) is the same run: nothing written.
    copy = tmp_path / f"copy-{output}"
    copy.write_bytes((HERE / output).read_bytes())
    os.utime(copy, (1_000_000, 1_000_000))
    again = import_run(cli, copy)
    assert (again["run_id"], again["events"]) == (row["run_id"], 0)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_promptfoo_config_is_refused_as_a_config(cli: Cli, tmp_path: Path, as_json: bool) -> None:
    path = CONFIG
    if as_json:
        path = tmp_path / "promptfooconfig.json"
        path.write_bytes(orjson.dumps(yaml.safe_load(CONFIG.read_text())))
    code, out, err = cli("import", str(path))
    assert code == 2, (out, err)
    assert f"{path.name}: detected a promptfoo config" in err
    assert "not its results" in err
    assert "Traceback" not in err
    assert cli.json("runs")["data"] == []


def test_repetitions_of_expanded_vars_are_told_apart() -> None:
    """promptfoo numbers a test's rows repetition by repetition, each vars combination inside."""
    a, b, other = b"a", b"b", b"c"
    seen = [(0, a), (1, b), (2, a), (3, b), (4, other)]
    assert repetition_places(iter(seen)) == {
        0: ("test-0", 0),
        1: ("test-1", 0),
        2: ("test-0", 1),
        3: ("test-1", 1),
        4: ("test-4", 0),
    }


def test_a_yaml_twin_with_sorted_keys_and_a_long_config_is_the_same_run(
    cli: Cli, tmp_path: Path
) -> None:
    # A YAML written by a tool that sorts keys (PyYAML's safe_dump) puts `evalId` after the
    # whole `config`; past the first 200 lines it was refused as "malformed JSON".
    data = orjson.loads(BASELINE.read_bytes())
    data["config"]["env"] = {f"VAR_{i:03}": f"value {i}" for i in range(300)}
    output = tmp_path / "results.json"
    output.write_bytes(orjson.dumps(data))
    twin = tmp_path / "converted.yaml"
    twin.write_text(yaml.safe_dump(data, sort_keys=True))
    assert twin.read_text().splitlines().index(f"evalId: {data['evalId']}") > 300
    first = import_run(cli, output)
    again = import_run(cli, twin)
    assert (again["run_id"], again["events"]) == (first["run_id"], 0)
