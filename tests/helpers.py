"""Small builders shared by tests."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

from evaledger.api.bootstrap import Services
from evaledger.domain.metrics import DEFAULT_METRIC_NAMES
from tests.conftest import example_bundle_data

ROOT = Path(__file__).resolve().parents[1]


def checkout_copy(destination: Path) -> Path:
    """A copy of the checkout's files (tracked and untracked, not ignored) at `destination`.

    A package build writes `build/` and `*.egg-info` beside its sources: built from a copy, it
    neither litters the checkout nor races another build of it (CI runs two suites at once).
    """
    names = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in names:
        src = ROOT / name
        if src.is_symlink() or src.is_file():
            dst = destination / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_symlink():
                dst.symlink_to(src.readlink())
            else:
                shutil.copy2(src, dst)
    return destination


def event_count(services: Services) -> int:
    """How many events the store holds."""
    return len(services.ledger.notifications(1, 1_000_000))


def bundle(**run_overrides: Any) -> dict[str, Any]:
    """A deep copy of the example bundle, with run fields overridden."""
    data: dict[str, Any] = copy.deepcopy(example_bundle_data())
    data["run"].update(run_overrides)
    return data


def scores(*values: int) -> list[dict[str, Any]]:
    """Metric scores for the 8 default metrics, in catalogue order."""
    names = DEFAULT_METRIC_NAMES
    vals = list(values) * 8 if len(values) == 1 else list(values)
    return [
        {"metric": n, "score": v, "justification": f"{n} is {v}", "turns": []}
        for n, v in zip(names, vals, strict=True)
    ]


def case(
    key: str,
    score: int = 4,
    *,
    outcomes: list[dict[str, Any]] | None = None,
    repetition: int = 0,
    status: str = "completed",
) -> dict[str, Any]:
    """A bundle case with a 4-turn transcript and one verdict."""
    c: dict[str, Any] = {
        "test_case": {
            "key": key,
            "name": key,
            "expected_outcomes": [o["statement"] for o in outcomes or []],
        },
        "repetition": repetition,
        "status": status,
        "transcript": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "latency_ms": 500},
            {"role": "user", "content": "bye"},
            {"role": "assistant", "content": "bye", "latency_ms": 700},
        ],
        "verdicts": [
            {
                "judge": {"provider": "anthropic", "model": "claude"},
                "metric_scores": scores(score),
                "expected_outcomes": outcomes or [],
                "prompt": f"judge {key}",
                "raw_output": "{}",
            }
        ],
    }
    if status == "errored":
        c.update(transcript=[], verdicts=[], error={"message": "timeout", "kind": "timeout"})
    return c
