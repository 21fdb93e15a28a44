"""`evaledger runs` through the bare driver (issue 32, start-up): the same bytes as the full path.

`quick_runs` answers a caught-up SQLite store's listing without SQLAlchemy; the full path
(`main` with a setting in the environment, which the quick path leaves to `Settings`) is the
reference. On PostgreSQL the quick path declines and `main` prints what the full path prints.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.cli import main
from evaledger.api.cli.run_list import quick_runs
from evaledger.application import runs
from evaledger.domain.bundle import BundleRun
from evaledger.domain.ledger import Context
from evaledger.projections import bare_reads, names, tables
from tests.helpers import bundle

FULL_PATH_ENV = ("EVALEDGER_PROJECTIONS", "inline")
"""A setting (the default's value) the quick path leaves to the full path's `Settings`."""

LISTINGS: tuple[list[str], ...] = (
    [],
    ["--json"],
    ["--wide"],
    ["--limit", "2"],
    ["--limit", "2", "--json"],
    ["--label", "trigger=nightly"],
    ["--label", "trigger=manual", "--json"],
    ["--label", "nope=x"],
    ["--key", "run-b"],
    ["--suite", "northwind-support-voice", "--agent", "northwind-support"],
    ["--suite", "other-suite"],
    ["--status", "completed"],
    ["--project", "elsewhere"],
    ["--project", "elsewhere", "--json", "--wide"],
)
"""The listings compared: every filter, --limit below the total, JSON and the wide table."""


@pytest.fixture
def listed_store(store_url: str, tmp_path: Path) -> str:
    """Four closed runs (one undated, two projects, two label values), read once (caught up)."""
    files = []
    for key, changes in (
        ("run-a", {}),
        ("run-b", {"labels": {"trigger": "manual"}, "created_at": "2026-11-21T02:00:00Z"}),
        ("run-c", {"project": "elsewhere"}),
        ("run-d", {"created_at": "1970-01-01T00:00:00Z"}),
    ):
        path = tmp_path / f"{key}.json"
        path.write_bytes(orjson.dumps(bundle(key=key, **changes)))
        files.append(str(path))
    assert main(["import", *files, "--db", store_url]) == 0
    assert main(["runs", "--db", store_url]) == 0  # catches the read models up
    return store_url


def printed(capsys: pytest.CaptureFixture[str], code: int | None) -> tuple[int | None, str, str]:
    out = capsys.readouterr()
    return code, out.out, out.err


def test_runs_through_the_bare_driver_prints_what_the_full_path_prints(
    listed_store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite = listed_store.startswith("sqlite")
    capsys.readouterr()
    for words in LISTINGS:
        argv = ["runs", *words, "--db", listed_store]
        with monkeypatch.context() as m:
            m.setenv(*FULL_PATH_ENV)
            assert quick_runs(argv) is None  # a setting in the environment: the full path
            full = printed(capsys, main(argv))
        quick = printed(capsys, quick_runs(argv))
        if sqlite:
            assert quick == full, words
        else:  # PostgreSQL: opening the store checks it is append-only; the full path does
            assert quick == (None, "", ""), words
        assert printed(capsys, main(argv)) == full, words
        assert full[0] == 0
    # The comparison saw every kind of answer: several runs, none, the undated mark, JSON.
    code, out, _ = printed(capsys, main(["runs", "--db", listed_store]))
    assert code == 0 and "run-a" in out and "run-b" in out and "run-c" not in out
    assert "imported at this time" in out
    listed = orjson.loads(printed(capsys, main(["runs", "--json", "--db", listed_store]))[1])
    assert (listed["count"], listed["total"]) == (3, 3)
    assert [r["run_key"] for r in listed["data"][:2]] == ["run-d", "run-b"]


def test_the_quick_path_leaves_to_the_full_one_what_it_cannot_answer_alike(
    listed_store: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = ["--db", listed_store]
    for words in (
        ["runs", "--help"],
        ["runs", "--limit", "0"],  # a usage error: the full parser names it
        ["runs", "--limit", "501"],  # past the filter's bound
        ["runs", "--label", "novalue"],
        ["runs", "--status", "nope"],
        ["runs", "--bogus"],
        ["show", "run-a"],
    ):
        assert quick_runs([*words, *db]) is None, words
    missing = f"sqlite:///{tmp_path}/missing/"
    assert quick_runs(["runs", "--db", missing]) is None
    with pytest.raises(SystemExit) as failed:
        main(["runs", "--db", missing])
    assert failed.value.code == 3
    assert not (tmp_path / "missing").exists()  # nothing created by either path


def open_run(url: str) -> None:
    """A run created and not closed: its summary is not materialised (the rules summarise it)."""
    data = bundle(key="live-run")["run"]
    for closing in ("status", "completed_at", "reason"):
        data.pop(closing, None)
    services: Services = build_services(Settings(db=url))
    try:
        runs.create_run(services, BundleRun.model_validate(data), Context(actor="test"))
    finally:
        services.close()


def test_the_quick_path_declines_a_store_behind_its_log_or_a_run_not_summarised(
    listed_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["runs", "--db", listed_store]
    open_run(listed_store)
    assert quick_runs(argv) is None  # behind the log: only the projectors catch up
    code, out, _ = printed(capsys, main(argv))  # the full path catches up
    assert code == 0 and "live-run" in out
    # Caught up now, but the open run has no materialised summary: still the full path's.
    assert quick_runs(argv) is None
    assert quick_runs(["runs", "--key", "run-a", "--db", listed_store]) == (
        0 if listed_store.startswith("sqlite") else None
    )


def test_the_bare_reads_name_the_tables_and_columns_tables_py_defines() -> None:
    defined = {t.name: set(t.c.keys()) for t in tables.metadata.sorted_tables}
    for table, columns in bare_reads.COLUMNS.items():
        assert set(columns) <= defined[table], table
    assert {column for _, column in bare_reads.FILTERS} <= defined[names.RUNS_PROJECTION]
    assert (tables.tracking.name, tables.runs.name, tables.run_summaries.name) == (
        names.TRACKING_TABLE,
        names.RUNS_PROJECTION,
        names.RUN_SUMMARIES_TABLE,
    )
    # `listed_at` and `run_id` order the page, `labels` is filtered, `run_row` decodes the rest.
    assert {"listed_at", "run_id", "labels", "created"} <= defined[names.RUNS_PROJECTION]
