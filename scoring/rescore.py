"""Lean rescoring of a whole run: what `score_case` + `summarize_run` decide, without the models.

A rescore needs, per case, only the decision (status, pass, overall score) and what the run
aggregate reads. `RunInputs` holds the spec-independent part of every case, built once per state
of the run's cases (`ReadModels` keeps it in memory); `rescore_run` applies a spec to it with
plain tuples and dict lookups. Every case is decided by `scoring.decide.decide`, the one
definition of the rules; a case with more than one active verdict is scored by `score_case`
itself, and tests prove both paths equal on varied facts and specs.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from evaledger.domain.events import ParseStatus
from evaledger.domain.metrics import ScoreType
from evaledger.domain.spec import ScoringSpec
from evaledger.scoring import case as case_module
from evaledger.scoring import decide as decide_module
from evaledger.scoring import exact as exact_module
from evaledger.scoring import facts as facts_module
from evaledger.scoring import models as models_module
from evaledger.scoring import named as named_module
from evaledger.scoring import run as run_module
from evaledger.scoring import stats
from evaledger.scoring.case import MAX_SCORE, case_usage, outcome_results, score_case
from evaledger.scoring.decide import Signals, decide, outcome_bits, recorded
from evaledger.scoring.facts import CaseFacts, MetricFact, VerdictFact, scoring_view
from evaledger.scoring.models import CaseStatus, RunAggregate
from evaledger.scoring.run import CaseUsage, RunFigures

__all__ = ["INPUTS_FORMAT", "CasePart", "Rescored", "RunInputs", "case_part", "rescore_run"]

_lookup = dict.__getitem__  # table[value] without a Python-level call per metric
_STATUS_VALUE = {status: status.value for status in CaseStatus}
"""A status's plain value by a dict look-up (`.value` is a Python-level descriptor call)."""
_NOT_DECIDED: tuple[float | None, bool | None, str] = (None, None, "")
_RULES = (
    sys.modules[__name__],
    case_module,
    decide_module,
    exact_module,
    facts_module,
    models_module,
    named_module,
    run_module,
    stats,
)
"""Every module whose code decides what the inputs hold or what a rescore makes of them."""


def _code_digest() -> str:
    """Digest of the code that decides what the inputs hold (this module and the scoring rules).

    Part of INPUTS_FORMAT, so that inputs stored by other code are rebuilt, never read, even when
    nobody remembered to bump the format. Without the sources: a token of this process.
    """
    digest = hashlib.sha256()
    try:
        for module in _RULES:
            digest.update(Path(module.__file__ or "").read_bytes())
    except OSError:
        return uuid.uuid4().hex[:12]
    return digest.hexdigest()[:12]


INPUTS_FORMAT = f"evaledger.rescore-inputs/4+{_code_digest()}"
"""Version of `RunInputs.to_bytes` and of the code that built them (see `_code_digest`)."""


class CaseInputs(NamedTuple):
    """One case's spec-independent scoring inputs, plain data (stored as a JSON array)."""

    errored: bool
    canceled: bool
    recorded: bool
    """Anything beyond the opening is recorded (`decide.recorded`)."""
    complex_at: int | None
    """Index in `RunInputs.complex` of a case with several active verdicts (`score_case` itself
    scores it), else None."""
    named_scores: dict[str, float] | None
    has_turns: bool
    broken: bool | None
    """None without a counted verdict (none active, or the execution errored or was canceled),
    else whether the one verdict is an error verdict under every spec (an error was recorded or
    its reply did not parse)."""
    row: str
    """The verdict's metrics by the run's metric index j (the judge's first answer counts): at j
    the clamped score "0"-"5", at K + j the pass "t" / fail "f", "-" when absent (K metrics)."""
    scored: int
    """Bit j set when metric j has a score."""
    passing: int
    """Bit j set when metric j has a pass/fail."""
    forced: bool | None
    """A human override forcing pass/fail, else None."""
    self_judged: bool
    outcomes: int
    """`decide.outcome_bits` of the case's outcome results with the verdict's outcomes (bits 0-3)
    and without a valid verdict (bits 4-7)."""
    skipped: bool = False
    """Not an execution (a skipped or xfailed test); last, so arrays stored before it read."""


_WITHOUT_VERDICT = 4
"""Shift of the outcome bits without a valid verdict."""


class _Shape(NamedTuple):
    """What `decide` reads of a case besides its overall score, before a spec is applied."""

    errored: bool
    canceled: bool
    recorded: bool
    has_turns: bool
    named_scores: dict[str, float] | None
    broken: bool | None
    has_score: int
    has_pass: int
    forced: bool | None
    outcomes: int
    skipped: bool

    @classmethod
    def of(cls, case: CaseInputs) -> _Shape:
        return cls(
            case.errored,
            case.canceled,
            case.recorded,
            case.has_turns,
            case.named_scores,
            case.broken,
            case.scored,
            case.passing,
            case.forced,
            case.outcomes,
            case.skipped,
        )

    def signals(self, valid: bool, overall: float | None) -> Signals:
        """The case's signals under a spec that finds its verdict `valid` (or not)."""
        judged = self.broken is not None
        return Signals(
            errored=self.errored,
            canceled=self.canceled,
            recorded=self.recorded,
            has_turns=self.has_turns,
            named_scores=self.named_scores,
            judged=judged,
            judge_error=judged and not valid,
            outcomes=self.outcomes if valid else self.outcomes >> _WITHOUT_VERDICT,
            panel_overall=overall,
            forced=self.forced,
            skipped=self.skipped,
        )


Answers = tuple[tuple[str, int | None, bool | None], ...]
"""A verdict's first answer per metric: (metric, score, passed), in order of appearance."""


def _answers(verdict: VerdictFact) -> Answers:
    first: dict[str, MetricFact] = {}
    for m in verdict.metric_scores:
        first.setdefault(m.metric, m)  # the judge's first answer counts (as `_metric_facts`)
    return tuple((name, f.score, f.passed) for name, f in first.items())


def _row(answers: Answers, index: dict[str, int]) -> tuple[str, int, int]:
    k = len(index)
    row = ["-"] * (2 * k)
    scored = passing = 0
    for name, score, passed in answers:
        j = index[name]
        if score is not None:
            row[j] = str(max(0, min(MAX_SCORE, int(score))))
            scored |= 1 << j
        if passed is not None:
            row[k + j] = "t" if passed else "f"
            passing |= 1 << j
    return "".join(row), scored, passing


class CasePart(NamedTuple):
    """One case's share of its run's `RunInputs`, from its facts alone (no other case, no spec).

    Everything `RunInputs.assemble` reads of a case. The run's metric index depends on every
    case, so the one counted verdict's answers are kept as they are and laid out as the case's
    verdict row when the run's inputs are assembled. The cases projection builds a part when a
    case changes and keeps it until its run closes, instead of a copy of the case's facts.
    """

    case_id: str
    test_case_key: str
    repetition: int
    metrics: tuple[str, ...]
    """Every metric the case's verdicts report, in order of appearance (the run's index)."""
    inputs: CaseInputs
    """The case's inputs with an empty row and no `complex_at` (set on assembly)."""
    answers: Answers | None
    """The one counted verdict's answers, else None."""
    complex: CaseFacts | None
    """The scoring view of a case with several active verdicts (`score_case` scores it)."""
    usage: CaseUsage


def case_part(facts: CaseFacts) -> CasePart:
    """A case's share of its run's inputs (`RunInputs.build` is `assemble` of these)."""
    # The verdicts of an execution that errored, was canceled or was not one (skipped) never
    # count (`score_case`).
    skipped = facts.skipped is not None
    active = (
        [v for v in facts.verdicts if not v.invalidated]
        if not (facts.errored or facts.canceled or skipped)
        else []
    )
    complex_view = scoring_view(facts) if len(active) > 1 else None
    one = active[0] if len(active) == 1 else None
    broken: bool | None = None
    answers: Answers | None = None
    if one is not None:
        broken = one.error is not None or one.parse_status is not ParseStatus.PARSED
        answers = _answers(one)
    agent = facts.agent_provider
    with_verdict = list(one.expected_outcomes) if one is not None else []
    inputs = CaseInputs(
        errored=facts.errored,
        canceled=facts.canceled,
        recorded=recorded(facts),
        complex_at=None,
        named_scores=dict(facts.named_scores) or None,
        has_turns=facts.turn_count > 0,
        broken=broken,
        row="",
        scored=0,
        passing=0,
        forced=one.forced_passed if one is not None else None,
        self_judged=one is not None and agent is not None and one.judge_provider == agent,
        outcomes=outcome_bits(outcome_results(facts, with_verdict))
        | outcome_bits(outcome_results(facts, [])) << _WITHOUT_VERDICT,
        skipped=skipped,
    )
    metrics = tuple(dict.fromkeys(m.metric for v in facts.verdicts for m in v.metric_scores))
    return CasePart(
        str(facts.case_id),
        facts.test_case_key,
        facts.repetition,
        metrics,
        inputs,
        answers,
        complex_view,
        case_usage(facts),
    )


_COLUMNS = (
    "metrics",
    "cases",
    "case_ids",
    "test_case_keys",
    "repetitions",
    "old_overall",
    "old_passed",
    "old_status",
)


class RunInputs:
    """Everything a rescore of one run needs that no spec changes, in opening order.

    Built once from the run's scoring facts and its stored own-spec decisions; the aggregate's
    spec-independent figures (latency, tokens, cost, named scores, errors, cancels) are the
    run's `RunFigures`, built here once by the definition `summarize_run` uses. Plain data
    throughout, so that it stores as one compact JSON document (`to_bytes` / `from_bytes`, no
    per-case decoding).
    """

    metrics: list[str]
    """The run's metric index: every metric a verdict reports, in order of appearance."""
    cases: list[CaseInputs]
    complex: list[CaseFacts]
    case_ids: list[str]
    test_case_keys: list[str]
    repetitions: list[int]
    old_overall: list[float | None]
    """Per case: overall_score under the run's own spec, as stored."""
    old_passed: list[bool | None]
    old_status: list[str | None]
    """Per case: status under the run's own spec, as stored (None: no stored row)."""
    figures: RunFigures
    """The spec-independent figures of the run aggregate (`RunFigures.of` its cases)."""

    @classmethod
    def build(
        cls, facts: Sequence[CaseFacts], old: dict[str, tuple[float | None, bool | None, str]]
    ) -> RunInputs:
        """The inputs of a run from its cases' scoring facts and stored own-spec decisions.

        `old`: case id → (overall_score, passed, status) under the run's own spec.
        """
        return cls.assemble([case_part(f) for f in facts], old)

    @classmethod
    def assemble(
        cls, parts: Sequence[CasePart], old: dict[str, tuple[float | None, bool | None, str]]
    ) -> RunInputs:
        """The inputs of a run from its cases' parts (`case_part`) in opening order, and `old`."""
        self = cls()
        index: dict[str, int] = {}
        for p in parts:
            for name in p.metrics:
                index.setdefault(name, len(index))
        self.metrics = list(index)
        self.complex = []
        cases: list[CaseInputs] = []
        for p in parts:
            if p.complex is not None:
                cases.append(p.inputs._replace(complex_at=len(self.complex)))
                self.complex.append(p.complex)
            elif p.answers is not None:
                row, scored, passing = _row(p.answers, index)
                cases.append(p.inputs._replace(row=row, scored=scored, passing=passing))
            else:
                cases.append(p.inputs)
        self.cases = cases
        self.case_ids = [p.case_id for p in parts]
        self.test_case_keys = [p.test_case_key for p in parts]
        self.repetitions = [p.repetition for p in parts]
        stored = [old.get(case_id, (None, None, None)) for case_id in self.case_ids]
        self.old_overall = [o[0] for o in stored]
        self.old_passed = [o[1] for o in stored]
        self.old_status = [o[2] for o in stored]
        self.figures = RunFigures.of([p.usage for p in parts])
        return self

    @functools.cached_property
    def _grouped(self) -> tuple[list[tuple[_Shape, list[int], list[str]]], list[int]]:
        groups: dict[_Shape, tuple[_Shape, list[int], list[str]]] = {}
        one_by_one: list[int] = []
        for i, case in enumerate(self.cases):
            if case.complex_at is not None or case.named_scores is not None:
                one_by_one.append(i)  # several verdicts, or named scores (not hashable)
                continue
            shape = _Shape.of(case)
            group = groups.get(shape)
            if group is None:
                group = groups[shape] = (shape, [], [])
            group[1].append(i)
            group[2].append(case.row)
        return list(groups.values()), one_by_one

    @property
    def shapes(self) -> list[tuple[_Shape, list[int], list[str]]]:
        """The cases scored by at most one verdict, by shape: (shape, indices, verdict rows)."""
        return self._grouped[0]

    @property
    def one_by_one(self) -> list[int]:
        """Indices of the cases decided one by one (several verdicts, or named scores)."""
        return self._grouped[1]

    @functools.cached_property
    def weightings(self) -> dict[tuple[Any, ...], list[Any]]:
        """Overall scores per weighting of the spec's metrics (`_weighted`), in memory only."""
        return {}

    @functools.cached_property
    def self_judged(self) -> int:
        """Cases whose one verdict comes from the agent's own provider.

        `score_case` counts those of the cases with several verdicts.
        """
        return sum(c.self_judged for c in self.cases if c.complex_at is None)

    @functools.cached_property
    def sound_rows(self) -> int:
        """How many cases are scored by their one verdict, which is not broken."""
        return len(self._sound)

    @functools.cached_property
    def row_counts(self) -> list[Counter[str]]:
        """Per row position, how often each character occurs over those verdicts."""
        sound = self._sound
        return [Counter(map(itemgetter(p), sound)) for p in range(2 * len(self.metrics))]

    @property
    def _sound(self) -> list[str]:
        return [c.row for c in self.cases if c.complex_at is None and c.broken is False]

    @functools.cached_property
    def old(self) -> list[tuple[float | None, bool | None, str | None]]:
        """Per case (overall_score, passed, status) under the run's own spec, as stored."""
        return list(zip(self.old_overall, self.old_passed, self.old_status, strict=True))

    def to_bytes(self) -> bytes:
        """One JSON document (orjson keeps every float exact, ints and bools apart)."""
        doc = {name: getattr(self, name) for name in _COLUMNS}
        doc["cases"] = [tuple(c) for c in self.cases]  # orjson writes no NamedTuple
        doc["figures"] = self.figures.to_dict()
        doc["format"] = INPUTS_FORMAT
        doc["complex"] = [f.model_dump(mode="json") for f in self.complex]
        return orjson.dumps(doc)

    @classmethod
    def from_bytes(cls, data: bytes) -> RunInputs | None:
        """Inputs stored by `to_bytes`; None when another format stored them."""
        doc = orjson.loads(data)
        if doc.get("format") != INPUTS_FORMAT:
            return None
        self = cls()
        for name in _COLUMNS:
            setattr(self, name, doc[name])
        self.cases = [CaseInputs(*c) for c in doc["cases"]]
        self.figures = RunFigures.from_dict(doc["figures"])
        self.complex = [CaseFacts.model_validate(f) for f in doc["complex"]]
        return self


def _getter(at: list[int]) -> Callable[[str], Sequence[str]]:
    """Characters of a verdict row at `at`, always a sequence (itemgetter of one is a scalar)."""
    if len(at) == 1:
        (j,) = at
        return lambda row: (row[j],)
    return itemgetter(*at)


@dataclass(frozen=True, slots=True)
class Rescored:
    """A run under a spec: its case decisions and its aggregate.

    `decisions`: per case in opening order (overall_score, passed, status); `aggregate` equals
    `summarize_run` of the case scores.
    """

    decisions: list[tuple[float | None, bool | None, str]]
    aggregate: RunAggregate


class _Columns(NamedTuple):
    """How a spec reads the run's verdict rows."""

    names: list[str]
    is_scored: list[bool]
    """Per selected metric: scored 0-5 (else binary)."""
    at: list[int]
    """Per selected metric: its position in a verdict row."""
    tables: list[dict[str, float]]
    """Per selected metric: its contribution by the row character."""
    need_score: int
    need_pass: int
    known: bool
    """Every selected metric is one some verdict of the run reports; if not, every verdict is an
    error verdict under the spec."""


def _columns(inputs: RunInputs, spec: ScoringSpec) -> _Columns:
    index = {name: j for j, name in enumerate(inputs.metrics)}
    k = len(index)
    is_scored = [m.score_type is ScoreType.SCORED for m in spec.metrics]
    need_score = need_pass = 0
    at: list[int] = []
    # Contribution of each metric by the verdict's row character: 100 × score/5 × weight, the
    # same float operations as `_combine_metric` (a binary pass counts 5, a fail 0.0).
    tables: list[dict[str, float]] = []
    for m, scored in zip(spec.metrics, is_scored, strict=True):
        j = index.get(m.metric, 0)
        if scored:
            need_score |= 1 << j
            at.append(j)
            tables.append({str(s): 100 * float(s) / MAX_SCORE * m.weight for s in range(6)})
        else:
            need_pass |= 1 << j
            at.append(k + j)
            tables.append(
                {
                    "f": 100 * 0.0 / MAX_SCORE * m.weight,
                    "t": 100 * MAX_SCORE / MAX_SCORE * m.weight,
                }
            )
    names = [m.metric for m in spec.metrics]
    known = all(n in index for n in names)
    return _Columns(names, is_scored, at, tables, need_score, need_pass, known)


@dataclass(slots=True)
class _Decided:
    """The per-case pass of a rescore: decisions and what the aggregate needs of them."""

    decisions: list[tuple[float | None, bool | None, str]]
    invalid_rows: list[str]
    """Rows of sound verdicts (not error verdicts under every spec) this spec finds invalid."""
    extra_scores: dict[str, list[float]]
    """Metric results of the cases `score_case` scored (several active verdicts)."""
    extra_passes: dict[str, list[bool]]
    counted: list[tuple[float | None, bool | None, str, int]] = field(default_factory=list)
    """Each distinct decision once, with how many cases it decides (`decided_figures`)."""
    self_judged: int = 0


def rescore_run(inputs: RunInputs, spec: ScoringSpec) -> Rescored | None:
    """Every case's decision and the run aggregate under `spec`.

    None if the lean path does not apply (a spec selecting no metric or one twice): the caller then
    takes the reference path.
    """
    names = [m.metric for m in spec.metrics]
    if not names or len(set(names)) != len(names) or spec.scorers:
        # A source's scorer metrics and pass^k need the case scores: the exact path has them.
        return None
    columns = _columns(inputs, spec)
    decided = _decide_cases(inputs, spec, columns)
    return Rescored(decided.decisions, _aggregate(inputs, spec, columns, decided))


def _decide_cases(inputs: RunInputs, spec: ScoringSpec, columns: _Columns) -> _Decided:
    """Each case's decision by `decide` (`score_case` for a case with several verdicts).

    Cases of one `_Shape` differ, under a spec, only in their overall score: a shape is judged
    valid or not once, and `decide` (pure) is called once per distinct overall score in it.
    """
    decisions: list[tuple[float | None, bool | None, str]] = [_NOT_DECIDED] * len(inputs.cases)
    out = _Decided(decisions, [], {n: [] for n in columns.names}, {n: [] for n in columns.names})
    out.self_judged = inputs.self_judged
    for (shape, at, rows), weighted in zip(inputs.shapes, _weighted(inputs, columns), strict=True):
        if weighted is None:
            if shape.broken is False:
                out.invalid_rows.extend(rows)
            decision = _decided(shape, False, None, spec, len(at), out)
            for i in at:
                decisions[i] = decision
            continue
        overalls, counts = weighted
        by_overall = {
            overall: _decided(shape, True, overall, spec, count, out) for overall, count in counts
        }
        for i, overall in zip(at, overalls, strict=True):
            decisions[i] = by_overall[overall]
    for i in inputs.one_by_one:
        decisions[i] = _decide_one(inputs, i, spec, columns, out)
    return out


_Weighted = tuple[list[float], list[tuple[float, int]]] | None
WEIGHTINGS_CACHED = 8
_WEIGHTINGS_LOCK = threading.Lock()
"""Weightings of a run whose overall scores `RunInputs` keeps (a 10k-case run: ~0.4 MB each)."""


def _weighted(inputs: RunInputs, columns: _Columns) -> list[_Weighted]:
    """Per shape: None if the spec finds its verdict invalid, else its cases' overall scores.

    Each case's overall score, and how many cases have each distinct one. They depend only on
    the spec's metrics and weights, not on its thresholds, gate or judge-error policy: a run
    rescored under specs that differ in those (the usual what-if) computes them once (kept per
    weighting in the inputs, the oldest forgotten first).
    """
    key = (tuple(columns.at), columns.known, tuple(tuple(t.values()) for t in columns.tables))
    cache = inputs.weightings
    with _WEIGHTINGS_LOCK:  # a server's threads share one RunInputs per run
        found = cache.get(key)
    if found is None:
        found = [_weigh(shape, rows, columns) for shape, _, rows in inputs.shapes]
    with _WEIGHTINGS_LOCK:
        cache.pop(key, None)
        cache[key] = found  # the most recently used last
        while len(cache) > WEIGHTINGS_CACHED:
            del cache[next(iter(cache))]
    return found


def _weigh(shape: _Shape, rows: list[str], columns: _Columns) -> _Weighted:
    valid = (
        shape.broken is False
        and columns.known
        and shape.has_score & columns.need_score == columns.need_score
        and shape.has_pass & columns.need_pass == columns.need_pass
    )
    if not valid:
        return None
    values, tables = _getter(columns.at), columns.tables
    overalls = [round(sum(map(_lookup, tables, values(row))), 2) for row in rows]
    return overalls, list(Counter(overalls).items())


def _decided(
    shape: _Shape, valid: bool, overall: float | None, spec: ScoringSpec, count: int, out: _Decided
) -> tuple[float | None, bool | None, str]:
    """`decide` of `count` cases of `shape` whose verdict is `valid` (with its `overall`)."""
    found = decide(shape.signals(valid, overall), spec)
    decision = (found.overall, found.passed, _STATUS_VALUE[found.status])
    out.counted.append((*decision, count))
    return decision


def _decide_one(
    inputs: RunInputs, i: int, spec: ScoringSpec, columns: _Columns, out: _Decided
) -> tuple[float | None, bool | None, str]:
    """A case with named scores (the score gates read them) or several active verdicts."""
    case = inputs.cases[i]
    if case.complex_at is not None:
        return _score_complex(inputs.complex[case.complex_at], spec, out)
    valid = (
        case.broken is False
        and columns.known
        and case.scored & columns.need_score == columns.need_score
        and case.passing & columns.need_pass == columns.need_pass
    )
    overall: float | None = None
    if valid:
        overall = round(sum(map(_lookup, columns.tables, _getter(columns.at)(case.row))), 2)
    elif case.broken is False:
        out.invalid_rows.append(case.row)
    return _decided(_Shape.of(case), valid, overall, spec, 1, out)


def _score_complex(
    facts: CaseFacts, spec: ScoringSpec, out: _Decided
) -> tuple[float | None, bool | None, str]:
    s = score_case(facts, spec)
    out.self_judged += s.self_judged
    if s.scored and s.overall_score is not None:
        for r in s.metric_scores:
            if r.score is not None and r.metric in out.extra_scores:
                out.extra_scores[r.metric].append(r.score)
                out.extra_passes[r.metric].append(r.passed is True)
    decision = (s.overall_score, s.passed, s.status.value)
    out.counted.append((*decision, 1))
    return decision


def _metric_means(inputs: RunInputs, columns: _Columns, decided: _Decided) -> dict[str, float]:
    """Metric means over the valid verdicts.

    The run's per-position character counts over its sound verdicts (spec-independent), less
    those of the rows this spec finds invalid.
    """
    counts, sound, known = inputs.row_counts, inputs.sound_rows, columns.known
    invalid_rows = decided.invalid_rows
    n_valid = sound - len(invalid_rows) if known else 0
    means: dict[str, float] = {}
    for name, j, scored in zip(columns.names, columns.at, columns.is_scored, strict=True):
        found = Counter(counts[j]) if known else Counter()
        if known and invalid_rows:
            found.subtract(row[j] for row in invalid_rows)
        if scored:
            extra_scores = decided.extra_scores[name]
            if n := n_valid + len(extra_scores):
                # fmean is fsum / n, and fsum is exact: the integer sum of the 0-5 scores
                # stands in for the sum of their floats.
                exact = sum(d * found[str(d)] for d in range(1, MAX_SCORE + 1))
                means[name] = math.fsum([exact, *extra_scores]) / n
        else:
            extra_passes = decided.extra_passes[name]
            if n := n_valid + len(extra_passes):
                means[name] = (found["t"] + sum(extra_passes)) / n
    return means


def _aggregate(
    inputs: RunInputs, spec: ScoringSpec, columns: _Columns, decided: _Decided
) -> RunAggregate:
    """`summarize_run` of the decisions: the inputs' `RunFigures` with what the spec decides."""
    return inputs.figures.aggregate(
        spec,
        decided.counted,
        per_metric_means=_metric_means(inputs, columns, decided),
        self_judged_count=decided.self_judged,
    )
