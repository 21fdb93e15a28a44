"""A run's figures have one definition (`scoring.run.RunFigures`) and its float means one helper.

The reference path (`summarize_run` over case scores) and the columnar rescore (`RunInputs` over
scoring facts) build the same `RunFigures` — from a case's score or from its facts, the same
`CaseUsage` — and the same `RunFigures.aggregate` turns them into the run aggregate. The mean
helper (`scoring.means.mean`) is `statistics.fmean` to the bit, and says what an empty input is
as each caller needs it.
"""

from __future__ import annotations

import math
import statistics
from uuid import UUID, uuid5

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaledger.domain.spec import RunConfig, ScorerInfo, ScoringSpec, resolve_spec
from evaledger.scoring import case as case_module
from evaledger.scoring import run as run_module
from evaledger.scoring.case import case_usage, reduce_repetitions, score_case
from evaledger.scoring.comparison import rules
from evaledger.scoring.facts import CaseFacts, MessageFact, VerdictFact
from evaledger.scoring.means import mean
from evaledger.scoring.models import CaseScore
from evaledger.scoring.named import compare_named_scores, named_score_means
from evaledger.scoring.rescore import RunInputs, rescore_run
from evaledger.scoring.run import CaseUsage, RunFigures, summarize_run
from evaledger.scoring.scorer_metrics import pass_hat_k, scorer_metrics
from tests.scoring.test_fastscore import facts_st, spec_st

RUN_ID = UUID("00000000-0000-0000-0000-0000000000f1")
FIGURES = list(RunFigures.__dataclass_fields__)


def _id(*parts: object) -> UUID:
    return uuid5(RUN_ID, "/".join(map(str, parts)))


def _facts(i: int, **fields: object) -> CaseFacts:
    return CaseFacts.model_validate(
        {
            "case_id": _id("case", i),
            "run_id": RUN_ID,
            "test_case_key": f"tc-{i % 3}",
            "test_id": "t",
            "repetition": i,
            **fields,
        }
    )


def _figures_json(figures: RunFigures) -> bytes:
    return orjson.dumps(figures.to_dict())


def _aggregate_figures(aggregate: object) -> dict[str, object]:
    return {name: getattr(aggregate, name) for name in FIGURES}


# ---------------------------------------------------------------------------------------------
# One RunFigures for both paths


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_summarize_run_and_the_columnar_rescore_build_one_run_figures(
    data: st.DataObject,
) -> None:
    facts = [data.draw(facts_st(i)) for i in range(data.draw(st.integers(0, 12)))]
    spec = data.draw(spec_st())
    scores = [score_case(f, spec) for f in facts]
    of_facts = RunFigures.of([case_usage(f) for f in facts])
    of_scores = RunFigures.of([CaseUsage.of_score(s) for s in scores])
    # A case's usage is the same read from its facts or from its score under any spec.
    assert [case_usage(f) for f in facts] == [CaseUsage.of_score(s) for s in scores]
    assert of_facts == of_scores
    built = RunInputs.build(facts, {})
    stored = RunInputs.from_bytes(built.to_bytes())
    assert stored is not None
    # The rescore's inputs hold the run's figures, stored and read back to the bit.
    assert _figures_json(built.figures) == _figures_json(of_facts)
    assert _figures_json(stored.figures) == _figures_json(of_facts)
    reference = summarize_run(scores, spec)
    assert _aggregate_figures(reference) == of_scores.to_dict()
    assert reference.coverage.errored == of_scores.error_count
    assert reference.coverage.canceled == of_scores.canceled_count
    lean = rescore_run(stored, spec)
    if lean is not None:  # None: a spec the lean path leaves to the reference
        assert lean.aggregate.model_dump_json() == reference.model_dump_json()


def test_the_run_figures_of_an_example_run() -> None:
    facts = [
        _facts(
            0,
            has_transcript=True,
            turn_count=3,
            messages=[MessageFact(role="assistant", latency_ms=x) for x in (100.0, 300.0)],
            prompt_tokens=10,
            completion_tokens=5,
            cost_usd=0.1,
            named_scores={"match": 1.0},
        ),
        _facts(1, errored=True, prompt_tokens=3, cost_usd=0.2, named_scores={"match": 0.0}),
        _facts(2, canceled=True),
        _facts(3, skipped="xfailed", prompt_tokens=99, cost_usd=9.0, named_scores={"match": 9}),
        _facts(
            4,
            verdicts=[
                VerdictFact(verdict_id=_id("v", 4), position=0, cost_usd=0.5, invalidated=True)
            ],
        ),
    ]
    figures = RunFigures.of([case_usage(f) for f in facts])
    assert figures == RunFigures(
        unique_test_case_count=3,
        total_executions=4,
        error_count=1,
        canceled_count=1,
        skipped_count=1,
        latency_p50_ms=200.0,
        latency_p95_ms=None,
        latency_max_ms=200.0,
        latency_avg_ms=200.0,
        total_prompt_tokens=13,
        total_completion_tokens=5,
        total_tokens=18,
        total_cost_usd=0.1 + 0.2,
        judge_cost_usd=0.5,
        named_score_means={"match": 0.5},
    )
    assert RunFigures.from_dict(orjson.loads(orjson.dumps(figures.to_dict()))) == figures


def test_a_skipped_case_that_also_errored_is_an_execution_on_both_paths() -> None:
    """`decide` puts an execution error before a skip: the case counts as an errored execution.

    The rescore once counted it as skipped (its facts say skipped), the reference as errored.
    """
    facts = [
        _facts(0, skipped="skipped", errored=True, error_message="boom", prompt_tokens=7),
        _facts(1, skipped="xfailed"),
        _facts(2),
    ]
    spec = resolve_spec(RunConfig())
    reference = summarize_run([score_case(f, spec) for f in facts], spec)
    lean = rescore_run(RunInputs.build(facts, {}), spec)
    assert lean is not None
    assert lean.aggregate.model_dump_json() == reference.model_dump_json()
    assert (reference.total_executions, reference.skipped_count, reference.error_count) == (2, 1, 1)
    assert reference.total_prompt_tokens == 7


def test_the_run_level_names_are_scoring_run_s_and_still_read_from_scoring_case() -> None:
    for name in ("summarize_run", "variant_figures", "pass_rate_figures", "threshold_passed"):
        assert getattr(case_module, name) is getattr(run_module, name)
    assert case_module.P95_MIN_SAMPLES == run_module.P95_MIN_SAMPLES


# ---------------------------------------------------------------------------------------------
# One mean


finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)


@given(st.lists(finite, min_size=1, max_size=40))
def test_mean_is_fmean_to_the_bit_whatever_the_order(values: list[float]) -> None:
    want = statistics.fmean(values)
    assert mean(values).hex() == want.hex()  # type: ignore[union-attr]
    assert mean(reversed(values)) == want  # an iterable, in another order: fsum is exact
    assert mean(tuple(values), empty=math.nan) == want


def test_mean_of_nothing_is_what_the_caller_asks() -> None:
    assert mean([]) is None
    assert mean(iter(())) is None
    assert math.isnan(mean([], empty=math.nan))
    assert mean([], empty=0.0) == 0.0
    assert mean([2, 3]) == 2.5  # ints read as floats, as fmean reads them


def _score(i: int, **fields: object) -> CaseScore:
    base: dict[str, object] = {
        "case_id": _id("score", i),
        "run_id": RUN_ID,
        "test_case_key": fields.pop("key", "tc"),
        "test_id": "t",
        "repetition": i,
        "status": "passed",
        "overall_score": None,
        "passed": True,
        "errored": False,
        "judge_error": False,
        "scored": False,
        "gate": "score_threshold",
        "gate_reason": "made up",
    }
    return CaseScore.model_validate(base | fields)


def test_each_caller_of_the_mean_keeps_its_empty_semantics() -> None:
    # Named-score means: a name no case has is absent (never 0.0).
    assert named_score_means([_score(0), _score(1, named_scores={"match": 1.0})]) == {"match": 1.0}
    assert named_score_means([]) == {}
    # Repetitions: no latency / cost among them → None (every repetition errored, no cost).
    (result,) = reduce_repetitions(
        [_score(0, errored=True, latency_p50_ms=100, status="errored", passed=False)],
        resolve_spec(RunConfig()),
    )
    assert result.latency_p50_ms is None and result.cost_usd is None
    # The run: no latency → None, not 0.0.
    assert RunFigures.of([]).latency_avg_ms is None
    # A comparison side without the named score has no mean.
    (named,) = compare_named_scores(
        [], reduce_repetitions([_score(0, named_scores={"m": 1.0})], _spec())
    )
    assert named.baseline_mean is None and named.candidate_mean == 1.0
    # The comparison's own name for it (the oracle reads it) is the one helper.
    assert rules._mean is mean


def _spec() -> ScoringSpec:
    return resolve_spec(RunConfig())


def test_the_source_metrics_mean_over_samples_and_pass_hat_k() -> None:
    scorer = ScorerInfo(
        name="s",
        score="m",
        semantics="inspect",
        value_type="continuous",
        metrics=("mean", "accuracy"),
    )
    scores = [
        _score(i, key=f"tc-{i}", named_scores={"m": v}) for i, v in enumerate([0.1, 0.2, 0.7])
    ]
    figures = scorer_metrics(scores, [scorer])
    assert figures["s/mean"] == statistics.fmean([0.1, 0.2, 0.7])
    assert scorer_metrics([], [scorer]) == {}  # no sample: no figure (the mean is never empty)
    reps = [_score(i, key="tc", passed=i % 2 == 0) for i in range(4)]
    assert pass_hat_k(reps) == {"1": 0.5, "2": pytest.approx(1 / 6), "3": 0.0, "4": 0.0}
