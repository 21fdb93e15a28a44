"""Run one `evaledger` CLI command in this fresh process and report its figures as JSON.

    python bench/cli_child.py OUT.json import --db URL --json FILE

Times the CLI's start-up (importing it) apart from the command itself, captures its stdout, and
records the process's peak RSS (VmHWM), so a benchmark can run a command the way a user does
without the benchmark's own memory or imports in the figures.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # EVALEDGER_BENCH_TREE: another checkout's product code (a before/after pair run by one
    # script; its own interpreter must be given too, since the product is installed editable).
    sys.path.insert(
        0, os.environ.get("EVALEDGER_BENCH_TREE", str(Path(__file__).resolve().parents[1]))
    )

import orjson

from bench.common import peak_rss_mb


def main(out: str, args: list[str]) -> int:
    """Run `evaledger ARGS`; write start-up and command seconds, exit code, stdout, peak RSS."""
    t0, c0 = time.perf_counter(), time.process_time()
    from evaledger.api import cli

    if args != ["--version"]:
        # Start-up = what every store command loads before it runs: the CLI imports its
        # families and the composition root lazily since issue 19, so they are loaded here to
        # keep "the command beyond start-up" the same quantity as before.
        cli.build_parser()
        import evaledger.api.bootstrap  # noqa: F401

    t1, c1 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()) as text:
        code = cli.main(args)
    t2, c2 = time.perf_counter(), time.process_time()
    figures = {
        "startup_s": t1 - t0,
        "command_s": t2 - t1,
        "startup_cpu_s": c1 - c0,
        "command_cpu_s": c2 - c1,
        "code": code,
        "stdout": text.getvalue(),
        "peak_rss_mb": peak_rss_mb(),
    }
    Path(out).write_bytes(orjson.dumps(figures))
    return 0


def run(args: list[str], workdir: Path) -> dict[str, object]:
    """Run `evaledger ARGS` in a child process through this script; its figures."""
    import subprocess

    out = workdir / "cli-child.json"
    subprocess.run([sys.executable, str(Path(__file__).resolve()), str(out), *args], check=True)
    figures: dict[str, object] = orjson.loads(out.read_bytes())
    out.unlink()
    if figures["code"] != 0:
        raise RuntimeError(f"evaledger {' '.join(args)} exited {figures['code']}")
    return figures


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
