"""The word diff of two known answers and the `change` measure (issue 36)."""

from __future__ import annotations

from evaledger.scoring.comparison.output_diff import (
    MAX_DIFF_WORDS,
    change,
    render_word_diff,
    turn_diffs,
    word_diff,
)


def test_the_diff_of_two_known_answers() -> None:
    diff = word_diff(
        "Your refund of 20 EUR was sent today.", "Your refund of 25 EUR will be sent tomorrow."
    )
    assert [(p.op, p.text) for p in diff.pieces] == [
        ("equal", "Your refund of"),
        ("delete", "20"),
        ("insert", "25"),
        ("equal", "EUR"),
        ("delete", "was"),
        ("insert", "will be"),
        ("equal", "sent"),
        ("delete", "today."),
        ("insert", "tomorrow."),
    ]
    # 8 + 9 words, 5 matched: ratio 2·5/17.
    assert (
        diff.change
        == round(1 - 10 / 17, 4)
        == change(
            "Your refund of 20 EUR was sent today.", "Your refund of 25 EUR will be sent tomorrow."
        )
    )
    assert render_word_diff(diff) == (
        "Your refund of [-20-] {+25+} EUR [-was-] {+will be+} sent [-today.-] {+tomorrow.+}"
    )


def test_change_is_zero_for_the_same_words_and_one_for_none_in_common() -> None:
    assert change("a  b\nc", "a b c") == 0.0
    assert change(None, "") == 0.0 and word_diff(None, None).pieces == []
    assert change("yes", "no") == 1.0
    assert change(None, "new answer") == 1.0
    assert [p.op for p in word_diff("", "new answer").pieces] == ["insert"]


def test_turns_pair_by_position_and_a_missing_turn_is_all_inserted() -> None:
    b = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]
    c = [*b[:1], {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}]
    turns = turn_diffs(b, c)
    assert [t.diff.change for t in turns] == [0.0, round(1 - 2 / 3, 4), 1.0]
    assert turns[2].baseline_role is None and turns[2].candidate_role == "user"


def test_a_huge_answer_is_cut_and_says_so() -> None:
    long = " ".join(f"w{i}" for i in range(MAX_DIFF_WORDS + 10))
    diff = word_diff(long, long + " more")
    assert diff.truncated and diff.change == 0.0
    assert render_word_diff(diff).endswith("[…]")
