"""No import circle, counting imports inside functions (api/ none, the product none but the known
ones, a ratchet); the CLI starts without the heavy libraries that only some commands need."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "api"

Graph = dict[str, set[str]]


def module_name(path: Path) -> str:
    """`api/cli/runs.py` → `evaledger.api.cli.runs`; `api/cli/__init__.py` → `evaledger.api.cli`."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["evaledger", *parts])


def api_sources() -> dict[str, tuple[str, bool]]:
    """Every api/ module's name → (source, is a package)."""
    return {
        module_name(p): (p.read_text(encoding="utf-8"), p.name == "__init__.py")
        for p in sorted(API.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def ancestors(name: str) -> list[str]:
    """`a.b.c` → `["a", "a.b"]`: the packages whose `__init__` runs before `a.b.c` does."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports_of(source: str, module: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The known modules `source` imports, at top level or inside functions.

    `from pkg import sub` names the submodule when `pkg.sub` is a module. Importing `a.b.c` also
    runs `a.b`'s `__init__` unless the importer lives inside `a.b` (its own packages are already
    initialising), so those packages count as imported too.
    """
    modules = set(known)
    package = module if is_package else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                prefix = ".".join(parts[: len(parts) - (node.level - 1)])
                base = ".".join(x for x in (prefix, node.module) if x)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    own = {module, *ancestors(module)}
    found = {t for t in targets if t in modules}
    found |= {a for t in found for a in ancestors(t) if a in modules and a not in own}
    return found - {module}


def import_graph(sources: Mapping[str, tuple[str, bool]]) -> Graph:
    """Module → the modules it imports, among `sources`."""
    return {
        name: imports_of(source, name, is_package, sources)
        for name, (source, is_package) in sources.items()
    }


def a_cycle(graph: Graph) -> list[str] | None:
    """One import circle of the graph (first module repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            found = visit(start)
            if found:
                return found
    return None


def test_api_has_no_import_circle() -> None:
    graph = import_graph(api_sources())
    # The graph sees the families, which the parser module imports (so the checker has edges).
    assert "evaledger.api.cli.runs" in graph["evaledger.api.cli.parsing"]
    assert a_cycle(graph) is None, " → ".join(a_cycle(graph) or [])


LAYERS = (
    "domain",
    "scoring",
    "projections",
    "api",
    "judging",
    "importers",
    "client",
    "application",
)

KNOWN_CIRCLES: list[frozenset[str]] = []
"""The product's import circles today (each the modules of one strongly connected part): a
ratchet. A new circle fails, and so does a listed one that is gone (remove it)."""


def product_sources() -> dict[str, tuple[str, bool]]:
    """Every product module's name → (source, is a package)."""
    return {
        module_name(p): (p.read_text(encoding="utf-8"), p.name == "__init__.py")
        for layer in LAYERS
        if (ROOT / layer).is_dir()
        for p in sorted((ROOT / layer).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def circles(graph: Graph) -> list[frozenset[str]]:
    """The strongly connected parts of more than one module (Tarjan), each one import circle
    or several tangled."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.add(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(frozenset(part))

    for start in sorted(graph):
        if start not in index:
            visit(start)
    return sorted(found, key=sorted)


def test_the_product_has_no_import_circle_but_the_known_ones() -> None:
    graph = import_graph(product_sources())
    assert "evaledger.domain.events" in graph["evaledger.domain.ledger"]
    found = circles(graph)
    assert [c for c in found if c not in KNOWN_CIRCLES] == [], "a new import circle"
    assert [c for c in KNOWN_CIRCLES if c not in found] == [], (
        "a known import circle is gone: remove it from KNOWN_CIRCLES"
    )


def test_the_circle_finder_sees_a_circle_closed_inside_a_function() -> None:
    graph = import_graph(
        {
            "evaledger.domain.ledger": ("from evaledger.domain import importing\n", False),
            "evaledger.domain.importing": (
                "def f():\n    from evaledger.domain.ledger import Ledger\n",
                False,
            ),
            "evaledger.domain.events": ("import os\n", True),
            "evaledger.domain": ("", True),
        }
    )
    assert circles(graph) == [frozenset({"evaledger.domain.importing", "evaledger.domain.ledger"})]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_routes_and_the_demo_do_not_import_the_cli() -> None:
    graph = import_graph(api_sources())
    for name, imported in graph.items():
        if name.startswith(("evaledger.api.routes", "evaledger.api.demo", "evaledger.api.web")):
            assert not {i for i in imported if i.startswith("evaledger.api.cli")}, name


def test_the_checker_sees_a_circle_through_a_function_and_a_package() -> None:
    # The no-circle test is only as good as this graph: a circle closed by a function-level
    # import, or by a package `__init__` that imports its families, is found.
    sources = {
        "evaledger.api.cli": ("from evaledger.api.cli import serve\n", True),
        "evaledger.api.cli.serve": ("def demo():\n    from evaledger.api import demo\n", False),
        "evaledger.api.cli.output": ("import sys\n", False),
        "evaledger.api.demo": (
            textwrap.dedent(
                """
                def run():
                    from evaledger.api.cli.output import emit_json
                """
            ),
            True,
        ),
    }
    graph = import_graph(sources)
    assert graph["evaledger.api.demo"] == {"evaledger.api.cli.output", "evaledger.api.cli"}
    assert graph["evaledger.api.cli.serve"] == {"evaledger.api.demo"}
    # A family importing its own package's sibling does not import the package again.
    sources["evaledger.api.cli.serve"] = ("from evaledger.api.cli.output import x\n", False)
    assert import_graph(sources)["evaledger.api.cli.serve"] == {"evaledger.api.cli.output"}
    sources["evaledger.api.cli.serve"] = (
        "def demo():\n    from evaledger.api import demo\n",
        False,
    )
    assert a_cycle(import_graph(sources)) == [
        "evaledger.api.cli",
        "evaledger.api.cli.serve",
        "evaledger.api.demo",
        "evaledger.api.cli",
    ]
    sources["evaledger.api.demo"] = ("from .. import cli\n", True)
    assert "evaledger.api.cli" in import_graph(sources)["evaledger.api.demo"]


HEAVY = ("fastapi", "uvicorn", "inspect_ai", "openai", "anthropic", "shtab")
"""Libraries only some commands need: `serve`, `import` of Inspect logs, `judge`, `completion`."""


def test_the_cli_starts_without_the_libraries_of_other_commands() -> None:
    probe = (
        "import sys\n"
        "from evaledger.api.cli import build_parser\n"
        "build_parser().parse_args(['runs'])\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"


COMMAND_ONLY = ("numpy", "ijson", *HEAVY)
"""Besides HEAVY: numpy (comparisons, agreement) and ijson (bundle files) (issue 19)."""


def loaded_by(argv: list[str], watched: Iterable[str]) -> tuple[str, list[str]]:
    """A fresh interpreter runs `main(argv)`: its stdout, and which of `watched` it imported."""
    probe = (
        "import sys\n"
        "from evaledger.api.cli import main\n"
        "try:\n"
        f"    code = main({argv!r})\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        f"print(code, sorted(m for m in {tuple(watched)!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    lines = out.strip().splitlines()
    return "\n".join(lines[:-1]), [lines[-1]]


def test_version_loads_nothing_of_the_product() -> None:
    watched = ("pydantic", "sqlalchemy", "rich", "eventsourcing", "evaledger.api.bootstrap")
    out, loaded = loaded_by(["--version"], (*COMMAND_ONLY, *watched))
    assert out.startswith("evaledger ")
    assert loaded == ["0 []"]


def test_runs_and_show_load_no_library_of_other_commands(tmp_path: Path) -> None:
    from tests.conftest import EXAMPLE_BUNDLE

    db = f"sqlite:///{tmp_path / 'store'}"
    subprocess.run(
        [sys.executable, "-m", "evaledger", "import", str(EXAMPLE_BUNDLE), "--db", db],
        capture_output=True,
        check=True,
        cwd=ROOT,
    )
    out, loaded = loaded_by(["runs", "--db", db], COMMAND_ONLY)
    assert loaded == ["0 []"]
    run_id = out.splitlines()[1].split()[0]
    out, loaded = loaded_by(["show", run_id, "--db", db], COMMAND_ONLY)
    assert run_id in out
    assert loaded == ["0 []"]
    # The probe sees a library a command does load: `compare` needs numpy.
    _, loaded = loaded_by(["compare", run_id, run_id, "--db", db], ("numpy",))
    assert loaded[0].endswith("['numpy']")


WRITE_SIDE = (
    "psycopg",
    "psycopg_pool",
    "eventsourcing.persistence",
    "evaledger.domain.ledger",
    "evaledger.domain.events",
    "evaledger.projections.projectors",
    "evaledger.projections.runner",
)
"""What a read on a caught-up SQLite store needs none of: the PostgreSQL driver, the ledger (and
eventsourcing under it), the event classes, the projectors and their runner (issue 19)."""


def test_parsing_a_command_line_loads_no_composition_root_ledger_or_driver() -> None:
    watched = ("evaledger.api.bootstrap", *WRITE_SIDE)
    probe = (
        "import sys\n"
        "from evaledger.api.cli import build_parser\n"
        "for words in (['runs'], ['show', 'r1'], ['import', 'f.json'], ['token', 'list']):\n"
        "    build_parser().parse_args(words)\n"
        f"print(sorted(m for m in {watched!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"


def test_runs_and_show_on_a_caught_up_sqlite_store_load_no_driver_ledger_or_projector(
    tmp_path: Path,
) -> None:
    from tests.conftest import EXAMPLE_BUNDLE

    db = f"sqlite:///{tmp_path / 'store'}"
    subprocess.run(
        [sys.executable, "-m", "evaledger", "import", str(EXAMPLE_BUNDLE), "--db", db],
        capture_output=True,
        check=True,
        cwd=ROOT,
    )
    # The import wrote events no projection has read: the first read catches up, and the
    # probe sees it load the ledger and the projectors to do so.
    out, loaded = loaded_by(["runs", "--db", db], WRITE_SIDE)
    assert loaded[0].startswith("0 ") and "evaledger.projections.runner" in loaded[0]
    run_id = out.splitlines()[1].split()[0]
    # Caught up: one query on each side, and none of the write side loads.
    out, loaded = loaded_by(["runs", "--db", db], WRITE_SIDE)
    assert run_id in out
    assert loaded == ["0 []"]
    out, loaded = loaded_by(["show", run_id, "--db", db], WRITE_SIDE)
    assert run_id in out and "store-hours" in out
    assert loaded == ["0 []"]
    out, loaded = loaded_by(["show", run_id, "--db", db, "--json"], WRITE_SIDE)
    assert '"variant"' in out
    assert loaded == ["0 []"]


BARE_RUNS_SKIPS = (
    "sqlalchemy",
    "eventsourcing",
    "fastapi",
    "evaledger.api.bootstrap",
    "evaledger.api.cli.parsing",
    "evaledger.domain.events",
    "evaledger.projections.queries",
)
"""What `evaledger runs` on a caught-up SQLite store imports none of (issue 32): it reads the
runs through `sqlite3` (`projections/bare_reads.py`) before the parser or the store is built."""


def test_runs_on_a_caught_up_sqlite_store_imports_no_sqlalchemy(tmp_path: Path) -> None:
    from tests.conftest import EXAMPLE_BUNDLE

    db = f"sqlite:///{tmp_path / 'store'}"
    cli = [sys.executable, "-m", "evaledger"]
    subprocess.run([*cli, "import", str(EXAMPLE_BUNDLE), "--db", db], check=True, cwd=ROOT)
    first, loaded = loaded_by(["runs", "--db", db], ("sqlalchemy",))
    assert loaded == ["0 ['sqlalchemy']"]  # behind the log: the full path caught it up
    for words in (["runs"], ["runs", "--json"], ["runs", "--wide", "--limit", "3"]):
        out, loaded = loaded_by([*words, "--db", db], BARE_RUNS_SKIPS)
        assert loaded == ["0 []"], words
    out, _ = loaded_by(["runs", "--db", db], ())
    assert out == first  # the same listing as the full path's
    # The probe sees SQLAlchemy where the quick path declines (`show`, an unknown option).
    _, loaded = loaded_by(["runs", "--bogus", "--db", db], ("sqlalchemy",))
    assert loaded == ["2 ['sqlalchemy']"]


def test_runs_shows_events_written_after_the_last_read(tmp_path: Path) -> None:
    from tests.conftest import EXAMPLE_BUNDLE
    from tests.helpers import bundle

    db = f"sqlite:///{tmp_path / 'store'}"
    cli = [sys.executable, "-m", "evaledger"]
    subprocess.run([*cli, "import", str(EXAMPLE_BUNDLE), "--db", db], check=True, cwd=ROOT)
    first, _ = loaded_by(["runs", "--db", db, "--json"], ())
    assert '"total":1' in first.replace(" ", "")
    later = tmp_path / "later.json"
    later.write_bytes(orjson.dumps(bundle(key="later-run")))
    subprocess.run([*cli, "import", str(later), "--db", db], check=True, cwd=ROOT)
    out, loaded = loaded_by(["runs", "--db", db], ("evaledger.projections.runner",))
    assert "later-run" in out
    assert loaded == ["0 ['evaledger.projections.runner']"]  # behind the log: it caught up


def test_the_caught_up_check_names_every_projection_the_composition_runs() -> None:
    from evaledger.projections.projectors import all_projections
    from evaledger.projections.tables import PROJECTION_NAMES

    names = [p.name for p in all_projections()]
    assert sorted(names) == sorted(PROJECTION_NAMES)
    assert len(set(names)) == len(names)


def test_a_read_on_a_caught_up_store_builds_neither_ledger_nor_runner(store_url: str) -> None:
    from evaledger.api.bootstrap import Settings, build_services
    from evaledger.domain.bundle import RunBundle
    from evaledger.domain.ledger import Context
    from evaledger.domain.store.urls import parse_db_url
    from evaledger.projections.queries import RunFilter
    from tests.helpers import bundle

    writer = build_services(Settings(db=store_url))
    try:
        writer.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("a"))
        writer.sync()
        reader = build_services(Settings(db=store_url), create=False)
        try:
            reader.sync()
            assert reader._runner is None  # caught up: nothing built to find it out
            # A SQLite store's ledger opens on first use; a PostgreSQL store's at once (opening
            # it checks the events table is append-only).
            assert (reader._ledger is None) == parse_db_url(store_url).is_sqlite
            assert reader.reads.list_runs(RunFilter())[1] == 1
            # Behind the log (a write by another process): the read catches up first.
            writer.ledger.import_bundle(RunBundle.model_validate(bundle(key="b")), Context("a"))
            reader.sync()
            assert reader._runner is not None
            assert reader.reads.list_runs(RunFilter())[1] == 2
            assert reader.reads.projected_position() == writer.ledger.position()
        finally:
            reader.close()
    finally:
        writer.close()


def test_the_sqlite_log_head_read_without_the_ledger_is_the_ledgers_position(
    store_url: str,
) -> None:
    from evaledger.api.bootstrap import Settings, build_services, sqlite_log_head
    from evaledger.domain.bundle import RunBundle
    from evaledger.domain.ledger import Context
    from tests.helpers import bundle

    s = build_services(Settings(db=store_url))
    try:
        assert s.log_head() == s.ledger.position() == 0
        s.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("a"))
        head = s.ledger.position()
        assert head > 0
        assert sqlite_log_head(s.location) == (head if s.location.is_sqlite else None)
        assert s.log_head() == head
    finally:
        s.close()


def test_the_sqlite_log_head_reads_a_store_whose_path_has_uri_characters(tmp_path: Path) -> None:
    from evaledger.api.bootstrap import Settings, build_services, sqlite_log_head
    from evaledger.domain.bundle import RunBundle
    from evaledger.domain.ledger import Context
    from tests.helpers import bundle

    # `?` and `#` would end the path of a SQLite URI unquoted (and open another file).
    s = build_services(Settings(db=f"sqlite:///{tmp_path / 'a?b#c d'}/store/"))
    try:
        s.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("a"))
        assert sqlite_log_head(s.location) == s.ledger.position() > 0
    finally:
        s.close()
