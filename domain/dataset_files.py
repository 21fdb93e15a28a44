"""Reading dataset items from a file: JSON lines, a JSON array, CSV or YAML (DESIGN §18).

The item format is one JSON object per line, `{"key", "input", "expected_outcomes", "tags",
"metadata", "label": {"passed", "score", "by"} | null}`, only `key` required: what
`evaledger review export` writes for a gold set. CSV has the same column names, lists
`;`-separated, the label as `label_passed`, `label_score` and `label_by`. YAML (a list of
items, or a mapping with `items`) goes through the product's bounded safe loader.

Every refusal is a ValidationError naming the line (or item) and the field; nothing is kept.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import orjson
import pydantic

from evaledger.domain.errors import ValidationError
from evaledger.domain.events.dataset import DatasetItem
from evaledger.domain.input_limits import check_json_file, load_yaml

MAX_DATASET_FILE_BYTES = 64 * 1024 * 1024
"""A dataset file larger than this is refused before it is parsed."""
SUFFIXES = (".jsonl", ".json", ".csv", ".yaml", ".yml")
CSV_COLUMNS = frozenset(
    {
        "key",
        "input",
        "expected_outcomes",
        "tags",
        "metadata",
        "label_passed",
        "label_score",
        "label_by",
    }
)
_TRUE = frozenset({"true", "1", "yes", "pass", "passed"})
_FALSE = frozenset({"false", "0", "no", "fail", "failed"})


def read_items(path: Path) -> list[DatasetItem]:
    """The items of a dataset file (format by its suffix), validated."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValidationError(
            f"{path.name}: a dataset file is one of {', '.join(SUFFIXES)}", field="file"
        )
    try:
        size = path.stat().st_size
    except OSError as e:
        raise ValidationError(f"{path}: cannot read ({e.strerror})", field="file") from None
    if size > MAX_DATASET_FILE_BYTES:
        raise ValidationError(
            f"{path.name}: larger than {MAX_DATASET_FILE_BYTES} bytes", field="file"
        )
    if suffix in (".yaml", ".yml"):
        try:
            loaded = load_yaml(path, path.name)
        except ValueError as e:
            if isinstance(e, ValidationError):
                raise
            raise ValidationError(f"{path.name}: {e}", field="file") from None
        if isinstance(loaded, dict) and "items" in loaded:
            loaded = loaded["items"]
        return _validated(_as_list(loaded, path.name), "item")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValidationError(f"{path.name}: not UTF-8 text", field="file") from None
    if suffix == ".csv":
        return _csv_items(text, path.name)
    check_json_file(path)
    if suffix == ".json":
        return _validated(_as_list(_json(text, path.name), path.name), "item")
    rows: list[tuple[int, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            rows.append((n, _json(line, f"{path.name} line {n}")))
    return [_item(row, f"line {n}") for n, row in rows]


def _json(text: str, where: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ValidationError(f"{where}: not valid JSON ({e})", field="file") from None


def _as_list(loaded: Any, where: str) -> list[Any]:
    if not isinstance(loaded, list):
        raise ValidationError(f"{where}: expected a list of items", field="items")
    return loaded


def _validated(rows: list[Any], what: str) -> list[DatasetItem]:
    return [_item(row, f"{what} {n}") for n, row in enumerate(rows, 1)]


def _item(row: Any, where: str) -> DatasetItem:
    """One item, or a ValidationError naming where it is and its first bad field."""
    if not isinstance(row, dict):
        raise ValidationError(f"{where}: an item is a JSON object", field="item")
    try:
        return DatasetItem.model_validate(row)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "item"
        raise ValidationError(f"{where}: {field}: {first['msg']}", field=field) from None


def _csv_items(text: str, name: str) -> list[DatasetItem]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = reader.fieldnames or []
    unknown = [c for c in columns if c not in CSV_COLUMNS]
    if unknown:
        raise ValidationError(
            f"{name}: unknown column {unknown[0]!r} (columns: {', '.join(sorted(CSV_COLUMNS))})",
            field=unknown[0],
        )
    if "key" not in columns:
        raise ValidationError(f"{name}: the column 'key' is required", field="key")
    items: list[DatasetItem] = []
    try:
        for row in reader:
            where = f"line {reader.line_num}"
            items.append(_item(_csv_row(row, where), where))
    except csv.Error as e:
        raise ValidationError(f"{name} line {reader.line_num}: {e}", field="file") from None
    return items


def _split(cell: str | None) -> list[str]:
    return [x.strip() for x in (cell or "").split(";") if x.strip()]


def _csv_row(row: dict[str | None, Any], where: str) -> dict[str, Any]:
    if None in row:
        raise ValidationError(f"{where}: more cells than columns", field="file")
    out: dict[str, Any] = {"key": row.get("key") or ""}
    if row.get("input"):
        out["input"] = row["input"]
    out["expected_outcomes"] = _split(row.get("expected_outcomes"))
    out["tags"] = _split(row.get("tags"))
    if row.get("metadata"):
        out["metadata"] = _json(row["metadata"], f"{where}: metadata")
    passed = (row.get("label_passed") or "").strip().lower()
    if passed:
        if passed not in _TRUE | _FALSE:
            raise ValidationError(
                f"{where}: label_passed must be true or false, not {passed!r}",
                field="label_passed",
            )
        score_text = (row.get("label_score") or "").strip()
        try:
            score = float(score_text) if score_text else None
        except ValueError:
            raise ValidationError(
                f"{where}: label_score must be a number, not {score_text!r}", field="label_score"
            ) from None
        out["label"] = {
            "passed": passed in _TRUE,
            "score": score,
            "by": _split(row.get("label_by")),
        }
    elif (row.get("label_score") or "").strip():
        raise ValidationError(f"{where}: label_score needs label_passed", field="label_passed")
    return out
