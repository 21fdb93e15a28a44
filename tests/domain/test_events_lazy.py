"""The event package's lazy re-exports (issue 32): what runs is what type checkers see.

`evaledger/domain/events/__init__.py` lists each re-exported name twice: imported under
`TYPE_CHECKING` (for mypy) and in `HOMES` (what `__getattr__` loads). These tests hold the two to
each other and to the submodules, and check that a value type does not load the event classes.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from evaledger.domain import events
from evaledger.domain.events.base import DomainEvent

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "evaledger.domain.events"


def type_checking_imports() -> dict[str, tuple[str, ...]]:
    """Submodule → the names the package's `if TYPE_CHECKING:` block imports from it."""
    tree = ast.parse((ROOT / "domain/events/__init__.py").read_text(encoding="utf-8"))
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    ]
    found: dict[str, tuple[str, ...]] = {}
    for node in block.body:
        if isinstance(node, ast.ImportFrom):
            assert node.module is not None and node.module.startswith(f"{PACKAGE}.")
            found[node.module.removeprefix(f"{PACKAGE}.")] = tuple(a.name for a in node.names)
    return found


def test_the_lazy_homes_are_the_type_checkers_imports() -> None:
    assert type_checking_imports() == events.HOMES
    named = [n for names in events.HOMES.values() for n in names]
    assert len(named) == len(set(named)), "a name has two homes"
    assert set(events.__all__) == {*named, "EVENT_CLASSES", "BY_TOPIC_NAME"}


def test_every_name_is_its_submodules_object() -> None:
    for module, names in events.HOMES.items():
        home = importlib.import_module(f"{PACKAGE}.{module}")
        for name in names:
            assert getattr(events, name) is getattr(home, name), name


def test_event_classes_are_every_concrete_event_of_the_submodules() -> None:
    # The reference: every DomainEvent subclass with a topic defined in a submodule.
    defined = {
        cls
        for module in events.HOMES
        for _, cls in inspect.getmembers(importlib.import_module(f"{PACKAGE}.{module}"))
        if inspect.isclass(cls)
        and issubclass(cls, DomainEvent)
        and cls.topic_name
        and cls.__module__.startswith(PACKAGE)
    }
    assert set(events.EVENT_CLASSES) == defined
    assert len(events.EVENT_CLASSES) == len(defined)
    assert {c.topic_name: c for c in defined} == events.BY_TOPIC_NAME
    assert list(events.EVENT_CLASSES) == [getattr(events, n) for n in events.EVENT_CLASS_NAMES]


def test_an_unknown_name_is_an_attribute_error() -> None:
    unknown = "NoSuchEvent"
    with pytest.raises(AttributeError, match="NoSuchEvent"):
        getattr(events, unknown)
    assert {"CaseOpened", "EVENT_CLASSES", "HOMES"} <= set(dir(events))


def test_a_value_type_loads_no_event_class_and_the_catalogue_loads_them_all() -> None:
    probe = (
        "import sys\n"
        "from evaledger.domain.events import AgentSnapshot, DatasetRef, ToolSpec\n"
        "import evaledger.application.compare\n"
        f"print(sorted(m for m in sys.modules if m.startswith('{PACKAGE}.')))\n"
        "from evaledger.domain.events import BY_TOPIC_NAME\n"
        f"print(sorted(m for m in sys.modules if m.startswith('{PACKAGE}.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.splitlines()
    assert out[0] == str([f"{PACKAGE}.{m}" for m in ("base", "dataset", "values")])
    assert out[1] == str(sorted(f"{PACKAGE}.{m}" for m in events.HOMES))
