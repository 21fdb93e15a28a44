"""A run's review queue (what needs a person, and why), walking it from case to case, deciding
from it, and the run page's unknown cost; the queue's rules as pure functions too.
"""

from __future__ import annotations

import copy
import re
from typing import Any
from uuid import uuid4

from fastapi.testclient import TestClient

from evaledger.api.web import views
from evaledger.scoring.facts import MetricFact, VerdictFact
from tests.api.test_web import case_ids, field, html, imported
from tests.api.test_web import client as client  # the fixture
from tests.api.test_web_signin import ORIGIN, csrf_of
from tests.helpers import case, scores


def two_judges(key: str, first: int, second: int) -> dict[str, Any]:
    c = case(key, first)
    other = copy.deepcopy(c["verdicts"][0])
    other.update(judge={"provider": "openai", "model": "gpt"}, metric_scores=scores(second))
    c["verdicts"].append(other)
    return c


def queue_rows(page: str) -> list[tuple[str, str, str]]:
    body = page.split('id="queue"', 1)[1].split("</tbody>", 1)[0]
    return re.findall(
        r'<tr data-case-id="([^"]+)".*?data-field="reasons">([^<]*)<.*?data-field="reviewed">'
        r"([^<]*)<",
        body,
        re.S,
    )


def test_the_queue_lists_what_needs_a_person_and_why(client: TestClient) -> None:
    judge_error = case("judged-badly", 4)
    judge_error["verdicts"][0].update(metric_scores=[], raw_output="?", error="no JSON")
    run_id = imported(
        client,
        [
            case("fine", 5),
            two_judges("split", 1, 5),
            two_judges("close", 4, 5),
            judge_error,
            case("task-10", 5, repetition=0),
            case("task-10", 1, repetition=1),
        ],
    )
    ids = case_ids(client, run_id)
    page = html(client.get(f"/ui/runs/{run_id}/queue"))
    assert queue_rows(page) == [
        (ids["judged-badly#0"], "judge error", "to do"),
        (ids["split#0"], "judges disagree", "to do"),
        (ids["task-10#0"], "flaky repetitions", "to do"),
        (ids["task-10#1"], "flaky repetitions", "to do"),
    ]
    assert field(page, "queue_open") == "4"
    run_page = html(client.get(f"/ui/runs/{run_id}"))
    assert f'href="/ui/runs/{run_id}/queue">Review queue</a>' in run_page


def test_walking_the_queue_and_deciding_from_it(client: TestClient) -> None:
    run_id = imported(client, [two_judges("a-split", 0, 5), two_judges("b-split", 5, 1)])
    ids = case_ids(client, run_id)
    first, second = ids["a-split#0"], ids["b-split#0"]
    page = html(client.get(f"/ui/cases/{first}?queue={run_id}"))
    assert "Review queue: case 1 of 2" in page
    assert f'<a data-key="j" href="/ui/cases/{second}?queue={run_id}">' in page
    assert 'data-key="k"' not in page
    assert f'<a data-key="u" href="/ui/runs/{run_id}/queue">' in page
    verdict = re.findall(r'name="verdict_id"><option value="([^"]+)"', page)[0]
    form = {
        "csrf_token": csrf_of(page),
        "verdict_id": verdict,
        "reason": "the first judge ignored the transcript",
        "queue": run_id,
    }
    r = client.post(
        f"/ui/cases/{first}/invalidate", data=form, headers=ORIGIN, follow_redirects=False
    )
    assert r.headers["location"] == f"/ui/cases/{first}?queue={run_id}#corr-h"
    after = html(client.get(f"/ui/runs/{run_id}/queue"))
    # Reviewed cases go to the end of the queue; one judge left, so no disagreement remains.
    assert queue_rows(after) == [(second, "judges disagree", "to do")]
    assert field(after, "queue_open") == "1"


def test_an_override_of_a_metric_score_keeps_the_other_scores(client: TestClient) -> None:
    run_id = imported(client, [case("a", 2)])
    case_id = case_ids(client, run_id)["a#0"]
    page = html(client.get(f"/ui/cases/{case_id}"))
    metric = re.findall(
        r'<select id="o-metric" name="metric"><option value="">[^<]*</option>'
        r'<option value="([^"]+)"',
        page,
    )[0]
    form = {
        "csrf_token": csrf_of(page),
        "verdict_id": re.findall(r'name="verdict_id"><option value="([^"]+)"', page)[0],
        "metric": metric,
        "score": "5",
        "reason": "the answer was complete",
    }
    bad = html(
        client.post(f"/ui/cases/{case_id}/override", data={**form, "score": "9"}, headers=ORIGIN),
        422,
    )
    assert "score: 0-5, got 9" in bad
    html(client.post(f"/ui/cases/{case_id}/override", data=form, headers=ORIGIN))
    events = client.get(f"/cases/{case_id}/history").json()["events"]
    overridden = events[-1]["payload"]["metric_scores"]
    assert len(overridden) == 8
    assert {m["metric"]: m["score"] for m in overridden}[metric] == 5
    assert sorted(m["score"] for m in overridden) == [2] * 7 + [5]


def test_an_unknown_cost_is_a_dash_not_zero_on_the_run_page_and_the_runs_list(
    client: TestClient,
) -> None:
    run_id = imported(client, [case("a", 4)])
    assert field(html(client.get(f"/ui/runs/{run_id}")), "total_cost_usd") == "—"
    costed = case("b", 4)
    costed["cost_usd"] = 0.25
    other = imported(client, [costed], key="costed")
    assert field(html(client.get(f"/ui/runs/{other}")), "total_cost_usd") == "$0.2500"
    free = case("c", 4)
    free["cost_usd"] = 0.0  # a reported zero is a cost: $0, not unknown
    zero = imported(client, [free], key="free")
    listed = html(client.get("/ui/"))
    costs = dict(
        re.findall(
            r'<tr data-run-id="([^"]+)">.*?data-field="total_cost_usd">([^<]*)<', listed, re.S
        )
    )
    assert costs == {run_id: "—", other: "$0.2500", zero: "$0.0000"}


def verdict(*values: tuple[str, int | None, bool | None], invalidated: bool = False) -> VerdictFact:
    return VerdictFact(
        verdict_id=uuid4(),
        position=0,
        metric_scores=[MetricFact(metric=m, score=s, passed=p) for m, s, p in values],
        invalidated=invalidated,
    )


def test_judges_disagree_on_a_two_point_gap_or_a_binary_split() -> None:
    assert views.judges_disagree([verdict(("m", 3, None)), verdict(("m", 5, None))])
    assert not views.judges_disagree([verdict(("m", 4, None)), verdict(("m", 5, None))])
    assert views.judges_disagree([verdict(("b", None, True)), verdict(("b", None, False))])
    assert not views.judges_disagree([verdict(("m", 0, None))])
    assert not views.judges_disagree(
        [verdict(("m", 0, None), invalidated=True), verdict(("m", 5, None))]
    )


def answered(key: str, score: int, answer: str) -> dict[str, Any]:
    c = case(key, score)
    c["transcript"][-1]["content"] = answer
    return c


def test_compare_pages_filters_and_shows_answers_side_by_side(client: TestClient) -> None:
    keys = [f"task-{i}" for i in range(130)]
    base = imported(client, [answered(k, 4, f"old answer to {k}") for k in keys], key="base")
    cand_cases = [answered(k, 4, f"new answer to {k}") for k in keys]
    cand_cases[7] = answered("task-7", 1, "I cannot help with <that>")
    cand = imported(client, cand_cases, key="cand")
    r = client.get("/ui/compare?baseline=base&candidate=cand&page=2")
    page = html(r)
    assert len(r.content) < 300_000
    assert field(page, "case_page").startswith("Test cases 51–100 of 130 · page 2 of 3")
    shown = re.findall(r'<tr class="answers" data-answers="([^"]+)"', page)
    assert len(shown) == 50
    assert 'rel="prev"' in page and 'rel="next"' in page
    # Filtered server-side, by class and by key; both runs' final answers, escaped.
    only = html(client.get(f"/ui/compare?baseline={base}&candidate={cand}&show=regression"))
    assert re.findall(r'data-answers="([^"]+)"', only) == ["task-7"]
    assert field(only, "baseline_answer") == "old answer to task-7"
    assert field(only, "candidate_answer") == "I cannot help with &lt;that&gt;"
    assert field(only, "case_page").startswith("Test cases 1–1 of 1 · page 1 of 1")
    by_key = html(client.get(f"/ui/compare?baseline={base}&candidate={cand}&q=TASK-12"))
    assert re.findall(r'data-answers="([^"]+)"', by_key) == [
        "task-12",
        *[f"task-12{i}" for i in range(10)],
    ]
    past_the_end = html(client.get(f"/ui/compare?baseline={base}&candidate={cand}&page=99"))
    assert "page 3 of 3" in field(past_the_end, "case_page")


def test_a_run_as_a_matrix_of_test_case_and_variant(client: TestClient) -> None:
    cells = []
    for config in ("gpt-4o", "claude"):
        for key, score in (("task-10", 4), ("task-2", 1)):
            c = answered(key, score, f"{config} says {key}")
            c["test_case"]["configuration"] = config
            cells.append(c)
    run_id = imported(client, cells)
    page = html(client.get(f"/ui/runs/{run_id}/matrix"))
    assert field(page, "matrix_page") == "2 test cases × 2 variants · page 1 of 1"
    assert re.findall(r'<tr data-key="([^"]+)"', page) == ["task-2", "task-10"]
    heads = page.split('id="matrix"', 1)[1].split("</thead>", 1)[0]
    assert re.findall(r'<th scope="col">([^<]+)</th>', heads) == ["Test case", "claude", "gpt-4o"]
    answers = re.findall(r'data-field="answer">([^<]*)<', page)
    assert answers == [
        "claude says task-2",
        "gpt-4o says task-2",
        "claude says task-10",
        "gpt-4o says task-10",
    ]
    assert page.count('class="pill s-failed"') == 2
