"""The CI shards (`EVALEDGER_TEST_SHARD=K/N`, tests/conftest.py) split the suite without loss.

CI runs the fast suite once across Python 3.12 and 3.13, half on each: a test left out of both
halves, or a bad shard value silently running nothing, would go untested on both Pythons.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Many cheap items (one per module of the package), collected in about a second.
TARGET = "tests/test_code_size.py"


def _collected(shard: str | None) -> tuple[int, set[str]]:
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_TEST_SHARD"}
    if shard is not None:
        env["EVALEDGER_TEST_SHARD"] = shard
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            TARGET,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ids = {line for line in proc.stdout.splitlines() if "::" in line}
    return proc.returncode, ids


def test_the_two_halves_partition_the_suite() -> None:
    code, everything = _collected(None)
    assert code == 0 and len(everything) > 50
    code0, first = _collected("0/2")
    code1, second = _collected("1/2")
    assert code0 == 0 and code1 == 0
    assert first and second, "a shard is empty"
    assert not first & second
    assert first | second == everything
    # Balanced to within a third: by node id, not by file.
    assert min(len(first), len(second)) > len(everything) / 3


def test_a_malformed_shard_is_a_usage_error_not_an_empty_run() -> None:
    for bad in ("2/2", "half", "1/0"):
        code, ids = _collected(bad)
        assert code == 4, (bad, code)  # pytest's usage-error exit
        assert not ids
