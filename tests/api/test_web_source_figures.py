"""Issue 30: the web run page shows a source's metric figures as `show` does, over real HTTP.

Rounded half up as written (`figure_text`: 0.60625 → 0.6063, where `f"{v:.4f}"` gives 0.6062),
and a random metric (`bootstrap_stderr`) shown as the source's value, "not recomputed: random".
"""

from __future__ import annotations

import re
import urllib.request
from datetime import UTC, datetime
from html import unescape
from pathlib import Path

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import BundleCase, BundleNamedScores, BundleRun, RunBundle
from evaledger.domain.events import AgentSnapshot, SuiteRef, TestCaseSnapshot, Turn
from evaledger.domain.ledger import Context
from evaledger.domain.spec import RunConfig, ScorerInfo
from evaledger.importers.base import named_scores
from tests.reliability.test_tenancy import serving

FIGURE = 0.60625
"""Recomputed and reported alike; binary rounding prints it 0.6062."""


def stored_run(db: str) -> str:
    scorer = ScorerInfo(
        name="m",
        score="m",
        semantics="inspect",
        metrics=("accuracy", "bootstrap_stderr"),
        reported={"accuracy": FIGURE, "bootstrap_stderr": 0.123456},
    )
    bundle = RunBundle(
        format="evaledger.run-bundle/1",
        run=BundleRun(
            key="figures",
            suite=SuiteRef(name="s"),
            agent=AgentSnapshot(name="a"),
            config=RunConfig(scorers=(scorer,)),
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
        ),
        cases=[
            BundleCase(
                test_case=TestCaseSnapshot(key="q1"),
                transcript=[Turn(role="assistant", content="x")],
                named_scores=[BundleNamedScores(scorer="m", scores=named_scores("m", FIGURE))],
            )
        ],
    )
    services = build_services(Settings(db=db))
    try:
        return str(services.ledger.import_bundle(bundle, Context(actor="test")).run_id)
    finally:
        services.close()


def row_cells(page: str, metric: str) -> list[str]:
    """The text of each cell of the source-metrics row of `metric`."""
    row = re.search(rf'<tr data-metric="{re.escape(metric)}">(.*?)</tr>', page, re.S)
    assert row is not None, metric
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    return [unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells]


def test_source_figures_round_as_written_and_random_ones_say_so(
    store_url: str, tmp_path: Path
) -> None:
    run_id = stored_run(store_url)
    with (
        serving(store_url, "127.0.0.1", tmp_path / "serve.log") as base,
        urllib.request.urlopen(f"{base}/ui/runs/{run_id}", timeout=30) as response,
    ):
        assert response.status == 200
        page = response.read().decode()
    headline = re.search(r'data-field="headline">([^<]*)<', page)
    assert headline is not None and headline.group(1) == "0.6063"
    assert row_cells(page, "m/accuracy") == ["m/accuracy", "0.6063", "0.6063"]
    assert row_cells(page, "m/bootstrap_stderr") == [
        "m/bootstrap_stderr",
        "—",
        "0.1235 (not recomputed: random)",
    ]
