"""promptfoo's row-shaped outputs: `-o out.jsonl` (one result row a line) and `-o out.csv`.

Neither carries the eval's header (no `evalId`, no time, no per-prompt metrics): the run is
named by the file's content digest and undated (listed by its import time, as tau-bench's),
and it has no source metrics. A JSONL row is the JSON output's result row, read by the same
`case_of`. A CSV row is a test (× repetition); each `[provider] prompt` column group of it is a
case, with the output, its PASS / FAIL / ERROR status, score, named scores and grader reason.

Repetitions (`--repeat N`) are told apart as in the JSON output (`repetition_places`): rows of
one test with the same vars are repetitions of it, in testIdx order (a CSV row's index is its
testIdx: promptfoo writes the table in that order).
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson
import orjson

from evaledger.domain.bundle import (
    BundleCase,
    BundleCaseStatus,
    BundleError,
    BundleNamedScores,
    BundleRun,
)
from evaledger.domain.events import (
    AgentSnapshot,
    NamedScore,
    Role,
    ScoreScale,
    SuiteRef,
    TestCaseSnapshot,
    Turn,
)
from evaledger.domain.events.run import UNDATED
from evaledger.domain.spec import RunConfig, ScoreGate
from evaledger.importers.base import Format, PeerImport, fail, named_score
from evaledger.importers.promptfoo import (
    PASS_SCORE,
    case_of,
    identity,
    provider_name,
    repetition_places,
    row_identity,
)

CSV_GROUP = ("Status", "Score", "Named Scores")
"""The columns after each `[provider] prompt` output column of promptfoo's CSV."""
_CSV_TAIL = ("Grader Reason", "Comment")
_CSV_HEAD_BYTES = 1 << 20
"""The most of a CSV file read to find its header row."""
_STATUS = {"PASS": True, "FAIL": False, "ERROR": False}
_CSV_FIELD_LIMIT = 16 << 20
"""The longest CSV field read (an output text); a longer one is refused, not loaded."""


def _file_key(path: Path) -> str:
    """A row-shaped output's run key: its content digest (the same file twice is one run)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return f"promptfoo-{digest.hexdigest()[:16]}"


def _run(path: Path, kind: str, providers: list[str]) -> BundleRun:
    key = _file_key(path)
    provider, _, model = providers[0].partition(":") if len(providers) == 1 else ("", "", "")
    return BundleRun(
        key=key,
        name=f"promptfoo eval ({kind} output)",  # not its file name: a copy is the same run
        suite=SuiteRef(name="promptfoo eval"),
        agent=AgentSnapshot(
            name=", ".join(providers) or "promptfoo",
            provider=provider or None,
            model=model or None,
        ),
        labels={"source": "promptfoo", "promptfoo.output": kind},
        config=RunConfig(score_gates=(ScoreGate(score=PASS_SCORE, op=">=", value=1.0),)),
        # No time in the file: undated, as tau-bench's (lists show the import time, marked);
        # a file's modification time would make a copy of it another run.
        created_at=UNDATED,
    )


# ---------------------------------------------------------------------------------------------
# JSONL


def jsonl_rows(path: Path) -> Iterator[Mapping[str, Any]]:
    """The result rows of a JSONL output, streamed."""
    with path.open("rb") as f:
        try:
            for row in ijson.items(f, "", multiple_values=True, use_float=True):
                if not isinstance(row, Mapping):
                    raise fail(path, "promptfoo JSONL output: a line is not a result object")
                yield row
        except ijson.common.JSONError as e:
            raise fail(path, f"promptfoo JSONL output is cut off or not valid JSON ({e})") from None


def open_jsonl(path: Path) -> PeerImport:
    """The run of a promptfoo JSONL output."""
    providers: list[str] = []
    labels: set[Any] = set()
    seen: list[tuple[int, bytes]] = []
    for row in jsonl_rows(path):
        name = provider_name(row)
        if name not in providers:
            providers.append(name)
        prompt = row.get("prompt") or {}
        labels.add(
            prompt.get("label") or prompt.get("raw") if isinstance(prompt, Mapping) else None
        )
        if isinstance(row.get("testIdx"), int):
            seen.append((row["testIdx"], row_identity(row)))
    places = repetition_places(iter(seen))
    several = len(labels) > 1

    def cases() -> Iterator[BundleCase]:
        for row in jsonl_rows(path):
            yield case_of(row, several, places)

    return PeerImport(
        format=Format.PROMPTFOO,
        sources=(str(path),),
        run=_run(path, "JSONL", providers),
        cases=cases,
    )


# ---------------------------------------------------------------------------------------------
# CSV


@dataclass(frozen=True)
class _Group:
    """One `[provider] prompt` column group of the CSV."""

    at: int
    provider: str
    label: str
    named: tuple[int, ...]
    """Columns of `Metric: <name>` values."""


def _csv_header(row: list[str]) -> tuple[int, list[_Group]] | None:
    """(how many leading columns are the description and vars, the groups), or None."""
    groups: list[_Group] = []
    i = 0
    while i < len(row) - len(CSV_GROUP):
        if tuple(row[i + 1 : i + 1 + len(CSV_GROUP)]) != CSV_GROUP:
            i += 1
            continue
        j = i + 1 + len(CSV_GROUP)
        named = []
        while j < len(row) and row[j].startswith("Metric: "):
            named.append(j)
            j += 1
        if tuple(row[j : j + len(_CSV_TAIL)]) != _CSV_TAIL:
            i += 1
            continue
        title = row[i]
        provider, label = "", title
        if title.startswith("[") and "] " in title:
            provider, _, label = title[1:].partition("] ")
        groups.append(_Group(i, provider, label, tuple(named)))
        i = j + len(_CSV_TAIL)
    if not groups:
        return None
    return groups[0].at, groups


def _csv_reader(f: io.TextIOBase) -> Iterator[list[str]]:
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    return csv.reader(f)


def is_promptfoo_csv(path: Path) -> bool:
    """Whether a file is promptfoo's CSV output: a header row of `[provider] prompt` groups."""
    with path.open("rb") as f:
        head = f.read(_CSV_HEAD_BYTES)
    line = head.split(b"\n", 1)[0].lstrip(b"\xef\xbb\xbf").decode("utf-8", "replace")
    try:
        row = next(csv.reader([line]), [])
    except csv.Error:
        return False
    return _csv_header(row) is not None


def _csv_rows(path: Path) -> tuple[list[str], Iterator[list[str]]]:
    f = path.open(encoding="utf-8-sig", newline="")
    reader = _csv_reader(f)
    header = next(reader, [])

    def rows() -> Iterator[list[str]]:
        with f:
            try:
                yield from reader
            except csv.Error as e:
                raise fail(path, f"promptfoo CSV output cannot be read ({e})") from None

    return header, rows()


def open_csv(path: Path) -> PeerImport:
    """The run of a promptfoo CSV output."""
    header, rows = _csv_rows(path)
    found = _csv_header(header)
    if found is None:
        raise fail(path, "promptfoo CSV output without its `[provider] prompt` columns")
    lead, groups = found
    places = repetition_places((i, identity(row[:lead])) for i, row in enumerate(rows))
    several = len({g.label for g in groups}) > 1
    providers = list(dict.fromkeys(g.provider for g in groups if g.provider))
    names = header[:lead]

    def cases() -> Iterator[BundleCase]:
        _, body = _csv_rows(path)
        for i, row in enumerate(body):
            key, repetition = places.get(i, (f"test-{i}", 0))
            for g in groups:
                if g.at + 1 < len(row) and row[g.at + 1]:
                    yield _csv_case(row, names, g, key, repetition, several)

    return PeerImport(
        format=Format.PROMPTFOO,
        sources=(str(path),),
        run=_run(path, "CSV", providers),
        cases=cases,
    )


def _csv_case(
    row: list[str], names: list[str], g: _Group, key: str, repetition: int, several: bool
) -> BundleCase:
    output, status, score, named_text = row[g.at : g.at + 4]
    reason = row[g.at + 4 + len(g.named)] if g.at + 4 + len(g.named) < len(row) else ""
    configuration = g.provider or "provider"
    if several:
        configuration += f" | {g.label}"
    passed = _STATUS.get(status, False)
    scores = [NamedScore(name=PASS_SCORE, value=passed, scale=ScoreScale.BOOLEAN)]
    if score:
        scores.append(named_score("score", float(score)))
    if named_text:
        named = orjson.loads(named_text)
        if isinstance(named, Mapping):
            scores.extend(
                named_score(k, v) for k, v in named.items() if k not in (PASS_SCORE, "score")
            )
    described = bool(names) and names[0] == "Description"
    error = None
    if status == "ERROR":
        error = BundleError(message=reason or "provider error", kind="promptfoo_error")
    values = dict(zip(names, row, strict=False))
    if described:
        values.pop("Description", None)
    return BundleCase(
        test_case=TestCaseSnapshot(
            key=key,
            name=(row[0] or None) if described else None,
            configuration=configuration,
        ),
        repetition=repetition,
        status=BundleCaseStatus.ERRORED if error else BundleCaseStatus.COMPLETED,
        error=error,
        transcript=[Turn(role=Role.ASSISTANT, content=output)],
        named_scores=[
            BundleNamedScores(
                scorer="promptfoo",
                scores=scores,
                explanation=reason or None,
                metadata={"vars": values},
            )
        ],
    )
