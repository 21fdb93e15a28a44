"""Output diff in compare (issue 36, item 2): answers and turns as word diffs, judge reasoning side
by side, cases sortable by `change`; on both stores, the CLI (`compare A B --case KEY`) and the
web page, with every answer HTML-escaped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.bootstrap import Services
from evaledger.application.case_diff import answer_changes, case_output_diff
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import NotFoundError
from evaledger.domain.ledger import Context
from evaledger.scoring.comparison.output_diff import change
from tests.api.test_cli import Cli
from tests.api.test_web import client as client  # the fixture
from tests.api.test_web import html, imported
from tests.helpers import bundle, case, scores

XSS = "<script>alert('x')</script>"
ANSWERS = {
    # key: (baseline's answer, candidate's answer)
    "refund": ("Your refund of 20 EUR was sent today.", "Your refund of 25 EUR will be sent."),
    "same": ("Opening hours are 9 to 5.", "Opening hours are 9 to 5."),
    "xss": ("Hello there", f"Hello {XSS}"),
}


def answered(key: str, answer: str, score: int, why: str) -> dict[str, Any]:
    c = case(key, score)
    c["transcript"][3]["content"] = answer
    c["verdicts"][0]["metric_scores"] = [
        {**m, "justification": f"{why} ({m['metric']})"} for m in scores(score)
    ]
    return c


def runs_data() -> tuple[dict[str, Any], dict[str, Any]]:
    base, cand = bundle(key="base"), bundle(key="cand")
    base["cases"] = [answered(k, a, 4, "polite") for k, (a, _) in ANSWERS.items()]
    cand["cases"] = [answered(k, b, 2, "hallucinated") for k, (_, b) in ANSWERS.items()]
    return base, cand


def test_the_case_diff_reads_both_answers_turns_and_reasoning(store_services: Services) -> None:
    ops = Context(actor="ops")
    b, c = (
        store_services.ledger.import_bundle(RunBundle.model_validate(d), ops).run_id
        for d in runs_data()
    )
    store_services.sync()
    diff = case_output_diff(store_services, b, c, "refund")
    assert diff.answer.change == change(*ANSWERS["refund"])
    assert [(p.op, p.text) for p in diff.answer.pieces][:3] == [
        ("equal", "Your refund of"),
        ("delete", "20"),
        ("insert", "25"),
    ]
    assert [t.diff.change for t in diff.turns][:3] == [0.0, 0.0, 0.0]
    assert diff.turns[3].diff.change == diff.answer.change
    row = diff.reasoning[0]
    assert row.item.startswith("metric:") and (row.baseline_value, row.candidate_value) == (
        "4",
        "2",
    )
    assert (row.baseline or "").startswith("polite")
    assert (row.candidate or "").startswith("hallucinated")
    rows = [store_services.reports.comparison(b, c).model.test_case_comparisons][0]
    changes = answer_changes(store_services, {"baseline": b, "candidate": c}, rows)
    assert changes == {(k, ""): change(*pair) for k, pair in ANSWERS.items()}
    with pytest.raises(NotFoundError):
        case_output_diff(store_services, b, c, "nowhere")


def test_cli_case_diff_as_text_and_json(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, sqlite_url)
    for i, data in enumerate(runs_data()):
        path = tmp_path / f"run{i}.json"
        path.write_bytes(orjson.dumps(data))
        assert cli("import", str(path))[0] == 0
    code, out, err = cli("compare", "base", "cand", "--case", "refund")
    assert code == 0, err
    assert "Your refund of [-20-] {+25+} EUR [-was sent today.-] {+will be sent.+}" in out
    assert "polite" in out and "hallucinated" in out and "|" in out
    body = cli.json("compare", "base", "cand", "--case", "refund")
    assert body["answer"]["change"] == change(*ANSWERS["refund"])
    assert body["reasoning"][0]["candidate_value"] == "2"
    code, out, err = cli("compare", "base", "cand", "--case", "nowhere", "--json")
    assert code == 2 and orjson.loads(out)["error"]["field"] == "case"


def test_the_compare_page_shows_the_word_diff_sorted_by_change_and_escaped(
    client: TestClient,
) -> None:
    base, cand = runs_data()
    b = imported(client, base["cases"], key="base")
    c = imported(client, cand["cases"], key="cand")
    page = html(client.get(f"/ui/compare?baseline={b}&candidate={c}&sort=change"))
    order = [s.split('"', 1)[0] for s in page.split('data-answers="')[1:]]
    by_change = sorted(ANSWERS, key=lambda k: (-change(*ANSWERS[k]), k))
    assert order == by_change and order[-1] == "same"  # most changed first
    assert '<del class="del">20</del> <ins class="add">25</ins>' in page
    assert XSS not in page and "&lt;script&gt;alert(" in page
    keyed = html(client.get(f"/ui/compare?baseline={b}&candidate={c}"))
    assert [s.split('"', 1)[0] for s in keyed.split('data-answers="')[1:]] == sorted(ANSWERS)
    r = client.get(f"/ui/compare?baseline={b}&candidate={c}&sort=size")
    assert r.status_code == 422 and "sort" in r.text
    case_page = html(client.get(f"/ui/compare/case?baseline={b}&candidate={c}&key=xss"))
    assert XSS not in case_page and "&lt;script&gt;" in case_page
    assert 'id="judge-reasoning"' in case_page and "hallucinated" in case_page
    assert case_page.count('data-turn="') == 4
    assert client.get(f"/ui/compare/case?baseline={b}&candidate={c}&key=none").status_code == 404
    assert client.get(f"/ui/compare/case?baseline={b}&candidate={c}").status_code == 422
