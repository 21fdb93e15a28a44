"""Named scores (a peer's own scores, e.g. Inspect's `match`, promptfoo's `Correctness`).

They are not 0-5 rubric metrics: each keeps its name and numeric reading (a fraction, a grade
read C=1 / P=0.5 / I=N=0, a boolean read 1/0, a reward). Here: the spec's score gates, the per-run
means `show` prints, and the paired comparison `compare` reports. Higher is taken to be better.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, Protocol

from pydantic import Field

from evaledger.domain.model import StrictModel
from evaledger.domain.spec import ScoringSpec
from evaledger.scoring.means import mean
from evaledger.scoring.models import TestCaseResult
from evaledger.scoring.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    BootstrapCI,
    paired_bootstrap_ci,
)

NamedScoreVerdict = Literal[
    "regression", "improvement", "no_significant_change", "insufficient_data"
]


def score_gate(named: Mapping[str, float], spec: ScoringSpec) -> tuple[bool, str] | None:
    """Pass/fail and why under the spec's score gates; None when it has none or nothing scored.

    A case with some named scores but not a gated one fails that gate (missing counts as failed).
    """
    if not spec.score_gates or not named:
        return None
    failed: list[str] = []
    for gate in spec.score_gates:
        number = named.get(gate.score)
        if number is None:
            failed.append(f"{gate.score} missing")
        elif not gate.holds(number):
            failed.append(f"{gate.score} = {number:g}, not {gate.op} {gate.value:g}")
    gates = ", ".join(str(g) for g in spec.score_gates)
    if failed:
        return False, f"score gates {gates}: " + "; ".join(failed)
    return True, f"score gates {gates} hold"


class NamedScores(Protocol):
    """Anything that carries a case's named scores (a `CaseScore`, `CaseFacts`, `CaseUsage`)."""

    @property
    def named_scores(self) -> Mapping[str, float]:
        """Score name → its numeric reading."""
        ...


def named_score_means(cases: Iterable[NamedScores]) -> dict[str, float]:
    """Mean of each named score over the cases that have it (for `show`), sorted by name."""
    values: dict[str, list[float]] = defaultdict(list)
    for case in cases:
        for name, number in case.named_scores.items():
            values[name].append(number)
    # Every list has a value: no name is left out.
    return {name: m for name, v in sorted(values.items()) if (m := mean(v)) is not None}


class NamedScoreComparison(StrictModel):
    """One named score, baseline vs candidate, over test cases matched by key."""

    name: str
    baseline_mean: float | None = Field(description="Mean over the baseline's test cases.")
    candidate_mean: float | None = Field(description="Mean over the candidate's test cases.")
    mean_delta: float | None = Field(description="candidate_mean - baseline_mean, 4 dp.")
    paired: BootstrapCI = Field(
        description="Paired bootstrap CI of the per-test-case delta (repetitions averaged first)."
    )
    verdict: NamedScoreVerdict


def compare_named_scores(
    baseline: Sequence[TestCaseResult],
    candidate: Sequence[TestCaseResult],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    by_variant: bool = False,
) -> list[NamedScoreComparison]:
    """Mean delta and paired statistics of every named score either run has.

    Means are over test cases (repetitions averaged first, as the paired statistics see them).
    `by_variant` (a side with several variants of one test: promptfoo's providers × prompts):
    each test case × variant is one result, paired with the other side's same variant, as the
    compared rows are; else a test case's one variant is only an attribute and keys pair.
    """
    names = sorted({n for r in (*baseline, *candidate) for n in r.named_scores})

    def key(r: TestCaseResult) -> tuple[str, str]:
        return (r.test_case_key, r.variant if by_variant else "")

    base = {key(r): r.named_scores for r in baseline}
    cand = {key(r): r.named_scores for r in candidate}
    out: list[NamedScoreComparison] = []
    for name in names:
        b = {k: v[name] for k, v in base.items() if name in v}
        c = {k: v[name] for k, v in cand.items() if name in v}
        b_mean, c_mean = mean(list(b.values())), mean(list(c.values()))
        deltas = [c[k] - b[k] for k in sorted(b.keys() & c.keys())]
        ci = paired_bootstrap_ci(deltas, resamples=resamples, seed=seed)
        verdict: NamedScoreVerdict
        if not ci.sufficient_data or ci.low is None or ci.high is None:
            verdict = "insufficient_data"
        elif ci.high < 0:
            verdict = "regression"
        elif ci.low > 0:
            verdict = "improvement"
        else:
            verdict = "no_significant_change"
        out.append(
            NamedScoreComparison(
                name=name,
                baseline_mean=b_mean,
                candidate_mean=c_mean,
                mean_delta=None if b_mean is None or c_mean is None else round(c_mean - b_mean, 4),
                paired=ci,
                verdict=verdict,
            )
        )
    return out
