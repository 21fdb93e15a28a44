"""lm-evaluation-harness and OpenAI evals outputs imported with their own figures (issue 36).

The fixtures are real runs (tests/fixtures/lm_eval, tests/fixtures/openai_evals). Each test
reads the source's own headline figures from its file (lm-eval's results JSON, evals' final
report) and holds `show` to them: recomputed from the cases, never copied. Detection needs no
flag; bad and hostile input is refused naming what is wrong, with nothing stored.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.application import reports, runs
from evaledger.application.transcripts import case_transcript
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context
from evaledger.importers.base import Format, ImportFormatError
from evaledger.importers.detect import detect
from evaledger.importers.load import open_imports
from tests.api.test_cli import Cli
from tests.conftest import FIXTURES
from tests.helpers import event_count

CTX = Context(actor="test")
LM_EVAL = FIXTURES / "lm_eval"
RESULTS = next(LM_EVAL.glob("results_*.json"))
SAMPLES = sorted(LM_EVAL.glob("samples_*.jsonl"))
OPENAI = FIXTURES / "openai_evals" / "test-match.jsonl"


def imported(services: Services, *paths: Path) -> Any:
    run = runs.import_files(services, list(paths), CTX)
    services.sync()
    return run


def lm_eval_figures() -> dict[str, float]:
    """The results JSON's own figures, keyed as the ledger keys its scorers' metrics."""
    data = orjson.loads(RESULTS.read_bytes())
    out = {}
    for task, figures in data["results"].items():
        for key, value in figures.items():
            metric, sep, filt = key.rpartition(",")
            if not sep or not isinstance(value, float):
                continue
            if metric.endswith("_stderr"):
                out[f"{task}/{metric.removesuffix('_stderr')},{filt}/stderr"] = value
            else:
                out[f"{task}/{metric},{filt}/mean"] = value
    return out


# -- lm-eval ----------------------------------------------------------------------------------


def test_lm_eval_is_detected_from_the_results_or_a_samples_file() -> None:
    assert detect(RESULTS) is Format.LM_EVAL
    assert all(detect(p) is Format.LM_EVAL for p in SAMPLES)
    # A samples file, its results and the other samples file are one run, opened once.
    (single,) = open_imports([SAMPLES[0], RESULTS, SAMPLES[1]])
    assert single.sources == (str(RESULTS),)


def test_lm_eval_imports_with_its_own_figures(store_services: Services) -> None:
    s = store_services
    (run,) = imported(s, RESULTS)
    aggregate = reports.run_summary(s, run.run.run_id).aggregate
    expected = lm_eval_figures()
    assert len(expected) == 6  # tiny_mc acc, acc_norm; tiny_gen exact_match; each ± stderr
    assert aggregate.scorer_metrics.keys() == expected.keys()
    for key, value in expected.items():
        assert aggregate.scorer_metrics[key] == pytest.approx(value, abs=1e-12), key
    assert aggregate.scorer_metrics_mismatched == {}
    data = orjson.loads(RESULTS.read_bytes())
    documents = sum(v["original"] for v in data["n-samples"].values())
    assert aggregate.total_executions == documents == 8
    headline = reports.show_run(s, run.run.run_id).headline
    assert headline.metric == "tiny_mc/acc,none/mean" and headline.value == pytest.approx(0.2)
    # A document passes when its task's first metric is 1: acc for tiny_mc, exact_match for gen.
    scores = reports.case_scores(s, run.run.run_id)
    for c in scores:
        first = (
            "tiny_mc/acc,none"
            if c.test_case_key.startswith("tiny_mc/")
            else "tiny_gen/exact_match,none"
        )
        assert c.passed is (c.named_scores[first] >= 1)


def test_lm_eval_cases_keep_the_prompt_and_the_answer(services: Services) -> None:
    (run,) = imported(services, RESULTS)
    by_key = {c.test_case_key: c for c in reports.case_scores(services, run.run.run_id)}
    assert set(by_key) == {f"tiny_mc/{i}" for i in range(5)} | {f"tiny_gen/{i}" for i in range(3)}
    gen = case_transcript(services, by_key["tiny_gen/1"].case_id)
    assert [t["role"] for t in gen.turns] == ["user", "assistant"]
    assert gen.turns[0]["content"] == "Say hello." and gen.turns[1]["content"] == "lol"
    mc = case_transcript(services, by_key["tiny_mc/0"].case_id)
    # The choice the model gave the highest log-likelihood (doc 0: " red", -0.1546 > -0.1546).
    line = orjson.loads(SAMPLES[1].read_bytes().splitlines()[0])
    lls = [float(r[0]) for r in line["filtered_resps"]]
    best = max(range(3), key=lls.__getitem__)
    assert mc.turns[1]["content"] == line["arguments"][f"gen_args_{best}"]["arg_1"]


def test_lm_eval_import_is_idempotent_whichever_file_is_given(services: Services) -> None:
    (first,) = imported(services, RESULTS)
    before = event_count(services)
    (again,) = imported(services, SAMPLES[0])
    assert again.run.run_id == first.run.run_id and event_count(services) == before


def test_lm_eval_without_its_other_half_is_refused(services: Services, tmp_path: Path) -> None:
    alone = tmp_path / RESULTS.name
    shutil.copy(RESULTS, alone)
    with pytest.raises(ImportFormatError, match="--log_samples"):
        imported(services, alone)
    orphan = tmp_path / "orphan" / SAMPLES[0].name
    orphan.parent.mkdir()
    shutil.copy(SAMPLES[0], orphan)
    with pytest.raises(ImportFormatError, match="without its results JSON"):
        imported(services, orphan)
    assert event_count(services) == 0


def test_a_cut_off_or_bad_samples_file_stores_nothing(services: Services, tmp_path: Path) -> None:
    for name in (RESULTS.name, *(p.name for p in SAMPLES)):
        shutil.copy(LM_EVAL / name, tmp_path / name)
    target = tmp_path / SAMPLES[1].name
    data = SAMPLES[1].read_bytes()
    target.write_bytes(data[: len(data) - 200])
    with pytest.raises(ValidationError, match="cut off"):
        imported(services, tmp_path / RESULTS.name)
    target.write_bytes(data + b'{"not": "a sample"}\n')
    with pytest.raises(ValidationError) as e:
        imported(services, tmp_path / RESULTS.name)
    assert e.value.field == "doc_id"
    assert event_count(services) == 0


# -- OpenAI evals -----------------------------------------------------------------------------


def final_report() -> dict[str, float]:
    for line in OPENAI.read_bytes().splitlines():
        record = orjson.loads(line)
        if "final_report" in record:
            return dict(record["final_report"])
    raise AssertionError("no final report")


def test_openai_evals_imports_with_its_own_figures(store_services: Services) -> None:
    s = store_services
    assert detect(OPENAI) is Format.OPENAI_EVALS
    (run,) = imported(s, OPENAI)
    spec = orjson.loads(OPENAI.read_bytes().splitlines()[0])["spec"]
    assert run.run.run_key == f"openai-evals-{spec['run_id']}"
    report = final_report()
    view = reports.show_run(s, run.run.run_id)
    assert view.aggregate.scorer_metrics == {"match/accuracy": pytest.approx(report["accuracy"])}
    assert view.headline.metric == "match/accuracy"
    # boostrap_std draws random samples: shown as evals reported it, never a mismatch.
    assert view.aggregate.scorer_metrics_mismatched == {}
    scorer = next(x for x in view.summary.spec.scorers if x.name == "match")
    assert scorer.reported["boostrap_std"] == report["boostrap_std"]
    assert view.aggregate.pass_rate == pytest.approx(report["accuracy"])
    assert view.aggregate.total_executions == 3


def test_openai_evals_cases_keep_the_sampling(services: Services) -> None:
    (run,) = imported(services, OPENAI)
    scores = {c.test_case_key: c for c in reports.case_scores(services, run.run.run_id)}
    t = case_transcript(services, scores["test-match.s1.1"].case_id)
    assert t.turns[-1] == {**t.turns[-1], "role": "assistant", "content": "George Washington"}
    assert "The first US president was" in t.turns[0]["content"]
    assert scores["test-match.s1.1"].passed is True and scores["test-match.s1.2"].passed is False
    before = event_count(services)
    imported(services, OPENAI)
    assert event_count(services) == before


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"spec": {"eval_name": "x"}}\n', "spec.run_id"),
        (None, "cut off"),
        (b"LINE2", "sample_id"),
        (b"DEEP", "nest"),
    ],
)
def test_bad_openai_evals_records_store_nothing(
    services: Services, tmp_path: Path, body: bytes | None, message: str
) -> None:
    data = OPENAI.read_bytes()
    target = tmp_path / "record.jsonl"
    if body is None:
        target.write_bytes(data[:-120])
    elif body == b"LINE2":
        target.write_bytes(data + b'{"type": "match", "data": {"correct": true}}\n')
    elif body == b"DEEP":
        target.write_bytes(data.splitlines()[0] + b"\n" + b'{"a": ' * 5000 + b"1" + b"}" * 5000)
    else:
        target.write_bytes(body)
    with pytest.raises(ValidationError, match=message):
        imported(services, target)
    assert event_count(services) == 0


def test_cli_imports_both_without_a_flag(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    cli = Cli(capsys, sqlite_url)
    done = cli.json("import", str(RESULTS), str(OPENAI))["imported"]
    assert sorted(d["format"] for d in done) == ["lm-eval", "openai-evals"]
    key = next(d["run_key"] for d in done if d["format"] == "openai-evals")
    shown = cli.json("show", key)
    assert shown["headline"]["metric"] == "match/accuracy"
    code, _, err = cli("import", str(OPENAI), "--from", "lm-eval")
    assert code == 2 and "openai-evals" in err


def test_http_upload_of_results_and_samples_is_one_run(services: Services) -> None:
    # An upload keeps each file's name but not its folder: the samples join their results.
    with TestClient(create_app(services=services)) as client:
        files = [RESULTS, *SAMPLES]
        r = client.post(
            "/imports",
            files=[("file", (p.name, p.read_bytes(), "application/octet-stream")) for p in files],
        )
        assert r.status_code == 200, r.text
        (done,) = r.json()["imported"]
        assert (done["format"], done["cases"]) == ("lm-eval", 8)
        alone = client.post(
            "/imports",
            files=[
                ("file", (SAMPLES[0].name, SAMPLES[0].read_bytes(), "application/octet-stream"))
            ],
        )
        assert alone.status_code == 422 and "results JSON" in alone.text
