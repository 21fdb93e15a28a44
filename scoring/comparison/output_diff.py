"""What changed between two runs' answers to one test case (issue 36): word diffs and `change`.

Pure functions, no I/O. A text is split into words at whitespace; two texts are compared as
sequences of words with `difflib.SequenceMatcher` (Ratcliff/Obershelp: the longest common run
first, then recursively either side of it). Why `difflib`: it is in the standard library, its
matching blocks read as a person would mark the change (whole phrases kept, not scattered
letters as a character-level diff such as diff-match-patch gives), and its `ratio()` is the
similarity the `change` measure needs, from the same matching.

- ``change(a, b) = 1 − SequenceMatcher(words(a), words(b)).ratio()``: 0 for the same words, 1
  for no word in common; two empty answers (or none) are 0. This is the one definition: the
  web page's sort, the CLI and the JSON all read it from here.
- Whitespace is not a change: ``"a  b"`` and ``"a b"`` are the same words.
- Bounded: each side is cut to its first `MAX_DIFF_WORDS` words before matching (the matcher
  is quadratic in the worst case); a cut diff says so (`truncated`).
- Turns are paired by position (turn i of the baseline with turn i of the candidate); a turn on
  one side only is all inserted or all deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import Any, Literal

from pydantic import Field

from evaledger.domain.model import StrictModel

MAX_DIFF_WORDS = 5_000
"""Words per side a diff matches at most (difflib's matcher is quadratic in the worst case)."""

DiffOp = Literal["equal", "delete", "insert"]


class DiffPiece(StrictModel):
    """A run of words: in both answers (equal), the baseline's only, or the candidate's only."""

    op: DiffOp
    text: str = Field(description="The words of the run, joined by single spaces.")


class TextDiff(StrictModel):
    """Two texts' word-level diff and how much changed."""

    change: float = Field(ge=0, le=1, description="1 − difflib ratio over words (0: same).")
    pieces: list[DiffPiece] = Field(default_factory=list)
    truncated: bool = Field(default=False, description=f"A side had > {MAX_DIFF_WORDS} words.")


class TurnDiff(StrictModel):
    """Turn `index` of both transcripts (a role is None where that side has no such turn)."""

    index: int
    baseline_role: str | None = None
    candidate_role: str | None = None
    diff: TextDiff


def words(text: str | None) -> list[str]:
    """The words of a text (split at whitespace; None is no words)."""
    return (text or "").split()


def _matcher(a: list[str], b: list[str]) -> SequenceMatcher[str]:
    # autojunk off: in a long answer, frequent words ("the") are words, not junk to skip.
    return SequenceMatcher(None, a, b, autojunk=False)


def _cut(text: str | None) -> tuple[list[str], bool]:
    found = words(text)
    return found[:MAX_DIFF_WORDS], len(found) > MAX_DIFF_WORDS


def change(baseline: str | None, candidate: str | None) -> float:
    """How much the answer changed: 1 − difflib's ratio over the words (see the module doc)."""
    a, _ = _cut(baseline)
    b, _ = _cut(candidate)
    if not a and not b:
        return 0.0
    return round(1.0 - _matcher(a, b).ratio(), 4)


def word_diff(baseline: str | None, candidate: str | None) -> TextDiff:
    """The word-level diff of two texts, with their `change`."""
    a, cut_a = _cut(baseline)
    b, cut_b = _cut(candidate)
    pieces: list[DiffPiece] = []
    matcher = _matcher(a, b)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pieces.append(DiffPiece(op="equal", text=" ".join(a[i1:i2])))
            continue
        if i2 > i1:
            pieces.append(DiffPiece(op="delete", text=" ".join(a[i1:i2])))
        if j2 > j1:
            pieces.append(DiffPiece(op="insert", text=" ".join(b[j1:j2])))
    ratio = 1.0 if not a and not b else matcher.ratio()
    return TextDiff(change=round(1.0 - ratio, 4), pieces=pieces, truncated=cut_a or cut_b)


def turn_diffs(
    baseline: Sequence[dict[str, Any]], candidate: Sequence[dict[str, Any]]
) -> list[TurnDiff]:
    """Each turn's diff, paired by position (turns as `{"role", "content"}` objects)."""
    out = []
    for i in range(max(len(baseline), len(candidate))):
        b = baseline[i] if i < len(baseline) else None
        c = candidate[i] if i < len(candidate) else None
        out.append(
            TurnDiff(
                index=i,
                baseline_role=None if b is None else str(b.get("role")),
                candidate_role=None if c is None else str(c.get("role")),
                diff=word_diff(
                    None if b is None else b.get("content"),
                    None if c is None else c.get("content"),
                ),
            )
        )
    return out


def render_word_diff(diff: TextDiff) -> str:
    """The diff as text, `git diff --word-diff` style: ``[-removed-]`` and ``{+added+}``."""
    marks = {"equal": ("", ""), "delete": ("[-", "-]"), "insert": ("{+", "+}")}
    text = " ".join(marks[p.op][0] + p.text + marks[p.op][1] for p in diff.pieces)
    return text + (" […]" if diff.truncated else "")
