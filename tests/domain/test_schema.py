"""The published run-bundle JSON Schema is current, and the example bundle is valid against it."""

from __future__ import annotations

import copy
import importlib.util
from typing import Any

import orjson
import pytest

from evaledger.domain.bundle import BUNDLE_FORMAT, RunBundle
from evaledger.domain.schema import render
from tests.conftest import EXAMPLE_BUNDLE

ROOT = EXAMPLE_BUNDLE.parents[2]
SCHEMA_FILE = ROOT / "schemas" / "run-bundle.v1.schema.json"
HAVE_JSONSCHEMA = importlib.util.find_spec("jsonschema") is not None


def validate(data: Any) -> None:
    """Validate against the published schema (jsonschema when installed, else the model)."""
    if HAVE_JSONSCHEMA:
        import jsonschema  # type: ignore[import-untyped,unused-ignore]

        schema = orjson.loads(SCHEMA_FILE.read_bytes())
        jsonschema.validators.validator_for(schema)(schema).validate(data)
    else:
        RunBundle.model_validate(data)


def invalid_errors() -> tuple[type[Exception], ...]:
    """What `validate` raises on an invalid bundle."""
    import pydantic

    if HAVE_JSONSCHEMA:
        import jsonschema  # type: ignore[import-untyped,unused-ignore]

        return (jsonschema.ValidationError,)
    return (pydantic.ValidationError,)


def test_the_published_schema_is_current() -> None:
    assert SCHEMA_FILE.read_bytes() == render(), (
        "schemas/run-bundle.v1.schema.json is stale: run `make schema`"
    )


def test_the_schema_names_the_format() -> None:
    schema = orjson.loads(SCHEMA_FILE.read_bytes())
    assert schema["$id"] == "https://evaledger.dev/schemas/run-bundle.v1.schema.json"
    assert schema["title"] == BUNDLE_FORMAT == "evaledger.run-bundle/1"
    assert schema["required"] == ["format", "run"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["format"]["const"] == BUNDLE_FORMAT


def test_the_example_validates_against_the_schema() -> None:
    data = orjson.loads(EXAMPLE_BUNDLE.read_bytes())
    validate(data)
    bundle = RunBundle.model_validate(data)
    assert bundle.format == BUNDLE_FORMAT
    assert [c.status.value for c in bundle.cases] == ["completed", "completed", "errored"]


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("cases", 0, "verdicts", 0, "metric_scores", 0, "score"), 6),
        (("cases", 0, "repetition"), -1),
        (("run", "suite"), None),
        (("format",), "evaledger.run-bundle/2"),
        (("run", "surprise"), "extra fields are refused"),
    ],
    ids=["score-6", "negative-repetition", "no-suite", "wrong-format", "extra-field"],
)
def test_an_invalid_example_fails_validation(where: tuple[Any, ...], value: Any) -> None:
    data = copy.deepcopy(orjson.loads(EXAMPLE_BUNDLE.read_bytes()))
    target = data
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(invalid_errors()):
        validate(data)
