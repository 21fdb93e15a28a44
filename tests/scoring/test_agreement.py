"""Agreement figures: Cohen's κ and Krippendorff's α (ordinal) on hand-computed examples, and the
agreement report of a run read from the `judge_votes_v1` projection (SQLite and PostgreSQL)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from evaledger.api.agreement import agreement_of
from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.scoring.agreement import (
    cohen_kappa,
    krippendorff_alpha_ordinal,
    measure_agreement,
    percent_agreement,
)
from tests.helpers import bundle, case, scores


def test_kappa_of_a_three_item_example() -> None:
    # A = 1,1,2; B = 1,2,2: p_o = 2/3; p_e = (2/3)(1/3) + (1/3)(2/3) = 4/9; κ = (2/9)/(5/9) = 2/5.
    assert cohen_kappa([(1, 1), (1, 2), (2, 2)]) == pytest.approx(0.4, abs=1e-15)


def test_kappa_edge_cases() -> None:
    assert cohen_kappa([]) is None
    # Both raters always say the same single value: chance agreement is total, κ is 0/0.
    assert cohen_kappa([(3, 3), (3, 3)]) is None
    # Perfect agreement over two values; systematic disagreement.
    assert cohen_kappa([(0, 0), (1, 1)]) == 1.0
    assert cohen_kappa([(0, 1), (1, 0)]) == -1.0
    assert percent_agreement([(0, 1), (1, 1)]) == 0.5


def test_alpha_of_a_three_unit_example() -> None:
    # Coincidences: o11 = 2, o12 = o21 = 1, o22 = 2; n1 = n2 = 3, n = 6.
    # Ordinal δ²12 = (n1 + n2 − (n1 + n2)/2)² = 9.
    # α = 1 − (n − 1) Σ o δ² / Σ n_c n_k δ² = 1 − 5 · 18 / 162 = 4/9.
    alpha = krippendorff_alpha_ordinal(
        {"u1": {"a": 1, "b": 1}, "u2": {"a": 1, "b": 2}, "u3": {"a": 2, "b": 2}}
    )
    assert alpha == pytest.approx(float(Fraction(4, 9)), abs=1e-15)


def test_alpha_reproduces_krippendorffs_published_example_with_missing_values() -> None:
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", 4 observers x 12 units
    # with missing values: ordinal α = 0.815 (nominal 0.743, interval 0.849).
    rows: dict[str, list[int | None]] = {
        "A": [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        "C": [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    }
    units = {
        f"u{i}": {r: float(x) for r, v in rows.items() if (x := v[i]) is not None}
        for i in range(12)
    }
    assert round(krippendorff_alpha_ordinal(units) or 0, 3) == 0.815
    # Unit 12 has a single value: it is not pairable and changes nothing.
    del units["u11"]
    assert round(krippendorff_alpha_ordinal(units) or 0, 3) == 0.815


def test_alpha_edge_cases() -> None:
    assert krippendorff_alpha_ordinal({}) is None
    assert krippendorff_alpha_ordinal({"u": {"a": 3}}) is None  # nothing pairable
    assert krippendorff_alpha_ordinal({"u": {"a": 3, "b": 3}, "v": {"a": 3, "b": 3}}) is None
    assert krippendorff_alpha_ordinal({"u": {"a": 1, "b": 1}, "v": {"a": 4, "b": 4}}) == 1.0


def test_measure_agreement_gives_kappa_only_for_two_judges() -> None:
    # Two items: no figure (insufficient data), not even the pair's κ (0.0 here); the pair keeps
    # its item count and percent agreement.
    two = measure_agreement("m", {"u": {"a": 1, "b": 1}, "v": {"a": 2, "b": 1}})
    assert (two.items, two.cohen_kappa, two.krippendorff_alpha) == (2, None, None)
    assert cohen_kappa([(1, 1), (2, 1)]) == 0.0
    assert (two.pairs[0].items, two.pairs[0].cohen_kappa, two.pairs[0].percent_agreement) == (
        2,
        None,
        0.5,
    )
    # Ten items: the headline κ is the pair's κ (9 of 10 agree, categories 1 and 2 only).
    ten = measure_agreement(
        "m", {f"u{i}": {"a": 1 + (i % 2), "b": 1 + (i % 2) if i else 2} for i in range(10)}
    )
    both = [(1 + (i % 2), 1 + (i % 2) if i else 2) for i in range(10)]
    assert ten.items == 10 and ten.cohen_kappa == cohen_kappa(both) == ten.pairs[0].cohen_kappa
    assert ten.cohen_kappa is not None and ten.krippendorff_alpha is not None
    three = measure_agreement("m", {"u": {"a": 1, "b": 1, "c": 1}, "v": {"a": 2, "c": 2}})
    assert three.cohen_kappa is None and [p.raters for p in three.pairs] == [
        ("a", "b"),
        ("a", "c"),
        ("b", "c"),
    ]
    assert [p.items for p in three.pairs] == [1, 2, 1]


# ---------------------------------------------------------------------------------------------
# The run's agreement report (read model)


def verdict(provider: str, model: str, score: int) -> dict[str, Any]:
    return {
        "judge": {"provider": provider, "model": model},
        "metric_scores": scores(score),
        "prompt": "p",
        "raw_output": "{}",
    }


def two_judge_bundle() -> dict[str, Any]:
    """4 cases judged by A (openai) and B (anthropic); A's verdict on c2 overridden by a human."""
    data = bundle(key="agreement-run")
    data["run"]["agent"]["provider"] = "google"
    a_scores, b_scores = [4, 4, 2, 5], [4, 3, 2, 5]
    data["cases"] = []
    for i, (a, b) in enumerate(zip(a_scores, b_scores, strict=True), start=1):
        c = case(f"c{i}")
        c["verdicts"] = [
            verdict("openai", "gpt-4.1", a),
            verdict("anthropic", "claude-sonnet-4-6", b),
        ]
        data["cases"].append(c)
    data["cases"][1]["overrides"] = [
        {
            "verdict_index": 0,
            "metric_scores": scores(3),
            "passed": False,
            "reason": "tool routing was worse than the judge saw",
            "actor": "reviewer@example.com",
        }
    ]
    # A third judge's verdict that a human invalidated does not count.
    data["cases"][0]["verdicts"].append(verdict("replay", "demo.json", 0))
    data["cases"][0]["overrides"] = [{"kind": "invalidate", "verdict_index": 2, "reason": "test"}]
    return data


def test_the_run_report_has_exact_kappa_alpha_and_judge_vs_human(store_services: Services) -> None:
    services = store_services
    run_id = services.ledger.import_bundle(
        RunBundle.model_validate(two_judge_bundle()), Context(actor="t")
    ).run_id
    report = agreement_of(services, run_id)
    assert report.judges == ["anthropic:claude-sonnet-4-6", "openai:gpt-4.1"]
    assert len(report.metrics) == 8
    tool = report.metrics[0]
    # A = 4,4,2,5; B = 4,3,2,5. κ: p_o = 3/4, p_e = (2·1 + 1·1 + 1·1)/16 = 1/4 → 2/3.
    # α (ordinal): n2 = 2, n3 = 1, n4 = 3, n5 = 2; Σoδ² = 2·4 = 8; Σ n_c n_k δ² = 624;
    # α = 1 − 7 · 8 / 624 = 71/78.
    assert (tool.measure, tool.items) == ("tool_routing", 4)
    # Four items are too few for a figure (issue 22: under 10, insufficient data), the pair
    # row's κ included; the coefficients of the same ratings are the ones computed above.
    assert (tool.reliability.value, tool.cohen_kappa, tool.krippendorff_alpha) == (
        "insufficient_data",
        None,
        None,
    )
    assert (tool.pairs[0].items, tool.pairs[0].cohen_kappa) == (4, None)
    assert cohen_kappa([(4, 4), (4, 3), (2, 2), (5, 5)]) == pytest.approx(2 / 3, abs=1e-12)
    ratings = {
        f"c{i}": {"A": a, "B": b} for i, (a, b) in enumerate([(4, 4), (4, 3), (2, 2), (5, 5)])
    }
    assert krippendorff_alpha_ordinal(ratings) == pytest.approx(71 / 78, abs=1e-12)
    assert tool.pairs[0].percent_agreement == 0.75
    # Case pass/fail (threshold 75): A passes c1, c2, c4; B passes c1, c4.
    # κ = (3/4 − 1/2) / (1 − 1/2) = 1/2; α (binary) = 1 − 7 · 32 / 480 = 8/15.
    passed = report.case_passed
    assert (passed.items, passed.cohen_kappa, passed.krippendorff_alpha) == (4, None, None)
    assert passed.pairs[0].cohen_kappa is None
    assert cohen_kappa([(1, 1), (1, 0), (0, 0), (1, 1)]) == pytest.approx(0.5, abs=1e-12)
    # The human changed A's 4 to 3 on c2 and failed the case A passed.
    human = {(h.judge, h.measure): h for h in report.human}
    assert len(human) == 9
    tr = human[("openai:gpt-4.1", "tool_routing")]
    # One value a human judged too: no κ (its 0.0 would read as a finding), insufficient data.
    assert (tr.items, tr.percent_agreement, tr.cohen_kappa) == (1, 0.0, None)
    assert tr.reliability.value == "insufficient_data" and tr.kappa_interval is None
    cp = human[("openai:gpt-4.1", "case_passed")]
    assert (cp.items, cp.percent_agreement) == (1, 0.0)


def test_agreement_of_a_run_without_verdicts_is_empty(services: Services) -> None:
    data = bundle(key="no-verdicts")
    for c in data["cases"]:
        c["verdicts"] = []
        c.pop("overrides", None)
    run_id = services.ledger.import_bundle(RunBundle.model_validate(data), Context()).run_id
    report = agreement_of(services, run_id)
    assert report.judges == [] and report.human == []
    assert [(m.items, m.krippendorff_alpha, m.cohen_kappa) for m in report.metrics] == [
        (0, None, None)
    ] * 8


# ---------------------------------------------------------------------------------------------
# Bootstrap intervals and reliability (issue 22)


def _ratings(n: int, seed: int = 7) -> dict[str, dict[str, float]]:
    import random

    rng = random.Random(seed)
    ratings: dict[str, dict[str, float]] = {}
    for i in range(n):
        a = float(rng.randint(0, 5))
        b = a if rng.random() < 0.6 else float(rng.randint(0, 5))
        ratings[f"u{i}"] = {"judge-a": a, "judge-b": b}
    return ratings


def test_resampled_coefficients_equal_the_scalar_definitions_on_every_resample() -> None:
    from evaledger.scoring.agreement import (
        bootstrap_counts,
        cohen_kappa,
        interval_of,
        krippendorff_alpha_ordinal,
        resampled_alphas,
        resampled_kappas,
    )

    units = list(_ratings(25).values())
    counts = bootstrap_counts(len(units), resamples=300)
    kappas, alphas = [], []
    for row in counts:
        drawn = [unit for unit, times in zip(units, row, strict=True) for _ in range(times)]
        kappa = cohen_kappa([(u["judge-a"], u["judge-b"]) for u in drawn])
        alpha = krippendorff_alpha_ordinal({str(i): u for i, u in enumerate(drawn)})
        kappas += [] if kappa is None else [kappa]
        alphas += [] if alpha is None else [alpha]
    pairs = [(u["judge-a"], u["judge-b"]) for u in units]
    assert resampled_kappas(pairs, counts) == pytest.approx(kappas, abs=1e-12)
    assert resampled_alphas(units, counts) == pytest.approx(alphas, abs=1e-12)
    # The interval is the 2.5th / 97.5th percentile of those, 4 dp.
    ref = sorted(kappas)
    low = interval_of(resampled_kappas(pairs, counts))
    assert low is not None and low.resamples == len(ref)
    assert ref[0] <= low.low <= low.high <= ref[-1]


def test_the_interval_brackets_the_estimate_and_shrinks_with_more_items() -> None:
    from evaledger.scoring.agreement import Reliability

    small = measure_agreement("m", _ratings(12))
    large = measure_agreement("m", _ratings(400))
    for m in (small, large):
        assert m.alpha_interval is not None and m.kappa_interval is not None
        assert m.krippendorff_alpha is not None and m.cohen_kappa is not None
        assert m.alpha_interval.low <= m.krippendorff_alpha <= m.alpha_interval.high
        assert m.kappa_interval.low <= m.cohen_kappa <= m.kappa_interval.high
    width = {id(m): m.alpha_interval.high - m.alpha_interval.low for m in (small, large)}  # type: ignore[union-attr]
    assert width[id(large)] < width[id(small)] / 3
    assert (small.reliability, large.reliability) == (Reliability.FEW_ITEMS, Reliability.OK)
    # Same ratings, same interval: the resampling seed is fixed.
    assert measure_agreement("m", _ratings(12)).alpha_interval == small.alpha_interval


@pytest.mark.parametrize(
    ("items", "level", "interval"),
    [
        (2, "insufficient_data", False),
        (9, "insufficient_data", False),
        (10, "few_items", True),
        (29, "few_items", True),
        (30, "ok", True),
    ],
)
def test_below_ten_items_no_figure_below_thirty_a_warning(
    items: int, level: str, interval: bool
) -> None:
    from evaledger.scoring.agreement import shown

    m = measure_agreement("m", _ratings(items))
    assert m.items == items and m.reliability.value == level
    assert (m.alpha_interval is not None, m.kappa_interval is not None) == (interval, interval)
    text = shown(m.krippendorff_alpha, m.reliability, m.alpha_interval)
    if level == "insufficient_data":
        assert text == "insufficient data"
    else:
        assert text.startswith(f"{m.krippendorff_alpha:.3f} [")
        assert text.endswith("(few items)") == (level == "few_items")


def test_the_two_item_example_of_the_issue_is_insufficient_data() -> None:
    from evaledger.scoring.agreement import shown

    ratings = {"u": {"a": 1.0, "b": 2.0}, "v": {"a": 2.0, "b": 1.0}}
    assert krippendorff_alpha_ordinal(ratings) == pytest.approx(-0.5)
    m = measure_agreement("m", ratings)
    assert m.krippendorff_alpha is None and m.cohen_kappa is None
    assert shown(m.krippendorff_alpha, m.reliability, m.alpha_interval) == "insufficient data"
