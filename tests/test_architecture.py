"""The import matrix of DESIGN §1, read from the source (ast), and no import-time I/O."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("domain", "projections", "api", "judging", "bench")

# Top-level import names a layer must never use (DESIGN §1, "rules of the house").
FORBIDDEN: dict[str, frozenset[str]] = {
    "domain": frozenset(
        {"projections", "api", "judging", "fastapi", "starlette", "uvicorn", "sqlalchemy"}
    ),
    "projections": frozenset({"api", "fastapi", "starlette", "uvicorn"}),
}


def module_name(path: Path) -> str:
    """`api/routes/runs.py` → `api.routes.runs`; `api/demo/__init__.py` → `api.demo`."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> list[Path]:
    """Every Python file of the product packages."""
    files = [p for pkg in PACKAGES if (ROOT / pkg).is_dir() for p in (ROOT / pkg).rglob("*.py")]
    return sorted(f for f in files if "__pycache__" not in f.parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> set[str]:
    """Absolute names of every module `source` imports, at top level or inside functions."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                prefix = ".".join(base[: len(base) - (node.level - 1)])
                name = ".".join(x for x in (prefix, node.module) if x)
            else:
                name = node.module or ""
            found.add(name)
            # `from projections import views` imports projections.views too.
            found.update(f"{name}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def violations(layer: str, source: str, module: str, is_package: bool = False) -> list[str]:
    """Forbidden imports of `source` for its layer."""
    banned = FORBIDDEN.get(layer, frozenset())
    return sorted(
        name
        for name in imported_modules(source, module, is_package)
        if name.split(".")[0] in banned
    )


def test_the_packages_exist_and_hold_modules() -> None:
    names = {module_name(p) for p in package_modules()}
    assert {"domain.events", "domain.ledger", "projections.runner", "api.app", "api.cli"} <= names


def test_the_checker_sees_every_form_of_import() -> None:
    # The matrix test below is only as good as this parser: prove it catches each form.
    source = textwrap.dedent(
        """
        import sqlalchemy.orm
        from fastapi import FastAPI
        from .. import events
        from ..projections.views import upsert
        def lazy():
            import judging.runner
        """
    )
    # Relative imports resolve inside the package (`domain.projections...` is still domain).
    assert imported_modules(source, "domain.sub.mod") >= {"domain", "domain.events"}
    assert violations("domain", source, "domain.sub.mod") == [
        "fastapi",
        "fastapi.FastAPI",
        "judging.runner",
        "sqlalchemy.orm",
    ]
    assert violations("domain", "from .api import app", "domain", is_package=True) == []
    assert violations("projections", "from api.bootstrap import Services", "projections.x") == [
        "api.bootstrap",
        "api.bootstrap.Services",
    ]
    assert violations("projections", "import domain.events", "projections.x") == []
    assert violations("api", "import fastapi, sqlalchemy", "api.app") == []


@pytest.mark.parametrize(
    "path",
    [p for p in package_modules() if module_name(p).split(".")[0] in FORBIDDEN],
    ids=lambda p: module_name(p),
)
def test_import_matrix(path: Path) -> None:
    module = module_name(path)
    layer = module.split(".")[0]
    found = violations(layer, path.read_text(), module, path.name == "__init__.py")
    assert found == [], f"{module} ({layer}/) must not import: {found} (DESIGN §1)"


# ---------------------------------------------------------------------------------------------
# No import-time I/O

_PROBE = r"""
import builtins, io, json, os, socket, sqlite3, sys, traceback

# Third-party libraries may touch files while importing; import them first, unwatched.
import eventsourcing.application, eventsourcing.persistence, eventsourcing.sqlite
import eventsourcing.postgres, fastapi, orjson, psycopg, pydantic, sqlalchemy
import starlette.testclient, uvicorn

calls = []

def watch(owner, name):
    original = getattr(owner, name)
    def spy(*args, **kwargs):
        calls.append([f"{getattr(owner, '__name__', owner)}.{name}", repr(args)[:200],
                      traceback.format_stack(limit=6)[:-1]])
        return original(*args, **kwargs)
    setattr(owner, name, spy)

for owner, name in [
    (builtins, "open"), (io, "open"), (os, "mkdir"), (os, "makedirs"), (os, "open"),
    (socket.socket, "connect"), (socket, "create_connection"), (sqlite3, "connect"),
    (psycopg, "connect"), (sqlalchemy, "create_engine"),
]:
    watch(owner, name)

import importlib
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
sys.stdout.write(json.dumps(calls))
"""


def test_importing_every_module_opens_no_file_or_socket_and_creates_nothing(
    tmp_path: Path,
) -> None:
    modules = sorted(module_name(p) for p in package_modules())
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALEDGER_")}
    env.update(PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(modules)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    calls = json.loads(proc.stdout)
    assert calls == [], "import-time I/O:\n" + "\n".join(
        f"{c[0]}{c[1]}\n{''.join(c[2])}" for c in calls
    )
    assert list(tmp_path.iterdir()) == []


def test_the_probe_notices_import_time_io(tmp_path: Path) -> None:
    # A module that opens its store at import time must be caught by the probe above.
    (tmp_path / "noisy.py").write_text("open('created-at-import', 'w').close()\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(["noisy"])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    calls = json.loads(proc.stdout)
    assert [c[0] for c in calls] == ["builtins.open"]
    assert (tmp_path / "created-at-import").exists()
