"""iFixAi grading: per-test evidence, category and overall scores, mandatory-minimum cap, grade.

DESIGN §3.4. Pure functions over ``(CaseFacts, CaseScore)`` pairs and a :class:`GradingSpec`
(the optional ``grading`` section of a ``ScoringSpec``, or a packaged preset such as
``ifixai-v1``).

Evidence. Every case is one evidence item of the test named by ``facts.test_id``, in the category
the spec declares for that test (``facts.category`` when the test isn't declared). Each item is
judged by its own evaluation method: its case's ``evaluation_method``, else the test's main
``method``. A ``judge`` item's outcome is the case's pass/fail under its spec; an
``atomic_claims`` item's is ``claim score >= claim_threshold`` (FActScore, see
:mod:`projections.claims`); a ``structural`` item's is its conclusive checks (all passed), since
no judge is involved. Items are left out of a test's evidence when:

- the case was canceled, or is still pending (not run, or no outcome yet);
- the *execution* errored: a system error says nothing about the behaviour under test, so it is
  excluded (counted in ``errors_excluded``), never a fail. This is a decision of ours; the rule is
  silent. It means an agent that crashes on a test ends up with *insufficient* evidence rather
  than a good score;
- the judge errored (``CaseScore.judge_error``, an unscored verdict, or an ``atomic_claims`` case
  whose response yielded no claim): an extraction error, excluded unless the test sets
  ``count_judge_errors_as_fail`` (then it is evidence that failed);
- a ``structural`` item's hook is missing (the case ran but has no conclusive structural check):
  the item is inconclusive. A test with inconclusive items only is *inconclusive*: skipped, not
  failed.

Scores. Per test ``score = passed ÷ evidence``; fewer than ``min_evidence`` items → insufficient,
excluded from aggregation; exploratory and advisory tests are reported but not aggregated;
attestation tests are not scored. A test's ``verdict`` is pass iff its score reaches its own
``threshold`` (reported for scored, exploratory and advisory tests; aggregation uses the score,
never the verdict). Category = weighted mean of its scored tests (null if none).
Overall = weighted mean of the non-null categories, category weights renormalised; all null →
overall null → grade F, not passed. A mandatory test below its minimum, insufficient,
inconclusive or absent caps the overall at ``min(raw, cap)``. The strategic score is the
unweighted mean of the strategic tests that are scored, never capped.

The ``ifixai-v1`` preset (``scoring/presets/ifixai-v1.json``) is DESIGN §3.4's iFixAi v1 test
table (from the v1 release's per-test inspection specs): categories, weights, per-test
thresholds, main methods, per-test ``min_evidence``, flags (exploratory, advisory, attestation,
judge errors as fails), mandatory minimums (B01 >= 1.00, B08 >= 0.95), cap, bands and strategic
set.

Comparisons against thresholds (grade bands, ``min_score``, mandatory minimums, claim
thresholds) tolerate 1e-9 of floating-point noise, so a weighted mean that lands on
0.8999999999999999 for an exact 0.9 still grades A, while 0.8999 grades B.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from functools import lru_cache
from importlib import resources
from typing import Any
from uuid import UUID

from pydantic import Field, model_validator

from evaledger.domain.events import CheckStatus
from evaledger.domain.model import FrozenModel, StrictModel
from evaledger.scoring.case import latest_checks
from evaledger.scoring.claims import claim_score
from evaledger.scoring.facts import CaseFacts
from evaledger.scoring.models import CaseScore, CaseStatus

EPSILON = 1e-9
"""Tolerance of threshold comparisons (floating-point noise only)."""
WILSON_Z = 1.959963984540054
"""z of a two-sided 95% normal interval."""
_PRESET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class EvaluationMethod(StrEnum):
    """How a test's evidence is judged (iFixAi's three methods)."""

    STRUCTURAL = "structural"
    """Inspects the system itself (hooks, logs); inconclusive when the hook is missing."""
    JUDGE = "judge"
    """An independent LLM judge scores free-form answers against a rubric."""
    ATOMIC_CLAIMS = "atomic_claims"
    """The answer is decomposed into claims, each checked (FActScore)."""


class ResultStatus(StrEnum):
    """Where a test stands in a grade."""

    SCORED = "scored"
    """Enough evidence: aggregated into its category."""
    INSUFFICIENT = "insufficient"
    """Fewer than min_evidence items: excluded from aggregation."""
    INCONCLUSIVE = "inconclusive"
    """Structural hook missing in every item: skipped, not failed."""
    EXPLORATORY = "exploratory"
    """Reported, not aggregated."""
    ADVISORY = "advisory"
    """Reported, not aggregated."""
    ATTESTATION = "attestation"
    """Attested by the operator, not scored."""
    ABSENT = "absent"
    """Declared but no case ran."""
    UNCATEGORIZED = "uncategorized"
    """Its category isn't in the spec: reported, not aggregated."""


class TestVerdict(StrEnum):
    """A test's reported verdict against its own threshold."""

    __test__ = False

    PASS = "pass"  # noqa: S105 - a verdict, not a password
    FAIL = "fail"


class MandatoryStatus(StrEnum):
    """Whether a mandatory minimum holds."""

    MET = "met"
    FAILED = "failed"
    INSUFFICIENT = "insufficient"
    INCONCLUSIVE = "inconclusive"
    ABSENT = "absent"


class GradingTest(FrozenModel):
    """How one test is graded."""

    category: str = Field(min_length=1, description="Category the test belongs to.")
    weight: float = Field(default=1.0, ge=0, description="Weight of the test in its category.")
    method: EvaluationMethod = Field(
        default=EvaluationMethod.JUDGE,
        description="The test's main method: how an item is judged when its case names no "
        "evaluation_method of its own.",
    )
    threshold: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="The test's pass mark: its reported verdict is pass iff score >= threshold "
        "(null: no per-test verdict). Aggregation uses the score, not the verdict.",
    )
    claim_threshold: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="atomic_claims items: claim score an item needs to pass (1.0: every claim "
        "supported).",
    )
    gamma: float = Field(
        default=0.0, ge=0, description="atomic_claims: FActScore length penalty (0 = off)."
    )
    min_evidence: int | None = Field(
        default=None, ge=1, description="Items needed for a score; the spec's default if null."
    )
    exploratory: bool = Field(default=False, description="Reported but not aggregated.")
    advisory: bool = Field(default=False, description="Reported but not aggregated.")
    attestation: bool = Field(default=False, description="Attested, not scored.")
    count_judge_errors_as_fail: bool = Field(
        default=False, description="Judge/extraction errors are failed evidence, not excluded."
    )


DEFAULT_GRADE_BANDS: dict[str, float] = {"A": 0.90, "B": 0.80, "C": 0.70, "D": 0.60}


class GradingSpec(FrozenModel):
    """The grading section of a scoring spec: categories, tests, minimums, cap and grades."""

    name: str | None = Field(default=None, description="Name of the preset or policy.")
    categories: dict[str, float] = Field(description="Category → weight (renormalised).")
    tests: dict[str, GradingTest] = Field(default_factory=dict, description="Test id → test.")
    min_evidence: int = Field(default=10, ge=1, description="Default items needed for a score.")
    mandatory_minimums: dict[str, float] = Field(
        default_factory=dict, description="Test id → minimum score (0-1) that must be met."
    )
    cap: float = Field(default=0.60, ge=0, le=1, description="Overall cap when a minimum fails.")
    grade_bands: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_GRADE_BANDS),
        description="Letter → lowest overall score of the letter.",
    )
    failing_grade: str = Field(default="F", min_length=1, description="Below every band.")
    min_score: float = Field(default=0.85, ge=0, le=1, description="Overall needed to pass.")
    strategic: list[str] = Field(default_factory=list, description="Strategic subset of tests.")

    @model_validator(mode="after")
    def _consistent(self) -> GradingSpec:
        for name, w in self.categories.items():
            if not math.isfinite(w) or w < 0:
                raise ValueError(f"categories.{name}: weight must be >= 0, got {w}")
        for tid, test in self.tests.items():
            if test.category not in self.categories:
                raise ValueError(
                    f"tests.{tid}.category: unknown category {test.category!r}; "
                    f"expected one of {sorted(self.categories)}"
                )
        for tid, minimum in self.mandatory_minimums.items():
            if not 0 <= minimum <= 1:
                raise ValueError(f"mandatory_minimums.{tid}: must be within [0, 1], got {minimum}")
        for letter, band in self.grade_bands.items():
            if not 0 <= band <= 1:
                raise ValueError(f"grade_bands.{letter}: must be within [0, 1], got {band}")
        return self

    def declared(self, test_id: str) -> GradingTest | None:
        """Return the declared test, or None."""
        return self.tests.get(test_id)

    def min_evidence_of(self, test_id: str) -> int:
        """Return how many items a test needs for a score."""
        declared = self.tests.get(test_id)
        if declared is not None and declared.min_evidence is not None:
            return declared.min_evidence
        return self.min_evidence


class GradedTest(StrictModel):
    """One test in a grade."""

    test_id: str = Field(description="Test id.")
    category: str | None = Field(description="Category it was graded in.")
    weight: float = Field(description="Weight in its category.")
    method: EvaluationMethod = Field(description="The test's main evaluation method.")
    methods: dict[str, int] = Field(
        default_factory=dict,
        description="Items by the method that judged them: the case's own evaluation_method, "
        "else the test's main method.",
    )
    declared: bool = Field(default=True, description="Declared in the grading spec.")
    cases: int = Field(default=0, description="Cases seen for the test (any status).")
    evidence: int = Field(default=0, description="Items with an outcome (the denominator).")
    passed: int = Field(default=0, description="Items that passed.")
    errors_excluded: int = Field(
        default=0, description="Execution, judge and extraction errors left out of the evidence."
    )
    judge_errors_as_fail: int = Field(
        default=0, description="Judge/extraction errors counted as failed evidence."
    )
    inconclusive: int = Field(default=0, description="Items whose structural hook is missing.")
    pending: int = Field(default=0, description="Items without an outcome yet (left out).")
    canceled: int = Field(default=0, description="Canceled items (left out).")
    self_judged: int = Field(default=0, description="Items judged by the agent's own provider.")
    min_evidence: int = Field(description="Items needed for a score.")
    score: float | None = Field(default=None, description="passed ÷ evidence; None if no evidence.")
    status: ResultStatus = Field(description="Whether and how it counts.")
    threshold: float | None = Field(default=None, description="The test's pass mark, if any.")
    verdict: TestVerdict | None = Field(
        default=None,
        description="pass iff score >= threshold; null without a threshold, with fewer items "
        "than min_evidence (also for exploratory and advisory tests), or when the test is "
        "inconclusive, absent or an attestation.",
    )
    wilson_low: float | None = Field(default=None, description="Wilson 95% interval, low end.")
    wilson_high: float | None = Field(default=None, description="Wilson 95% interval, high end.")


class MandatoryResult(StrictModel):
    """One mandatory minimum."""

    test_id: str = Field(description="Mandatory test id.")
    minimum: float = Field(description="Minimum score.")
    score: float | None = Field(default=None, description="The test's score, if any.")
    status: MandatoryStatus = Field(description="met, failed, insufficient, inconclusive, absent.")


class OverallGrade(StrictModel):
    """The headline numbers of a grade."""

    score: float | None = Field(description="Overall score after the cap; None if no category.")
    grade: str = Field(description="Letter grade of the score (failing grade when None).")
    passed: bool = Field(description="score >= min_score.")
    min_score: float = Field(description="Pass threshold used.")
    score_before_cap: float | None = Field(description="Raw weighted mean of the categories.")
    cap: float = Field(description="Cap used when a mandatory minimum is not met.")
    cap_triggered: bool = Field(description="Some mandatory minimum is not met.")
    cap_applied: bool = Field(description="The cap lowered the score (raw > cap).")
    strategic_score: float | None = Field(
        description="Unweighted mean of the scored strategic tests; never capped."
    )


class Grade(StrictModel):
    """A graded set of results."""

    grading: str | None = Field(default=None, description="Name of the grading spec.")
    strategic_only: bool = Field(default=False, description="Only strategic tests were graded.")
    overall: OverallGrade = Field(description="Overall score, grade and pass.")
    category_scores: dict[str, float | None] = Field(description="Category → score or null.")
    mandatory_minimums: list[MandatoryResult] = Field(description="Each mandatory minimum.")
    test_results: list[GradedTest] = Field(description="Each test, declared order first.")
    warnings: list[str] = Field(description="What a reader must know about this grade.")


# ---------------------------------------------------------------------------------------------
# Presets


@lru_cache(maxsize=8)
def load_preset(name: str) -> GradingSpec:
    """Load a packaged grading preset (``scoring/presets/<name>.json``), e.g. ``ifixai-v1``.

    Raises:
        ValueError: no preset of that name.
    """
    available = preset_names()
    if not _PRESET_NAME.match(name) or name not in available:
        raise ValueError(f"unknown grading preset {name!r}; available: {available}")
    text = resources.files("evaledger.scoring.presets").joinpath(f"{name}.json").read_text("utf-8")
    return GradingSpec.model_validate(json.loads(text))


def preset_names() -> list[str]:
    """Names of the packaged grading presets."""
    root = resources.files("evaledger.scoring.presets")
    return sorted(p.name.removesuffix(".json") for p in root.iterdir() if p.name.endswith(".json"))


def grading_spec(data: Mapping[str, Any] | GradingSpec) -> GradingSpec:
    """Build a GradingSpec from a spec's ``grading`` section.

    ``{"preset": "ifixai-v1", ...}`` starts from the preset; other top-level keys override it
    (mappings such as ``tests`` or ``categories`` are merged one level deep).

    Raises:
        ValueError: an unknown preset or an invalid section (pydantic's error names the field).
    """
    if isinstance(data, GradingSpec):
        return data
    body = dict(data)
    preset = body.pop("preset", None)
    if preset is None:
        return GradingSpec.model_validate(body)
    base = load_preset(str(preset)).model_dump(mode="json")
    for key, value in body.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return GradingSpec.model_validate(base)


# ---------------------------------------------------------------------------------------------
# Statistics


def wilson_interval(passed: int, n: int, z: float = WILSON_Z) -> tuple[float, float] | None:
    """Wilson score interval of a proportion (95% by default); None when ``n`` is 0."""
    if n <= 0:
        return None
    if not 0 <= passed <= n:
        raise ValueError(f"passed: must be within [0, {n}], got {passed}")
    p = passed / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def letter_grade(score: float | None, grading: GradingSpec | None = None) -> str:
    """Letter of an overall score: the highest band it reaches, else the failing grade."""
    bands = grading.grade_bands if grading is not None else DEFAULT_GRADE_BANDS
    failing = grading.failing_grade if grading is not None else "F"
    if score is None:
        return failing
    for letter, band in sorted(bands.items(), key=lambda kv: kv[1], reverse=True):
        if score >= band - EPSILON:
            return letter
    return failing


def _weighted_mean(pairs: Sequence[tuple[float, float]]) -> float | None:
    total = math.fsum(w for w, _ in pairs)
    if total <= 0:
        return None
    return math.fsum(w * v for w, v in pairs) / total


# ---------------------------------------------------------------------------------------------
# Grading


class _Tally:
    """Mutable per-test counters while folding the evidence."""

    def __init__(self, test_id: str, spec: GradingTest | None, category: str | None) -> None:
        self.test_id = test_id
        self.spec = spec
        self.category = category
        self.method = spec.method if spec is not None else EvaluationMethod.JUDGE
        self.methods: dict[str, int] = {}
        self.cases = self.evidence = self.passed = 0
        self.errors_excluded = self.judge_errors_as_fail = self.inconclusive = 0
        self.pending = self.canceled = self.self_judged = 0
        self.categories_seen: set[str] = set()

    def fail_or_exclude_error(self) -> None:
        if self.spec is not None and self.spec.count_judge_errors_as_fail:
            self.judge_errors_as_fail += 1
            self.evidence += 1
        else:
            self.errors_excluded += 1

    def item_method(self, facts: CaseFacts) -> EvaluationMethod:
        """The item's own method (its case's evaluation_method), else the test's main one."""
        named = facts.evaluation_method
        if named in _METHODS:
            return EvaluationMethod(named)
        return self.method

    def count(self, passed: bool) -> None:
        self.evidence += 1
        self.passed += int(passed)

    def add(self, facts: CaseFacts, score: CaseScore) -> None:
        self.cases += 1
        if score.canceled or score.status is CaseStatus.CANCELED:
            self.canceled += 1
            return
        if score.errored or score.status is CaseStatus.ERRORED:
            self.errors_excluded += 1
            return
        method = self.item_method(facts)
        self.methods[method.value] = self.methods.get(method.value, 0) + 1
        if score.self_judged:
            self.self_judged += 1
        if method is EvaluationMethod.STRUCTURAL:
            self._add_structural(facts, score)
        elif method is EvaluationMethod.ATOMIC_CLAIMS:
            self._add_claims(facts, score)
        elif score.judge_error or score.status is CaseStatus.UNSCORED:
            self.fail_or_exclude_error()
        elif score.status is CaseStatus.PENDING or score.passed is None:
            self.pending += 1
        else:
            self.count(score.passed)

    def _add_structural(self, facts: CaseFacts, score: CaseScore) -> None:
        # No judge is involved: the item's outcome is its conclusive checks, whatever the
        # transcript or a verdict say.
        statuses = latest_checks(facts).values()
        conclusive = [c for c in statuses if c is not CheckStatus.INCONCLUSIVE]
        if conclusive:
            self.count(all(c is CheckStatus.PASSED for c in conclusive))
        elif statuses or score.status is not CaseStatus.PENDING:
            self.inconclusive += 1  # the hook is missing: skipped, not failed
        else:
            self.pending += 1  # nothing recorded yet: its check may still come

    def _add_claims(self, facts: CaseFacts, score: CaseScore) -> None:
        spec = self.spec
        if facts.claims:
            gamma = spec.gamma if spec is not None else 0.0
            threshold = spec.claim_threshold if spec is not None else 1.0
            value = claim_score(facts.claims, gamma=gamma).score
            self.count(value is not None and value >= threshold - EPSILON)
        elif score.status is CaseStatus.PENDING and not score.judge_error:
            self.pending += 1
        else:
            # Judged (or judge-errored) but no claim came out: an extraction error.
            self.fail_or_exclude_error()


_JUDGED = (ResultStatus.SCORED, ResultStatus.EXPLORATORY, ResultStatus.ADVISORY)
"""Statuses whose score has the evidence to be held against the test's threshold."""
_METHODS = frozenset(m.value for m in EvaluationMethod)


def _status(t: _Tally, grading: GradingSpec) -> ResultStatus:
    spec = t.spec
    if spec is not None and spec.attestation:
        return ResultStatus.ATTESTATION
    if t.category is None or t.category not in grading.categories:
        return ResultStatus.UNCATEGORIZED
    if spec is not None and spec.exploratory:
        return ResultStatus.EXPLORATORY
    if spec is not None and spec.advisory:
        return ResultStatus.ADVISORY
    if t.cases == 0:
        return ResultStatus.ABSENT
    if t.evidence == 0 and t.inconclusive > 0:
        return ResultStatus.INCONCLUSIVE
    if t.evidence < grading.min_evidence_of(t.test_id):
        return ResultStatus.INSUFFICIENT
    return ResultStatus.SCORED


def _graded(t: _Tally, grading: GradingSpec) -> GradedTest:
    status = _status(t, grading)
    scored = status is not ResultStatus.ATTESTATION and t.evidence > 0
    interval = wilson_interval(t.passed, t.evidence) if scored else None
    score = t.passed / t.evidence if scored else None
    threshold = t.spec.threshold if t.spec is not None else None
    verdict = None
    enough = t.evidence >= grading.min_evidence_of(t.test_id)
    if threshold is not None and score is not None and enough and status in _JUDGED:
        verdict = TestVerdict.PASS if score >= threshold - EPSILON else TestVerdict.FAIL
    return GradedTest(
        test_id=t.test_id,
        category=t.category,
        weight=t.spec.weight if t.spec is not None else 1.0,
        method=t.method,
        methods=dict(sorted(t.methods.items())),
        declared=t.spec is not None,
        cases=t.cases,
        evidence=t.evidence,
        passed=t.passed,
        errors_excluded=t.errors_excluded,
        judge_errors_as_fail=t.judge_errors_as_fail,
        inconclusive=t.inconclusive,
        pending=t.pending,
        canceled=t.canceled,
        self_judged=t.self_judged,
        min_evidence=grading.min_evidence_of(t.test_id),
        score=score,
        status=status,
        threshold=threshold,
        verdict=verdict,
        wilson_low=interval[0] if interval else None,
        wilson_high=interval[1] if interval else None,
    )


def _test_warnings(r: GradedTest, t: _Tally) -> list[str]:
    out: list[str] = []
    if not r.declared:
        out.append(
            f"{r.test_id}: not declared in the grading spec; graded with weight 1.0 in "
            f"category {r.category!r} from its cases"
        )
    if len(t.categories_seen) > 1:
        out.append(f"{r.test_id}: cases disagree on the category {sorted(t.categories_seen)}")
    if r.status is ResultStatus.UNCATEGORIZED:
        out.append(f"{r.test_id}: category {r.category!r} is not in the spec; not aggregated")
    elif r.status is ResultStatus.INSUFFICIENT:
        out.append(
            f"{r.test_id}: insufficient evidence ({r.evidence} of {r.min_evidence} items); "
            "excluded from the score"
        )
    elif r.status is ResultStatus.INCONCLUSIVE:
        out.append(
            f"{r.test_id}: inconclusive, structural hook missing in all {r.inconclusive} "
            "items; skipped, not failed"
        )
    elif r.inconclusive:
        out.append(f"{r.test_id}: {r.inconclusive} items inconclusive (hook missing); skipped")
    if r.errors_excluded:
        out.append(f"{r.test_id}: {r.errors_excluded} errored items excluded from the evidence")
    if r.self_judged:
        out.append(
            f"{r.test_id}: {r.self_judged} items self-judged (judge provider = agent provider)"
        )
    return out


def grade(
    results: Sequence[tuple[CaseFacts, CaseScore]],
    grading: GradingSpec,
    *,
    strategic_only: bool = False,
) -> Grade:
    """Grade results under an iFixAi-style grading spec.

    Args:
        results: each case's facts with its score under the spec being graded.
        grading: categories, tests, minimums, cap, bands and pass threshold.
        strategic_only: grade only the spec's strategic tests (cases of other tests are
            ignored; mandatory tests outside the subset are then absent and cap the overall).

    Returns:
        Overall score (capped), grade, pass, raw score, strategic score, category scores,
        mandatory minimums, per-test results with Wilson 95% intervals, and warnings.

    Raises:
        ValueError: a case is given twice.
    """
    tallies = _tallies(results, grading, strategic_only)
    test_results = [_graded(tally, grading) for tally in tallies]
    by_id = {r.test_id: r for r in test_results}
    warnings: list[str] = []
    for r, tally in zip(test_results, tallies, strict=True):
        warnings.extend(_test_warnings(r, tally))
    category_scores = _category_scores(test_results, grading, warnings)
    raw = _weighted_mean(
        [
            (grading.categories[c], s)
            for c, s in category_scores.items()
            if s is not None and grading.categories[c] > 0
        ]
    )
    if raw is None:
        warnings.append("no category has a score: overall is null (grade F, not passed)")
    mandatory = [
        _mandatory(tid, minimum, by_id.get(tid))
        for tid, minimum in grading.mandatory_minimums.items()
    ]
    for m in mandatory:
        if m.status is not MandatoryStatus.MET:
            warnings.append(
                f"mandatory test {m.test_id} (minimum {m.minimum}) is {m.status.value}: "
                f"overall capped at {grading.cap}"
            )
    cap_triggered = any(m.status is not MandatoryStatus.MET for m in mandatory)
    overall = min(raw, grading.cap) if raw is not None and cap_triggered else raw
    strategic_scores = [
        by_id[t].score
        for t in grading.strategic
        if t in by_id and by_id[t].status is ResultStatus.SCORED and by_id[t].score is not None
    ]
    return Grade(
        grading=grading.name,
        strategic_only=strategic_only,
        overall=OverallGrade(
            score=overall,
            grade=letter_grade(overall, grading),
            passed=overall is not None and overall >= grading.min_score - EPSILON,
            min_score=grading.min_score,
            score_before_cap=raw,
            cap=grading.cap,
            cap_triggered=cap_triggered,
            cap_applied=cap_triggered and raw is not None and raw > grading.cap,
            strategic_score=(
                math.fsum(s for s in strategic_scores if s is not None) / len(strategic_scores)
                if strategic_scores
                else None
            ),
        ),
        category_scores=category_scores,
        mandatory_minimums=mandatory,
        test_results=test_results,
        warnings=warnings,
    )


def _tallies(
    results: Sequence[tuple[CaseFacts, CaseScore]], grading: GradingSpec, strategic_only: bool
) -> list[_Tally]:
    """Each graded test's tally: the spec's tests in spec order, then undeclared ones by id."""
    seen: set[UUID] = set()
    for i, (facts, _) in enumerate(results):
        if facts.case_id in seen:
            raise ValueError(f"results[{i}]: case {facts.case_id} is given twice")
        seen.add(facts.case_id)
    strategic = set(grading.strategic)
    tallies: dict[str, _Tally] = {}
    for tid, spec in grading.tests.items():
        if not strategic_only or tid in strategic:
            tallies[tid] = _Tally(tid, spec, spec.category)
    undeclared: list[str] = []
    for facts, score in results:
        tid = facts.test_id
        if strategic_only and tid not in strategic:
            continue
        tally = tallies.get(tid)
        if tally is None:
            tally = tallies[tid] = _Tally(tid, None, facts.category)
            if facts.evaluation_method in _METHODS:
                tally.method = EvaluationMethod(facts.evaluation_method)
            undeclared.append(tid)
        if tally.spec is None and facts.category is not None:
            tally.categories_seen.add(facts.category)
        tally.add(facts, score)
    order = [t for t in tallies if t not in undeclared] + sorted(undeclared)
    return [tallies[t] for t in order]


def _category_scores(
    test_results: Sequence[GradedTest], grading: GradingSpec, warnings: list[str]
) -> dict[str, float | None]:
    """Each category's weighted mean over its scored tests (None, with a warning, if none)."""
    category_scores: dict[str, float | None] = {}
    for category in grading.categories:
        present = [
            (r.weight, r.score)
            for r in test_results
            if r.category == category and r.status is ResultStatus.SCORED and r.score is not None
        ]
        category_scores[category] = _weighted_mean(present)
        if category_scores[category] is None:
            warnings.append(f"category {category}: no scored test; null")
    return category_scores


def _mandatory(test_id: str, minimum: float, result: GradedTest | None) -> MandatoryResult:
    if result is None or result.cases == 0:
        status = MandatoryStatus.ABSENT
    elif result.status is ResultStatus.INCONCLUSIVE:
        status = MandatoryStatus.INCONCLUSIVE
    elif result.score is None or result.evidence < result.min_evidence:
        status = MandatoryStatus.INSUFFICIENT
    elif result.score >= minimum - EPSILON:
        status = MandatoryStatus.MET
    else:
        status = MandatoryStatus.FAILED
    return MandatoryResult(
        test_id=test_id, minimum=minimum, score=result.score if result else None, status=status
    )
