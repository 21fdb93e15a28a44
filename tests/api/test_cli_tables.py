"""Tables on a real terminal: at 60, 80, 100 and 140 columns keys, status, pass rate and score
(the headline's figure) stay whole; what does not fit is dropped and named, never cut; ids show
8 characters."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import EXAMPLE_BUNDLE
from tests.helpers import bundle, case

EVALEDGER = Path(sys.executable).with_name("evaledger")
WIDTHS = (60, 80, 100, 140)
BIG_KEY = "northwind-support-v13-rc-2026-11-21"
BIG_CASES = 1000
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(argv: list[str], columns: int, db: str) -> list[str]:
    """Run in a pseudo-terminal `columns` wide; the lines the terminal showed, without colour."""
    main_fd, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "EVALEDGER_DB": db, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen(
        [str(EVALEDGER), *argv], env=env, stdout=terminal, stderr=terminal, close_fds=True
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    assert proc.wait() == 0
    return [ANSI.sub("", line).rstrip() for line in b"".join(chunks).decode().splitlines()]


def run_json(db: str, *argv: str) -> Any:
    done = subprocess.run(
        [str(EVALEDGER), *argv, "--json", "--db", db], capture_output=True, check=True
    )
    return orjson.loads(done.stdout)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The example run, and a run of 1000 cases with long names (a 4-digit case count)."""
    folder = tmp_path_factory.mktemp("tables")
    db = f"sqlite:///{folder}/store/"
    big = bundle(
        key=BIG_KEY,
        suite={"name": "northwind-support-voice-regression-suite", "version": "7"},
        agent={"name": "northwind-support-agent-with-tools", "version": None},
    )
    big["cases"] = [case(f"case-{i:04d}", 2 + i % 3) for i in range(BIG_CASES)]
    path = folder / "big.json"
    path.write_bytes(orjson.dumps(big))
    for file in (EXAMPLE_BUNDLE, path):
        subprocess.run([str(EVALEDGER), "import", str(file), "--db", db], check=True)
    return db


def shown(lines: list[str], header: list[str], row_marker: str) -> dict[str, str]:
    """The cells of the row holding `row_marker`, by column name (columns split on 2+ spaces)."""
    head = next(line for line in lines if line.split()[: len(header)] == header[: len(header)])
    names = head.split()
    row = next(line for line in lines if row_marker in line)
    cells = re.split(r"\s{2,}", row.strip())
    assert len(cells) == len(names), (names, cells)
    return dict(zip(names, cells, strict=True))


def dropped_note(lines: list[str]) -> str:
    """The note naming dropped columns (it may wrap: its lines joined back)."""
    start = next((i for i, line in enumerate(lines) if line.startswith("not shown at")), None)
    if start is None:
        return ""
    # The terminal may wrap inside "(--wide shows them)" itself.
    end = next(
        i
        for i in range(start, len(lines))
        if " ".join(lines[start : i + 1]).endswith("(--wide shows them)")
    )
    return " ".join(lines[start : end + 1])


@pytest.mark.parametrize("columns", WIDTHS)
def test_runs_keeps_keys_status_pass_rate_and_score_whole(store: str, columns: int) -> None:
    lines = on_terminal(["runs"], columns, store)
    listed = run_json(store, "runs")["data"]
    assert all(len(line) <= columns for line in lines), lines
    note = dropped_note(lines)
    for run in listed:
        cells = shown(lines, ["run_id", "key"], run["run_key"])
        # Ids: their first 8 characters (as git); keys in full, on one line.
        assert cells["run_id"] == run["run_id"][:8]
        assert cells["key"] == run["run_key"]
        # Issue 30: `score` is the headline's figure (here the rubric's weighted score).
        assert run["headline"]["metric"] == "weighted_metrics_score_pct"
        expected = {
            "status": run["status"],
            "cases": str(run["case_count"]),
            "pass": f"{100 * run['pass_rate']:.1f}%",
            "score": f"{run['weighted_metrics_score_pct']:.2f}",
        }
        for name, value in expected.items():
            # Whole, or dropped and named in the note (never a cut "100" for 1000).
            if name in cells:
                assert cells[name] == value
            else:
                assert name in note and "--wide" in note
        if columns >= 80:
            assert {"status", "pass", "score"} <= cells.keys(), lines
        if columns >= 100:
            assert "cases" in cells, lines
    if columns == 140:
        # Room for the names, not for the creation time: named as dropped.
        assert "suite" in lines[0] and "created_at" in note


def test_wide_shows_every_column_and_full_ids(store: str) -> None:
    lines = on_terminal(["runs", "--wide"], 80, store)
    big = next(r for r in run_json(store, "runs")["data"] if r["run_key"] == BIG_KEY)
    assert dropped_note(lines) == ""
    header = next(line for line in lines if line.startswith("run_id"))
    assert header.split() == [
        "run_id",
        "key",
        "suite",
        "agent",
        "status",
        "cases",
        "metric",
        "score",
        "pass",
        "passes_when",
        "created_at",
    ]
    # The terminal wraps a row wider than itself: join the screen lines back into one row.
    screen = "".join(lines)
    assert big["run_id"] in screen and "northwind-support-voice-regression-suite" in screen


@pytest.mark.parametrize("columns", WIDTHS)
def test_show_keeps_case_keys_status_and_score_whole(store: str, columns: int) -> None:
    lines = on_terminal(["show", BIG_KEY, "--limit", "5"], columns, store)
    payload = run_json(store, "show", BIG_KEY, "--limit", "5")
    # The table fits; the header lines above it (full run id) may wrap, the terminal's doing.
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("case_id")) :]
    assert all(len(line) <= columns for line in table), table
    note = dropped_note(lines)
    for c in payload["cases"]:
        cells = shown(lines, ["case_id", "test_case_key"], c["test_case_key"])
        assert cells["case_id"] == c["case_id"][:8]
        assert cells["test_case_key"] == c["test_case_key"]
        assert cells["rep"] == str(c["repetition"])
        for name, value in (("status", c["status"]), ("score", f"{c['overall_score']:.2f}")):
            if name in cells:
                assert cells[name] == value
            else:
                assert name in note
        if columns >= 80:
            assert {"status", "score"} <= cells.keys()
    # The header: a missing agent version is no "vNone".
    assert "None" not in "\n".join(lines)
    assert any("agent northwind-support-agent-with-tools " in line for line in lines), lines


SCORERS = [
    "exact_match",
    "answer_relevance",
    "faithfulness",
    "context_recall",
    "toxicity_free",
    "tool_accuracy",
    "latency_budget",
]


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run with seven source scorers (more than fit 80 columns), three cases."""
    folder = tmp_path_factory.mktemp("scorers")
    db = f"sqlite:///{folder}/store/"
    data = bundle(key="seven-scorers")
    data["run"]["config"]["scorers"] = [
        {"name": n, "score": n, "semantics": "inspect", "metrics": ["mean"]} for n in SCORERS
    ]
    data["cases"] = [case(f"q{i}") for i in range(3)]
    for i, c in enumerate(data["cases"]):
        c["verdicts"] = []
        c["named_scores"] = [
            {"scorer": n, "scores": [{"name": n, "value": (i + j) % 4 / 4, "scale": "fraction"}]}
            for j, n in enumerate(SCORERS)
        ]
    path = folder / "seven.json"
    path.write_bytes(orjson.dumps(data))
    subprocess.run([str(EVALEDGER), "import", str(path), "--db", db], check=True)
    return db


def test_show_wide_shows_every_scorer(scored: str) -> None:
    lines = on_terminal(["show", "seven-scorers", "--wide"], 80, scored)
    # The terminal wraps a row wider than itself: join the screen lines back into one row.
    screen = "".join(lines)
    assert dropped_note(lines) == ""
    for name in SCORERS:
        assert name in screen, name
    cases = run_json(scored, "show", "seven-scorers")["cases"]
    for c in cases:
        for name in SCORERS:
            assert f"{c['named_scores'][name]:.4f}" in screen


def test_show_lists_every_scorer_in_a_narrow_terminal_rather_than_dropping_one(
    scored: str,
) -> None:
    lines = on_terminal(["show", "seven-scorers"], 80, scored)
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("case_id")) :]
    assert all(len(line) <= 80 for line in table), table
    note = dropped_note(lines)
    assert not any(name in note for name in SCORERS), note
    text = " ".join(line.strip() for line in table)
    for c in run_json(scored, "show", "seven-scorers")["cases"]:
        for name in SCORERS:
            # name=value, each pair whole (the column wraps between pairs).
            assert f"{name}={c['named_scores'][name]:.4f}" in text, (name, table)


def test_show_piped_has_a_column_per_scorer(scored: str) -> None:
    done = subprocess.run(
        [str(EVALEDGER), "show", "seven-scorers", "--db", scored],
        capture_output=True,
        check=True,
        text=True,
    )
    header = next(line for line in done.stdout.splitlines() if line.startswith("case_id"))
    assert header.split() == ["case_id", "test_case_key", "rep", "status", *SCORERS, "gate"]


def test_show_lays_out_the_first_50_cases_and_says_how_to_see_the_rest(store: str) -> None:
    """Issue 32: the table pages (`--all` for every case); `--json` stays whole unless limited."""

    def text(*argv: str) -> list[str]:
        done = subprocess.run(
            [str(EVALEDGER), "show", BIG_KEY, *argv, "--db", store],
            capture_output=True,
            check=True,
            text=True,
        )
        return done.stdout.splitlines()

    def case_rows(lines: list[str]) -> list[str]:
        return [line for line in lines if " case-" in line]

    paged = text()
    assert len(case_rows(paged)) == 50
    assert paged[-1] == f"50 of {BIG_CASES:,} cases shown: {BIG_CASES - 50:,} more (--all)"
    every = text("--all")
    assert len(case_rows(every)) == BIG_CASES and "more (--all)" not in every[-1]
    assert text("--limit", "3")[-1] == f"3 of {BIG_CASES} cases shown (--limit 3)"
    whole = run_json(store, "show", BIG_KEY)
    assert (len(whole["cases"]), whole["cases_matching"]) == (BIG_CASES, BIG_CASES)
    page = run_json(store, "show", BIG_KEY, "--limit", "5")
    assert (len(page["cases"]), page["cases_matching"]) == (5, BIG_CASES)
    assert [c["case_id"] for c in page["cases"]] == [c["case_id"] for c in whole["cases"][:5]]
    done = subprocess.run(
        [str(EVALEDGER), "show", BIG_KEY, "--all", "--limit", "5", "--db", store],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "not allowed with argument" in done.stderr
