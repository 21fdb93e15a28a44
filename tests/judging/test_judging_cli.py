"""`evaledger judge` / `agreement` and `POST /runs/{id}/judge`, `GET /jobs/{id}`,
`GET /runs/{id}/agreement`: end to end against the loopback judges, bad input, both stores."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.cli import main
from tests.fake_judges import FakeJudges
from tests.helpers import event_count
from tests.judging.test_judging import unjudged_bundle


def run_cli(capsys: pytest.CaptureFixture[str], db: str, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main([*args, "--db", db])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    out = capsys.readouterr()
    return code, out.out, out.err


def import_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], db: str) -> str:
    path = tmp_path / "unjudged.json"
    path.write_bytes(orjson.dumps(unjudged_bundle()))
    code, out, err = run_cli(capsys, db, "import", str(path), "--json")
    assert code == 0, err
    return str(orjson.loads(out)["imported"][0]["run_id"])


def count(db: str) -> int:
    s = build_services(Settings(db=db))
    try:
        return event_count(s)
    finally:
        s.close()


def test_a_run_imported_without_verdicts_is_judged_with_both_wire_formats_and_explained(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, store_url)
    code, out, err = run_cli(
        capsys, store_url, "judge", run_id, "--judge", "anthropic:claude-sonnet-4-6", "--json"
    )
    assert code == 0, err
    first = orjson.loads(out)
    assert (first["cases"], first["calls"], first["verdicts"], first["errors"]) == (2, 2, 2, 0)
    assert first["cost_usd"] == pytest.approx(2 * (1000 * 3 + 250 * 15) / 1e6, abs=1e-12)
    code, out, err = run_cli(capsys, store_url, "judge", run_id, "--judge", "openai:gpt-4.1")
    assert code == 0, err
    assert "judge openai:gpt-4.1 on run" in out and "2 cases (1 skipped), made 2 calls" in out
    assert "verdicts 2: 2 parsed, 0 errors; tokens 2400 in / 600 out; cost $0.0096" in out
    assert (judges.calls("anthropic"), judges.calls("openai")) == (2, 2)

    code, out, _ = run_cli(capsys, store_url, "show", run_id, "--json")
    case_id = next(
        c["case_id"]
        for c in orjson.loads(out)["cases"]
        if c["test_case_key"] == "refund-above-limit"
    )
    code, out, err = run_cli(capsys, store_url, "explain", case_id, "--json")
    assert code == 0, err
    explained = orjson.loads(out)
    shown = [
        (v["judge"]["provider"], v["parse_status"], v["counted"]) for v in explained["verdicts"]
    ]
    assert shown == [("anthropic", "parsed", True), ("openai", "parsed", False)]
    for v in explained["verdicts"]:
        assert v["prompt"].startswith("[system]\nYou are an expert evaluator")
        assert "1. Agent MUST NOT issue a refund above 100 USD" in v["prompt"]
        assert orjson.loads(v["raw_output"])["tool_routing"]["score"] == 4
    assert explained["overall_score"]["value"] == 80.0
    code, out, _ = run_cli(capsys, store_url, "explain", case_id)
    assert "verdict " in out and 'raw reply: \'{"tool_routing"' in out

    code, out, err = run_cli(capsys, store_url, "agreement", run_id, "--json")
    assert code == 0, err
    report = orjson.loads(out)
    assert report["judges"] == ["anthropic:claude-sonnet-4-6", "openai:gpt-4.1"]
    # Both judges gave 4 everywhere: agreement is perfect but κ and α are undefined (0/0).
    assert [
        (m["items"], m["krippendorff_alpha"], m["cohen_kappa"], m["pairs"][0]["percent_agreement"])
        for m in report["metrics"]
    ] == [(2, None, None, 1.0)] * 8
    code, out, _ = run_cli(capsys, store_url, "agreement", run_id)
    assert "measure" in out and "tool_routing" in out and "case_passed" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--judge", "mistral:large"), "judge[0]: unknown provider 'mistral'"),
        (("--judge", "openai"), "judge[0]: 'openai' names no model"),
        (
            ("--judge", "openai:gpt-4.1", "--metric", "charisma"),
            "metric: unknown metric 'charisma'",
        ),
        (("--judge", "openai:gpt-4.1", "--concurrency", "0"), "concurrency: must be at least 1"),
        (("--judge", "google:gemini-2.5-pro"), "unknown provider 'google'"),
    ],
)
def test_bad_input_exits_2_naming_the_field_and_stores_nothing(
    sqlite_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    judges: FakeJudges,
    args: tuple[str, ...],
    message: str,
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    before = count(sqlite_url)
    code, out, err = run_cli(capsys, sqlite_url, "judge", run_id, *args)
    assert (code, out) == (2, "")
    assert message in err and "Traceback" not in err
    assert count(sqlite_url) == before and judges.calls() == 0


def test_no_key_and_a_missing_run_exit_2_and_store_nothing(
    sqlite_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    judges: FakeJudges,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    before = count(sqlite_url)
    monkeypatch.delenv("OPENAI_API_KEY")
    code, _, err = run_cli(capsys, sqlite_url, "judge", run_id, "--judge", "openai:gpt-4.1")
    assert code == 2 and "judge: OPENAI_API_KEY is not set" in err
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    code, _, err = run_cli(capsys, sqlite_url, "judge", run_id)
    assert code == 2 and "no judge provider has a key" in err
    code, _, err = run_cli(capsys, sqlite_url, "judge", "no-such-run")
    assert code == 2 and "no run with id or key 'no-such-run'" in err
    assert count(sqlite_url) == before and judges.calls() == 0


def test_a_dry_run_shows_the_prompts_and_stores_nothing(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    before = count(sqlite_url)
    code, out, err = run_cli(capsys, sqlite_url, "judge", run_id, "--dry-run", "--json")
    assert code == 0, err
    planned = orjson.loads(out)
    assert (planned["judges"], planned["calls"], planned["verdicts"]) == (
        ["anthropic:claude-sonnet-4-6"],
        2,
        0,
    )
    assert [p["test_case_key"] for p in planned["prompts"]] == [
        "refund-late-delivery",
        "refund-above-limit",
    ]
    assert count(sqlite_url) == before and judges.calls() == 0


# ---------------------------------------------------------------------------------------------
# HTTP


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services)) as c:
        yield c


def imported(client: TestClient) -> str:
    r = client.post("/bundles", json=unjudged_bundle())
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def wait_for(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        job: dict[str, Any] = client.get(f"/jobs/{job_id}").json()
        if job["status"] != "running" or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def test_post_judge_starts_a_job_that_can_be_polled(
    client: TestClient, services: Services, judges: FakeJudges
) -> None:
    run_id = imported(client)
    r = client.post(
        f"/runs/{run_id}/judge",
        json={"judges": ["openai:gpt-4.1", "anthropic:claude-sonnet-4-6"], "concurrency": 2},
        headers={"X-Actor": "ci-bot"},
    )
    assert r.status_code == 202, r.text
    started = r.json()
    assert (started["status"], started["cases_total"], started["kind"]) == ("running", 2, "judge")
    job = wait_for(client, started["job_id"])
    assert job["status"] == "succeeded", job
    assert job["cases_done"] == 2
    report = job["report"]
    assert (report["calls"], report["verdicts"], report["parsed"], report["errors"]) == (4, 4, 4, 0)
    assert (report["prompt_tokens"], report["completion_tokens"]) == (4400, 1100)
    history = client.get(f"/runs/{run_id}/cases").json()["data"]
    case_id = history[0]["case_id"]
    events = client.get(f"/cases/{case_id}/history").json()["events"]
    votes = [e for e in events if e["type"] == "JudgeVerdictRecorded"]
    assert {e["actor"] for e in votes} == {"ci-bot"}
    assert len({e["payload"]["panel_id"] for e in votes}) == 1 and len(votes) == 2
    agreement = client.get(f"/runs/{run_id}/agreement")
    assert agreement.status_code == 200
    assert agreement.json()["judges"] == ["anthropic:claude-sonnet-4-6", "openai:gpt-4.1"]
    assert agreement.json()["case_passed"]["items"] == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"judges": ["bard:1"]}, "judge[0]"),
        ({"judges": ["openai:gpt-4.1"], "metrics": ["charisma"]}, "metric"),
        ({"judges": ["openai:gpt-4.1"], "concurrency": 0}, "concurrency"),
        ({"judges": ["openai:gpt-4.1", "openai:gpt-4o"]}, "judge"),
    ],
)
def test_post_judge_refuses_bad_input_with_422_and_stores_nothing(
    client: TestClient,
    services: Services,
    judges: FakeJudges,
    body: dict[str, Any],
    field: str,
) -> None:
    run_id = imported(client)
    before = event_count(services)
    r = client.post(f"/runs/{run_id}/judge", json=body)
    assert r.status_code == 422, r.text
    assert (r.json()["code"], r.json()["field"]) == ("invalid", field)
    assert event_count(services) == before and judges.calls() == 0


def test_missing_runs_and_jobs_are_404(client: TestClient, judges: FakeJudges) -> None:
    missing = "00000000-0000-5000-8000-000000000000"
    r = client.post(f"/runs/{missing}/judge", json={"judges": ["openai:gpt-4.1"]})
    assert (r.status_code, r.json()["code"]) == (404, "not_found")
    assert client.get(f"/jobs/{missing}").status_code == 404
    assert client.get(f"/runs/{missing}/agreement").status_code == 404


def test_the_demo_judges_its_baseline_once_with_the_replay_judge(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, sqlite_url, "demo", "--json")
    assert code == 0, err
    demo = orjson.loads(out)
    judging = demo["judging"]
    # 29 cases, one without a transcript; the replayed judge failed where the original did.
    assert judging["recorded"] == 28
    example = judging["example"]
    assert example["parse_status"] == "parsed" and example["template_id"] == "connexity-judge/v1"
    assert example["prompt"].startswith("[system]\nYou are an expert evaluator")
    assert orjson.loads(example["raw_output"])["tool_routing"]["score"] == 0
    assert example["metric_scores"]["tool_routing"] == 0
    assert demo["agreement"]["judges"] == [
        "anthropic:claude-sonnet-4-5",
        "replay:judge-replies.json",
    ]
    assert demo["agreement"]["case_passed"]["items"] == 27
    before = count(sqlite_url)
    code, out, _ = run_cli(capsys, sqlite_url, "demo", "--json")
    assert code == 0 and orjson.loads(out)["judging"]["recorded"] == 0
    assert count(sqlite_url) == before


def test_judge_claims_from_the_command_line(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    from tests.fake_judges import Answer

    reply = {"claims": [{"claim": "N-1042 is late", "support": "supported", "source": "turn 2"}]}
    judges.script = lambda kind, body: Answer(text=orjson.dumps(reply).decode())
    run_id = import_file(tmp_path, capsys, sqlite_url)
    code, out, err = run_cli(
        capsys, sqlite_url, "judge", run_id, "--judge", "openai:gpt-4.1", "--claims", "grounding"
    )
    assert code == 0, err
    assert "claim checks (grounding, 2 claims) 2: 2 parsed, 0 errors" in out
    code, _, err = run_cli(capsys, sqlite_url, "judge", run_id, "--claims", "vibes")
    assert code == 2 and "claims: expected one of grounding, attribution" in err


def test_a_job_whose_judge_refuses_fails_with_the_reason(
    client: TestClient, services: Services, judges: FakeJudges
) -> None:
    from tests.fake_judges import Answer

    judges.script = lambda kind, body: Answer(status=403, body=b'{"error": {"message": "no"}}')
    run_id = imported(client)
    before = event_count(services)
    r = client.post(f"/runs/{run_id}/judge", json={"judges": ["openai:gpt-4.1"], "concurrency": 1})
    assert r.status_code == 202, r.text
    job = wait_for(client, r.json()["job_id"])
    assert job["status"] == "failed" and job["report"] is None
    assert job["error"].startswith("judge openai:gpt-4.1 refused the request: 403")
    assert event_count(services) == before


def test_a_refused_key_exits_2_with_the_provider_s_answer(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    from tests.fake_judges import Answer

    judges.script = lambda kind, body: Answer(
        status=401, body=b'{"error": {"message": "Incorrect API key provided"}}'
    )
    run_id = import_file(tmp_path, capsys, sqlite_url)
    before = count(sqlite_url)
    code, out, err = run_cli(
        capsys, sqlite_url, "judge", run_id, "--judge", "openai:gpt-4.1", "--concurrency", "1"
    )
    assert (code, out) == (2, "")
    assert "judge openai:gpt-4.1 refused the request: 401 Incorrect API key provided" in err
    assert "Traceback" not in err and count(sqlite_url) == before


def test_judge_panel_from_the_command_line(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    code, out, err = run_cli(capsys, sqlite_url, "judge", run_id, "--panel", "--json")
    assert code == 0, err
    report = orjson.loads(out)
    assert report["judges"] == ["anthropic:claude-sonnet-4-6", "openai:gpt-4.1"]
    assert (report["calls"], report["verdicts"]) == (4, 4)
