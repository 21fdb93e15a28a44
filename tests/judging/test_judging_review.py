"""Issue 22 as its user tries it by hand: Ctrl-C in a pass, rubric files as people write them,
a rubric's label order, what a pass's new verdicts will change, and agreement figures that say
why they are missing (judge vs judge and judge vs human)."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.agreement import agreement_notes, human_notes
from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context
from evaledger.domain.metrics import BUILTIN_BY_NAME
from evaledger.judging.rubric import JudgeRubric, load_rubrics, render_with_rubrics, rubric_of
from evaledger.scoring.agreement import cohen_kappa, human_agreement, measure_agreement
from tests.fake_judges import Answer, FakeJudges, _wire, default_script
from tests.helpers import bundle, case, scores
from tests.judging.test_judging_cli import count, import_file, run_cli, wait_for
from tests.judging.test_judging_prompt import FULL
from tests.scoring.test_agreement import verdict

OPENAI = ("--judge", "openai:gpt-4.1", "--max-retries", "0", "--concurrency", "1")
DELIVERY = BUILTIN_BY_NAME["response_delivery"]


# ---------------------------------------------------------------------------------------------
# Ctrl-C


@pytest.fixture
def terminal_sigint() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as in a terminal: a shell starts a background job (the
    tests run as one in CI) with SIGINT ignored, and Python then leaves it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("terminal_sigint")
def test_ctrl_c_in_a_pass_keeps_what_was_recorded_and_exits_130(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, store_url)
    before = count(store_url)

    def script(kind: str, body: dict[str, Any]) -> Answer:
        if judges.calls() == 1:
            return default_script(kind, body)
        # The user presses Ctrl-C while the second call is in flight, once the first call's
        # verdict is in the store: the runner records it in a worker thread while the second
        # call goes out, and a Ctrl-C before that write lands would leave "made 0 of 2" (the
        # state the test needs is waited for, not assumed from timing).
        deadline = time.monotonic() + 120
        while count(store_url) < before + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)
        return Answer(text="{}", delay_s=5)

    judges.script = script
    code, out, err = run_cli(capsys, store_url, "judge", run_id, *OPENAI)
    assert code == 130 and "Traceback" not in err
    assert "made 1 of 2 planned calls" in out and "verdicts 1: 1 parsed, 0 errors" in out
    assert "interrupted (Ctrl-C): 1 verdicts recorded stay recorded" in out
    assert "exit 130 (judge the rest with --missing-only)" in out
    assert count(store_url) == before + 1
    judges.mode("ok")
    code, out, _ = run_cli(capsys, store_url, "judge", run_id, *OPENAI, "--missing-only")
    assert code == 0 and "1 cases (2 skipped)" in out and judges.calls() == 3


# ---------------------------------------------------------------------------------------------
# Rubric files as people write them


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


YES_NO = """\
format: evaledger.rubric/1
rubrics:
  - metric: response_delivery
    criteria: Would a customer call this answer acceptable?
    scale:
      kind: categorical
      mapping: {yes: 5, partly: 3, no: 0}
      meanings: {on: not a label here, off: neither}
"""


def test_yaml_words_yes_no_on_off_are_labels_and_a_bom_is_not_part_of_the_text(
    tmp_path: Path,
) -> None:
    rubric = load_rubrics(_write(tmp_path, "r.yaml", YES_NO))["response_delivery"]
    assert list(rubric.scale.mapping) == ["yes", "partly", "no"]
    assert list(rubric.scale.meanings) == ["on", "off"]
    with_bom = _write(tmp_path, "r.json", b"\xef\xbb\xbf" + orjson.dumps(rubric.model_dump()))
    assert load_rubrics(with_bom)["response_delivery"] == rubric


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("broken.yaml", "format: [\n", "not valid YAML at line 2, column 1"),
        ("indent.yaml", "rubrics:\n - metric: x\n  criteria: y\n", "not valid YAML at line 3"),
        ("empty.yaml", "", "got an empty file"),
        ("list.json", "[1, 2]", "got list"),
    ],
)
def test_a_rubric_file_that_is_not_a_rubric_document_exits_2_naming_the_place(
    sqlite_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str,
    message: str,
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(ValidationError, match="rubric: ") as raised:
        load_rubrics(path)
    assert raised.value.field == "rubric" and message in str(raised.value)
    run_id = import_file(tmp_path, capsys, sqlite_url)
    code, _, err = run_cli(capsys, sqlite_url, "judge", run_id, "--dry-run", "--rubric", str(path))
    assert code == 2 and message in err and "Traceback" not in err


def test_a_rubric_keeps_its_label_order_stored_and_in_its_hash() -> None:
    scale = {"kind": "categorical", "mapping": {"excellent": 5, "good": 4, "adequate": 3}}
    rubric = JudgeRubric.model_validate(
        {"metric": "response_delivery", "criteria": "c", "scale": scale}
    )
    reordered = JudgeRubric.model_validate(
        {
            "metric": "response_delivery",
            "criteria": "c",
            "scale": {"kind": "categorical", "mapping": {"adequate": 3, "excellent": 5, "good": 4}},
        }
    )
    # A registered metric carries its rubric as this text: read back, the author's order holds.
    stored = DELIVERY.model_copy(update={"rubric": rubric.canonical()})
    assert rubric_of(stored) == rubric
    carried = rubric_of(stored)
    assert carried is not None and list(carried.scale.mapping) == ["excellent", "good", "adequate"]
    first = render_with_rubrics(FULL, [DELIVERY], {"response_delivery": rubric})
    second = render_with_rubrics(FULL, [DELIVERY], {"response_delivery": reordered})
    assert "one of `excellent`, `good`, `adequate`." in first.system
    # Other prompts, other hashes: a hash names what the judge was asked.
    assert first.system != second.system and first.template_hash != second.template_hash


# ---------------------------------------------------------------------------------------------
# What a pass's new verdicts will change


def test_a_pass_says_when_its_verdicts_will_not_count_or_will_count_as_errors(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, store_url)
    code, out, _ = run_cli(capsys, store_url, "judge", run_id, *OPENAI, "--dry-run", "--json")
    assert code == 0 and orjson.loads(out)["notes"] == []
    code, out, _ = run_cli(capsys, store_url, "judge", run_id, *OPENAI, "--metric", "tool_routing")
    assert code == 0 and "note: this pass does not score parameter_extraction, " in out
    assert "under that spec its verdicts are judge errors (judge_errors: score_zero)" in out
    code, out, _ = run_cli(capsys, store_url, "show", run_id)
    assert "2 judge errors counted as 0" in out  # what the note said
    code, out, _ = run_cli(capsys, store_url, "judge", run_id, *OPENAI)
    assert code == 0 and "note:" not in out
    code, out, _ = run_cli(capsys, store_url, "judge", run_id, *OPENAI, "--dry-run")
    assert "note: 2 of the 2 cases had a valid verdict before this pass: under the run's " in out
    assert "panel policy `first` the earliest valid verdict counts" in out


def test_the_api_judging_job_reports_the_notes(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    # On SQLite the job runs in the server's process (PostgreSQL queues it for a worker).
    run_id = import_file(tmp_path, capsys, sqlite_url)
    assert run_cli(capsys, sqlite_url, "judge", run_id, *OPENAI)[0] == 0
    services = build_services(Settings(db=sqlite_url))
    try:
        with TestClient(create_app(services=services)) as client:
            body = {"judges": ["openai:gpt-4.1"], "metrics": ["tool_routing"], "dry_run": True}
            started = client.post(f"/runs/{run_id}/judge", json=body)
            assert started.status_code == 202, started.text
            job = wait_for(client, started.json()["job_id"])
    finally:
        services.close()
    notes = job["report"]["notes"]
    assert notes[0].startswith("this pass does not score parameter_extraction, ")
    assert notes[1].startswith("2 of the 2 cases had a valid verdict before this pass")


# ---------------------------------------------------------------------------------------------
# Agreement figures that say why they are missing


def test_an_undefined_figure_says_why() -> None:
    same = measure_agreement("m", {f"u{i}": {"a": 4, "b": 4} for i in range(12)})
    varied = measure_agreement("v", {f"u{i}": {"a": i % 3, "b": i % 2} for i in range(12)})
    assert same.krippendorff_alpha is None and same.pairs[0].percent_agreement == 1.0
    notes = agreement_notes([same, varied])
    assert notes[-1].startswith("undefined: the judges gave one and the same value")
    assert notes[-1].endswith("cannot be measured: m")


def _human_run(services: Services, key: str, items: int) -> str:
    """`items` cases judged by one judge, each of its verdicts corrected by a human."""
    data: dict[str, Any] = bundle(key=key)
    data["run"]["agent"]["provider"] = "google"
    data["cases"] = []
    for i in range(items):
        c = case(f"c{i}")
        c["verdicts"] = [verdict("openai", "gpt-4.1", 2 + i % 3)]
        c["overrides"] = [
            {
                "verdict_index": 0,
                "metric_scores": scores(2 + (i % 3 if i % 4 else (i + 1) % 3)),
                "reason": "a reviewer's reading",
                "actor": "reviewer@example.com",
            }
        ]
        data["cases"].append(c)
    run = services.ledger.import_bundle(RunBundle.model_validate(data), Context(actor="t"))
    return str(run.run_id)


def test_judge_vs_human_kappa_needs_ten_values_and_carries_its_interval(
    store_services: Services,
) -> None:
    services = store_services
    many, few = _human_run(services, "many", 12), _human_run(services, "few", 3)
    judged = [2 + i % 3 for i in range(12)]
    human = [2 + (i % 3 if i % 4 else (i + 1) % 3) for i in range(12)]
    reference = cohen_kappa(list(zip(judged, human, strict=True)))
    assert reference is not None
    with TestClient(create_app(services=services)) as client:
        rows = client.get(f"/runs/{many}/agreement").json()["human"]
        tool = next(h for h in rows if h["measure"] == "tool_routing")
        assert tool["items"] == 12 and tool["reliability"] == "few_items"
        assert tool["cohen_kappa"] == pytest.approx(reference, abs=1e-12)
        low, high = tool["kappa_interval"]["low"], tool["kappa_interval"]["high"]
        assert low <= reference <= high
        page = client.get(f"/ui/runs/{many}/agreement").text
        shown = f"{reference:.3f} [{low:.3f}, {high:.3f}] (few items)"
        assert f'data-field="human_kappa">{shown}<' in page
        assert "warning: fewer than 30 values, read the 95% interval: openai:gpt-4.1" in page
        assert "Krippendorff's alpha (ordinal) [95% CI]" in page and "Cohen's kappa" in page
        rows = client.get(f"/runs/{few}/agreement").json()["human"]
        assert {(h["cohen_kappa"], h["reliability"]) for h in rows} == {(None, "insufficient_data")}
        page = client.get(f"/ui/runs/{few}/agreement").text
        assert 'data-field="human_kappa">insufficient data<' in page
    assert human_notes([human_agreement("j", "m", [(1, 1)] * 3)]) == [
        "insufficient data (fewer than 10 values a human judged too): j m"
    ]


@pytest.mark.parametrize(
    "flag", [("--retry-errors",), ("--max-cost", "1"), ("--dry-run",), ("--judge", "openai:x")]
)
def test_rescore_refuses_the_flags_of_a_judging_pass(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: tuple[str, ...]
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    rubric = _write(tmp_path, "r.yaml", YES_NO)
    args = ("judge", run_id, "--rubric", str(rubric), "--rescore", *flag)
    code, _, err = run_cli(capsys, sqlite_url, *args)
    assert code == 2 and f"{flag[0]} selects or calls judges; --rescore calls none" in err


def test_a_provider_that_cannot_be_reached_exits_3_naming_where(
    sqlite_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    closed = _closed_port()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed}/v1")
    code, out, _ = run_cli(capsys, sqlite_url, "judge", run_id, *OPENAI)
    assert code == 3 and "no call reached the provider (2 attempted): exit 3" in out
    assert f"Connection error. (http://127.0.0.1:{closed}/v1/chat/completions" in out
    assert "errors by kind: 2 provider error" in out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: nothing listens there


def test_registering_a_rubric_whose_scale_misfits_the_metric_names_the_scale(
    services: Services,
) -> None:
    rubric = {"metric": "warmth", "criteria": "c", "scale": {"kind": "1-5"}}
    body = {
        "name": "warmth",
        "display_name": "Warmth",
        "description": "Warm replies.",
        "tier": "delivery",
        "default_weight": 0.1,
        "score_type": "binary",
        "include_in_defaults": False,
        "judge_rubric": rubric,
    }
    with TestClient(create_app(services=services)) as client:
        refused = client.post("/config/metrics", json=body)
        assert refused.status_code == 422 and refused.json()["field"] == "judge_rubric.scale"
        assert "metric warmth is binary but its rubric's scale is 1-5" in refused.json()["detail"]
        metrics = client.get("/config/available-metrics").json()["data"]
        assert "warmth" not in {m["name"] for m in metrics}


def test_a_pass_whose_calls_cost_more_than_estimated_says_it_went_over_the_budget(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)

    def script(kind: str, body: dict[str, Any]) -> Answer:
        payload = _wire(kind, body, default_script(kind, body).text or "")
        payload["usage"] = {"prompt_tokens": 200_000, "completion_tokens": 300}  # far past ~3k
        return Answer(status=200, body=orjson.dumps(payload))

    judges.script = script
    code, out, _ = run_cli(capsys, sqlite_url, "judge", run_id, *OPENAI, "--max-cost", "0.05")
    # gpt-4.1 at $2 / M input: the first call's estimate fits, its 200k tokens cost $0.40.
    assert code == 1 and judges.calls() == 1
    assert "stopped at the budget (--max-cost $0.0500, spent $0.4024)" in out
    assert "warning: spent $0.4024, over --max-cost $0.0500" in out
