"""Judges calibrated on gold sets, and the gate that requires it (issue 35 item 3).

Through the use cases and `evaledger.api.cli.main`, on SQLite and PostgreSQL. The figures are
held to a plain-Python reference written here (κ, TPR, TNR, accuracy).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.application import calibration, datasets, runs
from evaledger.application.projects import issue_token
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import NotFoundError, ValidationError
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from evaledger.judging.prompt import TEMPLATE_HASH
from tests.api.test_cli import Cli
from tests.fake_judges import Answer, FakeJudges, serve, well_formed
from tests.helpers import bundle, case

ADMIN = Context(actor="ann")
SHOP = Context(actor="token:shop-ci", project="shop")
OTHER = Context(actor="token:other-ci", project="other")
JUDGE = "anthropic:claude"
TEMPLATE = "a" * 64
EDITED = "b" * 64
LABELS = [True] * 6 + [False] * 6
JUDGED = [True] * 5 + [False] * 6 + [True]
KEYS = [f"k{i:02d}" for i in range(12)]


def reference(pairs: list[tuple[bool, bool]]) -> dict[str, float]:
    """κ, TPR, TNR and accuracy by their textbook definitions (judge, label)."""
    n = len(pairs)
    tp = sum(1 for j, h in pairs if j and h)
    tn = sum(1 for j, h in pairs if not j and not h)
    fn = sum(1 for j, h in pairs if not j and h)
    fp = sum(1 for j, h in pairs if j and not h)
    observed = (tp + tn) / n
    judge_yes, human_yes = (tp + fp) / n, (tp + fn) / n
    expected = judge_yes * human_yes + (1 - judge_yes) * (1 - human_yes)
    return {
        "kappa": (observed - expected) / (1 - expected),
        "tpr": tp / (tp + fn),
        "tnr": tn / (tn + fp),
        "accuracy": observed,
    }


def gold_file(path: Path) -> Path:
    lines = [
        {"key": k, "input": k, "label": {"passed": passed, "by": ["token:ann", "token:bo"]}}
        for k, passed in zip(KEYS, LABELS, strict=True)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def judged_run(key: str, project: str, template: str | None = TEMPLATE) -> dict[str, Any]:
    """A run whose cases are the gold items (and one more), judged by JUDGE under `template`."""
    cases = [case(k, 5 if passed else 1) for k, passed in zip(KEYS, JUDGED, strict=True)]
    cases.append(case("not-gold", 1))
    for c in cases:
        c["verdicts"][0]["template_hash"] = template
    body = bundle(key=key, project=project)
    body["run"]["config"].update(metrics_pass_threshold=0.0, cases_pass_threshold=0.0)
    body["cases"] = cases
    return body


def _import(s: Services, body: dict[str, Any]) -> UUID:
    return runs.import_run(s, RunBundle.model_validate(body), ADMIN).run_id


@pytest.fixture
def gold(store_services: Services, tmp_path: Path) -> Services:
    datasets.create_dataset(store_services, "shop", "gold", None, SHOP)
    datasets.add_dataset_file(store_services, "shop", "gold", gold_file(tmp_path / "g.jsonl"), SHOP)
    return store_services


def test_the_calibration_equals_a_plain_python_reference(gold: Services) -> None:
    s = gold
    run_id = _import(s, judged_run("judged", "shop"))
    passes = {p.case_key: p.passed for p in calibration.run_judge_passes(s, run_id)}
    assert [passes[k] for k in KEYS] == JUDGED and passes["not-gold"] is False
    made = calibration.calibrate_judge(s, "shop", JUDGE, "gold@1", run_id, None, SHOP)
    expected = reference(list(zip(JUDGED, LABELS, strict=True)))
    assert made.n == 12 and made.judge == JUDGE and made.template_hash == TEMPLATE
    assert (made.true_positives, made.false_negatives) == (5, 1)
    assert (made.true_negatives, made.false_positives) == (5, 1)
    for name, value in expected.items():
        figure = getattr(made, name)
        assert figure.value == pytest.approx(value), name
        assert figure.low is not None and figure.high is not None
        assert figure.low <= value <= figure.high, name
    assert made.kappa.method.startswith("bootstrap") and made.tpr.method == "Wilson score"
    assert made.gold.name == "gold" and made.gold.version == 1 and made.gold.hash is not None
    assert made.actor == "token:shop-ci" and made.run_id == run_id
    assert calibration.list_calibrations(s, "shop", SHOP) == [made]


def test_the_gate_accepts_only_a_judge_calibrated_at_its_template(gold: Services) -> None:
    s = gold
    run_id = _import(s, judged_run("judged", "shop"))
    (refusal,) = calibration.calibration_refusals_of(s, run_id, 0.6)
    assert refusal == f"judge {JUDGE} has no calibration"
    calibration.calibrate_judge(s, "shop", JUDGE, "gold@1", run_id, None, SHOP)
    assert calibration.calibration_refusals_of(s, run_id, 0.6) == []
    (low,) = calibration.calibration_refusals_of(s, run_id, 0.9)
    assert JUDGE in low and "below the minimum 0.9" in low

    edited = _import(s, judged_run("edited-template", "shop", EDITED))
    (stale,) = calibration.calibration_refusals_of(s, edited, 0.6)
    assert JUDGE in stale and "stale" in stale and EDITED[:12] in stale
    other_model = judged_run("other-model", "shop")
    for c in other_model["cases"]:
        c["verdicts"][0]["judge"]["model"] = "claude-2"
    (uncalibrated,) = calibration.calibration_refusals_of(s, _import(s, other_model), 0.6)
    assert uncalibrated == "judge anthropic:claude-2 has no calibration"


def test_another_projects_token_and_calibration_are_refused(gold: Services) -> None:
    s = gold
    run_id = _import(s, judged_run("judged", "shop"))
    before = s.ledger.position()
    with pytest.raises(NotFoundError):
        calibration.calibrate_judge(s, "shop", JUDGE, "gold@1", run_id, None, OTHER)
    with pytest.raises(NotFoundError):
        calibration.list_calibrations(s, "shop", OTHER)
    assert s.ledger.position() == before
    calibration.calibrate_judge(s, "shop", JUDGE, "gold@1", run_id, None, SHOP)
    # The same judge and template in another project is not calibrated by shop's gold set.
    theirs = _import(s, judged_run("theirs", "other"))
    (refusal,) = calibration.calibration_refusals_of(s, theirs, 0.6)
    assert refusal == f"judge {JUDGE} has no calibration"
    assert calibration.list_calibrations(s, "other", OTHER) == []
    # Another project's run is not read as evidence for shop's calibration.
    with pytest.raises(ValidationError) as e:
        calibration.calibrate_judge(s, "shop", JUDGE, "gold@1", theirs, None, SHOP)
    assert e.value.field == "from_run"


@pytest.mark.parametrize(
    ("judge", "gold_ref", "field"),
    [
        ("claude", "gold@1", "judge"),
        (JUDGE, "gold@x", "dataset"),
        (JUDGE, "plain@1", "gold"),
        ("openai:gpt-4o", "gold@1", "from_run"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(
    gold: Services, tmp_path: Path, judge: str, gold_ref: str, field: str
) -> None:
    s = gold
    datasets.create_dataset(s, "shop", "plain", None, SHOP)
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"key": "k00"}\n')
    datasets.add_dataset_file(s, "shop", "plain", plain, SHOP)
    run_id = _import(s, judged_run("judged", "shop"))
    before = s.ledger.position()
    with pytest.raises(ValidationError) as e:
        calibration.calibrate_judge(s, "shop", judge, gold_ref, run_id, None, SHOP)
    assert e.value.field == field
    assert s.ledger.position() == before


def test_verdicts_with_no_template_hash_cannot_be_calibrated(gold: Services) -> None:
    s = gold
    run_id = _import(s, judged_run("imported", "shop", None))
    with pytest.raises(ValidationError, match="one template hash") as e:
        calibration.calibrate_judge(s, "shop", JUDGE, "gold@1", run_id, None, SHOP)
    assert e.value.field == "from_run"
    (refusal,) = calibration.calibration_refusals_of(s, run_id, 0.6)
    assert refusal == f"judge {JUDGE} has no calibration"


def test_the_cli_calibrates_lists_and_gates(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    cli = Cli(capsys, store_url)
    gold_path = gold_file(tmp_path / "gold.jsonl")
    cli.json("dataset", "create", "gold")
    cli.json("dataset", "add", "gold", str(gold_path))
    run_file, edited_file = tmp_path / "run.json", tmp_path / "edited.json"
    run_file.write_text(json.dumps(judged_run("judged", "default")))
    edited_file.write_text(json.dumps(judged_run("edited", "default", EDITED)))
    cli.json("import", str(run_file))
    cli.json("import", str(edited_file))

    code, out, err = cli("gate", "judged", "--require-calibrated")
    assert code == 1, err
    assert f"calibration: judge {JUDGE} has no calibration" in out
    assert "gate: FAILED (" in out and "calibration" in out.splitlines()[-1]
    code, _, err = cli("calibrate", "--judge", "claude", "--gold", "gold@1", "--from-run", "judged")
    assert code == 2 and "judge" in err and "Traceback" not in err
    code, _, err = cli(
        "calibrate",
        "--judge",
        JUDGE,
        "--gold",
        "gold@1",
        "--from-run",
        "judged",
        "--rubric",
        str(tmp_path / "missing.yaml"),
    )
    assert code == 2 and "rubric" in err
    assert cli.json("calibrations") == []

    made = cli.json("calibrate", "--judge", JUDGE, "--gold", "gold@1", "--from-run", "judged")
    expected = reference(list(zip(JUDGED, LABELS, strict=True)))
    assert made["kappa"]["value"] == pytest.approx(expected["kappa"])
    assert made["tpr"]["value"] == pytest.approx(expected["tpr"])
    assert made["gold"]["name"] == "gold" and made["n"] == 12
    (listed,) = cli.json("calibrations")
    assert listed == made
    code, out, _ = cli("calibrations")
    assert code == 0 and JUDGE in out and "gold@1" in out and TEMPLATE[:12] in out

    code, out, err = cli("gate", "judged", "--require-calibrated")
    assert code == 0, out + err
    gated = cli.json("gate", "judged", "--require-calibrated")
    assert gated["calibration"] == [] and "calibration" not in gated["failed"]
    code, out, _ = cli("gate", "judged", "--require-calibrated", "--min-kappa", "0.9")
    assert code == 1 and "below the minimum 0.9" in out
    code, out, _ = cli("gate", "edited", "--require-calibrated")
    assert code == 1 and "stale" in out and JUDGE in out


# -- calling the judge on the gold items (the loopback fake providers) ------------------------

JUDGE_CALLED = "openai:gpt-4.1"


@pytest.fixture
def judges() -> Iterator[FakeJudges]:
    yield from serve()


def scripted(failing: set[str]) -> Callable[[str, dict[str, Any]], Answer]:
    """Every metric 1 for the cases named in `failing`, 5 for the others."""

    def script(kind: str, body: dict[str, Any]) -> Answer:
        user = str(body["messages"][-1]["content"])
        score = 1 if any(k in user for k in failing) else 5
        reply = well_formed(body["response_format"]["json_schema"]["schema"], score)
        return Answer(text=json.dumps(reply))

    return script


def unjudged_gold_run(key: str) -> dict[str, Any]:
    """A run of gold@1 (its cases are the gold items), no verdict yet, the agent not OpenAI's."""
    body = judged_run(key, "shop")
    body["run"]["dataset"] = {"name": "gold", "version": 1}
    body["run"]["agent"]["provider"] = "google"
    for c in body["cases"]:
        c.pop("verdicts")
    return body


def test_calibrate_calls_the_judge_on_the_gold_run_then_compares(
    gold: Services, judges: FakeJudges
) -> None:
    s = gold
    with pytest.raises(ValidationError) as e:
        calibration.gold_run(s, "shop", "gold@1", SHOP)
    assert e.value.field == "gold"
    run_id = _import(s, unjudged_gold_run("gold-run"))
    _import(s, judged_run("another-run", "shop"))  # no dataset: not the gold run
    assert calibration.gold_run(s, "shop", "gold@1", SHOP) == run_id
    judges.script = scripted({k for k, passed in zip(KEYS, JUDGED, strict=True) if not passed})
    made = calibration.calibrate_by_judging(
        s, "shop", JUDGE_CALLED, "gold@1", (), None, SHOP, env=judges.env()
    )
    assert (made.report.cases, made.report.errors) == (13, 0) and judges.calls("openai") == 13
    c = made.calibration
    assert c is not None and c.run_id == run_id and c.template_hash == TEMPLATE_HASH
    expected = reference(list(zip(JUDGED, LABELS, strict=True)))
    assert c.n == 12 and c.tpr.value == pytest.approx(expected["tpr"])
    assert c.kappa.value == pytest.approx(expected["kappa"])
    assert calibration.calibration_refusals_of(s, run_id, 0.6) == []
    # Again: the judged cases are not judged twice; the same figures are recorded again.
    again = calibration.calibrate_by_judging(
        s, "shop", JUDGE_CALLED, "gold@1", (), None, SHOP, env=judges.env()
    )
    assert again.report.cases == 0 and judges.calls("openai") == 13
    assert again.calibration is not None and again.calibration.kappa == c.kappa


def test_an_incomplete_judging_pass_records_no_calibration(
    gold: Services, judges: FakeJudges
) -> None:
    s = gold
    _import(s, unjudged_gold_run("gold-run"))
    judges.mode("500")
    made = calibration.calibrate_by_judging(
        s, "shop", JUDGE_CALLED, "gold@1", (), None, SHOP, env=judges.env()
    )
    assert made.calibration is None and made.report.exit_code() != 0
    assert calibration.list_calibrations(s, "shop", SHOP) == []


def test_the_calibrations_page_shows_only_the_viewers_project(gold: Services) -> None:
    s = gold
    run_id = _import(s, judged_run("judged", "shop"))
    calibration.calibrate_judge(s, "shop", JUDGE, "gold@1", run_id, None, SHOP)
    admin = Context(actor="admin")
    reader = issue_token(s, "shop", TokenScope.READ, "viewer", admin).token
    rival = issue_token(s, "rival", TokenScope.ADMIN, "rival", admin).token
    with TestClient(create_app(services=s)) as client:

        def page(path: str, token: str) -> Any:
            return client.get(path, headers={"authorization": f"Bearer {token}"})

        shown = page("/ui/calibrations", reader)
        assert shown.status_code == 200, shown.text[:500]
        assert re.findall(r'<tr data-judge="([^"]+)">', shown.text) == [JUDGE]
        assert 'data-field="n">12<' in shown.text
        assert page("/ui/calibrations?project=shop", rival).status_code == 404
        assert JUDGE not in page("/ui/calibrations", rival).text.split("<main")[1]
