"""`compare A B --json` prints the same bytes as before issue 32's compare work (session 12).

The golden file is `main` at 454e7b1's output for two generated 40-case runs (bench's
`generate_bundle`, seeds 7 and 8): every field, the per-case metric deltas, the significance
and the headlines. A faster path must print exactly these bytes.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.common import generate_bundle
from tests.api.test_cli import Cli

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures/compare/cli-compare-40.json"


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
