"""The comparability guard (issue 35): runs of two dataset versions are compared over their
common items, exactly as two runs made of only those items would be; on SQLite and PostgreSQL,
at the command line and over HTTP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from tests.api.test_cli import Cli
from tests.helpers import bundle, case

# What a comparison says of its cases and totals, whichever runs it compared.
COMPARED = ("aggregate", "test_case_comparisons", "verdict", "statistics")


def _items(path: Path, lines: list[dict[str, Any]]) -> str:
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    return str(path)


def _run(tmp_path: Path, key: str, scores: dict[str, int], version: int | None) -> str:
    dataset = {"dataset": {"name": "qa", "version": version}} if version else {}
    data = bundle(key=key, **dataset)
    data["cases"] = [case(k, s) for k, s in scores.items()]
    path = tmp_path / f"{key}.json"
    path.write_bytes(orjson.dumps(data))
    return str(path)


def _said(answer: dict[str, Any]) -> dict[str, Any]:
    """What a comparison says of its cases and totals (per-metric deltas aside: an option)."""
    said = {k: answer[k] for k in COMPARED}
    said["test_case_comparisons"] = [
        {k: v for k, v in t.items() if k != "metric_deltas"} for t in said.pop(COMPARED[1])
    ]
    return said


def _compare(cli: Cli, *args: str) -> tuple[dict[str, Any], str]:
    code, out, err = cli("compare", *args, "--json")
    assert code in (0, 1), err
    return orjson.loads(out), err


def test_runs_of_two_versions_compare_as_two_runs_of_only_their_common_items(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, store_url)
    cli.json("dataset", "create", "qa")
    v1 = [{"key": k} for k in ("a", "b", "c", "gone")]
    v2 = [{"key": "a"}, {"key": "b"}, {"key": "c", "input": "edited"}, {"key": "new"}]
    cli.json("dataset", "add", "qa", _items(tmp_path / "v1.jsonl", v1))
    cli.json("dataset", "add", "qa", _items(tmp_path / "v2.jsonl", v2))
    runs = {
        "old": ({"a": 4, "b": 2, "c": 5, "gone": 1}, 1),
        "new": ({"a": 3, "b": 5, "c": 1, "new": 2}, 2),
        # The reference: two runs holding only the common items (a, b), of one dataset.
        "ref-old": ({"a": 4, "b": 2}, None),
        "ref-new": ({"a": 3, "b": 5}, None),
    }
    for key, (scores, version) in runs.items():
        cli.json("import", _run(tmp_path, key, scores, version))
    found, err = _compare(cli, "old", "new")
    reference, ref_err = _compare(cli, "ref-old", "ref-new")
    assert "comparability" not in reference and "warning" not in ref_err
    assert {k: found[k] for k in COMPARED} == {k: reference[k] for k in COMPARED}
    assert [t["test_case_key"] for t in found["test_case_comparisons"]] == ["a", "b"]
    guard = found["comparability"]
    assert guard["baseline_dataset"].startswith("qa@1 (sha256 ")
    assert guard["candidate_dataset"].startswith("qa@2 (sha256 ")
    assert guard["restricted"] is True and guard["common_items"] == 2
    assert (guard["baseline_only_items"], guard["candidate_only_items"]) == (["gone"], ["new"])
    assert (guard["changed_items"], guard["changed_count"]) == (["c"], 1)
    assert "warning: runs of different dataset versions: qa@1" in err
    assert "compared only the 2 item(s) common to both runs" in err
    # Allowed: every case is compared (c among them), with the same warning.
    everything, err = _compare(cli, "old", "new", "--allow-different-datasets")
    assert everything["comparability"]["restricted"] is False
    assert [t["test_case_key"] for t in everything["test_case_comparisons"]] == ["a", "b", "c"]
    assert everything["aggregate"] != found["aggregate"]
    assert "compared every case (--allow-different-datasets)" in err
    # Over HTTP: the same answer, the guard in its `comparability` field.
    services = build_services(Settings(db=store_url))
    try:
        with TestClient(create_app(services=services)) as client:
            pair = found["baseline_run_id"], found["candidate_run_id"]
            base = "/runs/compare?baseline_run_id={}&candidate_run_id={}".format(*pair)
            answer = client.get(base)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert _said(body) == _said(found)
            assert body["comparability"] == guard
            allowed = client.get(f"{base}&allow_different_datasets=true").json()
            assert allowed["comparability"]["restricted"] is False
            assert len(allowed["test_case_comparisons"]) == 3
    finally:
        services.close()


def _graded(tmp_path: Path, key: str, model: str, template: str, version: str | None) -> str:
    data = bundle(key=key)
    data["cases"] = [case(k, 4) for k in ("a", "b")]
    for c in data["cases"]:
        judge = {"provider": "anthropic", "model": model}
        c["verdicts"][0].update(
            judge={**judge, **({"version": version} if version else {})}, template_hash=template
        )
    path = tmp_path / f"{key}.json"
    path.write_bytes(orjson.dumps(data))
    return str(path)


def test_the_guard_lists_what_differs_between_the_runs_graders(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, store_url)
    cli.json("import", _graded(tmp_path, "base", "claude", "t1", None))
    cli.json("import", _graded(tmp_path, "same", "claude", "t1", None))
    cli.json("import", _graded(tmp_path, "regraded", "claude-2", "t2", "v2"))
    same, err = _compare(cli, "base", "same")
    assert "comparability" not in same and "warning" not in err
    found, err = _compare(cli, "base", "regraded")
    guard = found["comparability"]
    assert guard["grader_differences"] == [
        {
            "field": "judge model",
            "old_value": ["anthropic:claude"],
            "new_value": ["anthropic:claude-2"],
        },
        {"field": "judge template hash", "old_value": ["t1"], "new_value": ["t2"]},
        {"field": "scorer version", "old_value": [], "new_value": ["anthropic:claude-2@v2"]},
    ]
    # A warning, not a restriction: every case is compared.
    assert guard["restricted"] is False and guard["baseline_dataset"] is None
    assert [t["test_case_key"] for t in found["test_case_comparisons"]] == ["a", "b"]
    assert "warning: the runs' graders differ: judge model: anthropic:claude (baseline)" in err
    assert "judge template hash: t1 (baseline) vs t2 (candidate)" in err


def test_cached_cases_are_shown_and_excluded_on_request(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, store_url)
    runs = {
        "base": ({"a": 4, "b": 2, "c": 5}, set()),
        "cand": ({"a": 3, "b": 5, "c": 1}, {"c"}),
        "ref-base": ({"a": 4, "b": 2}, set()),
        "ref-cand": ({"a": 3, "b": 5}, set()),
    }
    for key, (scores, cached) in runs.items():
        data = bundle(key=key)
        data["cases"] = [
            case(k, s) | ({"cached": True} if k in cached else {}) for k, s in scores.items()
        ]
        path = tmp_path / f"{key}.json"
        path.write_bytes(orjson.dumps(data))
        cli.json("import", str(path))
    # The flag is kept: the run's export carries it, on that case only.
    exported = orjson.loads(cli("export", "cand")[1])
    assert [c.get("cached", False) for c in exported["cases"]] == [False, False, True]
    shown, err = _compare(cli, "base", "cand")
    guard = shown["comparability"]
    assert (guard["cached_items"], guard["baseline_cached"], guard["candidate_cached"]) == (
        ["c"],
        0,
        1,
    )
    assert guard["excluded_cached"] is False and len(shown["test_case_comparisons"]) == 3
    assert "warning: 1 test case(s) served from a cache: 0 in the baseline, 1 in the" in err
    excluded, err = _compare(cli, "base", "cand", "--exclude-cached")
    assert excluded["comparability"]["excluded_cached"] is True
    assert "left out of both runs: --exclude-cached" in err
    reference, _ = _compare(cli, "ref-base", "ref-cand")
    assert _said(excluded) == _said(reference)


def test_the_web_compare_page_and_its_markdown_show_the_guard(
    store_services: Services, tmp_path: Path
) -> None:
    ctx = Context(actor="ops")
    ids = {}
    for key, model, cached in (("base", "claude", False), ("cand", "claude-2", True)):
        data = bundle(key=key)
        data["cases"] = [case(k, 4) for k in ("a", "b")]
        data["cases"][1]["cached"] = cached
        for c in data["cases"]:
            c["verdicts"][0]["judge"] = {"provider": "anthropic", "model": model}
        bundled = RunBundle.model_validate(data)
        ids[key] = store_services.ledger.import_bundle(bundled, ctx).run_id
    store_services.sync()
    query = f"baseline={ids['base']}&candidate={ids['cand']}"
    with TestClient(create_app(services=store_services)) as client:
        page = client.get(f"/ui/compare?{query}")
        assert page.status_code == 200, page.text[:500]
        banner = re.search(r'data-field="datasets">(.*?)</div>', page.text, re.S)
        assert banner is not None
        assert "the runs&#39; graders differ: judge model: anthropic:claude" in banner.group(1)
        assert 'data-field="cached_items">Served from a cache: b<' in banner.group(1)
        link = re.search(r'data-action="exclude-cached" href="([^"]+)"', page.text)
        assert link is not None
        excluded = client.get(link.group(1).replace("&amp;", "&"))
        assert "(left out of both runs: --exclude-cached)" in excluded.text
        assert 'data-action="exclude-cached"' not in excluded.text
        assert re.findall(r'<tr data-status="[^"]*" data-key="([^"]+)"', page.text) == ["a", "b"]
        assert re.findall(r'<tr data-status="[^"]*" data-key="([^"]+)"', excluded.text) == ["a"]
        markdown = client.get(f"/ui/compare.md?{query}").text
        assert "> ⚠️ the runs' graders differ" in markdown
        assert "1 test case(s) served from a cache" in markdown
        same = client.get(f"/ui/compare?baseline={ids['base']}&candidate={ids['base']}")
        assert 'data-field="datasets"' not in same.text


def test_a_cached_flag_that_is_not_a_boolean_is_refused_and_nothing_stored(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, sqlite_url)
    data = bundle(key="odd")
    data["cases"] = [case("a", 4) | {"cached": "perhaps"}]
    path = tmp_path / "odd.json"
    path.write_bytes(orjson.dumps(data))
    code, _, err = cli("import", str(path))
    assert code == 2 and "cached" in err
    code, _, err = cli("show", "odd")
    assert code == 2 and "odd" in err and "Traceback" not in err
