"""The package people install: `python -m build` makes a wheel that installs in a fresh venv."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_installs_in_a_fresh_venv(tmp_path: Path) -> None:
    source = tmp_path / "src"
    # A copy of the tracked tree: the build must not depend on (or write into) the checkout.
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in files:
        src = ROOT / name
        if src.is_symlink() or src.is_file():
            dst = source / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_symlink():
                dst.symlink_to(src.readlink())
            else:
                shutil.copy2(src, dst)
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
    venv.EnvBuilder(with_pip=True).create(fresh)
    python = fresh / "bin" / "python"
    # Dependencies come from this venv (a full install from an index is slow and offline here).
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
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
