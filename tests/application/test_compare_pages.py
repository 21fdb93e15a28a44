"""Compare's paired statistics are computed once per pair of runs, not once per request or page.

The bootstrap is counted (calls of `stats.paired_bootstrap_ci`), never timed: two requests for
different pages of the same pair, another serving process (a second `Reports` over the same
store) and the web report's comparison (per-case metric deltas, other thresholds) all read the
statistics the first request computed.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import orjson
import pytest

from evaledger.api.bootstrap import Services
from evaledger.application import compare
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.projections.reports import Reports
from evaledger.scoring import stats
from evaledger.scoring.comparison import CompareThresholds
from tests.helpers import bundle, case

ADMIN = Context(actor="tester")


def _import(services: Services, key: str, scores: list[int]) -> UUID:
    data = bundle(key=key)
    data["cases"] = [case(f"t{i:02d}", s) for i, s in enumerate(scores)]
    return services.ledger.import_bundle(RunBundle.model_validate(data), ADMIN).run_id


@pytest.fixture
def bootstraps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every call of the paired bootstrap, by the number of deltas it resampled."""
    calls: list[int] = []
    real = stats.paired_bootstrap_ci

    def counted(deltas: Any, **kwargs: Any) -> stats.BootstrapCI:
        calls.append(len(deltas))
        return real(deltas, **kwargs)

    monkeypatch.setattr(stats, "paired_bootstrap_ci", counted)
    return calls


def test_the_bootstrap_runs_once_per_pair_of_runs(
    store_services: Services, bootstraps: list[int]
) -> None:
    services = store_services
    b = _import(services, "base", [4, 3, 4, 2, 5, 4, 3, 4, 1, 4, 5, 3])
    c = _import(services, "cand", [4, 4, 2, 2, 5, 1, 3, 4, 2, 4, 3, 3])
    services.sync()
    first = orjson.loads(compare.compare_runs_json(services, b, c, case_offset=0, case_limit=5))
    second = orjson.loads(compare.compare_runs_json(services, b, c, case_offset=5, case_limit=5))
    assert bootstraps == [12]
    assert [t["test_case_key"] for t in second["test_case_comparisons"]] == [
        f"t{i:02d}" for i in range(5, 10)
    ]
    assert first["statistics"] == second["statistics"]
    assert first["statistics"]["score_delta_ci95"]["sufficient_data"] is True
    # Another serving process: its own in-process caches, the same store.
    other = Reports(services.reads)
    third = orjson.loads(other.compare_json(b, c, case_offset=10, case_limit=5))
    assert third["statistics"] == first["statistics"] and bootstraps == [12]
    # The web report's comparison (per-case metric deltas) and other thresholds: the same pair.
    web = compare.compare_runs(services, b, c, CompareThresholds(case_score_delta=50.0))
    assert web.statistics.model_dump(mode="json") == first["statistics"]
    assert bootstraps == [12]
    # Another pair (the runs swapped) is computed once, too.
    compare.compare_runs_json(services, c, b, case_limit=5)
    compare.compare_runs_json(services, c, b, case_offset=5, case_limit=5)
    assert bootstraps == [12, 12]
