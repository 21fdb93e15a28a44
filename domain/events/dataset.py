"""The events of a versioned dataset: its creation, then each immutable version of its items.

A version holds every item it has (not a change set), so a version is read without replaying
the ones before it; its content hash (`domain/datasets.py`) names its content.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field

from evaledger.domain.events.base import DomainEvent
from evaledger.domain.model import FrozenModel
from evaledger.domain.types import MAX_AMOUNT, JsonObject, Key


def _finite_json(value: Any) -> Any:
    """No NaN or infinity anywhere inside free-form JSON (checked by the C encoder)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        raise ValueError("NaN and infinity are not allowed") from None
    except TypeError:
        raise ValueError("not a JSON value") from None
    return value


FiniteJson = Annotated[Any, AfterValidator(_finite_json)]


class DatasetLabel(FrozenModel):
    """A human label of an item (an item with one belongs to a gold set)."""

    passed: bool = Field(description="The reviewers' pass/fail for the item.")
    score: float | None = Field(
        default=None, ge=-MAX_AMOUNT, le=MAX_AMOUNT, description="An optional score."
    )
    by: list[Key] = Field(default_factory=list, description="Who labelled it (principals).")


class DatasetItem(FrozenModel):
    """One item of a dataset: only its key is required."""

    key: Key = Field(description="The item's key, unique in its version (cases link to it).")
    input: FiniteJson = Field(default=None, description="The input the system under test is given.")
    expected_outcomes: list[str] = Field(
        default_factory=list, description="What a passing answer does (statements)."
    )
    tags: list[Key] = Field(default_factory=list, description="Free tags.")
    metadata: JsonObject = Field(default_factory=dict, description="Free JSON object.")
    label: DatasetLabel | None = Field(default=None, description="A human label, if any.")


class DatasetRef(FrozenModel):
    """The dataset version a run ran: its name, version and content hash (DESIGN §18).

    For a ledger dataset the hash is its version's content hash, filled in by the ledger when a
    run names only `name@version` (or only `name`: the latest version); for an imported or
    hooked run it is what the source names (its task's dataset and a hash of its samples).
    A run's stored reference always has its hash.
    """

    name: Key = Field(description="The dataset's name.")
    version: int | None = Field(
        default=None, ge=1, le=2**31 - 1, description="Its version in the ledger, if it is one."
    )
    hash: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 (hex) of the version's content (a ledger dataset's: filled in).",
    )


class DatasetEvent(DomainEvent):
    """An event of a Dataset aggregate (one named dataset of one project)."""


class DatasetCreated(DatasetEvent):
    """A named dataset was created in a project (it has no version yet)."""

    topic_name: ClassVar[str] = "evaledger.dataset.created"

    project: str = Field(min_length=1, description="The project the dataset belongs to.")
    name: Key = Field(description="The dataset's name, unique in its project.")
    description: str | None = Field(default=None, description="What the dataset is for.")


class DatasetVersionAdded(DatasetEvent):
    """A new immutable version of the dataset: all its items and their content hash."""

    topic_name: ClassVar[str] = "evaledger.dataset.version_added"

    version: int = Field(ge=1, description="1, 2, … in the order versions were added.")
    content_hash: str = Field(
        min_length=64, max_length=64, description="sha256 of the canonical JSON of its items."
    )
    items: list[DatasetItem] = Field(description="Every item of the version, sorted by key.")
    source: str | None = Field(default=None, description="The file the items were read from.")
