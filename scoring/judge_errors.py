"""The judge-error policy said beside a run's figures (issue 22): "N judge errors counted as 0".

Under the default policy (`judge_errors: score_zero`, the reference rule) a case whose counted
verdict is an error scores 0.0 in the metric mean and fails; a run's figures must say how many of
its cases that is. Pure functions over case scores and the spec's policy: the CLI (`show`,
`compare`), the web run page and the compare page print the same sentence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from evaledger.domain.spec import JudgeErrorPolicy


class _Scored(Protocol):
    @property
    def judge_error(self) -> bool: ...


class JudgeErrorNote(NamedTuple):
    """How many cases count a judge error verdict, under which policy, in one sentence."""

    judge_errors: int
    policy: JudgeErrorPolicy
    text: str

    def as_json(self) -> dict[str, Any]:
        """The note as plain JSON values (`judge_error_policy` of a show/compare payload)."""
        return {"judge_errors": self.judge_errors, "policy": self.policy.value, "note": self.text}


def judge_error_note(count: int, policy: JudgeErrorPolicy) -> JudgeErrorNote | None:
    """The sentence for `count` judge errors under `policy`; None when there are none."""
    if count == 0:
        return None
    errors = "judge error" if count == 1 else "judge errors"
    if policy is JudgeErrorPolicy.SCORE_ZERO:
        text = f"{count} {errors} counted as 0 (judge_errors: score_zero)"
    else:
        text = f"{count} {errors} left unscored (judge_errors: unscored)"
    return JudgeErrorNote(count, policy, text)


def run_judge_error_note(
    scores: Iterable[_Scored | Mapping[str, Any]], policy: JudgeErrorPolicy
) -> JudgeErrorNote | None:
    """The note of a run from all its case scores.

    `CaseScore`s, rows with `judge_error`, or the decoded JSON of `case_score_objects`.
    """
    count = sum(
        1
        for s in scores
        if (s.get("judge_error", False) if isinstance(s, Mapping) else s.judge_error)
    )
    return judge_error_note(count, policy)


def judge_error_policy_json(count: int, policy: JudgeErrorPolicy) -> dict[str, Any] | None:
    """`judge_error_policy` of a show / compare JSON payload: count, policy, sentence; or null.

    `count` is the run's cases whose counted verdict is a judge error (`ReadModels.
    judge_error_count` counts them in the database, without decoding the scores).
    """
    note = judge_error_note(count, policy)
    return None if note is None else note.as_json()
