"""A case that was not an execution (issue 30): a skipped or xfailed test, recorded as a fact.

A bundle case `status: skipped` (with pytest's report in `skipped`) records ExecutionSkipped;
the case reads `skipped`, and the run counts it in `skipped_count`, out of `total_executions`
and the pass rate's denominator, in the live summary, a rescore and a rebuild alike; the export
gives it back. A run without one keeps every figure's meaning (a canceled case stays in the
denominator). On SQLite and PostgreSQL; the web shows the status, over a real app.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import ExecutionSkipped
from evaledger.domain.export import export_bundle
from evaledger.domain.ledger import Context
from evaledger.projections.drift import check_views
from tests.helpers import bundle, case, event_count

OPS = Context(actor="ops")


def _seed_like() -> dict[str, Any]:
    """3 passed, 1 failed, 1 errored, 1 skipped, 1 xfailed (pytest's words)."""
    data = bundle(key="pytest-like")
    errored = case("errors", 4, status="errored")
    errored["error"] = {"message": "setup exploded", "kind": "RuntimeError"}
    del errored["verdicts"]
    skipped = {"test_case": {"key": "skipped"}, "status": "skipped"}
    skipped["skipped"] = {"outcome": "skipped", "reason": "no network here"}
    xfailed = {"test_case": {"key": "xfailed"}, "skipped": {"outcome": "xfailed"}}
    data["cases"] = [case("p1"), case("p2"), case("p3"), case("fails", 1), errored]
    data["cases"] += [skipped, xfailed]
    return data


def test_a_skipped_case_is_out_of_the_executions_everywhere(store_services: Services) -> None:
    services = store_services
    result = services.ledger.import_bundle(RunBundle.model_validate(_seed_like()), OPS)
    services.sync()
    agg = services.reads.summary(result.run_id).aggregate
    assert (agg.passed_count, agg.total_executions, agg.pass_rate) == (3, 5, 3 / 5)
    assert (agg.failed_count, agg.error_count, agg.canceled_count) == (1, 1, 0)
    assert (agg.skipped_count, agg.unique_test_case_count) == (2, 7)
    ids = services.reads.first_cases(result.run_id, ["skipped", "xfailed"])
    for key, outcome in (("skipped", "skipped"), ("xfailed", "xfailed")):
        facts, score = services.reads.case_score(ids[(key, "")])
        assert (facts.skipped, score.status.value, score.passed) == (outcome, "skipped", None)
        events = [
            e for e in services.ledger.events_of(ids[(key, "")]) if isinstance(e, ExecutionSkipped)
        ]
        assert [e.outcome for e in events] == [outcome]
    # A rescore under the run's own spec counts them the same way (the columnar path).
    rescored = services.reads.rescore(result.run_id, services.reads.run_spec(result.run_id))
    after = rescored["after"]["aggregate"]
    assert (after["total_executions"], after["skipped_count"], after["pass_rate"]) == (5, 2, 0.6)
    # Rebuilt from the log, the read models equal the live ones.
    report = check_views(services.ledger, services.engine)
    assert report.ok, report.as_json()
    # The export gives the skip back, and importing it again writes nothing.
    exported = export_bundle(services.ledger, result.run_id)
    skips = {c.test_case.key: c.skipped for c in exported.cases if c.skipped is not None}
    assert {k: (s.outcome, s.reason) for k, s in skips.items()} == {
        "skipped": ("skipped", "no network here"),
        "xfailed": ("xfailed", None),
    }
    n = event_count(services)
    services.ledger.import_bundle(exported, OPS)
    assert event_count(services) == n


def test_a_run_without_skips_keeps_its_figures(store_services: Services) -> None:
    """The seed's meaning stays: a canceled case is an execution, in the denominator."""
    data = bundle(key="no-skips")
    data["cases"] = [case("p1"), case("fails", 1), case("gone", status="canceled")]
    del data["cases"][2]["verdicts"]
    result = store_services.ledger.import_bundle(RunBundle.model_validate(data), OPS)
    store_services.sync()
    agg = store_services.reads.summary(result.run_id).aggregate
    assert (agg.total_executions, agg.canceled_count, agg.skipped_count) == (3, 1, 0)
    assert agg.pass_rate == 1 / 3


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"status": "completed", "skipped": {"outcome": "skipped"}}, "skipped"),
        ({"skipped": {"outcome": "deselected"}}, "outcome"),
        ({"status": "skipped", "error": {"message": "x"}}, "error"),
    ],
    ids=["completed-but-skipped", "unknown-outcome", "skipped-with-an-error"],
)
def test_a_bad_skip_names_the_field_and_stores_nothing(
    services: Services, changes: dict[str, Any], field: str
) -> None:
    data = bundle(key="bad-skip")
    data["cases"] = [{"test_case": {"key": "t"}, **changes}]
    n = event_count(services)
    with TestClient(create_app(services=services), base_url="http://127.0.0.1") as client:
        r = client.post("/bundles", json=data)
    assert r.status_code == 422, r.text
    assert field in r.text
    assert event_count(services) == n
    with pytest.raises((ValidationError, ValueError)):
        RunBundle.model_validate(data)


def test_the_web_shows_a_skipped_case_apart(services: Services) -> None:
    result = services.ledger.import_bundle(RunBundle.model_validate(_seed_like()), OPS)
    with TestClient(create_app(services=services), base_url="http://127.0.0.1") as client:
        page = client.get(f"/ui/runs/{result.run_id}").text
        case_id = next(iter(services.reads.first_cases(result.run_id, ["xfailed"]).values()))
        row = page.split(f'data-case-id="{case_id}"', 1)[1].split("</tr>", 1)[0]
        assert 'data-status="skipped"' in page and "pill s-skipped" in row
        assert "not an execution: xfailed" in row
        # Both pass-rate cards say the run's skipped cases apart from its 3 of 5.
        rule = page.split('data-field="pass_rule">', 1)[1].split("</span></div>", 1)[0]
        assert rule.startswith("3 of 5 cases") and '"skipped_count">2</span> skipped' in rule
        card = page.split('data-field="pass_rate">', 1)[1].split("</div>", 1)[0]
        assert "1 errored · 2 skipped" in card
        detail = client.get(f"/ui/cases/{case_id}").text
        assert "not an execution: xfailed" in detail
    assert isinstance(case_id, UUID)
