"""The cases table's filters (issue 36): one rule for the run page, the API and `show`.

The example run: refund-late-delivery passed (88.5, p50 670 ms), refund-above-limit failed
(47.5, 1085 ms, instruction_compliance 0), store-hours errored (no score, no latency). One case
is flagged and one labelled; each filter is checked against what it must keep, on both stores.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from evaledger.api.bootstrap import Services
from evaledger.application import cases, runs
from evaledger.application.case_filters import CaseFilter, filter_cases
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context
from tests.helpers import bundle

CTX = Context(actor="reviewer")
PASSED, FAILED, ERRORED = "refund-late-delivery", "refund-above-limit", "store-hours"


@pytest.fixture
def run(store_services: Services) -> tuple[Services, UUID]:
    run_id = runs.import_run(store_services, RunBundle.model_validate(bundle()), CTX).run_id
    store_services.sync()
    ids = store_services.reads.first_cases(run_id, [PASSED, FAILED, ERRORED])
    by_key = {key: cid for (key, _), cid in ids.items()}
    cases.flag_case(store_services, by_key[FAILED], CTX, reason="the refund is above the limit")
    cases.label_case(store_services, by_key[PASSED], CTX, passed=True)
    store_services.sync()
    return store_services, run_id


@pytest.mark.parametrize(
    ("given", "keys"),
    [
        ({}, [PASSED, FAILED, ERRORED]),
        ({"min_score": 50}, [PASSED]),
        ({"max_score": 88.4}, [FAILED]),
        ({"min_score": 47.5, "max_score": 88.5}, [PASSED, FAILED]),
        ({"min_latency_ms": 700}, [FAILED]),
        ({"max_latency_ms": 670}, [PASSED]),
        ({"status": "errored"}, [ERRORED]),
        ({"metric": "instruction_compliance"}, [PASSED, FAILED]),
        ({"metric": "instruction_compliance", "metric_max": 1}, [FAILED]),
        ({"metric": "tool_routing", "metric_min": 5}, [PASSED]),
        ({"label": "labelled"}, [PASSED]),
        ({"label": "unlabelled"}, [FAILED, ERRORED]),
        ({"flag": "flagged"}, [FAILED]),
        ({"flag": "unflagged", "status": "passed"}, [PASSED]),
    ],
)
def test_each_filter_keeps_what_it_says(
    run: tuple[Services, UUID], given: dict[str, Any], keys: list[str]
) -> None:
    services, run_id = run
    page = filter_cases(services, run_id, CaseFilter(**given))
    assert [s.test_case_key for s in page.rows] == keys
    assert page.total == len(keys)


def test_a_page_of_the_matching_cases(run: tuple[Services, UUID]) -> None:
    services, run_id = run
    page = filter_cases(services, run_id, CaseFilter(max_score=100), limit=1, offset=1)
    assert [s.test_case_key for s in page.rows] == [FAILED] and page.total == 2


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"min_score": 60, "max_score": 50}, "min_score"),
        ({"min_latency_ms": 2, "max_latency_ms": 1}, "min_latency_ms"),
        ({"metric_min": 1}, "metric"),
        ({"status": "great"}, "status"),
        ({"label": "maybe"}, "label"),
        ({"flag": "red"}, "flag"),
    ],
)
def test_contradictory_or_unknown_filters_name_the_field(given: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as e:
        CaseFilter(**given)
    assert e.value.field == field
