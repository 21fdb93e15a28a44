"""Agreement you can read (issue 22): the bootstrap intervals held against a reference computed
another way, and the web page showing κ and α with their intervals, n and the warnings."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.scoring.agreement import (
    bootstrap_counts,
    cohen_kappa,
    krippendorff_alpha_ordinal,
    measure_agreement,
)
from tests.helpers import bundle, case
from tests.scoring.test_agreement import verdict


def _ratings(n: int, seed: int = 7) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    out: dict[str, dict[str, float]] = {}
    for i in range(n):
        a = float(rng.randint(0, 5))
        b = a if rng.random() < 0.6 else float(rng.randint(0, 5))
        out[f"u{i}"] = {"a": a, "b": b}
    return out


def _pct_interval(values: list[float]) -> tuple[float, float]:
    """2.5th / 97.5th percentiles by the standard library (type 7, 'inclusive'), 4 dp."""
    cuts = statistics.quantiles(values, n=40, method="inclusive")
    return round(cuts[0], 4), round(cuts[-1], 4)


def test_the_intervals_equal_a_plain_python_bootstrap_over_the_same_draws() -> None:
    ratings = _ratings(20)
    m = measure_agreement("m", ratings)
    units = list(ratings.values())
    kappas: list[float] = []
    alphas: list[float] = []
    # The same draws (the resample counts are the shared input); every coefficient from its
    # scalar definition on the expanded sample and the percentile from the standard library.
    for row in bootstrap_counts(len(units)):
        drawn = [u for u, times in zip(units, row, strict=True) for _ in range(times)]
        kappa = cohen_kappa([(u["a"], u["b"]) for u in drawn])
        alpha = krippendorff_alpha_ordinal({str(i): u for i, u in enumerate(drawn)})
        kappas += [] if kappa is None else [kappa]
        alphas += [] if alpha is None else [alpha]
    assert m.kappa_interval is not None and m.alpha_interval is not None
    assert (m.kappa_interval.low, m.kappa_interval.high) == pytest.approx(
        _pct_interval(kappas), abs=1e-4
    )
    assert (m.alpha_interval.low, m.alpha_interval.high) == pytest.approx(
        _pct_interval(alphas), abs=1e-4
    )
    assert (m.kappa_interval.resamples, m.alpha_interval.resamples) == (len(kappas), len(alphas))


def test_the_intervals_agree_with_an_independent_bootstrap_of_other_draws() -> None:
    ratings = _ratings(300, seed=3)
    m = measure_agreement("m", ratings)
    pairs = [(u["a"], u["b"]) for u in ratings.values()]
    rng = random.Random(2026)
    kappas = []
    for _ in range(400):
        drawn = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        kappa = cohen_kappa(drawn)
        assert kappa is not None
        kappas.append(kappa)
    low, high = _pct_interval(kappas)
    assert m.kappa_interval is not None
    # Different draws: the endpoints agree to Monte Carlo error, far inside the interval's width.
    width = m.kappa_interval.high - m.kappa_interval.low
    assert abs(m.kappa_interval.low - low) < width / 6
    assert abs(m.kappa_interval.high - high) < width / 6


def _judged_run(services: Services, key: str, items: int) -> str:
    """`items` cases, each judged by two vendors, scores agreeing on about two in three."""
    rng = random.Random(items)
    data: dict[str, Any] = bundle(key=key)
    data["run"]["agent"]["provider"] = "google"
    data["cases"] = []
    for i in range(items):
        a = rng.randint(0, 5)
        b = a if rng.random() < 0.65 else rng.randint(0, 5)
        c = case(f"c{i}")
        c["verdicts"] = [verdict("openai", "gpt-4.1", a), verdict("anthropic", "claude-x", b)]
        data["cases"].append(c)
    run = services.ledger.import_bundle(RunBundle.model_validate(data), Context(actor="t"))
    return str(run.run_id)


def _cell(page: str, measure: str, field: str) -> str:
    row = page.split(f'data-measure="{measure}"', 1)[1].split("</tr>", 1)[0]
    return row.split(f'data-field="{field}">', 1)[1].split("<", 1)[0]


def test_the_web_page_shows_intervals_n_and_the_warnings(store_services: Services) -> None:
    services = store_services
    few, two = _judged_run(services, "few", 12), _judged_run(services, "two", 2)
    with TestClient(create_app(services=services)) as client:
        api = client.get(f"/runs/{few}/agreement").json()
        page = client.get(f"/ui/runs/{few}/agreement")
        assert page.status_code == 200, page.text
        tool = next(m for m in api["metrics"] if m["measure"] == "tool_routing")
        assert tool["reliability"] == "few_items" and tool["items"] == 12
        a, k = tool["alpha_interval"], tool["kappa_interval"]
        assert _cell(page.text, "tool_routing", "n") == "12"
        assert _cell(page.text, "tool_routing", "alpha") == (
            f"{tool['krippendorff_alpha']:.3f} [{a['low']:.3f}, {a['high']:.3f}] (few items)"
        )
        assert _cell(page.text, "tool_routing", "kappa") == (
            f"{tool['cohen_kappa']:.3f} [{k['low']:.3f}, {k['high']:.3f}] (few items)"
        )
        assert "warning: fewer than 30 items, read the 95% interval: tool_routing" in page.text
        assert f'href="/ui/runs/{few}/agreement"' in client.get(f"/ui/runs/{few}").text
        text = client.get(f"/ui/runs/{two}/agreement").text
        assert _cell(text, "case_passed", "alpha") == "insufficient data"
        assert _cell(text, "case_passed", "kappa") == "insufficient data"
        assert _cell(text, "case_passed", "n") == "2"
        assert "insufficient data (fewer than 10 items rated by two judges)" in text
        assert client.get("/ui/runs/no-such-run/agreement").status_code == 404
