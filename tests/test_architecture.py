"""The import matrix of DESIGN §1, read from the source (ast), and no import-time I/O."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import checkout_copy

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "domain",
    "scoring",
    "projections",
    "api",
    "judging",
    "importers",
    "client",
    "application",
    "bench",
)
# Layer folders that install under the `evaledger` namespace (pyproject's package-dir mapping).
INSTALLED = frozenset(
    {"domain", "scoring", "projections", "api", "judging", "importers", "client", "application"}
)

# Top-level import names a layer must never use (DESIGN §1, "rules of the house").
FORBIDDEN: dict[str, frozenset[str]] = {
    "domain": frozenset(
        {"projections", "api", "judging", "fastapi", "starlette", "uvicorn", "sqlalchemy"}
    ),
    # The evaluation rules are pure functions over facts and a spec: they build on `domain` only.
    "scoring": frozenset(
        {
            "projections",
            "api",
            "judging",
            "importers",
            "fastapi",
            "starlette",
            "uvicorn",
            "sqlalchemy",
            "psycopg",
            "sqlite3",
            "eventsourcing",
        }
    ),
    "projections": frozenset({"api", "fastapi", "starlette", "uvicorn"}),
    # The judge runner writes through the ledger's commands and reads no read model.
    "judging": frozenset({"api", "projections", "fastapi", "starlette", "uvicorn", "sqlalchemy"}),
    "importers": frozenset({"api", "judging", "fastapi", "starlette", "uvicorn"}),
    # The use cases (issue 31) sit under every entry point: the API, the CLI and the client call
    # them; they call the domain's commands, the read models, the rules, the judge and importers.
    "application": frozenset({"api", "fastapi", "starlette", "uvicorn"}),
    # Nothing in the product depends on the client: it sits on top, beside the API.
    "api": frozenset({"client"}),
}
# The client is the outermost layer: no other layer may import it. The application layer sits
# above the core: nothing below it (domain, rules, read models, judge, importers) imports it.
FORBIDDEN = {
    name: banned | {"client"} if name != "api" else banned for name, banned in FORBIDDEN.items()
}
FORBIDDEN = {
    name: banned | {"application"} if name not in ("api", "application") else banned
    for name, banned in FORBIDDEN.items()
}


# Database drivers (and eventsourcing's adapters over them) belong to the store's adapters and
# the composition root, which picks a store: the rest of the product reaches the events through
# the ledger and the read models through SQLAlchemy URLs.
DRIVERS = frozenset(
    {"sqlite3", "psycopg", "psycopg_pool", "eventsourcing.sqlite", "eventsourcing.postgres"}
)
DRIVER_USERS = ("evaledger.domain.store", "evaledger.api.bootstrap")


def module_name(path: Path) -> str:
    """`api/routes/runs.py` → `evaledger.api.routes.runs`; `api/demo/__init__.py` → `evaledger.api.demo`."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in INSTALLED:
        parts.insert(0, "evaledger")
    return ".".join(parts)


def layer(name: str) -> str:
    """The layer a module name belongs to: `evaledger.domain.events` → `domain`."""
    parts = name.split(".")
    return parts[1] if parts[0] == "evaledger" and len(parts) > 1 else parts[0]


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
        elif isinstance(node, ast.Call) and _dynamic_import(node):
            found.add(node.args[0].value)  # type: ignore[attr-defined]
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


def _dynamic_import(call: ast.Call) -> bool:
    """`importlib.import_module("x")`, `import_module("x")` or `__import__("x")`."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return (
        name in ("import_module", "__import__")
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
    )


def is_driver(name: str) -> bool:
    """Whether an imported module name is a database driver (or a part of one)."""
    return any(name == d or name.startswith(f"{d}.") for d in DRIVERS)


def driver_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Drivers `source` imports, unless it is the store's adapters or the composition root."""
    if any(module == m or module.startswith(f"{m}.") for m in DRIVER_USERS):
        return []
    return sorted(n for n in imported_modules(source, module, is_package) if is_driver(n))


def violations(of_layer: str, source: str, module: str, is_package: bool = False) -> list[str]:
    """Forbidden imports of `source` for its layer."""
    banned = FORBIDDEN.get(of_layer, frozenset())
    return sorted(
        name for name in imported_modules(source, module, is_package) if layer(name) in banned
    )


def test_the_packages_exist_and_hold_modules() -> None:
    names = {module_name(p) for p in package_modules()}
    assert {
        "evaledger.domain.events",
        "evaledger.domain.ledger",
        "evaledger.projections.runner",
        "evaledger.api.app",
        "evaledger.api.cli",
    } <= names


def test_the_checker_sees_every_form_of_import() -> None:
    # The matrix test below is only as good as this parser: prove it catches each form.
    source = textwrap.dedent(
        """
        import sqlalchemy.orm
        from fastapi import FastAPI
        from .. import events
        from ..projections.views import upsert
        def lazy():
            import evaledger.judging.runner
        """
    )
    # Relative imports resolve inside the package (`domain.projections...` is still domain).
    mod = "evaledger.domain.sub.mod"
    assert imported_modules(source, mod) >= {"evaledger.domain", "evaledger.domain.events"}
    assert violations("domain", source, mod) == [
        "evaledger.judging.runner",
        "fastapi",
        "fastapi.FastAPI",
        "sqlalchemy.orm",
    ]
    assert violations("domain", "from .api import app", "evaledger.domain", is_package=True) == []
    assert violations(
        "projections", "from evaledger.api.bootstrap import Services", "evaledger.projections.x"
    ) == ["evaledger.api.bootstrap", "evaledger.api.bootstrap.Services"]
    assert (
        violations("projections", "import evaledger.domain.events", "evaledger.projections.x") == []
    )
    assert violations("api", "import fastapi, sqlalchemy", "evaledger.api.app") == []


def test_the_checker_sees_every_way_to_reach_a_driver() -> None:
    # The store rule below is only as good as this: each form of import, nested or dynamic.
    source = textwrap.dedent(
        """
        import sqlite3 as lite
        import os, psycopg.sql
        from psycopg_pool import ConnectionPool
        from eventsourcing import postgres
        from eventsourcing.sqlite import SQLiteDatastore
        import importlib
        class Store:
            def open(self):
                from psycopg import connect
                importlib.import_module("psycopg.rows")
                __import__("sqlite3")
        """
    )
    assert driver_violations(source, "evaledger.projections.tables") == [
        "eventsourcing.postgres",
        "eventsourcing.sqlite",
        "eventsourcing.sqlite.SQLiteDatastore",
        "psycopg",
        "psycopg.connect",
        "psycopg.rows",
        "psycopg.sql",
        "psycopg_pool",
        "psycopg_pool.ConnectionPool",
        "sqlite3",
    ]
    assert driver_violations('__import__("sqlite3")', "m.x") == ["sqlite3"]
    # Near names are not drivers; the store's adapters and the composition root may use them.
    assert driver_violations("import sqlite3x, psycopgish, eventsourcing.persistence", "m.x") == []
    assert driver_violations(source, "evaledger.domain.store.postgres") == []
    assert driver_violations(source, "evaledger.domain.store", is_package=True) == []
    assert driver_violations(source, "evaledger.api.bootstrap") == []
    assert driver_violations(source, "evaledger.domain.storex") != []
    assert driver_violations(source, "evaledger.api.bootstrapping") != []
    # A relative import from inside the store is still the store's.
    assert imported_modules("from .sqlite import x", "evaledger.domain.store.urls") >= {
        "evaledger.domain.store.sqlite"
    }


@pytest.mark.parametrize(
    "path",
    [p for p in package_modules() if layer(module_name(p)) in INSTALLED],
    ids=lambda p: module_name(p),
)
def test_only_the_store_and_the_composition_root_import_a_driver(path: Path) -> None:
    module = module_name(path)
    found = driver_violations(path.read_text(), module, path.name == "__init__.py")
    assert found == [], (
        f"{module} must not import a database driver: {found} "
        "(the event store's adapters live in domain/store/, the choice of store in api/bootstrap)"
    )


def test_the_store_rule_has_modules_to_hold() -> None:
    # Guards the rule above against a rename that would leave it checking nothing.
    names = {module_name(p) for p in package_modules()}
    assert {
        "evaledger.domain.store.sqlite",
        "evaledger.domain.store.postgres",
        "evaledger.api.bootstrap",
    } <= names
    drivers = {
        module_name(p)
        for p in package_modules()
        if layer(module_name(p)) in INSTALLED
        and any(is_driver(n) for n in imported_modules(p.read_text(), module_name(p)))
    }
    assert drivers == {
        "evaledger.api.bootstrap",
        "evaledger.domain.store.errors",
        "evaledger.domain.store.liveness",
        "evaledger.domain.store.postgres",
        "evaledger.domain.store.sqlite",
    }


@pytest.mark.parametrize(
    "path",
    [p for p in package_modules() if layer(module_name(p)) in FORBIDDEN],
    ids=lambda p: module_name(p),
)
def test_import_matrix(path: Path) -> None:
    module = module_name(path)
    found = violations(layer(module), path.read_text(), module, path.name == "__init__.py")
    assert found == [], f"{module} ({layer(module)}/) must not import: {found} (DESIGN §1)"


@pytest.mark.parametrize(
    "path",
    [p for pkg in (*PACKAGES, "tests", "scripts") for p in sorted((ROOT / pkg).rglob("*.py"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_code_imports_the_layers_through_the_evaledger_namespace(path: Path) -> None:
    # A bare `import domain` would load a second copy of the module (or another package's).
    bare = sorted(
        name
        for name in imported_modules(
            path.read_text(), module_name(path), path.name == "__init__.py"
        )
        if name.split(".")[0] in INSTALLED
    )
    assert bare == [], f"{path}: import these as evaledger.<layer>: {bare}"


def test_the_wheel_installs_one_evaledger_namespace_and_nothing_generic(tmp_path: Path) -> None:
    # Built the way pip installs it: only `evaledger/…` (and its metadata) may land in site-packages.
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(checkout_copy(tmp_path / "src")),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("evaledger-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"evaledger"}
    assert {
        "evaledger/domain/events/__init__.py",
        "evaledger/api/cli/__init__.py",
        "evaledger/__main__.py",
    } <= set(names)
    assert "evaledger/scoring/presets/ifixai-v1.json" in names


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    # A package missing from pyproject's list installs from a checkout but not from the wheel.
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        module_name(init)
        for layer_dir in sorted(INSTALLED)
        if (ROOT / layer_dir).is_dir()
        for init in (ROOT / layer_dir).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found, "no package folder found"
    assert sorted(found - listed) == []
