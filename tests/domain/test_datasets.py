"""Dataset versions: the content hash, the diff of two versions, and reading item files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from evaledger.domain.dataset_files import read_items
from evaledger.domain.datasets import content_hash, diff_items, parse_ref
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import DatasetItem

ITEMS = [
    DatasetItem(key="b", input={"q": "refund?"}, expected_outcomes=["asks for the order"]),
    DatasetItem(key="a", input="hello", tags=["smoke"], label={"passed": True, "by": ["ann"]}),
]


def test_the_hash_is_sha256_of_the_canonical_json_of_the_items_sorted_by_key() -> None:
    plain = [
        {
            "expected_outcomes": [],
            "input": "hello",
            "key": "a",
            "label": {"by": ["ann"], "passed": True, "score": None},
            "metadata": {},
            "tags": ["smoke"],
        },
        {
            "expected_outcomes": ["asks for the order"],
            "input": {"q": "refund?"},
            "key": "b",
            "label": None,
            "metadata": {},
            "tags": [],
        },
    ]
    reference = json.dumps(plain, sort_keys=True, separators=(",", ":")).encode()
    assert content_hash(ITEMS) == hashlib.sha256(reference).hexdigest()


def test_same_content_same_hash_whatever_the_order_or_the_defaults_written() -> None:
    spelled_out = [
        DatasetItem.model_validate(
            {
                "key": "a",
                "input": "hello",
                "tags": ["smoke"],
                "metadata": {},
                "label": {"passed": True, "score": None, "by": ["ann"]},
            }
        ),
        DatasetItem.model_validate(
            {
                "key": "b",
                "input": {"q": "refund?"},
                "expected_outcomes": ["asks for the order"],
                "label": None,
            }
        ),
    ]
    assert content_hash(ITEMS) == content_hash(list(reversed(ITEMS))) == content_hash(spelled_out)


def test_one_changed_item_changes_the_hash_and_the_diff_names_it() -> None:
    edited = [
        ITEMS[0].model_copy(update={"expected_outcomes": ["asks for the order id"]}),
        ITEMS[1],
    ]
    assert content_hash(edited) != content_hash(ITEMS)
    added = [*ITEMS, DatasetItem(key="c")]
    diff = diff_items(ITEMS, edited)
    assert (diff.added, diff.removed, diff.changed, diff.unchanged) == ((), (), ("b",), 1)
    diff = diff_items(added, edited)
    assert (diff.added, diff.removed, diff.changed) == ((), ("c",), ("b",))
    assert diff.differing == ("b", "c")


def test_a_key_twice_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="'a' appears twice"):
        content_hash([*ITEMS, DatasetItem(key="a")])


@pytest.mark.parametrize(
    ("text", "expected"),
    [("qa", ("qa", None)), ("qa@3", ("qa", 3)), ("qa@v12", ("qa", 12)), ("a@b@2", ("a@b", 2))],
)
def test_a_reference_names_a_dataset_and_maybe_a_version(
    text: str, expected: tuple[str, int | None]
) -> None:
    assert parse_ref(text) == expected


@pytest.mark.parametrize("text", ["qa@", "qa@0", "qa@x", "@1", "qa@-1"])
def test_a_bad_reference_is_refused_naming_the_dataset(text: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_ref(text)
    assert e.value.field == "dataset"


# -- files -----------------------------------------------------------------------------------

GOLD_JSONL = (
    '{"key": "refund-1", "input": {"q": "Where is my refund?"}, "expected_outcomes": '
    '["looks the order up"], "tags": ["refunds"], "metadata": {"source": "review"}, '
    '"label": {"passed": true, "score": 4, "by": ["token:ann", "token:bo"]}}\n'
    "\n"
    '{"key": "refund-2", "label": null}\n'
)


def test_a_review_export_jsonl_is_read(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    path.write_text(GOLD_JSONL)
    first, second = read_items(path)
    assert first.label is not None and first.label.passed and first.label.score == 4
    assert first.label.by == ["token:ann", "token:bo"]
    assert first.input == {"q": "Where is my refund?"} and first.metadata == {"source": "review"}
    assert second.key == "refund-2" and second.label is None


def test_csv_and_yaml_give_the_same_items_as_jsonl(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(
        '{"key": "k1", "input": "hi", "expected_outcomes": ["greets", "asks"], "tags": ["x"], '
        '"metadata": {"n": 1}, "label": {"passed": false, "score": 1.5, "by": ["ann"]}}\n'
        '{"key": "k2"}\n'
    )
    csv_file = tmp_path / "a.csv"
    csv_file.write_text(
        "key,input,expected_outcomes,tags,metadata,label_passed,label_score,label_by\n"
        'k1,hi,greets;asks,x,"{""n"": 1}",false,1.5,ann\n'
        "k2,,,,,,,\n"
    )
    yaml_file = tmp_path / "a.yaml"
    yaml_file.write_text(
        "items:\n"
        "  - key: k1\n    input: hi\n    expected_outcomes: [greets, asks]\n    tags: [x]\n"
        "    metadata: {n: 1}\n    label: {passed: false, score: 1.5, by: [ann]}\n"
        "  - key: k2\n"
    )
    expected = content_hash(read_items(jsonl))
    assert content_hash(read_items(csv_file)) == expected
    assert content_hash(read_items(yaml_file)) == expected


@pytest.mark.parametrize(
    ("name", "text", "field", "where"),
    [
        ("bad.jsonl", '{"key": "a"}\n{"key": "b", "tags": "x"}\n', "tags", "line 2"),
        ("bad.jsonl", '{"input": "no key"}\n', "key", "line 1"),
        ("bad.jsonl", '{"key": "a", "colour": "red"}\n', "colour", "line 1"),
        ("bad.jsonl", '{"key": "a", "label": {"score": 2}}\n', "label.passed", "line 1"),
        ("bad.jsonl", '{"key": "a"}\n{"key": \n', "file", "line 2"),
        ("bad.jsonl", '{"key": "a", "metadata": {"x": NaN}}\n', "file", "line 1"),
        ("bad.csv", "key,colour\na,red\n", "colour", "colour"),
        ("bad.csv", "key,label_passed\na,maybe\n", "label_passed", "line 2"),
        ("bad.csv", "key,label_passed,label_score\na,true,high\n", "label_score", "line 2"),
        ("bad.csv", "input\nhi\n", "key", "key"),
        ("bad.yaml", "- key: a\n  tags: 3\n", "tags", "item 1"),
        ("bad.yaml", "key: a\n", "items", "list"),
        ("bad.txt", "key\n", "file", ".jsonl"),
    ],
)
def test_a_bad_file_is_refused_naming_the_field(
    tmp_path: Path, name: str, text: str, field: str, where: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValidationError) as e:
        read_items(path)
    assert e.value.field == field
    assert where in e.value.detail


def test_a_yaml_bomb_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{n}: &a{n} [*a{n - 1}, *a{n - 1}, *a{n - 1}, *a{n - 1}]" for n in range(1, 30)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValidationError, match="YAML refused"):
        read_items(path)


def test_json_nested_past_the_depth_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text('{"key": "a", "input": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(ValidationError):
        read_items(path)
