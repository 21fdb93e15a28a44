"""A run's cases as CSV, JSON lines, JUnit XML or Parquet: pure formatters over `RunTable`.

`application/exports.py` gathers the run (its row, aggregate, headline) and one `CaseRow` per
case from the read models and the log; these functions only lay them out, so each format says
the same thing: the cases with their status, gate, scores, named scores and judge summary, and
the run's figures (its pass rate, counts and the source's scorer metrics) where the format has
room for them (the JSON lines' first record, the Parquet file's metadata, the JUnit suite's
properties; a CSV is the case table alone).

Nothing here imports more than the standard library and orjson: `pyarrow` is imported by
`to_parquet` only (start-up: `evaledger export --format csv` never loads it).
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

import orjson

ExportFormat = Literal["bundle", "csv", "parquet", "junit", "jsonl"]
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)
"""Every `--format` / `?format=`; `bundle` (the run bundle) is the default."""

MEDIA_TYPES = {
    "bundle": "application/json",
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
    "junit": "application/xml",
    "jsonl": "application/jsonl",
}
SUFFIXES = {
    "bundle": ".json",
    "csv": ".csv",
    "parquet": ".parquet",
    "junit": ".junit.xml",
    "jsonl": ".jsonl",
}

# The case columns every tabular format shares, in order; then `metric.<id>` (0-5 rubric score)
# per metric and `score.<name>` (numeric reading) per named score the run has.
BASE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "str"),
    ("run_key", "str"),
    ("case_id", "str"),
    ("test_case_key", "str"),
    ("test_case_name", "str"),
    ("repetition", "int"),
    ("variant", "str"),
    ("status", "str"),
    ("passed", "bool"),
    ("errored", "bool"),
    ("gate", "str"),
    ("gate_reason", "str"),
    ("overall_score", "float"),
    ("judge_error", "bool"),
    ("latency_p50_ms", "int"),
    ("latency_p95_ms", "float"),
    ("prompt_tokens", "int"),
    ("completion_tokens", "int"),
    ("cost_usd", "float"),
    ("judge_cost_usd", "float"),
    ("started_at", "str"),
    ("ended_at", "str"),
    ("error", "str"),
    ("judge_summary", "str"),
)
METRIC_PREFIX = "metric."
SCORE_PREFIX = "score."


@dataclass(frozen=True)
class CaseRow:
    """One case as exported: the base columns' values, its metric and named scores."""

    values: dict[str, Any]
    """Base column → value (None: empty)."""
    metric_scores: dict[str, float | None] = field(default_factory=dict)
    named_scores: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunTable:
    """A run as exported: its figures (JSON-ready) and its cases in opening order."""

    run: dict[str, Any]
    """run_id, run_key, name, project, suite, agent, status, created_at, completed_at, labels."""
    figures: dict[str, Any]
    """The aggregate's counts and pass rate, the headline, the scorer metrics (as `show`)."""
    cases: list[CaseRow]

    @property
    def metric_names(self) -> list[str]:
        """Every rubric metric some case has, in first-seen order."""
        return list(dict.fromkeys(m for c in self.cases for m in c.metric_scores))

    @property
    def score_names(self) -> list[str]:
        """Every named score some case has, in first-seen order."""
        return list(dict.fromkeys(n for c in self.cases for n in c.named_scores))

    def columns(self) -> list[tuple[str, str]]:
        """The tabular formats' columns: the base ones, then one per metric and named score."""
        return [
            *BASE_COLUMNS,
            *((METRIC_PREFIX + m, "float") for m in self.metric_names),
            *((SCORE_PREFIX + n, "float") for n in self.score_names),
        ]

    def flat(self, case: CaseRow) -> dict[str, Any]:
        """A case as one flat row of `columns()`."""
        row = dict(case.values)
        for m in self.metric_names:
            row[METRIC_PREFIX + m] = case.metric_scores.get(m)
        for n in self.score_names:
            row[SCORE_PREFIX + n] = case.named_scores.get(n)
        return row


# ---------------------------------------------------------------------------------------------
# CSV

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """A value as a CSV cell: empty for None, `true`/`false`, numbers as Python writes them.

    Text that a spreadsheet would run as a formula (`=`, `+`, `-`, `@`, tab, CR first: a judge
    reply or a case key can be anything) is prefixed with `'` (OWASP's CSV-injection advice);
    numbers are never prefixed.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value if value.startswith(_FORMULA_START) else value
    return str(value)


def to_csv(table: RunTable) -> bytes:
    """The cases as CSV (RFC 4180, CRLF rows, UTF-8): a header row, then one row per case."""
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    names = [name for name, _ in table.columns()]
    writer.writerow(names)
    for case in table.cases:
        row = table.flat(case)
        writer.writerow([csv_cell(row[name]) for name in names])
    return out.getvalue().encode()


# ---------------------------------------------------------------------------------------------
# JSON lines


def to_jsonl(table: RunTable) -> bytes:
    """One JSON object per line: the run (`"record": "run"`, with its figures), then each case.

    A case's metric and named scores are objects (`metric_scores`, `named_scores`), not columns.
    """
    lines = [orjson.dumps({"record": "run", **table.run, **table.figures})]
    for case in table.cases:
        lines.append(
            orjson.dumps(
                {
                    "record": "case",
                    **case.values,
                    "metric_scores": case.metric_scores,
                    "named_scores": case.named_scores,
                }
            )
        )
    return b"\n".join(lines) + b"\n"


# ---------------------------------------------------------------------------------------------
# JUnit XML

# XML 1.0 allows tab, LF, CR and everything from U+0020 but the surrogates and U+FFFE/U+FFFF.
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: Any) -> str:
    """Text an XML 1.0 document can hold: a character it cannot is written as U+FFFD."""
    return _NOT_XML.sub("\ufffd", str(value))


def junit_name(values: dict[str, Any]) -> str:
    """A case's test name: its key, `#repetition` and `[variant]` when it has them."""
    name = str(values["test_case_key"])
    if values.get("repetition"):
        name += f" #{values['repetition']}"
    if values.get("variant"):
        name += f" [{values['variant']}]"
    return name


def _junit_case(suite_name: str, case: CaseRow) -> ET.Element:
    v = case.values
    el = ET.Element(
        "testcase",
        {
            "name": xml_text(junit_name(v)),
            "classname": xml_text(suite_name),
            "time": _seconds(v.get("started_at"), v.get("ended_at")),
        },
    )
    props = ET.SubElement(el, "properties")
    for key in ("case_id", "status", "gate", "overall_score"):
        if v.get(key) is not None:
            ET.SubElement(props, "property", {"name": key, "value": xml_text(v[key])})
    for name, value in case.named_scores.items():
        ET.SubElement(props, "property", {"name": SCORE_PREFIX + name, "value": repr(value)})
    for name, score in case.metric_scores.items():
        if score is not None:
            ET.SubElement(props, "property", {"name": METRIC_PREFIX + name, "value": repr(score)})
    status = v["status"]
    summary = v.get("judge_summary") or ""
    if status == "failed":
        node = ET.SubElement(
            el, "failure", {"message": xml_text(v["gate_reason"]), "type": v["gate"]}
        )
        node.text = xml_text(summary) if summary else None
    elif status == "errored":
        message = v.get("error") or v["gate_reason"]
        node = ET.SubElement(el, "error", {"message": xml_text(message), "type": v["gate"]})
        node.text = xml_text(summary) if summary else None
    elif status != "passed":  # canceled, skipped, pending, unscored: not run or not decided
        ET.SubElement(el, "skipped", {"message": xml_text(f"{status}: {v['gate_reason']}")})
    return el


def _seconds(start: str | None, end: str | None) -> str:
    """A case's duration in seconds from its ISO times (0 when it has none)."""
    if not start or not end:
        return "0"
    # ISO-8601 instants as the transcript stores them (pydantic's JSON, `Z` for UTC).
    seconds = (_instant(end) - _instant(start)).total_seconds()
    return f"{max(0.0, seconds):.3f}"


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def to_junit(table: RunTable) -> bytes:
    """JUnit XML as CI systems read it: one `<testsuite>` (the run), one `<testcase>` per case.

    A failed case has a `<failure>` (message: the gate's reason; text: the judge summary), an
    errored one an `<error>` (the execution error), a canceled, skipped, pending or unscored one
    `<skipped>`. The counts are `show`'s: failures = failed cases, errors = errored cases.
    """
    run, figures = table.run, table.figures
    suite_name = str(run.get("name") or run["run_key"])
    statuses = [c.values["status"] for c in table.cases]
    counts = {
        "tests": str(len(statuses)),
        "failures": str(statuses.count("failed")),
        "errors": str(statuses.count("errored")),
        "skipped": str(sum(s not in ("passed", "failed", "errored") for s in statuses)),
    }
    root = ET.Element("testsuites", {"name": xml_text(run["run_key"]), **counts})
    suite = ET.SubElement(
        root,
        "testsuite",
        {
            "name": xml_text(suite_name),
            **counts,
            "timestamp": xml_text(run.get("created_at") or ""),
            "id": str(run["run_id"]),
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in _suite_properties(run, figures):
        ET.SubElement(props, "property", {"name": name, "value": xml_text(value)})
    for case in table.cases:
        suite.append(_junit_case(suite_name, case))
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def _suite_properties(run: dict[str, Any], figures: dict[str, Any]) -> list[tuple[str, Any]]:
    props: list[tuple[str, Any]] = [
        ("run_id", run["run_id"]),
        ("run_key", run["run_key"]),
        ("suite", run["suite"]),
        ("agent", run["agent"]),
        ("status", run["status"]),
    ]
    headline = figures.get("headline") or {}
    if headline.get("summary"):
        props.append(("headline", headline["summary"]))
    for key in ("pass_rate", "passed_count", "failed_count", "error_count"):
        if figures.get(key) is not None:
            props.append((key, figures[key]))
    for name, value in (figures.get("scorer_metrics") or {}).items():
        props.append((f"scorer_metric.{name}", value))
    return props


# ---------------------------------------------------------------------------------------------
# Parquet


def to_parquet(table: RunTable) -> bytes:
    """The cases as one Parquet table (typed columns), the run and its figures in its metadata.

    The file's key-value metadata `evaledger.run` holds the JSON lines' run record.
    """
    # lazy: pyarrow (~50 MB of native code) only when a Parquet file is written
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
    columns = table.columns()
    schema = pa.schema(
        [pa.field(name, types[kind]) for name, kind in columns],
        metadata={"evaledger.run": orjson.dumps({"record": "run", **table.run, **table.figures})},
    )
    rows = [table.flat(c) for c in table.cases]
    arrow = pa.Table.from_pylist(rows, schema=schema)
    sink = io.BytesIO()
    pq.write_table(arrow, sink)
    written: bytes = sink.getvalue()
    return written


FORMATTERS = {"csv": to_csv, "jsonl": to_jsonl, "junit": to_junit, "parquet": to_parquet}
