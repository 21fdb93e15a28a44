"""Shell completion of run keys and case keys, read from the store (bash run for real)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.test_cli import RUN_KEY
from tests.conftest import EXAMPLE_BUNDLE, drop_pg_database, fresh_pg_database
from tests.helpers import bundle

EVALEDGER = Path(sys.executable).with_name("evaledger")
OTHER_KEY = "northwind-support-v13-rc-2026-11-21"
CASE_KEYS = ["refund-above-limit", "refund-late-delivery"]

# Source the generated script, then ask its completion function as bash would on <TAB>.
BASH_COMPLETE = """
source <(evaledger completion bash)
COMP_WORDS=(evaledger "$@")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="${COMP_WORDS[*]}"
COMP_POINT=${#COMP_LINE}
_shtab_evaledger
printf '%s\\n' "${COMPREPLY[@]}"
"""


def import_runs(db: str, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(__import__("json").dumps(bundle(key=OTHER_KEY)))
    for file in (EXAMPLE_BUNDLE, other):
        subprocess.run([str(EVALEDGER), "import", str(file), "--db", db], check=True)


def complete_in_bash(db: str, *words: str) -> list[str]:
    env = {**os.environ, "PATH": f"{EVALEDGER.parent}:{os.environ['PATH']}", "EVALEDGER_DB": db}
    done = subprocess.run(
        ["bash", "-c", BASH_COMPLETE, "complete", *words],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return sorted(line for line in done.stdout.splitlines() if line)


@pytest.fixture
def store(sqlite_url: str, tmp_path: Path) -> str:
    import_runs(sqlite_url, tmp_path)
    return sqlite_url


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_run_keys_and_case_keys_from_the_store(store: str) -> None:
    assert complete_in_bash(store, "show", "northwind-") == sorted([RUN_KEY, OTHER_KEY])
    assert complete_in_bash(store, "show", "northwind-support-v13") == [OTHER_KEY]
    assert complete_in_bash(store, "compare", RUN_KEY, "northwind-support-v1") == sorted(
        [RUN_KEY, OTHER_KEY]
    )
    # RUN TEST_CASE_KEY: the run's own case keys.
    assert complete_in_bash(store, "explain", RUN_KEY, "refund-") == CASE_KEYS
    # Options still complete as before.
    assert complete_in_bash(store, "show", "--fai") == ["--failed"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_reads_db_and_project_from_the_command_line(store: str, tmp_path: Path) -> None:
    elsewhere = f"sqlite:///{tmp_path}/none/"
    assert complete_in_bash(elsewhere, "show", "--db", store, "northwind-") == sorted(
        [RUN_KEY, OTHER_KEY]
    )
    assert complete_in_bash(store, "show", "--project", "other", "northwind-") == []


def test_the_hidden_command_prints_keys_and_creates_nothing(store: str, tmp_path: Path) -> None:
    # Straight after `import` (nothing read yet, so nothing projected): keys come from the log.
    def hidden(*words: str) -> list[str]:
        done = subprocess.run(
            [str(EVALEDGER), "__complete", *words], capture_output=True, text=True, check=True
        )
        assert done.stderr == ""
        return done.stdout.splitlines()

    assert sorted(hidden("show", "--db", store)) == sorted([RUN_KEY, OTHER_KEY])
    assert hidden("history", "--db", store, RUN_KEY) == [*CASE_KEYS, "store-hours"]
    assert hidden("runs", "--db", store) == []  # no RUN argument there
    missing = tmp_path / "missing"
    assert hidden("show", "--db", f"sqlite:///{missing}/") == []
    assert not missing.exists()


def test_the_hidden_command_is_not_in_help() -> None:
    done = subprocess.run([str(EVALEDGER), "--help"], capture_output=True, text=True, check=True)
    assert "__complete" not in done.stdout and "completion" in done.stdout


def test_postgres_keys_complete_too(tmp_path: Path) -> None:
    url, name = fresh_pg_database()
    try:
        import_runs(url, tmp_path)
        done = subprocess.run(
            [str(EVALEDGER), "__complete", "show", "--db", url],
            capture_output=True,
            text=True,
            check=True,
        )
        assert sorted(done.stdout.splitlines()) == sorted([RUN_KEY, OTHER_KEY])
    finally:
        drop_pg_database(name)


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_ask_the_store_for_keys(shell: str) -> None:
    done = subprocess.run(
        [str(EVALEDGER), "completion", shell], capture_output=True, text=True, check=True
    )
    asks = [line for line in done.stdout.splitlines() if "evaledger __complete" in line]
    # Every command taking a run: show, export, compare, … (more than a dozen of them).
    assert len(asks) >= 12, asks
    assert any("show" in line for line in asks) if shell == "fish" else asks
