"""The package people install: `python -m build` makes a wheel that installs in a fresh venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.client.test_client import SNIPPET
from tests.helpers import checkout_copy

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_installs_in_a_fresh_venv(tmp_path: Path) -> None:
    # A copy of the tree: the build must not depend on (or write into) the checkout.
    source = checkout_copy(tmp_path / "src")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist")],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    log = built.stdout + built.stderr
    # (setuptools' own "byte-compiling is disabled" line only echoes PYTHONDONTWRITEBYTECODE.)
    assert "WARNING" not in log and "Warning" not in log, log
    (wheel,) = (tmp_path / "dist").glob("evaledger-*.whl")
    assert len(list((tmp_path / "dist").glob("evaledger-*.tar.gz"))) == 1

    fresh = tmp_path / "venv"
    # Dependencies come from this venv (a full install from an index is slow and offline here).
    python, purelib = fresh_venv(fresh)
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    assert "setuptools" not in installed.stderr.lower(), installed.stderr
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    version = subprocess.run(
        [str(fresh / "bin" / "evaledger"), "--version"],
        cwd=outside,
        capture_output=True,
        text=True,
        check=False,
    )
    assert version.stdout.strip() == "evaledger 0.1.0", version.stderr
    imported = subprocess.run(
        [
            str(python),
            "-c",
            "import evaledger, evaledger.scoring.case, evaledger.client.pytest_plugin; "
            "evaledger.run; print(evaledger.__file__)",
        ],
        cwd=outside,
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(str(purelib))
    assert (purelib / "evaledger" / "py.typed").is_file()

    # The snippet, verbatim, from the fresh install, then `evaledger show` lists its case.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    snippet = subprocess.run(
        [str(python), "-c", SNIPPET], cwd=outside, env=env, capture_output=True, text=True
    )
    assert snippet.returncode == 0, snippet.stderr
    key, run_id = snippet.stdout.split()
    shown = subprocess.run(
        [str(fresh / "bin" / "evaledger"), "show", key],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"run {run_id}  {key}  [completed]" in shown.stdout
    assert "refund-policy" in shown.stdout

    # Metadata: an SPDX licence expression, classifiers, URLs, the entry points.
    meta = subprocess.run(
        [
            str(python),
            "-c",
            "import json, importlib.metadata as m; d = m.distribution('evaledger'); "
            "print(json.dumps({'meta': {k: d.metadata.get_all(k) for k in "
            "('License-Expression', 'License', 'Classifier', 'Project-URL', 'Requires-Python')}, "
            "'eps': sorted(f'{e.group}:{e.name}={e.value}' for e in d.entry_points), "
            "'where': str(d.locate_file(''))}))",
        ],
        cwd=outside,
        capture_output=True,
        text=True,
        check=True,
    )
    info = json.loads(meta.stdout)
    assert info["where"] == str(purelib)
    assert info["meta"]["License-Expression"] == ["MIT"]
    assert info["meta"]["License"] is None  # the SPDX string, not the deprecated free text
    assert "Typing :: Typed" in info["meta"]["Classifier"]
    assert not any(c.startswith("License ::") for c in info["meta"]["Classifier"])
    urls = dict(u.split(", ", 1) for u in info["meta"]["Project-URL"])
    assert set(urls) >= {"Homepage", "Documentation", "Source", "Issues"}
    assert info["meta"]["Requires-Python"] == [">=3.11"]
    assert info["eps"] == [
        "console_scripts:evaledger=evaledger.api.cli:main",
        "inspect_ai:evaledger=evaledger.client.inspect_hook",
        "pytest11:evaledger=evaledger.client.pytest_plugin",
    ]


def fresh_venv(where: Path) -> tuple[Path, Path]:
    """A new venv whose imports fall back to this one's packages (the index is not used)."""
    venv.EnvBuilder(with_pip=True).create(where)
    python = where / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, purelib


@pytest.mark.slow
def test_the_sdist_installs_in_a_fresh_venv_without_setuptools_warnings(tmp_path: Path) -> None:
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    source = tmp_path / "src"
    source.mkdir()
    subprocess.run(["tar", "x"], input=archive, cwd=source, check=True)
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir", "dist"],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (sdist,) = (source / "dist").glob("evaledger-*.tar.gz")
    python, _ = fresh_venv(tmp_path / "venv")
    # The venv's bundled setuptools predates the build-system's `setuptools>=77`; without an index
    # the build uses this venv's (what an isolated build would fetch).
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], check=True)
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", sdist],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    warnings = [
        line
        for line in (installed.stdout + installed.stderr).splitlines()
        if "warn" in line.lower()
        # pip's own notes on this machine's index set-up, and setuptools echoing
        # PYTHONDONTWRITEBYTECODE: neither comes from the package.
        and "is ignored" not in line
        and "byte-compiling is disabled" not in line
    ]
    assert warnings == []
    version = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "evaledger"), "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert version.stdout.strip() == "evaledger 0.1.0", version.stderr
