"""Size limits of product code (issue 17): no module over 800 lines, no function over 80 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("domain", "scoring", "projections", "api", "judging", "importers", "client", "application", "evaledger")
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


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


@pytest.mark.parametrize("path", product_modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_module_and_function_sizes(path: Path) -> None:
    source = path.read_text()
    lines = source.count("\n")
    assert lines <= MAX_MODULE_LINES, f"{path.name}: {lines} lines (at most {MAX_MODULE_LINES})"
    assert long_functions(source) == [], f"functions over {MAX_FUNCTION_LINES} lines"
