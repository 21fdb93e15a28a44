"""The docs describe this repository: they cite only its files, and the event catalogue is whole.

`docs/architecture.md` names the source file of every layer and rule, and lists every event class
with its stored topic; a rename or a new event that the page does not follow fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evaledger.domain.events import EVENT_CLASSES

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "api/demo/LICENSES.md"]
SOURCE_FOLDERS = (
    "domain",
    "scoring",
    "projections",
    "api",
    "judging",
    "importers",
    "application",
    "tests",
)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_cite_nothing_outside_the_repository(doc: Path) -> None:
    text = doc.read_text()
    assert "../" not in text
    assert not re.search(r"\bshared/", text), "a path of the workspace's shared folder"


def test_the_architecture_page_lists_every_event_with_its_topic() -> None:
    rows = re.findall(r"^\| `(\w+)` \| `([\w./]+)` \|", ARCHITECTURE.read_text(), re.MULTILINE)
    assert len(rows) == len(EVENT_CLASSES)
    assert dict(rows) == {c.__name__: c.topic() for c in EVENT_CLASSES}


def test_the_architecture_page_cites_files_that_exist() -> None:
    cited = {
        token
        for token in re.findall(r"`([\w./-]+)`", ARCHITECTURE.read_text())
        if token.split("/")[0] in SOURCE_FOLDERS and "/" in token
    }
    assert len(cited) >= 25
    assert sorted(p for p in cited if not (ROOT / p).exists()) == []
