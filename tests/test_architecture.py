"""The import matrix of DESIGN §1 and the ratchets of issue 31, read from the source (ast).

The ratchets: entry points reach the core through `application/` only, no module uses another
module's `_private` names, and every import inside a function says (`# lazy: …`) which start-up
cost it saves. Each holds today's exceptions as counts per file that can only go down: a new
exception fails, and so does a count left higher than the code (lower it, or drop the entry).
"""

from __future__ import annotations

import ast
import re
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
    # The core: events, aggregates, commands, the spec. It builds on nothing of the product.
    "domain": frozenset(
        {
            "projections",
            "api",
            "judging",
            "scoring",
            "importers",
            "fastapi",
            "starlette",
            "uvicorn",
            "sqlalchemy",
        }
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
    # The judge reads cases through the ledger; which file a run came from is not its business.
    "judging": frozenset(
        {"api", "projections", "importers", "fastapi", "starlette", "uvicorn", "sqlalchemy"}
    ),
    # Importers map peer files to bundles and events: no read model, no rule.
    "importers": frozenset(
        {"api", "judging", "projections", "scoring", "fastapi", "starlette", "uvicorn"}
    ),
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


# Imports the matrix forbids that a file still has (path → imported module names), a ratchet:
# the list only shrinks. Empty since issue 31 (domain imports no scoring/importers, importers no
# projections/scoring, judging no importers); keep it so.
KNOWN_LAYER_VIOLATIONS: dict[str, frozenset[str]] = {}


def rel(path: Path) -> str:
    """A file's path from the repository root, `/`-separated."""
    return path.relative_to(ROOT).as_posix()


# Database drivers (and eventsourcing's adapters over them) belong to the store's adapters and
# the composition root, which picks a store: the rest of the product reaches the events through
# the ledger and the read models through SQLAlchemy URLs. One exception (issue 32, start-up):
# `evaledger runs` reads a caught-up SQLite store's runs through `sqlite3` without SQLAlchemy.
DRIVERS = frozenset(
    {"sqlite3", "psycopg", "psycopg_pool", "eventsourcing.sqlite", "eventsourcing.postgres"}
)
DRIVER_USERS = (
    "evaledger.domain.store",
    "evaledger.api.bootstrap",
    "evaledger.projections.bare_reads",
)


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
        "evaledger.projections.bare_reads",
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
        "evaledger.domain.store.scratch",
        "evaledger.domain.store.sqlite",
        "evaledger.projections.bare_reads",
    }


@pytest.mark.parametrize(
    "path",
    [p for p in package_modules() if layer(module_name(p)) in FORBIDDEN],
    ids=lambda p: module_name(p),
)
def test_import_matrix(path: Path) -> None:
    module = module_name(path)
    found = violations(layer(module), path.read_text(), module, path.name == "__init__.py")
    allowed = sorted(KNOWN_LAYER_VIOLATIONS.get(rel(path), ()))
    assert [f for f in found if f not in allowed] == [], (
        f"{module} ({layer(module)}/) must not import: {found} (DESIGN §1)"
    )
    assert [a for a in allowed if a not in found] == [], (
        f"{rel(path)}: KNOWN_LAYER_VIOLATIONS lists imports it no longer has: remove them"
    )


def test_the_known_layer_violations_name_files_that_exist() -> None:
    assert sorted(p for p in KNOWN_LAYER_VIOLATIONS if not (ROOT / p).is_file()) == []


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


# ── Ratchets (issue 31) ──────────────────────────────────────────────────────────────────────────
# Each table is today's exceptions, path → count. A file past its count (or missing from the table
# with one) fails; a file below its count fails too, until its entry is lowered or removed, so the
# tables only shrink. A failure prints the table as it should read now.

ENTRY_POINTS = (
    "api/routes/**/*.py",
    "api/cli/**/*.py",
    "api/web/**/*.py",
    "api/demo/**/*.py",
    "api/jobs.py",
    "api/deps.py",
    "api/operation.py",
    "api/audit.py",
    "api/agreement.py",
    "api/file_compare.py",
    "client/**/*.py",
)
"""The adapters: they parse, call one use case of `application/` and render (issue 31)."""

ENTRY_POINT_USES: dict[str, int] = {
    # The audit routes' renderer types the events it lays out as history entries by their base
    # class (`DomainEvent`); it reads nothing itself (the use cases are `application/audit.py`).
    "api/audit.py": 1,
}
"""Entry points that still reach past the application layer: `.ledger`, `.reads`, `.reports` or
`.runner`, an event class, `domain.importing`, `judging.runner` or `ReadModels` (see
`entry_point_uses`). Goal: empty."""

PRIVATE_NAME_USES: dict[str, int] = {
    # argparse's own classes and tables (the CLI's completion and option checks).
    "api/cli/inputs.py": 1,
    "api/cli/keys.py": 4,
    "api/cli/parsing.py": 3,
    # The stored hash an event keeps (`DomainEvent._hash`, set when the event is read).
    "domain/store/codec.py": 1,
    # `ApiToken.issue`, a classmethod, triggers the first event of the token it builds.
    "domain/tokens.py": 1,
}
"""Uses of a `_name` the file does not define itself (see `private_uses`). Goal: none but the
libraries' hooks a subclass must call."""

FUNCTION_IMPORTS: dict[str, tuple[int, int]] = {
    "api/bootstrap.py": (11, 0),
    "api/cli/alerts.py": (2, 0),
    "api/cli/__init__.py": (11, 0),
    "api/cli/admin.py": (9, 0),
    "api/cli/audit.py": (8, 0),
    "api/cli/calibration.py": (6, 0),
    "api/cli/compare_views.py": (4, 0),
    "api/cli/erasure.py": (4, 0),
    "api/cli/inputs.py": (1, 0),
    "api/cli/judging.py": (8, 0),
    "api/cli/online.py": (5, 0),
    "api/cli/datasets.py": (2, 0),
    "api/cli/keys.py": (2, 0),
    "api/cli/parsing.py": (1, 0),
    # issue 34: each proof command imports its use cases (the ledger, cryptography) when run.
    "api/cli/proofs.py": (9, 0),
    "api/cli/reports.py": (17, 0),
    "api/cli/review.py": (1, 0),
    "api/cli/run_list.py": (1, 0),
    "api/cli/runs.py": (5, 0),
    "api/cli/statistics.py": (3, 0),
    "api/cli/serve.py": (8, 0),
    "api/cli/search.py": (1, 0),
    "api/cli/share.py": (3, 0),
    "api/cli/transcript.py": (1, 0),
    "api/cli/trend.py": (2, 0),
    "api/console.py": (4, 0),
    "api/demo/__init__.py": (5, 0),
    "api/share_key.py": (1, 0),
    "api/web/session.py": (1, 0),
    "application/compare.py": (4, 0),
    "application/export_formats.py": (2, 0),
    "application/runs.py": (2, 0),
    "client/inspect_hook.py": (7, 0),
    "client/pytest_plugin.py": (7, 0),
    "domain/store/liveness.py": (1, 0),
    "evaledger/__init__.py": (1, 0),
    "importers/bundle.py": (2, 0),
    "importers/inspect.py": (3, 0),
    "importers/load.py": (1, 0),
    "judging/providers.py": (4, 0),
    "projections/queries.py": (8, 0),
    "projections/reports.py": (6, 0),
    "projections/rows.py": (4, 0),
    "projections/tables.py": (2, 0),
    "scoring/agreement.py": (4, 0),
    "scoring/stats.py": (2, 0),
}
"""The budget of imports inside functions, per file: (imports, of which without a `# lazy:`
comment). Goal: a few, each naming the start-up cost it saves; none unexplained."""

FUNCTION_IMPORT_BUDGET = 196
"""The product's imports inside functions, all files (the sum of `FUNCTION_IMPORTS`).
Issue 36 search (+2): `evaledger search` loads its use case (the index's queries) for itself;
`show` loads the case filters (the reviewers' read model) only when one is given.
Issue 36 compare (+5): `compare --case` and `compare BASE C1 C2` load the case diff and the
many-run use case (the log's reads, numpy) for themselves (+4); the compare page the many-run
page's module lives beside the compare page since (0); `share` loads the share use cases, the
ledger and the store's key for itself (+3), the key's grant psycopg on PostgreSQL only (+1).
Issue 32 reads (+3): compare loads the importers, transcripts and the write side only when used.
Issue 36 (+3): `export --format` loads the exports only for itself, pyarrow (+2) only for Parquet.
Issue 34 (+10): the proofs CLI loads signing and receipts per command (+9), verify the tree (+1).
Issue 33 (+2): api/cli/online.py loads protobuf/OTLP and the ledger lazily.
Issue 33 rules (+3): `online rule` loads the rule use cases, the ledger and the rubrics lazily.
Issue 37 (+6): the statistics use cases (numpy) that compare, gate, noise and plan import only
when they run (api/cli/reports.py +3, api/cli/statistics.py +3).
Issue 33 trends (+2): `evaledger trend` loads the series use case and the ledger's context;
alerts (+2): `evaledger online alert` loads the alert use cases (httpx, tenacity) likewise.
Issue 34 erasure by subject (+2): `erase --subject` loads its use case only for itself.
Issue 32 start-up (+4): `main` loads the quick `runs` only for `runs` (+1), importlib.metadata
only for a version (+3: `evaledger.__version__`, the CLI's two names); `run_statuses` moved
from `runs.py` to `run_list.py` (0).
Issue 32 compare (+1): the guard loads the dataset use cases only for runs of two datasets.
Issue 35 gate --baseline (+2): `gate --baseline` loads the comparison (numpy) and, with
--noise-floor, the noise reasons only for itself (api/cli/reports.py)."""

RATCHETED = ("domain", "scoring", "projections", "api", "judging", "importers", "client")
"""The product's layers the lazy-import budget counts (with `evaledger/` and `application/`).

`bench/` and `scripts/` are tools run one at a time, not the product: where they import is
their own business (`bench/startup.py` measures start-up). They keep the private-name rule."""

PUBLIC_UNDERSCORE = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
"""Underscored names that are public API (namedtuple's)."""

LAZY = re.compile(r"#\s*lazy:\s*\S")
IMPORT_NODES = (ast.Import, ast.ImportFrom)
FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def files_of(patterns: tuple[str, ...]) -> list[Path]:
    """The Python files the glob patterns (from the repository root) match."""
    found = {p for pattern in patterns for p in ROOT.glob(pattern)}
    return sorted(p for p in found if "__pycache__" not in p.parts)


def ratcheted_files() -> list[Path]:
    """The product's Python files (each once: `evaledger/`'s layers are symlinks)."""
    return files_of(
        (*(f"{layer}/**/*.py" for layer in (*RATCHETED, "application")), "evaledger/*.py")
    )


def event_class_names() -> frozenset[str]:
    """The event classes and their abstract bases (`CaseEvent`, `DomainEvent`, …)."""
    from evaledger.domain.events import EVENT_CLASSES, DomainEvent

    return frozenset(
        c.__name__ for e in EVENT_CLASSES for c in e.__mro__ if issubclass(c, DomainEvent)
    )


CORE_ATTRIBUTES = frozenset({"ledger", "reads", "reports", "runner"})
CORE_MODULES = ("evaledger.domain.importing", "evaledger.judging.runner")


def _under(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == m or name.startswith(f"{m}.") for m in modules)


def entry_point_uses(source: str, events: frozenset[str]) -> list[str]:
    """`line:what` of each reach past the application layer in an entry point's source.

    An attribute `.ledger`, `.reads`, `.reports` or `.runner` (whatever holds it), an event class
    imported from `evaledger.domain.events` or read as an attribute (`events.CaseFlagged`), an
    import of `evaledger.domain.importing` or `evaledger.judging.runner`, or of `ReadModels`.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and (node.attr in CORE_ATTRIBUTES | events):
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _under(a.name, CORE_MODULES)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                if (
                    alias.name == "ReadModels"
                    or _under(module, CORE_MODULES)
                    or _under(f"{module}.{alias.name}", CORE_MODULES)
                    or (_under(module, ("evaledger.domain.events",)) and alias.name in events)
                ):
                    found.append((node.lineno, f"{module}.{alias.name}"))
    return [f"{line}:{what}" for line, what in sorted(found)]


def _is_private(name: str) -> bool:
    dunder = name.startswith("__") and name.endswith("__")
    return name.startswith("_") and not dunder and name not in PUBLIC_UNDERSCORE


def defined_names(tree: ast.AST) -> set[str]:
    """Names a source defines itself: functions, classes, assigned names, parameters, imports'
    local names and attributes it sets on `self` / `cls`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    return names


def private_uses(source: str) -> list[str]:
    """`line:name` of each use of another module's `_private` name.

    What is checkable from one file: an attribute `x._name` where the file defines no `_name`
    (no def, class, assignment, parameter or `self._name = …`), and `from m import _name`.
    Dunders and namedtuple's `_replace`-style API are public. A `_name` the file defines too is
    not seen (`other._name` beside its own `self._name`): the rule catches the rest.
    """
    tree = ast.parse(source)
    own = defined_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _is_private(node.attr)
            and node.attr not in own
            and not _own_member(node)
        ):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            found += [(node.lineno, a.name) for a in node.names if _is_private(a.name)]
    return [f"{line}:{name}" for line, name in sorted(found)]


def _own_member(node: ast.Attribute) -> bool:
    """`self._name` / `cls._name`: a class's own protected member, maybe inherited from a base
    class in another module (the ledger's command classes build on its write unit)."""
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def function_imports(source: str) -> list[tuple[int, bool]]:
    """(line, has a `# lazy:` reason) of each import statement inside a function.

    The reason is a comment starting `# lazy:` at the end of the import's lines, or in the
    comment lines directly above it; a run of imports (blank lines between allowed) shares the
    comment above its first one.
    """
    tree = ast.parse(source)
    lines = source.splitlines()
    nested: list[ast.stmt] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, IMPORT_NODES):
                nested.append(child)
            visit(child, in_function or isinstance(child, FUNCTION_NODES))

    visit(tree, False)
    import_lines = {
        n for node in nested for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }

    def reasoned(node: ast.stmt) -> bool:
        if any(LAZY.search(line) for line in lines[node.lineno - 1 : node.end_lineno]):
            return True
        n = node.lineno - 1  # the line above, 1-based
        while n >= 1 and (not lines[n - 1].strip() or n in import_lines):
            n -= 1
        while n >= 1 and lines[n - 1].strip().startswith("#"):
            if LAZY.match(lines[n - 1].strip()):
                return True
            n -= 1
        return False

    return [(node.lineno, reasoned(node)) for node in nested]


def _table(counts: dict[str, object]) -> str:
    """A table as the Python source that would hold `counts` (to paste on a ratchet failure)."""
    return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in sorted(counts.items()) if v) + "}"


def _ratchet(name: str, found: dict[str, object], allowed: dict[str, object]) -> None:
    """`found` must be `allowed`, except the entries of neither; the message says what to do."""
    grown = {k: v for k, v in found.items() if v and v != allowed.get(k) and k not in allowed}
    changed = {k: (allowed.get(k), v) for k, v in found.items() if k in allowed and v != allowed[k]}
    gone = sorted(k for k in allowed if not found.get(k))
    assert not grown and not changed and not gone, (
        f"{name} changed: new {grown}, (listed, found) {changed}, gone {gone}. Fix the new "
        f"ones; if the code only got better, set {name} to\n{_table(found)}"
    )


def test_entry_points_reach_the_core_only_through_the_application_layer() -> None:
    events = event_class_names()
    found = {rel(p): len(entry_point_uses(p.read_text(), events)) for p in files_of(ENTRY_POINTS)}
    assert len(found) >= 30, "the entry points' globs match too few files"
    _ratchet("ENTRY_POINT_USES", dict(found), dict(ENTRY_POINT_USES))


def test_no_module_uses_another_modules_private_names() -> None:
    found = {
        rel(p): len(private_uses(p.read_text()))
        for p in [*ratcheted_files(), *files_of(("bench/**/*.py", "scripts/**/*.py"))]
    }
    _ratchet("PRIVATE_NAME_USES", dict(found), dict(PRIVATE_NAME_USES))


def test_imports_inside_functions_stay_within_the_budget_and_say_why() -> None:
    found: dict[str, tuple[int, int]] = {}
    for p in ratcheted_files():
        imports = function_imports(p.read_text())
        if imports:
            found[rel(p)] = (len(imports), sum(1 for _, ok in imports if not ok))
    _ratchet("FUNCTION_IMPORTS", dict(found), dict(FUNCTION_IMPORTS))
    total = sum(n for n, _ in found.values())
    assert total == FUNCTION_IMPORT_BUDGET == sum(n for n, _ in FUNCTION_IMPORTS.values()), (
        f"{total} imports inside functions: set FUNCTION_IMPORT_BUDGET to it"
    )


def test_the_ratchets_name_files_that_exist_and_cover_the_product() -> None:
    tables: list[dict[str, object]] = [
        dict(ENTRY_POINT_USES),
        dict(PRIVATE_NAME_USES),
        dict(FUNCTION_IMPORTS),
    ]
    assert sorted(p for t in tables for p in t if not (ROOT / p).is_file()) == []
    names = {rel(p) for p in ratcheted_files()}
    assert {"evaledger/__init__.py", "api/bootstrap.py", "application/ports.py"} <= names
    assert not any(n.startswith(("bench/", "tests/", "evaledger/api/")) for n in names)
    entry = {rel(p) for p in files_of(ENTRY_POINTS)}
    assert {"api/routes/cases.py", "api/cli/runs.py", "api/web/review.py", "api/jobs.py"} <= entry
    assert {"client/backends.py", "api/demo/__init__.py", "api/deps.py"} <= entry
    assert "api/bootstrap.py" not in entry  # the composition root builds what the others use


def test_the_checker_sees_an_entry_point_reach_past_the_application_layer() -> None:
    events = frozenset({"CaseFlagged", "CaseEvent"})
    source = textwrap.dedent(
        """
        from evaledger.domain.events import CaseFlagged, Turn
        from evaledger.domain.events.case import CaseEvent
        from evaledger.domain import events
        from evaledger.domain.importing import import_stream
        from evaledger.judging import runner
        import evaledger.judging.runner as judge
        from evaledger.projections.queries import ReadModels, RunFilter
        from evaledger.application import cases
        def flag(services, ctx):
            services.ledger.flag_case(ctx, reason=events.CaseFlagged.topic_name)
            rows = services.reads.list_runs()
            services.reports.compare()
            services.runner.catch_up()
            return cases.flag_case(services, ctx), services.sync(), Turn
        """
    )
    assert entry_point_uses(source, events) == [
        "2:evaledger.domain.events.CaseFlagged",
        "3:evaledger.domain.events.case.CaseEvent",
        "5:evaledger.domain.importing.import_stream",
        "6:evaledger.judging.runner",
        "7:evaledger.judging.runner",
        "8:evaledger.projections.queries.ReadModels",
        "11:.CaseFlagged",
        "11:.ledger",
        "12:.reads",
        "13:.reports",
        "14:.runner",
    ]
    assert entry_point_uses("from evaledger.application.cases import flag_case\n", events) == []
    assert event_class_names() >= {"JudgeVerdictRecorded", "CaseEvent", "DomainEvent"}
    assert "Turn" not in event_class_names()


def test_the_checker_sees_a_private_name_of_another_module() -> None:
    source = textwrap.dedent(
        """
        from __future__ import annotations
        from evaledger.domain.ledger import Ledger, _retrying
        _LIMIT = 3
        class Mine:
            _seen: int = 0
            def __init__(self, other):
                self._own = other._theirs
                self.__dict__, other.__class__
            def _helper(self, _param):
                return self._own, self._helper, _param, _LIMIT, other._save(), row._asdict()
        other._cache = {}
        """
    )
    assert private_uses(source) == ["3:_retrying", "8:_theirs", "11:_save", "12:_cache"]
    assert private_uses("import os\nos._exit(0)\n") == ["2:_exit"]
    assert private_uses("class A:\n    _x = 1\n    y = _x\nA._x\n") == []
    # A subclass uses its base's protected members through self/cls, not another object's.
    inherited = (
        "class B(Base):\n    def f(self):\n        return self._save(), cls._load, b._save\n"
    )
    assert private_uses(inherited) == ["3:_save"]


def test_the_checker_sees_an_unexplained_import_inside_a_function() -> None:
    source = textwrap.dedent(
        """
        import os
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            import numpy
        def top():
            import json
            # lazy: numpy, only for comparisons
            import numpy

            from evaledger.scoring import stats
            x = 1
            import csv
            import ijson  # lazy: ijson, only the importer parses
            # a comment that gives no reason
            import yaml
            # lazy:
            import orjson
        class C:
            import abc
            def m(self):
                def inner():
                    # The parse is rare.
                    # lazy: jinja2, only the web report
                    from jinja2 import Environment
                return lambda: __import__("x")
        """
    )
    assert function_imports(source) == [
        (7, False),
        (9, True),
        (11, True),
        (13, False),
        (14, True),
        (16, False),
        (18, False),
        (25, True),
    ]
    assert function_imports("import os\nclass A:\n    import json\n") == []


def test_the_ratchet_fails_on_a_new_entry_a_higher_count_and_a_stale_one() -> None:
    _ratchet("T", {"a.py": 2, "b.py": 0}, {"a.py": 2})
    for found, allowed in (
        ({"a.py": 2, "c.py": 1}, {"a.py": 2}),  # a new file with a use
        ({"a.py": 3}, {"a.py": 2}),  # one more use
        ({"a.py": 1}, {"a.py": 2}),  # one fewer: lower the entry
        ({"a.py": 0}, {"a.py": 2}),  # none left: remove the entry
        ({}, {"a.py": 2}),  # the file is gone
    ):
        with pytest.raises(AssertionError, match="set T to"):
            _ratchet("T", dict(found), dict(allowed))


def test_the_matrix_keeps_the_core_free_of_rules_and_importers() -> None:
    # Issue 31: the domain builds on nothing of the product; importers reach no read model nor
    # rule; the judge reaches no importer.
    assert violations("domain", "from evaledger.scoring import case", "evaledger.domain.x") == [
        "evaledger.scoring",
        "evaledger.scoring.case",
    ]
    assert violations("domain", "from ..importers import load", "evaledger.domain.x") == [
        "evaledger.importers",
        "evaledger.importers.load",
    ]
    source = "def f():\n    import evaledger.projections.rows, evaledger.scoring.rescore\n"
    assert violations("importers", source, "evaledger.importers.x") == [
        "evaledger.projections.rows",
        "evaledger.scoring.rescore",
    ]
    assert violations("judging", "import evaledger.importers.load", "evaledger.judging.x") == [
        "evaledger.importers.load"
    ]
    assert (
        violations("application", "import evaledger.importers.load", "evaledger.application.x")
        == []
    )
    assert violations("domain", "import evaledger.application.runs", "evaledger.domain.x") != []
