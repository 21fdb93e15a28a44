"""Size limits of product code: no function over 80 lines (issue 17); modules as a ratchet.

A module holds at most 800 lines unless `LONG_MODULES` lists it with its ceiling and the reason
it is one module (issue 31: a per-file ratchet, not a wall that forces arbitrary splits). An
entry's ceiling is the module's size: a module that shrank must have its entry lowered (or
removed once it is back under the limit), so the table only goes down.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = (
    "domain",
    "scoring",
    "projections",
    "api",
    "judging",
    "importers",
    "client",
    "application",
    "evaledger",
)
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80

LONG_MODULES: dict[str, tuple[int, str]] = {}
"""Modules allowed past `MAX_MODULE_LINES`: path → (its lines, today's and its ceiling; why it
is one module). Example entry: `"domain/ledger.py": (812, "the Ledger's named commands, one per
fact: one class")`."""


def product_modules() -> list[Path]:
    """Every Python file of product code (tests, bench and scripts aside)."""
    found = {
        p.resolve()
        for pkg in PRODUCT
        if (ROOT / pkg).is_dir() and not (ROOT / pkg).is_symlink()
        for p in (ROOT / pkg).rglob("*.py")
    }
    return sorted(p for p in found if "__pycache__" not in p.parts)


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`name:lines` of every function (nested ones too) longer than `limit` lines."""
    return [
        f"{node.name}:{node.end_lineno - node.lineno + 1}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_the_checker_finds_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    assert long_functions(f"def f():\n{body}\n") == ["f:86"]
    assert long_functions("def g():\n    return 1\n") == []


def test_the_product_modules_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in product_modules()}
    assert {"domain/ledger.py", "scoring/case.py", "projections/runner.py"} <= names


def module_size_problem(
    path: str, lines: int, allowed: dict[str, tuple[int, str]] = LONG_MODULES
) -> str | None:
    """What is wrong with a module of `lines` lines under the table `allowed`, or None."""
    if path not in allowed:
        if lines > MAX_MODULE_LINES:
            return (
                f"{path}: {lines} lines (at most {MAX_MODULE_LINES}): split it where it has a "
                "seam, or list it in LONG_MODULES with the reason it is one module"
            )
        return None
    ceiling, reason = allowed[path]
    if not reason.strip():
        return f"{path}: LONG_MODULES gives no reason"
    if lines <= MAX_MODULE_LINES:
        return f"{path}: {lines} lines, within the limit: remove it from LONG_MODULES"
    if lines > ceiling:
        return f"{path}: {lines} lines, past its LONG_MODULES ceiling {ceiling}"
    if lines < ceiling:
        return f"{path}: {lines} lines: lower its LONG_MODULES ceiling from {ceiling} to {lines}"
    return None


def test_the_size_ratchet_fails_on_growth_a_new_long_module_and_a_stale_entry() -> None:
    table = {"a.py": (900, "one state machine")}
    assert module_size_problem("a.py", 900, table) is None
    assert module_size_problem("b.py", 800, table) is None
    assert "past its LONG_MODULES ceiling" in (module_size_problem("a.py", 901, table) or "")
    assert "lower its LONG_MODULES ceiling from 900 to 850" in (
        module_size_problem("a.py", 850, table) or ""
    )
    assert "remove it" in (module_size_problem("a.py", 700, table) or "")
    assert "at most 800" in (module_size_problem("b.py", 801, table) or "")
    assert "no reason" in (module_size_problem("c.py", 900, {"c.py": (900, " ")}) or "")


def test_the_long_modules_exist() -> None:
    assert sorted(p for p in LONG_MODULES if not (ROOT / p).is_file()) == []


@pytest.mark.parametrize("path", product_modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_module_and_function_sizes(path: Path) -> None:
    source = path.read_text()
    problem = module_size_problem(path.relative_to(ROOT).as_posix(), source.count("\n"))
    assert problem is None, problem
    assert long_functions(source) == [], f"functions over {MAX_FUNCTION_LINES} lines"
