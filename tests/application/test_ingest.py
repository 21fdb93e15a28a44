"""The ingest use case called directly (application/ingest.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from evaledger.api.bootstrap import Services
from evaledger.application.ingest import MAX_INGEST_CASES, ingest_cases
from evaledger.domain.bundle import BundleCase, BundleRun
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context
from tests.helpers import bundle, case, event_count

CTX = Context(actor="test")


def header(**fields: object) -> BundleRun:
    run = {**bundle()["run"], "key": "ingested", "status": "running", **fields}
    run.pop("completed_at", None)
    return BundleRun.model_validate(run)


def cases(*keys: str) -> list[BundleCase]:
    return [BundleCase.model_validate(case(k)) for k in keys]


def test_one_transaction_per_batch_and_the_same_ids(store_services: Services) -> None:
    s = store_services
    first = ingest_cases(s, header(), cases("a", "b"), CTX)
    head = s.ledger.position()
    assert first.position == head and first.new_cases == 2
    # Every event of the batch sits in one commit of the chain (one transaction).
    blocks = s.ledger.chain_blocks(0, 100)
    assert [(b.first_position, b.last_position) for b in blocks] == [(1, head)]
    again = ingest_cases(s, header(), cases("a", "b"), CTX)
    assert (again.events, again.case_ids, again.run_id) == (0, first.case_ids, first.run_id)
    s.sync()
    run = s.reads.get_run(first.run_id)
    assert run.status == "running"


def test_too_many_cases_store_nothing(store_services: Services) -> None:
    many = cases("x") * (MAX_INGEST_CASES + 1)
    with pytest.raises(ValidationError) as e:
        ingest_cases(store_services, header(), many, CTX)
    assert e.value.field == "cases"
    assert event_count(store_services) == 0
