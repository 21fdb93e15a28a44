"""A review queue's selection rule (`--where`): which cases a queue takes (DESIGN §18).

A rule is clauses joined by `and`; each tests one fact of a case under its run's own spec:

    status = failed                 status in (failed, errored)      passed = false
    score >= 80                     (the case's overall score, 0-100)
    judge_score >= 4                (the mean of its judged 0-5 metric scores)
    metric.helpfulness <= 2         (one metric's 0-5 score)
    flagged   judge_error   judges_disagree   (true/false facts; `not flagged` negates)
    key ~ refund                    (the test case key contains the text)

e.g. `status = failed and judge_score >= 4`: every failed case a judge scored 4 or more. An
empty rule takes every case. A fact a case lacks (no score) makes its comparison false. Pure:
no I/O; `parse_rule` raises `RuleError` naming the clause.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

MAX_RULE_CHARS = 2000

FLAGS = ("flagged", "judge_error", "judges_disagree")
NUMBERS = ("score", "judge_score")
STATUSES = ("passed", "failed", "errored", "canceled", "unscored", "pending")
OPS: Mapping[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "≥": operator.ge,
    "<=": operator.le,
    "≤": operator.le,
    "!=": operator.ne,
    "=": operator.eq,
    "==": operator.eq,
    ">": operator.gt,
    "<": operator.lt,
}
_CLAUSE = re.compile(
    r"^(?P<name>[A-Za-z_][\w.\-]*)\s*(?:(?P<op>>=|<=|!=|==|=|>|<|≥|≤|~|\bin\b)\s*(?P<value>.+))?$"
)


class RuleError(ValueError):
    """A rule that cannot be read; the message names the clause."""


@dataclass(frozen=True)
class ReviewFacts:
    """What a rule can test of one case."""

    key: str
    status: str
    passed: bool | None
    score: float | None
    metric_scores: Mapping[str, float | None] = field(default_factory=dict)
    flagged: bool = False
    judge_error: bool = False
    judges_disagree: bool = False

    @property
    def judge_score(self) -> float | None:
        """The mean of the case's 0-5 metric scores (None: no metric was scored)."""
        scored = [s for s in self.metric_scores.values() if s is not None]
        return sum(scored) / len(scored) if scored else None


Test = Callable[[ReviewFacts], bool]


@dataclass(frozen=True)
class Rule:
    """A parsed rule: every clause must hold."""

    text: str
    tests: tuple[Test, ...]

    def matches(self, facts: ReviewFacts) -> bool:
        """Whether the case is taken."""
        return all(t(facts) for t in self.tests)


def parse_rule(text: str) -> Rule:
    """The rule written in `text` (see the module's docstring)."""
    if len(text) > MAX_RULE_CHARS:
        raise RuleError(f"where: at most {MAX_RULE_CHARS} characters")
    clauses = [c.strip() for c in re.split(r"\s+and\s+", text.strip(), flags=re.I) if c.strip()]
    return Rule(text.strip(), tuple(_clause(c) for c in clauses))


def _clause(clause: str) -> Test:
    negated = clause.lower().startswith("not ")
    body = clause[4:].strip() if negated else clause
    m = _CLAUSE.match(body)
    if m is None:
        raise RuleError(f"where: cannot read {clause!r}")
    name, op, value = m.group("name"), m.group("op"), (m.group("value") or "").strip()
    if name in FLAGS and op is None:
        return (lambda f: not getattr(f, name)) if negated else (lambda f: bool(getattr(f, name)))
    if negated:
        raise RuleError(f"where: `not` goes before a true/false fact ({', '.join(FLAGS)})")
    if op is None:
        raise RuleError(f"where: {clause!r} needs an operator and a value")
    if name == "status":
        return _status(clause, op, value)
    if name == "passed" and op in ("=", "==", "!="):
        want = _boolean(clause, value)
        return lambda f: f.passed is not None and (f.passed == want) == (op != "!=")
    if name == "key" and op == "~":
        return lambda f: value in f.key
    metric = name.removeprefix("metric.") if name.startswith("metric.") else None
    if name not in NUMBERS and not metric:
        known = ", ".join(("status", "passed", "key", *NUMBERS, "metric.<id>", *FLAGS))
        raise RuleError(f"where: unknown fact {name!r} in {clause!r} (known: {known})")
    if op in ("~", "in") or op not in OPS:
        raise RuleError(f"where: {clause!r}: {op!r} does not apply to {name!r}")
    number, compare = _number(clause, value), OPS[op]
    if metric:
        return lambda f: (v := f.metric_scores.get(metric)) is not None and compare(v, number)
    return lambda f: (v := getattr(f, name)) is not None and compare(v, number)


def _status(clause: str, op: str, value: str) -> Test:
    if op == "in":
        inner = value.strip()
        if not (inner.startswith("(") and inner.endswith(")")):
            raise RuleError(f"where: {clause!r}: `in` takes a list like (failed, errored)")
        wanted = {v.strip().lower() for v in inner[1:-1].split(",") if v.strip()}
    elif op in ("=", "==", "!="):
        wanted = {value.lower()}
    else:
        raise RuleError(f"where: {clause!r}: status takes =, != or in")
    unknown = wanted - set(STATUSES)
    if unknown or not wanted:
        raise RuleError(f"where: {clause!r}: unknown status (known: {', '.join(STATUSES)})")
    if op == "!=":
        return lambda f: f.status not in wanted
    return lambda f: f.status in wanted


def _boolean(clause: str, value: str) -> bool:
    if value.lower() in ("true", "yes", "1"):
        return True
    if value.lower() in ("false", "no", "0"):
        return False
    raise RuleError(f"where: {clause!r}: expected true or false")


def _number(clause: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise RuleError(f"where: {clause!r}: {value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise RuleError(f"where: {clause!r}: {value!r} is not a finite number")
    return number
