"""Issue 37's statistics against scipy / statsmodels, and simulations with a known truth.

Simulations are seeded (numpy's default_rng), so every run draws the same data; their
tolerances are those the issue states (±5 points of power over 500 runs; FWER <= alpha over
1,000 null comparisons; ~95 % coverage of clustered intervals).
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from evaledger.application.statistics import noise_reading
from evaledger.scoring.clustered import (
    clustered_difference,
    clustered_mean,
    t_quantile,
    t_two_sided_p,
)
from evaledger.scoring.comparison.adjust import adjust_p_values
from evaledger.scoring.power import (
    detectable_difference,
    icc_oneway,
    metric_noise,
    plan_sample_size,
    variance_split,
)

# ---------------------------------------------------------------------------------------------
# Against the references


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10, 29, 30, 101, 500, 1999, 5000])
@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 1.96, 2.5, 4.0, 12.0])
def test_t_distribution_matches_scipy(t: float, df: int) -> None:
    assert t_two_sided_p(t, df) == pytest.approx(
        2 * sps.t.sf(t, df), abs=2e-6 if df > 1999 else 1e-10
    )
    assert t_two_sided_p(-t, df) == t_two_sided_p(t, df)


@pytest.mark.parametrize("df", [1, 2, 5, 30, 400])
@pytest.mark.parametrize("q", [0.8, 0.9, 0.975, 0.995])
def test_t_quantile_matches_scipy(q: float, df: int) -> None:
    assert t_quantile(q, df) == pytest.approx(sps.t.ppf(q, df), rel=1e-8)


def _clustered_data(
    rng: np.random.Generator, cases: int, reps: int, icc: float
) -> tuple[np.ndarray, np.ndarray]:
    effects = rng.normal(0, math.sqrt(icc), cases)
    values = np.repeat(effects, reps) + rng.normal(0, math.sqrt(1 - icc), cases * reps)
    return values, np.repeat(np.arange(cases), reps)


def test_clustered_mean_matches_statsmodels_cluster_covariance() -> None:
    rng = np.random.default_rng(1)
    values, clusters = _clustered_data(rng, 40, 3, 0.4)
    # Unequal cluster sizes too: drop a few executions.
    keep = np.ones(len(values), dtype=bool)
    keep[[1, 5, 6, 50]] = False
    values, clusters = values[keep], clusters[keep]
    ours = clustered_mean(values.tolist(), clusters.tolist())
    fit = sm.OLS(values, np.ones(len(values))).fit(
        cov_type="cluster", cov_kwds={"groups": clusters}
    )
    assert ours.mean == pytest.approx(fit.params[0], rel=1e-12)
    assert ours.se == pytest.approx(fit.bse[0], rel=1e-10)
    assert ours.naive_se == pytest.approx(sps.sem(values), rel=1e-10)
    assert ours.clusters == 40 and ours.n == len(values)


def test_clustered_difference_is_a_paired_t_test_on_case_means() -> None:
    rng = np.random.default_rng(2)
    base, clusters = _clustered_data(rng, 30, 4, 0.5)
    cand = base + 0.2 + rng.normal(0, 0.5, len(base))
    ours = clustered_difference(
        (base.tolist(), clusters.tolist()), (cand.tolist(), clusters.tolist())
    )
    b_means = base.reshape(30, 4).mean(axis=1)
    c_means = cand.reshape(30, 4).mean(axis=1)
    ref = sps.ttest_rel(c_means, b_means)
    ci = ref.confidence_interval(0.95)
    assert ours.delta == pytest.approx(float(np.mean(c_means - b_means)), rel=1e-12)
    assert ours.t == pytest.approx(ref.statistic, rel=1e-10)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-8)
    assert (ours.low, ours.high) == pytest.approx((ci.low, ci.high), rel=1e-8)
    assert ours.df == 29 and ours.clusters == 30


def test_clustered_difference_pairs_only_shared_clusters_and_handles_small_data() -> None:
    one = clustered_difference(([1.0, 0.0], ["a", "a"]), ([1.0], ["a"]))
    assert one.delta == 0.5 and one.se is None and one.p_value is None
    none = clustered_difference(([1.0], ["a"]), ([1.0], ["b"]))
    assert none.delta is None and none.clusters == 0
    same = clustered_difference(([1.0, 0.0], ["a", "b"]), ([1.0, 0.0], ["a", "b"]))
    assert same.delta == 0 and same.p_value == 1.0


@pytest.mark.parametrize(("method", "ref"), [("holm", "holm"), ("bh", "fdr_bh")])
def test_adjustments_match_statsmodels(
    method: str, ref: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # statsmodels' Holm calls gc.collect() on every call: in a test process that has run a
    # thousand tests that took 410 s (50 full collections of a large heap). The reference's
    # figures do not depend on it.
    monkeypatch.setattr(gc, "collect", lambda generation=2: 0)
    rng = np.random.default_rng(3)
    for _ in range(50):
        ps = rng.uniform(0, 0.2, rng.integers(1, 12)).tolist()
        expected = multipletests(ps, method=ref)[1]
        assert adjust_p_values(ps, method) == pytest.approx(expected.tolist(), rel=1e-12)  # type: ignore[arg-type]


def test_adjustment_leaves_missing_p_values_out_of_the_family() -> None:
    assert adjust_p_values([0.01, None, 0.04], "holm") == [0.02, None, 0.04]
    assert adjust_p_values([0.01, None], "none") == [0.01, None]
    with pytest.raises(ValueError, match="correction"):
        adjust_p_values([0.1], "bonferroni")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="within"):
        adjust_p_values([1.5], "holm")


def test_icc_matches_statsmodels_mixedlm_on_balanced_data() -> None:
    rng = np.random.default_rng(4)
    values, clusters = _clustered_data(rng, 60, 4, 0.3)
    ours = icc_oneway(values.tolist(), clusters.tolist())
    fit = sm.MixedLM(values, np.ones((len(values), 1)), groups=clusters).fit(reml=True)
    between, within = float(np.asarray(fit.cov_re)[0, 0]), float(fit.scale)
    # Balanced one-way data: REML's variance components are the ANOVA ones.
    assert ours.between_variance == pytest.approx(between, rel=1e-3)
    assert ours.within_variance == pytest.approx(within, rel=1e-3)
    assert ours.icc == pytest.approx(between / (between + within), rel=1e-3)


def test_variance_split_matches_statsmodels_nested_mixedlm() -> None:
    rng = np.random.default_rng(5)
    cases, reps, judges = 40, 3, 3
    case_eff = np.repeat(rng.normal(0, 1.0, cases), reps * judges)
    rep_eff = np.repeat(rng.normal(0, 0.6, cases * reps), judges)
    y = 2.5 + case_eff + rep_eff + rng.normal(0, 0.4, cases * reps * judges)
    case_ids = np.repeat(np.arange(cases), reps * judges)
    transcript = np.repeat(np.arange(cases * reps), judges)
    ours = variance_split(
        "accuracy", list(zip(case_ids.tolist(), transcript.tolist(), y.tolist(), strict=True))
    )
    frame = pd.DataFrame({"y": y, "case": case_ids, "rep": transcript})
    fit = sm.MixedLM.from_formula(
        "y ~ 1", frame, groups="case", re_formula="1", vc_formula={"rep": "0 + C(rep)"}
    ).fit(reml=True)
    assert ours.cases == pytest.approx(float(np.asarray(fit.cov_re)[0, 0]), rel=2e-2)
    assert ours.agent == pytest.approx(float(fit.vcomp[0]), rel=2e-2)
    assert ours.judge == pytest.approx(float(fit.scale), rel=2e-2)
    assert sum(ours.shares.values()) == pytest.approx(1.0)
    assert (ours.test_cases, ours.transcripts, ours.verdicts) == (40, 120, 360)


def test_variance_split_without_a_panel_or_repetitions() -> None:
    rows = [(c, (c, r), float(c % 3 + r)) for c in range(6) for r in range(2)]
    split = variance_split("m", rows)
    assert split.judge is None and split.agent is not None and split.cases is not None
    single = variance_split("m", [(c, c, float(c)) for c in range(5)])
    assert single.agent is None and single.judge is None and single.cases == pytest.approx(2.5)


def test_plan_matches_the_normal_formula_and_statsmodels_power() -> None:
    plan = plan_sample_size("pass_rate", 0.82, 0.03)
    var = 0.82 * 0.18 + 0.79 * 0.21  # the drop, nearer 0.5, is the worse case
    assert plan.case_difference_variance == pytest.approx(var)
    assert plan.cases_needed is not None
    normal_n = (sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) ** 2 * var / 0.03**2
    assert normal_n <= plan.cases_needed <= normal_n + 3
    # statsmodels' one-sample t power at the planned n and effect size δ/√V reaches 80 %.
    power = TTestPower().power(0.03 / math.sqrt(var), plan.cases_needed, 0.05)
    assert 0.8 <= power < 0.8 + 5e-4
    reps = plan_sample_size("pass_rate", 0.82, 0.03, repetitions=3, icc=0.4)
    assert reps.case_difference_variance == pytest.approx(var * 0.6 / 3)
    assert reps.cases_needed is not None and reps.cases_needed < plan.cases_needed / 4
    mde = detectable_difference("pass_rate", 0.82, plan.cases_needed)
    assert mde.mde == pytest.approx(0.03, abs=2e-4)
    scored = plan_sample_size("accuracy", 3.5, 0.2, sd=1.2)
    assert scored.cases_needed is not None
    assert TTestPower().power(0.2 / math.sqrt(2 * 1.44), scored.cases_needed, 0.05) >= 0.8


def test_plan_refuses_impossible_designs() -> None:
    with pytest.raises(ValueError, match="baseline"):
        plan_sample_size("pass_rate", 82, 0.03)
    with pytest.raises(ValueError, match="power"):
        plan_sample_size("pass_rate", 0.8, 0.03, power=0.3)
    with pytest.raises(ValueError, match="icc"):
        plan_sample_size("pass_rate", 0.8, 0.03, icc=1.0)
    with pytest.raises(ValueError, match="mde"):
        plan_sample_size("pass_rate", 0.8, 0.0)


@pytest.mark.parametrize(("baseline", "mde", "sd"), [(0.5, 1e-200, None), (0.0, 5e-324, 1.0)])
def test_plan_of_an_undetectable_difference_is_above_the_cap(
    baseline: float, mde: float, sd: float | None
) -> None:
    # Found by the API fuzz test: an mde whose square underflows divided by zero, and an
    # infinite n overflowed its ceiling. "No size finds it": no cases needed.
    plan = plan_sample_size("score", baseline, mde, sd=sd)
    assert plan.cases_needed is None and plan.executions_needed is None


def test_plan_refuses_an_sd_whose_square_overflows() -> None:
    with pytest.raises(ValueError, match=r"sd: .* too large"):
        plan_sample_size("score", 0.0, 0.5, sd=1e300)


# ---------------------------------------------------------------------------------------------
# Simulations with a known truth


def _simulate_power(p: float, delta: float, reps: int, icc: float, cases: int, runs: int) -> float:
    """Share of `runs` simulated comparisons whose paired clustered test finds the change."""
    rng = np.random.default_rng(37)
    a = p * (1 - icc) / icc if icc else None
    b = (1 - p) * (1 - icc) / icc if icc else None
    clusters = np.repeat(np.arange(cases), reps).tolist()
    found = 0
    for _ in range(runs):
        probs = rng.beta(a, b, cases) if a is not None and b is not None else np.full(cases, p)
        base = rng.random((cases, reps)) < probs[:, None]
        cand = rng.random((cases, reps)) < np.clip(probs + delta, 0, 1)[:, None]
        diff = clustered_difference(
            (base.astype(float).ravel().tolist(), clusters),
            (cand.astype(float).ravel().tolist(), clusters),
        )
        found += diff.p_value is not None and diff.p_value < 0.05
    return found / runs


@pytest.mark.parametrize(
    ("p", "delta", "reps", "icc"),
    [(0.82, -0.03, 1, 0.0), (0.5, 0.06, 3, 0.2), (0.3, 0.08, 2, 0.1)],
)
def test_planned_sample_size_achieves_the_power(
    p: float, delta: float, reps: int, icc: float
) -> None:
    plan = plan_sample_size("pass_rate", p, abs(delta), repetitions=reps, icc=icc)
    assert plan.cases_needed is not None
    achieved = _simulate_power(p, delta, reps, icc, plan.cases_needed, 500)
    assert abs(achieved - 0.8) <= 0.05, (plan.cases_needed, achieved)


def test_holm_keeps_the_family_wise_error_where_raw_p_values_do_not() -> None:
    rng = np.random.default_rng(11)
    metrics, cases, alpha = 8, 60, 0.05
    clusters = list(range(cases))
    raw_any = holm_any = bh_any = 0
    for _ in range(1000):
        base = rng.normal(0, 1, (metrics, cases))
        cand = base * 0.5 + rng.normal(0, 1, (metrics, cases))  # correlated sides, no change
        ps = [
            clustered_difference((base[m].tolist(), clusters), (cand[m].tolist(), clusters)).p_value
            for m in range(metrics)
        ]
        raw_any += any(p is not None and p < alpha for p in ps)
        holm_any += any(p is not None and p < alpha for p in adjust_p_values(ps, "holm"))
        bh_any += any(p is not None and p < alpha for p in adjust_p_values(ps, "bh"))
    assert holm_any / 1000 <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / 1000)
    assert bh_any / 1000 <= alpha + 2 * math.sqrt(
        alpha * (1 - alpha) / 1000
    )  # all nulls: FDR = FWER
    assert raw_any / 1000 > 0.25  # 1 - 0.95**8 ≈ 0.34: the family without correction


def test_clustered_intervals_cover_where_naive_ones_do_not() -> None:
    rng = np.random.default_rng(12)
    cases, reps, icc, true_delta = 50, 5, 0.6, 0.1
    clusters = np.repeat(np.arange(cases), reps).tolist()
    clustered_hits = naive_hits = single_hits = 0
    sims = 1000
    for _ in range(sims):
        # Unpaired runs (two suites' draws): the single-run mean's clustered SE is what matters.
        values, _ = _clustered_data(rng, cases, reps, icc)
        m = clustered_mean(values.tolist(), clusters)
        assert m.se is not None and m.naive_se is not None and m.mean is not None
        single_hits += abs(m.mean) <= 1.96 * m.se
        naive_hits += abs(m.mean) <= 1.96 * m.naive_se
        # Paired runs, the same suite: the agent's noise differs per repetition.
        effects = np.repeat(rng.normal(0, 1, cases), reps)
        base = effects + rng.normal(0, 1, cases * reps)
        cand = (
            effects
            + true_delta
            + rng.normal(0, 1, cases * reps)
            + np.repeat(rng.normal(0, 0.5, cases), reps)
        )
        d = clustered_difference((base.tolist(), clusters), (cand.tolist(), clusters))
        assert d.low is not None and d.high is not None
        clustered_hits += d.low <= true_delta <= d.high
    assert 0.93 <= single_hits / sims <= 0.97
    assert 0.93 <= clustered_hits / sims <= 0.97
    assert naive_hits / sims < 0.8  # treating 5 repetitions as independent: far too narrow


def test_noise_of_identical_setups_bounds_their_differences() -> None:
    rng = np.random.default_rng(13)
    cases = 200
    clusters = list(range(cases))
    difficulty = rng.uniform(0.2, 0.95, cases)
    runs = [((rng.random(cases) < difficulty).astype(float).tolist(), clusters) for _ in range(4)]
    noise = metric_noise("pass_rate", runs)
    assert len(noise.pair_deltas) == 6 and noise.spread_sd is not None
    assert (
        noise.noise_floor is not None and noise.mde is not None and noise.sd_difference is not None
    )
    assert noise.noise_floor == pytest.approx(1.959964 * noise.sd_difference, rel=1e-5)
    assert noise.mde == pytest.approx((1.959964 + 0.841621) * noise.sd_difference, rel=1e-5)
    # The SD of an A/A difference, from the binomial truth: Σ 2 p(1-p) / n².
    truth = math.sqrt(float(np.sum(2 * difficulty * (1 - difficulty)))) / cases
    assert noise.sd_difference == pytest.approx(truth, rel=0.35)
    assert all(abs(d) <= 3 * truth for d in noise.pair_deltas)


def test_the_noise_reading_of_a_rate_never_promises_a_change_beyond_its_range() -> None:
    small = noise_reading("pass_rate", 0.028, 0.04, 0.05, 0.8)
    assert small == (
        "pass_rate: A/A runs differ by up to 2.8 points by chance (95 %); "
        "a change of 4.0 is found with 80 % power"
    )
    wide = noise_reading("pass_rate", 0.84, 1.2, 0.05, 0.8)
    assert "a change of 120" not in wide and "MDE exceeds 100 points" in wide
    assert "a change of 1.2 is found" in noise_reading("avg_score", 0.5, 1.2, 0.05, 0.8)
