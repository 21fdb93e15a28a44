"""Many-run compare (issue 36, item 3): a base and several candidates equal the pairwise
compares, cell for cell, verdict for verdict; the candidates' p-values are corrected as one
family (`adjust_p_values` over all of them); on both stores, the CLI and its refusals."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application.compare import compare_report
from evaledger.application.compare_many import compare_many
from evaledger.application.statistics import compare_significance
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from evaledger.scoring.comparison import CompareThresholds
from evaledger.scoring.comparison.adjust import adjust_p_values
from tests.api.test_cli import Cli
from tests.helpers import bundle, case

OWNER = Context(actor="ops")

SCORES = {
    # run key: each test case's score (the base first)
    "base": [4, 4, 4, 2, 5, 3, 4, 4],
    "cand-a": [4, 2, 1, 2, 5, 3, 1, 1],
    "cand-b": [5, 5, 4, 5, 5, 4, 4, 5],
    "cand-c": [4, 4, 4, 2, 5, 3, 4, 3],
}


def run_data(key: str) -> dict[str, Any]:
    data = bundle(key=key)
    data["cases"] = [
        case(f"case-{i:02d}", s, repetition=r) for i, s in enumerate(SCORES[key]) for r in range(2)
    ]
    return data


def imported(services: Services) -> dict[str, UUID]:
    ops = Context(actor="ops")
    found = {
        key: services.ledger.import_bundle(RunBundle.model_validate(run_data(key)), ops).run_id
        for key in SCORES
    }
    services.sync()
    return found


@pytest.mark.parametrize("correction", ["none", "holm", "bh"])
def test_many_run_compare_equals_the_pairwise_compares(
    store_services: Services, correction: Any
) -> None:
    runs = imported(store_services)
    base, cands = runs["base"], [runs[k] for k in ("cand-a", "cand-b", "cand-c")]
    thresholds = CompareThresholds(case_score_delta=1.0)
    many = compare_many(store_services, base, cands, thresholds, correction=correction)
    pairwise = [
        compare_significance(
            store_services,
            compare_report(store_services, base, c, thresholds),
            correction=correction,
        )
        for c in cands
    ]
    assert [r.run_id for r in many.runs] == [str(base), *map(str, cands)]
    assert many.runs[0].aggregate == pairwise[0].comparison.aggregate.baseline_metrics
    raw: list[float | None] = []
    for i, (cand, pair) in enumerate(zip(many.candidates, pairwise, strict=True), start=1):
        model = pair.result
        assert cand.verdict == model.verdict and cand.aggregate == model.aggregate
        assert many.runs[i].aggregate == model.aggregate.candidate_metrics
        cells = {(c.test_case_key, c.variant): c.cells for c in many.cases}
        for t in model.test_case_comparisons:
            base_cell, cand_cell = (cells[(t.test_case_key, t.variant)][j] for j in (0, i))
            assert base_cell is not None and cand_cell is not None
            assert (base_cell.passed, base_cell.score) == (t.baseline_passed, t.baseline_score)
            assert (cand_cell.passed, cand_cell.score, cand_cell.status) == (
                t.candidate_passed,
                t.candidate_score,
                t.status,
            )
        assert cand.significance is not None and pair.significance is not None
        mine, theirs = cand.significance.metrics, pair.significance.metrics
        assert [(m.metric, m.p_value, m.difference) for m in mine] == [
            (m.metric, m.p_value, m.difference) for m in theirs
        ]
        if correction == "none":
            assert cand.significance == pair.significance.model_copy(
                update={"family_size": many.family_size}
            )
        raw += [m.p_value for m in theirs]
    adjusted = adjust_p_values(raw, correction)
    mine_adjusted = [
        m.adjusted_p_value
        for c in many.candidates
        if c.significance
        for m in c.significance.metrics
    ]
    assert mine_adjusted == adjusted
    assert many.family_size == sum(1 for p in raw if p is not None) > 0
    verdicts = [c.verdict.regression_detected for c in many.candidates]
    assert verdicts == [True, False, True]  # cand-c: one case a point down, past the 1.0 delta


def test_many_run_compare_refuses_bad_run_lists(services: Services) -> None:
    runs = imported(services)
    base = runs["base"]
    for cands, message in (
        ([], "at least one candidate"),
        ([runs["cand-a"], runs["cand-a"]], "named twice"),
        ([base], "named twice"),
        ([runs["cand-a"]] * 10, "at most 10 runs"),
    ):
        with pytest.raises(ValidationError, match=message) as e:
            compare_many(services, base, cands)
        assert e.value.field == "runs"


def test_cli_compare_of_four_runs(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, sqlite_url)
    for key in SCORES:
        path = tmp_path / f"{key}.json"
        path.write_bytes(orjson.dumps(run_data(key)))
        assert cli("import", str(path))[0] == 0
    args = ("compare", "base", "cand-a", "cand-b", "cand-c", "--case-score-delta", "1")
    code, out, err = cli(*args)
    assert code == 1, err  # cand-a and cand-c regress
    assert "candidates against the base (holm, a family of" in out
    assert out.count("case-0") == len(SCORES["base"])
    code, out, err = cli(*args, "--json")
    body = orjson.loads(out)
    assert code == 1 and [r["run_key"] for r in body["runs"]] == list(SCORES)
    assert len(body["cases"]) == 8 and len(body["cases"][0]["cells"]) == 4
    pair = cli("compare", "base", "cand-b", "--json", "--case-score-delta", "1")
    assert pair[0] == 0
    assert body["candidates"][1]["aggregate"] == orjson.loads(pair[1])["aggregate"]
    pairs = [cli("compare", "base", k)[0] for k in ("cand-b", "cand-c")]
    assert cli("compare", "base", "cand-b", "cand-c")[0] == max(pairs) and pairs[0] == 0
    for extra in (("--markdown",), ("--case", "case-01"), ("--noise-floor", "base")):
        code, _, err = cli("compare", "base", "cand-a", "cand-b", *extra)
        assert code == 2 and extra[0] in err


def test_the_api_and_the_page_of_many_runs(services: Services) -> None:
    runs = imported(services)
    ids = [str(runs[k]) for k in SCORES]
    with TestClient(create_app(services=services)) as client:
        query = "&".join(f"candidate_run_id={i}" for i in ids[1:])
        r = client.get(f"/runs/compare/many?baseline_run_id={ids[0]}&{query}&correction=bh")
        assert r.status_code == 200, r.text
        body = r.json()
        mine = compare_many(services, runs["base"], [runs[k] for k in list(SCORES)[1:]],
                            correction="bh")  # fmt: skip
        assert body == mine.model_dump(mode="json")
        twice = client.get(f"/runs/compare/many?baseline_run_id={ids[0]}&candidate_run_id={ids[0]}")
        assert twice.status_code == 422 and twice.json()["field"] == "candidate_run_id"
        page = client.get(f"/ui/compare?runs={','.join(SCORES)}&correction=bh").text
        assert page.count('<tr data-key="case-') == len(SCORES["base"])
        assert (
            'id="many-candidates"' in page and page.count('data-field="regression_detected"') == 3
        )
        verdicts = re.findall(r'data-field="regression_detected">([^<]*)<', page)
        assert verdicts == [
            "regression detected" if c.verdict.regression_detected else "no regression"
            for c in mine.candidates
        ]
        assert f"family of {mine.family_size} p-values" in page
        bad = client.get("/ui/compare?runs=base")
        assert bad.status_code == 422 and "runs" in bad.text
        assert client.get("/ui/compare?runs=base,nope").status_code == 404


def test_another_projects_run_is_never_compared(tmp_path: Path) -> None:
    services = build_services(Settings(db=f"sqlite:///{tmp_path}/store/", auth="tokens"))
    try:
        token = services.ledger.issue_token("alpha", TokenScope.READ, "ann", OWNER).token
        ids = {}
        for project, key in (("alpha", "base"), ("alpha", "cand-a"), ("beta", "cand-b")):
            data = run_data(key)
            data["run"]["project"] = project
            ids[key] = str(
                services.ledger.import_bundle(RunBundle.model_validate(data), OWNER).run_id
            )
        services.sync()
        auth = {"Authorization": f"Bearer {token}"}
        with TestClient(create_app(services=services)) as client:
            ok = (
                f"/runs/compare/many?baseline_run_id={ids['base']}&candidate_run_id={ids['cand-a']}"
            )
            assert client.get(ok, headers=auth).status_code == 200
            foreign = ok + f"&candidate_run_id={ids['cand-b']}"
            r = client.get(foreign, headers=auth)
            assert r.status_code == 404 and "beta" not in r.text
            page = client.get(f"/ui/compare?runs=base,cand-a,{ids['cand-b']}", headers=auth)
            assert page.status_code == 404 and "cand-b" not in page.text
    finally:
        services.close()
