"""The columnar comparison (compare_columns, its JSON) equals the reference per-case path.

`tests/oracles/comparison.py` is `compare_results` as it was before the fast path: one
pydantic-validated dict per case. On varied inputs (keys matched in part, duplicate keys, missing
scores, errored and undecided cases, flaky ones, metrics outside the spec, binary metrics, named
scores) both must give the same comparison, and the fast JSON must be the bytes the model
serialises to, paged or not.
"""

from __future__ import annotations

import math
from typing import Any
from uuid import UUID

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaledger.domain.spec import ScoringSpec
from evaledger.scoring.comparison import (
    CompareThresholds,
    RunColumns,
    compare_columns,
    compare_results,
)
from evaledger.scoring.comparison.engine import _round4
from evaledger.scoring.models import TestCaseResult
from tests.oracles.comparison import reference_compare_results
from tests.scoring.test_comparison import BASE_ID, BIN_SPEC, CAND_ID, SPEC, run

KEYS = [f"tc-{i:02d}" for i in range(12)]
METRICS = ["tool_routing", "task_completion", "grounding_fidelity", "zz_extra", "aa_extra"]
# Scores as the summaries hold them: overall 0-100 at 2 dp, metric means of 0-5 integers.
OVERALL = st.one_of(st.none(), st.integers(0, 10_000).map(lambda n: n / 100))
# Mostly none; else a provider, or provider × prompt (joined by U+001F) as promptfoo's.
VARIANT = st.sampled_from(["", "", "", "echo", "echo\x1fprompt 2"])
LATENCY = st.one_of(st.none(), st.integers(0, 5_000).map(float), st.floats(0, 1e5, width=32))


@st.composite
def results(draw: st.DrawFn, run_id: UUID, variants: bool = False) -> list[TestCaseResult]:
    keys = draw(st.lists(st.sampled_from(KEYS), max_size=10))
    out = []
    for n, key in enumerate(keys):
        reps = draw(st.integers(1, 3))
        scored = draw(st.lists(st.sampled_from(METRICS), unique=True, max_size=4))
        binary = draw(st.lists(st.sampled_from(METRICS), unique=True, max_size=2))
        named = draw(
            st.dictionaries(st.sampled_from(["match", "accuracy"]), st.floats(0, 1), max_size=2)
        )
        out.append(
            TestCaseResult(
                test_case_key=key,
                variant=draw(VARIANT) if variants else "",
                repetitions=reps,
                case_ids=[UUID(int=run_id.int + n)],
                score=draw(OVERALL),
                passed=draw(st.one_of(st.none(), st.booleans())),
                errored=draw(st.booleans()),
                flaky=draw(st.booleans()),
                latency_p50_ms=draw(LATENCY),
                metric_scores={m: draw(st.integers(0, 10)) / 2 for m in scored},
                metric_passed={m: draw(st.booleans()) for m in binary},
                named_scores=named,
            )
        )
    return out


THRESHOLDS = st.builds(
    CompareThresholds,
    case_score_delta=st.one_of(st.none(), st.sampled_from([0.0, 0.5, 5.0, 12.34])),
    max_avg_score_drop=st.one_of(st.none(), st.just(0.0)),
)


def _runs(spec: ScoringSpec) -> tuple[Any, Any]:
    return run([], run_id=BASE_ID, spec=spec), run([], run_id=CAND_ID, spec=spec)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=results(BASE_ID),
    cand=results(CAND_ID),
    thresholds=THRESHOLDS,
    spec=st.sampled_from([None, SPEC, BIN_SPEC]),
    metric_deltas=st.booleans(),
    page=st.tuples(st.integers(0, 12), st.one_of(st.none(), st.integers(0, 5))),
)
def test_columns_equal_the_reference(
    base: list[TestCaseResult],
    cand: list[TestCaseResult],
    thresholds: CompareThresholds,
    spec: ScoringSpec | None,
    metric_deltas: bool,
    page: tuple[int, int | None],
) -> None:
    baseline, candidate = _runs(BIN_SPEC if spec is None else spec)
    kw: dict[str, Any] = {"resamples": 200, "seed": 3, "metric_deltas": metric_deltas}
    expected = reference_compare_results(baseline, candidate, base, cand, thresholds, spec, **kw)
    got = compare_results(baseline, candidate, base, cand, thresholds, spec, **kw)
    assert got == expected
    fast = compare_columns(
        baseline, candidate, RunColumns(base), RunColumns(cand), thresholds, spec, **kw
    )
    assert fast.json() == expected.__pydantic_serializer__.to_json(expected)
    offset, limit = page
    end = None if limit is None else offset + limit
    paged = expected.model_copy(
        update={"test_case_comparisons": expected.test_case_comparisons[offset:end]}
    )
    assert fast.json(offset, limit) == paged.__pydantic_serializer__.to_json(paged)
    assert orjson.loads(fast.json()) == expected.model_dump(mode="json")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=results(BASE_ID, variants=True),
    cand=results(CAND_ID, variants=True),
    page=st.tuples(st.integers(0, 12), st.one_of(st.none(), st.integers(0, 5))),
)
def test_rows_with_variants_are_the_models_bytes(
    base: list[TestCaseResult], cand: list[TestCaseResult], page: tuple[int, int | None]
) -> None:
    # The case rows put a variant right after the key, as `TestCaseComparison` serialises it
    # (the reference above predates variants: it is held to the validated model here).
    baseline, candidate = _runs(SPEC)
    fast = compare_columns(
        baseline, candidate, RunColumns(base), RunColumns(cand), resamples=50, metric_deltas=False
    )
    model = fast.model
    assert fast.json() == model.__pydantic_serializer__.to_json(model)
    offset, limit = page
    end = None if limit is None else offset + limit
    paged = model.model_copy(
        update={"test_case_comparisons": model.test_case_comparisons[offset:end]}
    )
    assert fast.json(offset, limit) == paged.__pydantic_serializer__.to_json(paged)


def test_columns_are_reused_across_comparisons() -> None:
    """A side's columns keep the per-metric values they computed; a second use agrees."""
    base = [
        TestCaseResult(
            test_case_key=k,
            repetitions=1,
            case_ids=[UUID(int=i)],
            score=50.0 + i,
            passed=i % 2 == 0,
            errored=False,
            metric_scores={"tool_routing": float(i % 6)},
        )
        for i, k in enumerate(KEYS)
    ]
    cand = [r.model_copy(update={"score": r.score + 7.5 if r.score else None}) for r in base]
    baseline, candidate = _runs(SPEC)
    b, c = RunColumns(base), RunColumns(cand)
    first = compare_columns(baseline, candidate, b, c, resamples=200).json()
    again = compare_columns(baseline, candidate, b, c, resamples=200).json()
    reference = reference_compare_results(baseline, candidate, base, cand, resamples=200)
    assert first == again == reference.__pydantic_serializer__.to_json(reference)
    assert orjson.loads(first)["aggregate"]["total_improvements"] == len(KEYS)


HALVES = st.integers(-(10**9), 10**9).map(lambda n: (n + 0.5) / 1e4)  # at (or next to) a tie
FLOATS = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(FLOATS, HALVES, st.floats(-200, 200), st.just(-0.0)), max_size=30))
def test_round4_is_pythons_round(values: list[float]) -> None:
    got = _round4(np.array([*values, np.nan], dtype=np.float64)).tolist()
    assert math.isnan(got[-1])
    for value, rounded in zip(values, got[:-1], strict=True):
        expected = round(value, 4)
        assert rounded == expected and math.copysign(1, rounded) == math.copysign(1, expected)


def test_round4_near_ties() -> None:
    # Differences of 2 dp scores and of 1-decimal latencies land next to 4 dp halves.
    values = [b - a for a in (0.1, 0.15, 33.33, 61.25) for b in (0.35, 12.345, 73.75, 99.99)]
    values += [0.00005, 0.00015, 1.00005, -2.00025, 0.03125, 107374.18245, 1e15 + 0.5]
    got = _round4(np.array(values, dtype=np.float64)).tolist()
    assert got == [round(v, 4) for v in values]
