"""The calibration gate of a run (issue 35) over HTTP and at the command line, one rule.

A run judged by two judges: one calibrated on the gold set at its template hash, one never
calibrated. `GET /runs/{id}/calibration` shows each judge's calibration, κ with interval and
n, and whether `gate --require-calibrated --min-kappa K` accepts it; the CLI gate refuses with
the same sentences. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from tests.api.test_cli import Cli
from tests.application.test_calibration import JUDGE, TEMPLATE, gold_file, judged_run

OTHER = "anthropic:claude-2"
OTHER_TEMPLATE = "c" * 64


def two_judges_run(key: str) -> dict[str, Any]:
    """`judged_run`, each case judged again by OTHER under another template."""
    body = judged_run(key, "default")
    for c in body["cases"]:
        second = copy.deepcopy(c["verdicts"][0])
        second["judge"]["model"] = OTHER.split(":")[1]
        second["template_hash"] = OTHER_TEMPLATE
        c["verdicts"].append(second)
    return body


def _gate(client: TestClient, run_id: str, query: str = "") -> dict[str, Any]:
    answer = client.get(f"/runs/{run_id}/calibration{query}")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_the_run_shows_each_judges_calibration_gate_as_the_cli_gate_decides(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, store_url)
    cli.json("dataset", "create", "gold")
    cli.json("dataset", "add", "gold", str(gold_file(tmp_path / "gold.jsonl")))
    path = tmp_path / "run.json"
    path.write_bytes(orjson.dumps(two_judges_run("judged")))
    (row,) = cli.json("import", str(path))["imported"]
    run_id = row["run_id"]
    services: Services = build_services(Settings(db=store_url))
    try:
        with TestClient(create_app(services=services)) as client:
            before = _gate(client, run_id)
            assert before["accepted"] is False and before["min_kappa"] == 0.6
            assert [(j["judge"], j["template_hash"]) for j in before["judges"]] == [
                (JUDGE, TEMPLATE),
                (OTHER, OTHER_TEMPLATE),
            ]
            assert [j["calibrated"] for j in before["judges"]] == [False, False]
            assert before["refusals"] == [
                f"judge {JUDGE} has no calibration",
                f"judge {OTHER} has no calibration",
            ]
            cli.json("calibrate", "--judge", JUDGE, "--gold", "gold@1", "--from-run", "judged")
            after = _gate(client, run_id)
            mine, other = after["judges"]
            # κ 0.667 on 12 pairs (tests/application/test_calibration.py's reference figures).
            assert (mine["calibrated"], mine["n"], mine["gold"]) == (True, 12, "gold@1")
            assert mine["kappa"] == pytest.approx(2 / 3)
            assert mine["kappa_low"] <= mine["kappa"] <= mine["kappa_high"]
            assert mine["accepted"] is True and mine["calibrated_at"] == [TEMPLATE]
            assert (other["calibrated"], other["accepted"], other["kappa"]) == (False, False, None)
            assert after["accepted"] is False
            assert after["refusals"] == [f"judge {OTHER} has no calibration"]
            # The CLI gate: the same refusals, exit 1; a higher minimum refuses both.
            code, out, err = cli("gate", "judged", "--require-calibrated", "--json")
            assert code == 1, err
            assert orjson.loads(out)["calibration"] == after["refusals"]
            strict = _gate(client, run_id, "?min_kappa=0.9")
            assert [j["accepted"] for j in strict["judges"]] == [False, False]
            code, out, _ = cli(
                "gate", "judged", "--require-calibrated", "--min-kappa", "0.9", "--json"
            )
            assert code == 1 and orjson.loads(out)["calibration"] == strict["refusals"]
            assert "below the minimum 0.9" in strict["refusals"][0]
            # Bad input names the field; an unknown run is 404.
            bad = client.get(f"/runs/{run_id}/calibration?min_kappa=2")
            assert bad.status_code == 422 and "min_kappa" in bad.text
            missing = client.get("/runs/00000000-0000-0000-0000-000000000000/calibration")
            assert missing.status_code == 404
    finally:
        services.close()
