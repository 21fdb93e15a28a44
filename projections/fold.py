"""The one fold of a case's events into its facts, read from their stored state dicts.

Catch-up, rebuild and the audit read all fold here. The stored events were validated when they
were written, so the fold reads only the fields the facts keep from the (upcast) state dict and
builds the facts from trusted values, converted to the types validation would give (UUIDs, enums,
floats): no pydantic event is built. tests/oracles/fold.py folds the validated pydantic events
the same way; tests/projections/test_fold.py holds this fold to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel

from evaledger.domain.events import (
    CaseEvent,
    CaseFlagged,
    CaseOpened,
    CaseUnflagged,
    CheckStatus,
    ClaimSupport,
    ClaimsVerified,
    DomainEvent,
    ExecutionCanceled,
    ExecutionErrored,
    ExecutionSkipped,
    HumanLabelRecorded,
    JudgeVerdictRecorded,
    NamedScore,
    NamedScoresRecorded,
    OutcomeEvaluated,
    ParseStatus,
    PayloadErased,
    Role,
    ScoreOverridden,
    ScoreScale,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.spec import Severity
from evaledger.projections.decode import Decoded
from evaledger.scoring.facts import (
    CaseFacts,
    CheckFact,
    MessageFact,
    MetricFact,
    OutcomeFact,
    VerdictFact,
)

State = dict[str, Any]
"""A stored event's state (every field but the aggregate id and version), upcast to the current
class version, as `orjson.loads` gives it."""

FOLDED_VERSIONS: dict[type[CaseEvent], int] = {
    CaseOpened: 1,
    TranscriptRecorded: 1,
    ExecutionErrored: 1,
    ExecutionCanceled: 1,
    ExecutionSkipped: 1,
    JudgeVerdictRecorded: 1,
    OutcomeEvaluated: 1,
    ClaimsVerified: 1,
    StructuralCheckRecorded: 1,
    VerdictOverridden: 1,
    VerdictInvalidated: 1,
    NamedScoresRecorded: 1,
    ScoreOverridden: 1,
    HumanLabelRecorded: 1,
    CaseFlagged: 1,
    CaseUnflagged: 1,
    PayloadErased: 1,
}
"""Every case topic and the class version its fold reads. Older stored versions reach the fold
upcast to the current one (`store.codec.decode_state`); a class whose version moves on fails
tests/projections/test_fold.py until its fold below and this table are brought along."""

_set = object.__setattr__
M = TypeVar("M", bound=BaseModel)


def _trusted(cls: type[M]) -> Callable[..., M]:
    """A constructor of `cls` from trusted values of EVERY field (test_fold.py holds that).

    What `model_construct` does, without its per-field loop: that loop calls each missing
    field's default factory through `FieldInfo.get_default`, which (pydantic 2.14) inspects the
    factory's signature on every call; even with every field given it cost more than the fold.
    """
    new = cls.__new__

    def make(**values: Any) -> M:
        m = new(cls)
        _set(m, "__dict__", values)
        _set(m, "__pydantic_fields_set__", set(values))
        _set(m, "__pydantic_extra__", None)
        _set(m, "__pydantic_private__", None)
        return m

    return make


_OUTCOME = _trusted(OutcomeFact)
_METRIC = _trusted(MetricFact)
_VERDICT = _trusted(VerdictFact)
_MESSAGE = _trusted(MessageFact)
_CHECK = _trusted(CheckFact)
_FACTS = _trusted(CaseFacts)

# Enum members by their stored value: a dict look-up, not `Enum.__call__` (~150,000 per 10,000
# cases). The stored states were validated when written, so every value is a member's.
_ROLE = {r.value: r for r in Role}
_SEVERITY = {s.value: s for s in Severity}
_PARSE = {p.value: p for p in ParseStatus}
_CHECK_STATUS = {c.value: c for c in CheckStatus}
_SUPPORT = {c.value: c for c in ClaimSupport}


def _set_fields(facts: CaseFacts, values: dict[str, Any]) -> None:
    """Set fields of the facts, as `facts.name = value` does without its per-call checks.

    Every field of folded facts is already set (`open_case`, or validated from a stored row), so
    pydantic's `__setattr__` (no `validate_assignment`) would only write the `__dict__`.
    """
    facts.__dict__.update(values)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _tokens(usage: State | None) -> int | None:
    if usage is None:
        return None
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def _declared(facts: CaseFacts) -> dict[str, Severity]:
    """The test case's severity of each outcome statement (results without one take it)."""
    return {o.statement: o.severity for o in facts.expected_outcomes}


def _outcome_facts(results: Sequence[State], declared: dict[str, Severity]) -> list[OutcomeFact]:
    construct = _OUTCOME
    out = []
    for r in results:
        statement = r["statement"]
        severity = r.get("severity")
        out.append(
            construct(
                statement=statement,
                passed=r["passed"],
                severity=_SEVERITY[severity]
                if severity
                else declared.get(statement, Severity.BLOCKER),
            )
        )
    return out


def _metric_facts(scores: Sequence[State]) -> list[MetricFact]:
    construct = _METRIC
    return [
        construct(
            metric=m["metric"],
            score=m.get("score"),
            passed=m.get("passed"),
            failure_code=m.get("failure_code") or None,
            turns=list(m.get("turns") or ()),
        )
        for m in scores
    ]


def _declared_outcomes(test_case: State) -> list[OutcomeFact]:
    outcomes = []
    for o in test_case.get("expected_outcomes") or ():
        if isinstance(o, str):  # as TestCaseSnapshot's validator reads a bare statement
            o = {"statement": o}
        outcomes.append(
            _OUTCOME(
                statement=o["statement"],
                passed=False,
                severity=_SEVERITY[o.get("severity", "blocker")],
            )
        )
    return outcomes


def open_case(opened: Decoded, agent_provider: str | None = None) -> CaseFacts:
    """The facts of a case just opened, from its CaseOpened state (every field given)."""
    data = opened.data
    tc = data["test_case"]
    key = tc["key"]
    return _FACTS(
        case_id=UUID(opened.oid),
        run_id=UUID(data["run_id"]),
        test_case_key=key,
        test_id=tc.get("test_id") or key,
        name=tc.get("name"),
        repetition=data["repetition"],
        variant=data.get("variant", ""),
        configuration=tc.get("configuration"),
        persona=tc.get("persona"),
        scenario=tc.get("scenario"),
        category=tc.get("category"),
        tags=list(tc.get("tags") or ()),
        weight=float(tc.get("weight", 1.0)),
        evaluation_method=tc.get("evaluation_method"),
        expected_outcomes=_declared_outcomes(tc),
        has_transcript=False,
        turn_count=0,
        messages=[],
        prompt_tokens=0,
        completion_tokens=0,
        cost_usd=None,
        duration_ms=None,
        errored=False,
        error_message=None,
        error_kind=None,
        canceled=False,
        skipped=None,
        verdicts=[],
        outcome_evaluations=[],
        claims=[],
        checks=[],
        agent_provider=agent_provider,
        cached=bool(data.get("cached", False)),
        last_version=opened.version,
        named_scores={},
        score_overrides={},
    )


def _transcript(facts: CaseFacts, data: State) -> None:
    # The hottest loop of a catch-up (10-14 turns a case): `_tokens` and `_float` inlined, and
    # the facts' fields set in their `__dict__` (`_set_fields`).
    construct, roles = _MESSAGE, _ROLE
    turns = data["turns"]
    values: dict[str, Any] = {"has_transcript": True, "turn_count": len(turns)}
    messages: list[MessageFact] = []
    append = messages.append
    for t in turns:
        get = t.get
        metrics = get("metrics")
        usage = get("usage")
        latency = get("latency_ms")
        cost = get("cost_usd")
        append(
            construct(
                role=roles[t["role"]],
                latency_ms=None if latency is None else float(latency),
                tokens=None
                if usage is None
                else int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)),
                cost_usd=None if cost is None else float(cost),
                metrics={k: float(v) for k, v in metrics.items()} if metrics else {},
            )
        )
    values["messages"] = messages
    usage = data.get("usage")
    if usage is not None:
        values["prompt_tokens"] = int(usage.get("prompt_tokens", 0))
        values["completion_tokens"] = int(usage.get("completion_tokens", 0))
    values["cost_usd"] = _float(data.get("cost_usd"))
    values["duration_ms"] = _float(data.get("duration_ms"))
    _set_fields(facts, values)


def _errored(facts: CaseFacts, data: State) -> None:
    facts.errored = True
    facts.error_message = data["message"]
    facts.error_kind = data.get("kind")


def _canceled(facts: CaseFacts, data: State) -> None:
    facts.canceled = True


def _skipped(facts: CaseFacts, data: State) -> None:
    facts.skipped = data.get("outcome", "skipped")


def _verdict(facts: CaseFacts, data: State) -> None:
    judge = data["judge"]
    facts.verdicts.append(
        _VERDICT(
            verdict_id=UUID(data["verdict_id"]),
            position=len(facts.verdicts),
            judge_kind=judge.get("kind", "llm"),
            judge_provider=judge.get("provider"),
            judge_model=judge.get("model"),
            parse_status=_PARSE[data.get("parse_status", "parsed")],
            error=data.get("error"),
            metric_scores=_metric_facts(data.get("metric_scores") or ()),
            expected_outcomes=_outcome_facts(data.get("expected_outcomes") or (), _declared(facts)),
            invalidated=False,
            overridden=False,
            forced_passed=None,
            override_reasons=[],
            latency_ms=_float(data.get("latency_ms")),
            cost_usd=_float(data.get("cost_usd")),
            tokens=_tokens(data.get("usage")) or 0,
            template_hash=data.get("template_hash"),
            judge_version=judge.get("version"),
        )
    )


def _named_number(score: State) -> float | None:
    # NamedScore.number is the one reading of a scale; the stored value is already valid.
    named = NamedScore.model_construct(
        name=score["name"], value=score["value"], scale=ScoreScale(score["scale"])
    )
    return named.number


def _named_scores(facts: CaseFacts, data: State) -> None:
    # Labels have no numeric reading; they stay in the event.
    for score in data["scores"]:
        number = _named_number(score)
        if number is not None:
            facts.named_scores[score["name"]] = number
            # The scorer's later reading supersedes an earlier human override of it.
            facts.score_overrides.pop(score["name"], None)


def _score_overridden(facts: CaseFacts, data: State) -> None:
    facts.named_scores[data["score"]] = float(data["value"])
    facts.score_overrides[data["score"]] = data["reason"]


def _outcomes_evaluated(facts: CaseFacts, data: State) -> None:
    facts.outcome_evaluations.append(_outcome_facts(data["results"], _declared(facts)))


def _claims(facts: CaseFacts, data: State) -> None:
    support = _SUPPORT
    facts.claims.extend(support[c["support"]] for c in data["claims"])


def _check(facts: CaseFacts, data: State) -> None:
    facts.checks.append(_CHECK(check=data["check"], status=_CHECK_STATUS[data["status"]]))


def _corrected(facts: CaseFacts, data: State) -> list[VerdictFact]:
    """The verdicts a correction names (one, unless a case recorded the same id twice)."""
    verdict_id = UUID(data["verdict_id"])
    return [v for v in facts.verdicts if v.verdict_id == verdict_id]


def _overridden(facts: CaseFacts, data: State) -> None:
    scores = data.get("metric_scores")
    outcomes = data.get("expected_outcomes")
    passed = data.get("passed")
    for v in _corrected(facts, data):
        v.override_reasons.append(data["reason"])
        v.overridden = True
        if scores is not None:
            v.metric_scores = _metric_facts(scores)
            v.error = None
            v.parse_status = ParseStatus.PARSED
        if outcomes is not None:
            v.expected_outcomes = _outcome_facts(outcomes, _declared(facts))
        if passed is not None:
            v.forced_passed = passed


def _invalidated(facts: CaseFacts, data: State) -> None:
    for v in _corrected(facts, data):
        v.override_reasons.append(data["reason"])
        v.invalidated = True


def _unscored(facts: CaseFacts, data: State) -> None:
    """An event that changes no fact scoring reads."""


_FOLDS: dict[type[DomainEvent], Callable[[CaseFacts, State], None]] = {
    TranscriptRecorded: _transcript,
    ExecutionErrored: _errored,
    ExecutionCanceled: _canceled,
    ExecutionSkipped: _skipped,
    JudgeVerdictRecorded: _verdict,
    OutcomeEvaluated: _outcomes_evaluated,
    ClaimsVerified: _claims,
    StructuralCheckRecorded: _check,
    VerdictOverridden: _overridden,
    VerdictInvalidated: _invalidated,
    NamedScoresRecorded: _named_scores,
    ScoreOverridden: _score_overridden,
    # A reviewer's label and flags score nothing: agreement and the review queue read them
    # from `judge_votes_v1`'s tables (projections/votes.py).
    HumanLabelRecorded: _unscored,
    CaseFlagged: _unscored,
    CaseUnflagged: _unscored,
    PayloadErased: _unscored,
}


def fold_event(facts: CaseFacts, event: Decoded) -> None:
    """Fold one case event after CaseOpened into the facts, in place."""
    _FOLDS[event.cls](facts, event.data)
    facts.__dict__["last_version"] = event.version  # as `_set_fields`


def fold_events(events: Sequence[DomainEvent], agent_provider: str | None) -> CaseFacts:
    """A case's facts from its events in order (the first is its CaseOpened), as stored."""
    first, *rest = events
    if not isinstance(first, CaseOpened):
        raise ValueError(f"a case's first event is CaseOpened, not {type(first).__name__}")
    facts = open_case(Decoded.of_event(first), agent_provider)
    for event in rest:
        fold_event(facts, Decoded.of_event(event))
    return facts
