"""The catch-up equals the reference read model on random logs (issue 32), SQLite and PostgreSQL.

The catch-up folds state dicts page by page, loads the cases a page touches once, scores each
touched case once per page, keeps open runs' scores and facts for their summary and rescore
inputs, and writes `cases_v6` rows. Its reference (tests/oracles/read_model.py) folds every
case's validated events with the reference fold, scores it once at the end and summarises every
closed run from scratch. On random command sequences (the rebuild property's `Driver`: runs,
cases, verdicts, corrections, lifecycle, baselines, metrics), caught up incrementally after
random prefixes with a random page size, then rebuilt from 0 in pages of 1,000, every case row
(facts, score, decision columns, position), the opening order and every closed run's summary
must be the reference's, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.projections.tables import CASES_PROJECTION
from tests.conftest import require_postgres
from tests.helpers import bundle
from tests.oracles.read_model import (
    ReferenceReadModel,
    reference_read_model,
    stored_read_model,
)
from tests.projections.test_rebuild_property import Driver, pg_store, sqlite_store


def assert_is_the_reference(services: Services, expected: ReferenceReadModel, when: str) -> None:
    with services.engine.connect() as conn:
        stored = stored_read_model(conn)
    assert set(stored.rows) == set(expected.rows), when
    for case_id, row in expected.rows.items():
        got = stored.rows[case_id]
        diff = {k: (got[k], v) for k, v in row.items() if got[k] != v}
        assert not diff, f"{when}: case {case_id}: {diff}"
    assert stored.opening_order == expected.opening_order, when
    assert stored.summaries == expected.summaries, when


def check_catch_up_is_the_reference(services: Services, data: st.DataObject) -> None:
    driver = Driver(services, data)
    driver.play()
    expected = reference_read_model(services.ledger)
    driver.incremental.catch_up()
    assert_is_the_reference(services, expected, "incremental")
    assert services.runner.rebuild(CASES_PROJECTION) == services.ledger.position()
    assert_is_the_reference(services, expected, "rebuilt")


def run_property(store: Callable[[], Any], max_examples: int) -> None:
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.data())
    def prop(data: st.DataObject) -> None:
        with store() as services:
            check_catch_up_is_the_reference(services, data)

    prop()


def test_catch_up_is_the_reference_read_model_on_sqlite() -> None:
    run_property(sqlite_store, max_examples=15)


@pytest.mark.postgres
def test_catch_up_is_the_reference_read_model_on_postgres() -> None:
    require_postgres()
    run_property(pg_store, max_examples=5)


def test_the_comparison_tells_an_edited_row_or_summary(store_services: Services) -> None:
    """The comparison can fail: a score or a summary that is not the reference's is named."""
    s = store_services
    s.ledger.import_bundle(RunBundle.model_validate(bundle()), Context(actor="t"))
    s.runner.catch_up()
    assert_is_the_reference(s, reference_read_model(s.ledger), "as stored")
    edited = reference_read_model(s.ledger)
    case_id = edited.opening_order[-1]
    edited.rows[case_id]["score"] += " "
    with pytest.raises(AssertionError, match=case_id):
        assert_is_the_reference(s, edited, "score edited")
    edited = reference_read_model(s.ledger)
    assert edited.summaries, "the imported run is closed: it has a summary"
    for summary in edited.summaries.values():
        summary["aggregate"] += " "
    with pytest.raises(AssertionError, match="as read"):
        assert_is_the_reference(s, edited, "as read")
