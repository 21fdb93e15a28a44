"""The comparison engine: both sides' reduced test cases as columns, compared with numpy."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import orjson
from pydantic import BaseModel, TypeAdapter

from evaledger.domain.spec import ScoringSpec
from evaledger.domain.types import variant_label
from evaledger.scoring.case import reduce_repetitions
from evaledger.scoring.comparison.config_diff import config_diff
from evaledger.scoring.comparison.models import (
    AggregateComparison,
    CaseStatus,
    Comparability,
    ComparedRun,
    CompareThresholds,
    MetricAggregateDelta,
    RegressionVerdict,
    RunComparison,
    TestCaseComparison,
    VariantDelta,
)
from evaledger.scoring.comparison.rules import (
    DELTA_DP,
    KEYS_SHOWN,
    binary_value,
    case_label,
    comparison_warnings,
    extra_metric_deltas,
    keys_text,
    metric_delta,
    metric_types,
    regression_verdict,
    round_delta,
    run_cost,
)
from evaledger.scoring.means import mean
from evaledger.scoring.models import TestCaseResult
from evaledger.scoring.named import NamedScoreComparison, compare_named_scores
from evaledger.scoring.run import variant_figures
from evaledger.scoring.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    PairedStatistics,
    paired_statistics_of,
)

PairStatistics = Callable[[int, int, list[float]], PairedStatistics]
"""The paired statistics of a pair of runs from (pass→fail flips, fail→pass flips, score deltas).

A caller that keeps them per pair of runs (`projections/reports.py`) passes its own, so the
bootstrap runs once per pair, not once per request or per page laid out."""

_CASES = TypeAdapter(list[TestCaseComparison])
Key = tuple[str, str]
"""A compared row: (test case key, variant)."""


class RunColumns:
    """One side's reduced test cases as columns sorted by key, built once per run summary.

    A comparison reads these lists instead of a model per case; a side keeps them (and the
    per-metric values it has needed) for every comparison it takes part in. Duplicate keys: the
    last result wins, as in a dict by key.
    """

    __slots__ = (
        "_lock",
        "_metrics",
        "arrays",
        "errored",
        "flaky",
        "has_named",
        "index",
        "keys",
        "latency",
        "multi",
        "names",
        "passed",
        "plain",
        "repetitions",
        "results",
        "score",
        "source",
    )

    def __init__(self, results: Sequence[TestCaseResult]) -> None:
        # A test case × variant (promptfoo's provider × prompt) is one row: variants are never
        # merged, and match only the same variant on the other side.
        by_key = {(r.test_case_key, r.variant): r for r in results}
        self.source = results
        self.keys = sorted(by_key)
        rows = [by_key[k] for k in self.keys]
        self.results = rows
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.score = [r.score for r in rows]
        self.passed = [r.passed for r in rows]
        self.errored = [r.errored for r in rows]
        self.latency = [r.latency_p50_ms for r in rows]
        self.flaky = [r.flaky for r in rows]
        self.repetitions = [r.repetitions for r in rows]
        self.arrays = _Arrays(
            score=np.array([_NAN if v is None else v for v in self.score], dtype=np.float64),
            latency=np.array([_NAN if v is None else v for v in self.latency], dtype=np.float64),
            passed=np.array([-1 if v is None else int(v) for v in self.passed], dtype=np.int8),
            errored=np.array(self.errored, dtype=np.bool_),
            flaky=np.array(self.flaky, dtype=np.bool_),
        )
        names: set[str] = set()
        for r in rows:
            names.update(r.metric_scores)
            names.update(r.metric_passed)
        self.names = names
        self.has_named = any(r.named_scores for r in results)
        # Several variants of one test case (promptfoo's providers × prompts in one run): rows
        # match the other side's same variant. Else a variant is only an attribute of its test
        # case (its one provider, a persona): rows match by key, whatever the other side's is.
        self.multi = len(self.keys) > len({k for k, _ in self.keys})
        self.plain: tuple[list[Key], dict[Key, int]] | None = None
        if not self.multi:
            plain: list[Key] = [(k, "") for k, _ in self.keys]
            self.plain = (plain, {k: i for i, k in enumerate(plain)})
        self._metrics: dict[tuple[str, bool], tuple[list[float | None], float | None]] = {}
        self._lock = threading.Lock()

    def metric(self, name: str, binary: bool) -> tuple[list[float | None], float | None]:
        """Per case (key order) the metric's value, None where missing, and their mean.

        Binary: 1.0 / 0.0 (`metric_passed`, else score >= 5); scored: the 0-5 mean score.
        """
        found = self._metrics.get((name, binary))
        if found is None:
            if binary:
                flags = [binary_value(r, name) for r in self.results]
                values = [None if f is None else (1.0 if f else 0.0) for f in flags]
            else:
                values = [r.metric_scores.get(name) for r in self.results]
            found = (values, mean(v for v in values if v is not None))
            with self._lock:
                self._metrics[name, binary] = found
        return found


def _take(values: list[Any], idx: list[int] | None) -> list[Any]:
    """``values`` at ``idx`` (None: all of them, in order)."""
    if idx is None:
        return values
    if len(idx) == 1:
        return [values[idx[0]]]
    return list(itemgetter(*idx)(values)) if idx else []


def _round4(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``round(v, 4)`` of each value, exactly as Python rounds (NaN stays NaN), vectorised.

    ``rint(v * 1e4) / 1e4`` is Python's result whenever ``v * 1e4`` is the integer N that the
    exact decimal rounding picks: the division is then correctly rounded like Python's parse of
    the 4-decimal string. The product is off the exact value by at most half an ulp (< 1.2e-7
    below 2**30), so N can only differ within that distance of a half: such values (and larger
    ones) are rounded by Python itself.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # NaN; inf past 1.8e304: Python's
        scaled = values * 1e4
        out: npt.NDArray[np.float64] = np.rint(scaled) / 1e4
        near_half = np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6
        risky = near_half | (np.abs(scaled) >= 2.0**30)
    for i in np.flatnonzero(risky).tolist():
        out[i] = round(float(values[i]), DELTA_DP)
    return out


def _optional(values: npt.NDArray[np.float64]) -> list[float | None]:
    """The values as Python floats, None for NaN."""
    return [None if v != v else v for v in values.tolist()]


class _Arrays(NamedTuple):
    """A side's columns as arrays: NaN for a missing score or latency, -1 for undecided."""

    score: npt.NDArray[np.float64]
    latency: npt.NDArray[np.float64]
    passed: npt.NDArray[np.int8]
    errored: npt.NDArray[np.bool_]
    flaky: npt.NDArray[np.bool_]

    def take(self, idx: list[int] | None) -> _Arrays:
        """These arrays at ``idx`` (None: all)."""
        if idx is None:
            return self
        at = np.array(idx, dtype=np.intp)
        return _Arrays(
            self.score[at], self.latency[at], self.passed[at], self.errored[at], self.flaky[at]
        )


_NAN = float("nan")
_STATUSES = np.array(["regression", "improvement", "unchanged", "error"], dtype=object)
_REGRESSION, _IMPROVEMENT, _UNCHANGED, _ERROR = range(4)


def _per_metric_means(
    base: RunColumns,
    cand: RunColumns,
    bidx: list[int] | None,
    cidx: list[int] | None,
    types: Mapping[str, bool],
) -> list[MetricAggregateDelta]:
    """Each metric's mean on each side over the matched test cases, and the delta."""
    names = list(types)
    matched: list[tuple[TestCaseResult, TestCaseResult]] | None = None
    if (base.names | cand.names) - types.keys():
        # Metrics outside the spec: listed in the order matched cases first show them.
        matched = list(zip(_take(base.results, bidx), _take(cand.results, cidx), strict=True))
        seen = set(names)
        for pair in matched:
            for r in pair:
                for name in sorted(set(r.metric_scores) | set(r.metric_passed)):
                    if name not in seen:
                        seen.add(name)
                        names.append(name)
    out: list[MetricAggregateDelta] = []
    for name in names:
        binary = types.get(name)
        if binary is None:
            assert matched is not None  # a name outside the spec was found in a matched case
            binary = any(name in r.metric_passed for pair in matched for r in pair)
        sides: list[float | None] = []
        for columns, idx in ((base, bidx), (cand, cidx)):
            values, side = columns.metric(name, binary)
            if idx is not None:
                side = mean(v for v in _take(values, idx) if v is not None)
            sides.append(side)
        b, c = sides
        if b is None and c is None:
            continue
        out.append(
            MetricAggregateDelta(
                metric=name,
                is_binary=binary,
                baseline_avg=None if b is None else round(b, 4),
                candidate_avg=None if c is None else round(c, 4),
                delta=round_delta(b, c),
            )
        )
    return out


def _per_variant(
    base: RunColumns,
    cand: RunColumns,
    matched: _Matched,
    statuses: list[CaseStatus],
    base_spec: ScoringSpec,
    cand_spec: ScoringSpec,
) -> list[VariantDelta]:
    """Each variant's pass rate on both sides (`variant_figures`) and its matched cases' classes."""
    sides = [
        {f.variant: f for f in variant_figures(columns.results, s)}
        for columns, s in ((base, base_spec), (cand, cand_spec))
    ]
    counts: dict[str, Counter[str]] = {}
    for (_, variant), status in zip(matched.keys, statuses, strict=True):
        counts.setdefault(variant, Counter())[status] += 1
    out = []
    for variant in sorted(sides[0].keys() | sides[1].keys()):
        b, c = sides[0].get(variant), sides[1].get(variant)
        found = counts.get(variant, Counter())
        b_rate = None if b is None else b.pass_rate
        c_rate = None if c is None else c.pass_rate
        out.append(
            VariantDelta(
                variant=variant_label(variant) or "(default)",
                baseline_pass_rate=b_rate,
                candidate_pass_rate=c_rate,
                pass_rate_delta=round_delta(b_rate, c_rate),
                baseline_executions=0 if b is None else b.executions,
                candidate_executions=0 if c is None else c.executions,
                total_regressions=found["regression"],
                total_improvements=found["improvement"],
                total_unchanged=found["unchanged"],
                total_errors=found["error"],
            )
        )
    return out


def _flaky_warning(side: str, keys: list[Key], flaky: npt.NDArray[np.bool_]) -> str | None:
    at = np.flatnonzero(flaky)
    if not at.size:
        return None
    # Only the keys the warning quotes are labelled (a 10k-case run can have thousands).
    found = [case_label(*keys[i]) for i in at[:KEYS_SHOWN].tolist()]
    return f"{at.size} flaky test case(s) in {side} (repetitions disagree): " + keys_text(
        found, total=int(at.size)
    )


class _CaseColumns(NamedTuple):
    """The matched test cases' output fields, one list each, in key order."""

    keys: list[Key]
    statuses: list[CaseStatus]
    baseline_passed: list[bool | None]
    candidate_passed: list[bool | None]
    baseline_score: list[float | None]
    candidate_score: list[float | None]
    score_delta: list[float | None]
    baseline_latency_ms: list[float | None]
    candidate_latency_ms: list[float | None]
    latency_delta_ms: list[float | None]
    baseline_flaky: list[bool]
    candidate_flaky: list[bool]
    baseline_repetitions: list[int]
    candidate_repetitions: list[int]


class _MetricSource(NamedTuple):
    """What the per-case metric deltas are built from: both sides' columns and matched rows."""

    base: RunColumns
    cand: RunColumns
    bidx: list[int] | None
    cidx: list[int] | None
    types: Mapping[str, bool]


def _window(values: list[Any], idx: list[int] | None, window: slice) -> list[Any]:
    """``_take(values, idx)[window]`` without taking the rows outside the window."""
    if idx is None:
        return values[window]
    return _take(values, idx[window])


def _metric_deltas(source: _MetricSource, window: slice) -> list[list[dict[str, Any]]]:
    """Per matched case in ``window``: its per-metric deltas (`metric_delta`), spec order first.

    Built per metric column, not per case: a metric's values on both sides (kept per run by
    `RunColumns.metric`) take few distinct pairs (0-5 means), so each pair's delta is built
    once and shared by every case that has it. Metrics outside the spec (rare) follow per case.
    """
    base, cand, bidx, cidx, types = source
    matched = range(len(base.keys) if bidx is None else len(bidx))[window]
    rows: list[list[dict[str, Any]]] = [[] for _ in matched]
    for name, binary in types.items():
        b_values = _window(base.metric(name, binary)[0], bidx, window)
        c_values = _window(cand.metric(name, binary)[0], cidx, window)
        built: dict[tuple[float | None, float | None], dict[str, Any] | None] = {}
        for row, pair in zip(rows, zip(b_values, c_values, strict=True), strict=True):
            found = built.get(pair, _MISSING)
            if found is _MISSING:
                b: float | bool | None
                c: float | bool | None
                b, c = pair
                if binary:  # the column holds the passes as 1.0 / 0.0
                    b, c = (None if b is None else b == 1.0), (None if c is None else c == 1.0)
                found = built[pair] = metric_delta(name, binary, b, c)
            if found is not None:
                row.append(found)
    if (base.names | cand.names) - types.keys():
        pairs = zip(
            _window(base.results, bidx, window), _window(cand.results, cidx, window), strict=True
        )
        for row, (b_res, c_res) in zip(rows, pairs, strict=True):
            row.extend(extra_metric_deltas(b_res, c_res, types))
    return rows


_MISSING: Any = object()


def _with_variant(row: dict[str, Any], variant: str) -> dict[str, Any]:
    """A case row with its variant's label right after its key (as `TestCaseComparison`)."""
    key = row.pop("test_case_key")
    return {"test_case_key": key, "variant": variant_label(variant), **row}


class Comparison:
    """A comparison computed from two runs' columns: small parts as models, cases as columns.

    `json` encodes it with only the requested page of cases turned into rows; `model`
    validates the whole `RunComparison` (once, on demand).
    """

    __slots__ = ("_model", "cases", "head", "metric_source", "named_scores", "tail")

    def __init__(
        self,
        head: dict[str, Any],
        cases: _CaseColumns,
        tail: dict[str, Any],
        named_scores: list[NamedScoreComparison],
        metric_source: _MetricSource | None = None,
    ) -> None:
        self.head = head
        self.cases = cases
        self.tail = tail
        self.named_scores = named_scores
        self.metric_source = metric_source
        self._model: RunComparison | None = None

    @property
    def aggregate(self) -> AggregateComparison:
        """The run-level deltas and case counts (what `RunComparison.aggregate` holds)."""
        found: AggregateComparison = self.head["aggregate"]
        return found

    @property
    def comparability(self) -> Comparability | None:
        """Issue 35: the guard's answer, when the comparison was given one."""
        found: Comparability | None = self.tail.get("comparability")
        return found

    @property
    def verdict(self) -> RegressionVerdict:
        """The suite-level threshold verdict (what `RunComparison.verdict` holds)."""
        found: RegressionVerdict = self.tail["verdict"]
        return found

    def rows(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """The test case comparisons ``[start:end]`` as plain dicts (TestCaseComparison's)."""
        window = slice(start, end)
        columns = self.cases if (start, end) == (0, None) else [c[window] for c in self.cases]
        # A dict display of constant keys only (no `**` for the rare variant: ≈ 1/3 of the
        # rows' time); a row with a variant gets it after its key below.
        rows = [
            {
                "test_case_key": k[0],
                "status": st,
                "baseline_passed": b_pass,
                "candidate_passed": c_pass,
                "baseline_score": b_score,
                "candidate_score": c_score,
                "score_delta": sd,
                "baseline_latency_ms": b_lat,
                "candidate_latency_ms": c_lat,
                "latency_delta_ms": ld,
                "metric_deltas": [],
                "baseline_flaky": b_flaky,
                "candidate_flaky": c_flaky,
                "repetitions": {"baseline": b_reps, "candidate": c_reps},
            }
            for k, st, b_pass, c_pass, b_score, c_score, sd, b_lat, c_lat, ld, b_flaky, c_flaky,
            b_reps, c_reps in zip(*columns, strict=True)
        ]  # fmt: skip
        keys = self.cases.keys[window]
        if any(variant for _, variant in keys):
            rows = [
                _with_variant(row, variant) if variant else row
                for row, (_, variant) in zip(rows, keys, strict=True)
            ]
        if self.metric_source is not None:
            for row, deltas in zip(rows, _metric_deltas(self.metric_source, window), strict=True):
                row["metric_deltas"] = deltas
        return rows

    def _fields(self, rows: Any) -> dict[str, Any]:
        return {**self.head, "test_case_comparisons": rows, **self.tail}

    @property
    def model(self) -> RunComparison:
        """The whole comparison as a validated `RunComparison`."""
        if self._model is None:
            self._model = RunComparison(
                **self._fields(_CASES.validate_python(self.rows())),
                named_scores=self.named_scores,
            )
        return self._model

    def body(self, case_offset: int = 0, case_limit: int | None = None) -> dict[str, Any]:
        """The comparison as `RunComparison.model_dump(mode="json")` gives it, cases paged.

        Built from the columns, plain dicts and the small parts' dumps: no model of the cases.
        """
        end = None if case_limit is None else case_offset + case_limit
        body = {
            k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v
            for k, v in self._fields(self.rows(case_offset, end)).items()
        }
        if self.named_scores:
            body["named_scores"] = [n.model_dump(mode="json") for n in self.named_scores]
        return body

    def json(self, case_offset: int = 0, case_limit: int | None = None) -> bytes:
        """The comparison as JSON (what `RunComparison` serialises to), cases paged."""
        return orjson.dumps(self.body(case_offset, case_limit))


class _Matched(NamedTuple):
    """Test cases matched by key: their keys, each side's row indices (None: all, in order)."""

    keys: list[Key]
    bidx: list[int] | None
    cidx: list[int] | None
    baseline_only: list[str]
    candidate_only: list[str]


def _match(base: RunColumns, cand: RunColumns) -> _Matched:
    """Rows matched by (key, variant) when a side has several variants of a test, else by key."""
    if base.plain is not None and cand.plain is not None:
        (b_keys, b_index), (c_keys, c_index) = base.plain, cand.plain
    else:
        b_keys, b_index, c_keys, c_index = base.keys, base.index, cand.keys, cand.index
    if b_keys == c_keys:
        return _Matched(b_keys, None, None, [], [])
    keys = [k for k in b_keys if k in c_index]
    return _Matched(
        keys,
        None if len(keys) == len(b_keys) else [b_index[k] for k in keys],
        None if len(keys) == len(c_keys) else [c_index[k] for k in keys],
        [case_label(*k) for k in b_keys if k not in c_index],
        [case_label(*k) for k in c_keys if k not in b_index],
    )


class _Classified(NamedTuple):
    """`classify_case` of every matched case, and what the paired statistics read."""

    statuses: list[CaseStatus]
    counts: list[int]
    """How many cases have each status, by status code."""
    score_deltas: list[float | None]
    baseline_flips: int
    candidate_flips: int
    deltas: list[float]
    """Unrounded score deltas of the non-error cases both sides scored."""


def _classify(b_arr: _Arrays, c_arr: _Arrays, case_score_delta: float) -> _Classified:
    """`classify_case` of every matched case, vectorised.

    Later rules win: |rounded delta| > case_score_delta, then pass flips, then errors.
    """
    raw = c_arr.score - b_arr.score  # NaN where a side has no score
    rounded = _round4(raw)
    errored = b_arr.errored | c_arr.errored
    down = (b_arr.passed == 1) & (c_arr.passed == 0)
    up = (b_arr.passed == 0) & (c_arr.passed == 1)
    code = np.full(len(raw), _UNCHANGED, dtype=np.intp)
    with np.errstate(invalid="ignore"):
        big = np.abs(rounded) > case_score_delta
        code[big & (rounded < 0)] = _REGRESSION
        code[big & (rounded > 0)] = _IMPROVEMENT
    code[up] = _IMPROVEMENT
    code[down] = _REGRESSION
    code[errored] = _ERROR
    # The statistics pair non-error cases: flips where both sides decided, score deltas
    # (unrounded) where both sides scored.
    return _Classified(
        statuses=_STATUSES[code].tolist(),
        counts=np.bincount(code, minlength=4).tolist(),
        score_deltas=_optional(rounded),
        baseline_flips=int(np.count_nonzero(down & ~errored)),
        candidate_flips=int(np.count_nonzero(up & ~errored)),
        deltas=raw[~errored & ~np.isnan(raw)].tolist(),
    )


def _aggregate(
    baseline: ComparedRun,
    candidate: ComparedRun,
    counts: list[int],
    per_metric: list[MetricAggregateDelta],
) -> AggregateComparison:
    ba, ca = baseline.aggregate, candidate.aggregate
    return AggregateComparison(
        baseline_metrics=ba,
        candidate_metrics=ca,
        pass_rate_delta=round(ca.pass_rate - ba.pass_rate, DELTA_DP),
        avg_score_delta=round_delta(ba.weighted_metrics_score_pct, ca.weighted_metrics_score_pct),
        latency_avg_delta_ms=round_delta(ba.latency_avg_ms, ca.latency_avg_ms),
        latency_avg_increase_pct=(
            None
            if ba.latency_avg_ms is None or ca.latency_avg_ms is None or ba.latency_avg_ms == 0
            else round((ca.latency_avg_ms - ba.latency_avg_ms) / ba.latency_avg_ms, DELTA_DP)
        ),
        latency_p95_delta_ms=round_delta(ba.latency_p95_ms, ca.latency_p95_ms),
        cost_delta_usd=round_delta(run_cost(baseline), run_cost(candidate)),
        judge_cost_delta_usd=(
            round_delta(ba.judge_cost_usd, ca.judge_cost_usd)
            if ba.judge_cost_usd or ca.judge_cost_usd
            else None
        ),
        total_regressions=counts[_REGRESSION],
        total_improvements=counts[_IMPROVEMENT],
        total_unchanged=counts[_UNCHANGED],
        total_errors=counts[_ERROR],
        per_metric_aggregate_deltas=per_metric,
    )


def _case_columns(
    base: RunColumns, cand: RunColumns, matched: _Matched, classified: _Classified
) -> _CaseColumns:
    bidx, cidx = matched.bidx, matched.cidx
    b_arr, c_arr = base.arrays.take(bidx), cand.arrays.take(cidx)
    return _CaseColumns(
        matched.keys,
        classified.statuses,
        _take(base.passed, bidx),
        _take(cand.passed, cidx),
        _take(base.score, bidx),
        _take(cand.score, cidx),
        classified.score_deltas,
        _take(base.latency, bidx),
        _take(cand.latency, cidx),
        _optional(_round4(c_arr.latency - b_arr.latency)),
        _take(base.flaky, bidx),
        _take(cand.flaky, cidx),
        _take(base.repetitions, bidx),
        _take(cand.repetitions, cidx),
    )


def compare_columns(
    baseline: ComparedRun,
    candidate: ComparedRun,
    base: RunColumns,
    cand: RunColumns,
    thresholds: CompareThresholds | None = None,
    spec: ScoringSpec | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    metric_deltas: bool = True,
    statistics: PairStatistics | None = None,
) -> Comparison:
    """`compare_results` over both sides' columns (see there); the fast core of every compare.

    `statistics` computes the paired statistics (default: `paired_statistics_of` with
    ``resamples`` and ``seed``); a cache of them per pair of runs is passed here.
    """
    effective = thresholds or CompareThresholds()
    used = effective.resolve((spec or candidate.spec).comparison)
    types = metric_types([spec] if spec is not None else [candidate.spec, baseline.spec])
    matched = _match(base, cand)
    bidx, cidx = matched.bidx, matched.cidx
    b_arr, c_arr = base.arrays.take(bidx), cand.arrays.take(cidx)
    classified = _classify(b_arr, c_arr, used.case_score_delta)
    per_metric = _per_metric_means(base, cand, bidx, cidx, types)
    aggregate = _aggregate(baseline, candidate, classified.counts, per_metric)
    if base.multi or cand.multi:
        per_variant = _per_variant(
            base, cand, matched, classified.statuses, spec or baseline.spec, spec or candidate.spec
        )
        aggregate = aggregate.model_copy(update={"per_variant": per_variant})
    warnings = comparison_warnings(baseline, candidate, spec)
    for side, flaky in (("baseline", b_arr.flaky), ("candidate", c_arr.flaky)):
        text = _flaky_warning(side, matched.keys, flaky)
        if text is not None:
            warnings.append(text)
    verdict = regression_verdict(aggregate, used, warnings)
    named: list[NamedScoreComparison] = []
    if base.has_named or cand.has_named:
        named = compare_named_scores(
            base.source,
            cand.source,
            resamples=resamples,
            seed=seed,
            by_variant=base.multi or cand.multi,
        )
    paired = (statistics or partial(paired_statistics_of, resamples=resamples, seed=seed))(
        classified.baseline_flips, classified.candidate_flips, classified.deltas
    )
    return Comparison(
        head={
            "baseline_run_id": str(baseline.run_id),
            "candidate_run_id": str(candidate.run_id),
            "baseline_agent_version": baseline.agent.version,
            "candidate_agent_version": candidate.agent.version,
            "aggregate": aggregate,
        },
        cases=_case_columns(base, cand, matched, classified),
        tail={
            "baseline_only_test_cases": matched.baseline_only,
            "candidate_only_test_cases": matched.candidate_only,
            "config_diff": config_diff(baseline, candidate),
            "verdict": verdict,
            "statistics": paired,
            "warnings": warnings,
        },
        named_scores=named,
        metric_source=_MetricSource(base, cand, bidx, cidx, types) if metric_deltas else None,
    )


def compare_results(
    baseline: ComparedRun,
    candidate: ComparedRun,
    baseline_results: Sequence[TestCaseResult],
    candidate_results: Sequence[TestCaseResult],
    thresholds: CompareThresholds | None = None,
    spec: ScoringSpec | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    metric_deltas: bool = True,
) -> RunComparison:
    """Compare two runs whose repetitions are already reduced to one result per test case.

    ``spec`` (or the candidate's own spec) supplies the default thresholds, overridden by
    ``thresholds``. `compare_runs` is the usual entry point; this is its reduced-input core.
    ``metric_deltas=False`` leaves each case's per-metric deltas out (most of the payload and
    of the time on a large run; the per-metric aggregate deltas stay).
    """
    return compare_columns(
        baseline,
        candidate,
        RunColumns(baseline_results),
        RunColumns(candidate_results),
        thresholds,
        spec,
        resamples=resamples,
        seed=seed,
        metric_deltas=metric_deltas,
    ).model


def compare_runs(
    baseline: ComparedRun,
    candidate: ComparedRun,
    thresholds: CompareThresholds | None = None,
    spec: ScoringSpec | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> RunComparison:
    """Compare a candidate run against a baseline run (DESIGN §5).

    Repetitions are reduced per test case with `reduce_repetitions` under ``spec`` when given,
    else under each run's own spec (never "last row wins"); test cases are matched by key.
    Thresholds are ``thresholds`` overrides over the ``comparison`` section of ``spec`` (or the
    candidate's spec). ``resamples`` and ``seed`` drive the bootstrap of the statistics.
    """
    baseline_results = reduce_repetitions(baseline.cases, spec or baseline.spec)
    candidate_results = reduce_repetitions(candidate.cases, spec or candidate.spec)
    return compare_results(
        baseline,
        candidate,
        baseline_results,
        candidate_results,
        thresholds,
        spec,
        resamples=resamples,
        seed=seed,
    )
