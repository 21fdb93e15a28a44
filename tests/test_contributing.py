"""The contributor's guide, the pre-commit hooks and the README's layout follow the tree.

`CONTRIBUTING.md` names the ratchet tables the tests hold, `.pre-commit-config.yaml` runs the ruff
that `pyproject.toml` pins, and the README's layout table lists every top-level folder.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONTRIBUTING = ROOT / "CONTRIBUTING.md"


def ruff_pin() -> str:
    """The ruff requirement of pyproject's dev extra, e.g. `ruff>=0.6,<1`."""
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = [r for r in dev["dev"] if re.match(r"ruff\b", r)]
    return str(pin)


def test_the_pre_commit_hooks_run_ruff_format_and_check_at_pyprojects_version() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    entries = {hook["entry"].split()[1]: hook for hook in hooks if hook["entry"].startswith("ruff")}
    assert set(entries) == {"format", "check"}
    for hook in entries.values():
        assert hook["language"] == "python"
        assert hook["additional_dependencies"] == [ruff_pin()]
    assert ruff_pin().startswith("ruff>=")


def test_contributing_names_the_ratchets_the_tests_hold() -> None:
    text = CONTRIBUTING.read_text()
    rows = re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \| `([\w/.]+)` \|", text, re.MULTILINE)
    assert len(rows) >= 6
    for first, second, test_file in rows:
        source = (ROOT / test_file).read_text()
        for name in filter(None, (first, second)):
            assert re.search(rf"^{name}\b.*=", source, re.MULTILINE), f"{name} not in {test_file}"


def test_contributing_gives_the_readme_set_up_commands_and_make_check() -> None:
    text = CONTRIBUTING.read_text()
    readme = (ROOT / "README.md").read_text()

    def commands(doc: str) -> list[str]:
        block = re.search(r"```sh\n(make demo.*?)\n```", doc, re.DOTALL)
        assert block is not None
        return [line.split("#")[0].strip() for line in block.group(1).splitlines()]

    assert commands(text) == commands(readme) == ["make demo", "make check"]
    for target in ("lint", "typecheck", "test", "fmt"):
        assert f"make {target}" in text
        assert re.search(rf"^{target}:", (ROOT / "Makefile").read_text(), re.MULTILINE)


def test_the_readme_layout_lists_every_top_level_folder() -> None:
    text = (ROOT / "README.md").read_text()
    layout = text[text.index("## Layout") :]
    listed = set(re.findall(r"^\| `([\w.-]+)/` \|", layout, re.MULTILINE))
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    folders = {p.split("/")[0] for p in tracked if "/" in p and not p.startswith(".")}
    assert folders, "git ls-files found nothing"
    assert sorted(folders - listed) == []
    assert sorted(listed - folders) == []
