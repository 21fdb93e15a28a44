"""`compare A B --json` prints the same bytes as before issue 32's compare work (session 12).

The golden file is `main` at 454e7b1's output for two generated 40-case runs (bench's
`generate_bundle`, seeds 7 and 8): every field, the per-case metric deltas, the significance
and the headlines. A faster path must print exactly these bytes.

Python 3.12 made `sum()` of floats compensated (gh-100425): the judge cost, a sum of per-call
costs, differs in its last digit between 3.11 and 3.12+ (0.43974300000000005 against 0.439743),
so 3.12 and later have their own golden file, made the same way by the same code on 3.12 and
3.13 (byte-identical on both); the two files differ in those two fields only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from bench.common import generate_bundle
from tests.api.test_cli import Cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/compare"
GOLDEN = FIXTURES / (
    "cli-compare-40.json" if sys.version_info < (3, 12) else "cli-compare-40.py312.json"
)


def test_compare_json_of_a_generated_pair_is_the_golden_bytes(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, sqlite_url)
    ids = []
    for i in range(2):
        bundle = tmp_path / f"run-{i}.json"
        bundle.write_bytes(orjson.dumps(generate_bundle(40, seed=7 + i, run_key=f"golden-{i}")))
        ids.append(cli.json("import", str(bundle))["imported"][0]["run_id"])
    code, out, err = cli("compare", *ids, "--json")
    assert code == 1, err  # the candidate regresses: the exit says so
    assert out == GOLDEN.read_text(encoding="utf-8")
    # twice: the second answer comes from what the first kept (graders, significance)
    assert cli("compare", *ids, "--json") == (1, out, err)


def test_the_golden_files_differ_only_in_the_judge_cost_sums() -> None:
    old = (FIXTURES / "cli-compare-40.json").read_text(encoding="utf-8").splitlines()
    new = (FIXTURES / "cli-compare-40.py312.json").read_text(encoding="utf-8").splitlines()
    assert len(old) == len(new)
    differ = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    assert len(differ) == 2
    for a, b in differ:
        assert a.split(":")[0] == b.split(":")[0] == '      "judge_cost_usd"'
        assert float(a.split(":")[1].rstrip(",")) == pytest.approx(
            float(b.split(":")[1].rstrip(","))
        )
