"""CLI start-up (issue 19): `evaledger --version`, `runs` and `show` on a small store, each in a
fresh process, beside `python -c "import pydantic, orjson"` measured in the same run.

    .venv/bin/python bench/startup.py              # median of 15 runs of each, interleaved
    .venv/bin/python bench/startup.py --repeat 5

Each command runs as the installed `evaledger` script does (`python -m evaledger`), with its
stdout discarded. Wall time and the child's CPU time (user + system) are both printed: on a
loaded machine the CPU seconds move less. Bytecode is compiled by one untimed run of each first,
with PYTHONDONTWRITEBYTECODE removed from the children's environment (an installed package has
its bytecode; a run that compiles every module would measure the compiler). The store is the
repository's example bundle imported into a fresh SQLite store.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Goal, machine_note, print_goals, print_table

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "fixtures" / "run-bundle.example.json"
AIM_VERSION = 2.5
"""`evaledger --version` at most this many times the baseline."""
AIM_READ = 6.0
"""`evaledger show` at most this many times the baseline (issue 19)."""
AIM_RUNS = 4.0
"""`evaledger runs` at most this many times the baseline (issue 32: the bare-driver listing)."""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and the child's CPU seconds (user + system) of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeat", type=int, default=15, help="runs of each command (median)")
    args = p.parse_args(argv)
    print(f"machine: {machine_note()}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="evaledger-startup-") as tmp:
        db = f"sqlite:///{tmp}/store/"
        cli = [py, "-m", "evaledger"]
        subprocess.run([*cli, "import", str(EXAMPLE), "--db", db], env=env, check=True,
                       stdout=subprocess.DEVNULL, cwd=ROOT)  # fmt: skip
        run_id = (
            subprocess.run(
                [*cli, "runs", "--db", db], env=env, check=True, capture_output=True, text=True
            )
            .stdout.splitlines()[1]
            .split()[0]
        )
        commands = {
            'python -c "import pydantic, orjson"': [py, "-c", "import pydantic, orjson"],
            "evaledger --version": [*cli, "--version"],
            "evaledger runs": [*cli, "runs", "--db", db],
            "evaledger show RUN": [*cli, "show", run_id, "--db", db],
        }
        for command in commands.values():
            timed(command, env)  # untimed: bytecode written, files in the page cache
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):  # interleaved: a load spike hits every command alike
            for name, command in commands.items():
                one_wall, one_cpu = timed(command, env)
                walls[name].append(one_wall)
                cpus[name].append(one_cpu)
    wall = {name: statistics.median(v) for name, v in walls.items()}
    cpu = {name: statistics.median(v) for name, v in cpus.items()}
    base = 'python -c "import pydantic, orjson"'
    print_table(
        f"CLI start-up, median of {args.repeat} fresh processes each",
        ["command", "wall ms", "CPU ms", "wall / baseline", "CPU / baseline"],
        [
            [
                name,
                f"{wall[name] * 1000:.0f}",
                f"{cpu[name] * 1000:.0f}",
                f"{wall[name] / wall[base]:.2f}x",
                f"{cpu[name] / cpu[base]:.2f}x",
            ]
            for name in commands
        ],
    )
    goals = []
    for name, aim in (
        ("evaledger --version", AIM_VERSION),
        ("evaledger runs", AIM_RUNS),
        ("evaledger show RUN", AIM_READ),
    ):
        ratio = wall[name] / wall[base]
        goals.append(
            Goal(
                f"CLI start-up: {name} (small store)",
                f"{wall[name] * 1000:.0f} ms (CPU {cpu[name] * 1000:.0f} ms)",
                f"{base} {wall[base] * 1000:.0f} ms (CPU {cpu[base] * 1000:.0f} ms)",
                f"{ratio:.2f}x (CPU {cpu[name] / cpu[base]:.2f}x)",
                f"<= {aim}x",
                ratio <= aim,
            )
        )
    print_goals("issue 19/32 start-up goals (ratios from this run)", goals)
    print(f"\nmachine: {machine_note()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
