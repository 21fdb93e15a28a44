"""Issue 22 through the CLI against the loopback judges: honest exits for every provider mode,
--retry-errors, --max-cost, --dry-run estimates, and the judge-error policy beside the figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from evaledger.domain.spec import JudgeErrorPolicy
from evaledger.scoring.judge_errors import judge_error_note
from tests.fake_judges import Answer, FakeJudges, default_script
from tests.judging.test_judging_cli import count, import_file, run_cli

OPENAI = ("--judge", "openai:gpt-4.1", "--max-retries", "0", "--concurrency", "1")
ANTHROPIC = ("--judge", "anthropic:claude-sonnet-4-6", "--max-retries", "0", "--concurrency", "1")


@pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=["openai", "anthropic"])
@pytest.mark.parametrize(
    ("mode", "extra", "code", "errors", "printed"),
    [
        ("ok", (), 0, {}, "verdicts 2: 2 parsed, 0 errors"),
        ("malformed", (), 1, {"unparseable": 2}, "errors by kind: 2 unparseable"),
        ("partial", (), 1, {"missing_metrics": 2}, "errors by kind: 2 missing metrics"),
        ("500", (), 1, {"provider_error": 2}, "errors by kind: 2 provider error"),
        ("slow", ("--timeout", "0.3"), 3, {"timeout": 2}, "no call reached the provider"),
    ],
)
def test_judge_exits_honestly_for_each_provider_mode(
    sqlite_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    judges: FakeJudges,
    wire: tuple[str, ...],
    mode: str,
    extra: tuple[str, ...],
    code: int,
    errors: dict[str, int],
    printed: str,
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    judges.mode(mode)
    got, out, err = run_cli(capsys, sqlite_url, "judge", run_id, *wire, *extra, "--json")
    report = orjson.loads(out)
    assert got == code == report["exit_code"], out + err
    assert {k: n for k, n in report["error_counts"].items() if n} == errors
    assert report["verdicts"] == 2 and report["parsed"] == 2 - sum(errors.values())
    if mode == "slow":
        return  # the text is the same; a second slow pass would only cost time
    got, out, err = run_cli(capsys, sqlite_url, "judge", run_id, *wire, *extra)
    assert got == code, out + err
    assert printed in out


@pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=["openai", "anthropic"])
def test_a_429_with_retry_after_is_waited_out_then_succeeds(
    sqlite_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    judges: FakeJudges,
    wire: tuple[str, ...],
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    judges.mode("429")  # the first call: 429 with Retry-After: 0.2 (seconds); then ok
    code, out, err = run_cli(capsys, sqlite_url, "judge", run_id, *wire)
    assert code == 0, out + err
    assert "verdicts 2: 2 parsed, 0 errors" in out
    assert "rate limited 1 times: waited out 0.2 s (Retry-After)" in out
    # Three requests: the 429, the same call asked again no sooner than Retry-After, the other.
    assert judges.calls() == 3
    assert judges.times[1] - judges.times[0] >= 0.2
    assert judges.requests[0][1] == judges.requests[1][1]


def test_no_provider_listening_is_exit_3_and_records_provider_errors(
    sqlite_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    judges: FakeJudges,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.fake_judges import _free_port

    run_id = import_file(tmp_path, capsys, sqlite_url)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{_free_port()}/v1")
    code, out, _ = run_cli(capsys, sqlite_url, "judge", run_id, *OPENAI, "--json")
    report = orjson.loads(out)
    assert (code, report["attempted_calls"], report["reached_calls"]) == (3, 2, 0)
    assert report["error_counts"]["provider_error"] == 2 and judges.calls() == 0


def test_retry_errors_calls_only_for_the_errored_cases_and_keeps_the_old_verdicts(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    def one_fails(kind: str, body: dict[str, object]) -> Answer:
        user = str(body["messages"][-1]["content"])  # type: ignore[index]
        if "refund-above-limit" in user or "MUST NOT issue a refund" in user:
            return Answer(text="not json")
        return default_script(kind, body)

    run_id = import_file(tmp_path, capsys, store_url)
    judges.script = one_fails
    code, _, _ = run_cli(capsys, store_url, "judge", run_id, *OPENAI)
    assert code == 1 and judges.calls() == 2
    # --missing-only does not skip the case whose only verdict is an error (a failed call is
    # not a judgement): it asks again for that case alone (still failing here).
    code, out, _ = run_cli(capsys, store_url, "judge", run_id, *OPENAI, "--missing-only")
    assert (code, judges.calls()) == (1, 3) and "1 cases (2 skipped), made 1 calls" in out
    # --retry-errors picks exactly the errored case.
    judges.mode("ok")
    code, out, _ = run_cli(capsys, store_url, "judge", run_id, *OPENAI, "--retry-errors")
    assert code == 0, out
    assert "1 cases (2 skipped), made 1 calls" in out and judges.calls() == 4
    asked = [str(body["messages"][-1]["content"]) for _, body, _ in judges.requests]
    assert all("MUST NOT issue a refund" in a for a in asked[2:])
    code, out, _ = run_cli(capsys, store_url, "show", run_id, "--json")
    above = next(
        c for c in orjson.loads(out)["cases"] if c["test_case_key"] == "refund-above-limit"
    )
    code, out, _ = run_cli(capsys, store_url, "explain", above["case_id"], "--json")
    statuses = [(v["parse_status"], v["counted"]) for v in orjson.loads(out)["verdicts"]]
    assert statuses == [("unparseable", False), ("unparseable", False), ("parsed", True)]
    # Nothing errored or missing any more: neither flag makes a call.
    for flag in ("--retry-errors", "--missing-only"):
        code, out, _ = run_cli(capsys, store_url, "judge", run_id, *OPENAI, flag)
        assert (code, judges.calls()) == (0, 4) and "0 cases (3 skipped)" in out


def test_max_cost_stops_before_the_budget_is_exceeded(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    code, out, _ = run_cli(capsys, sqlite_url, "judge", run_id, *OPENAI, "--dry-run", "--json")
    planned = orjson.loads(out)
    estimates = [p["estimate"]["cost_usd"] for p in planned["prompts"]]
    assert planned["estimate"]["is_estimate"] is True and all(e > 0 for e in estimates)
    # Room for the first call's estimate, not for a second call on top of what it cost.
    budget = max(estimates) + 0.0048 / 2
    code, out, _ = run_cli(
        capsys, sqlite_url, "judge", run_id, *OPENAI, "--max-cost", f"{budget:.6f}"
    )
    assert code == 1 and judges.calls() == 1
    assert "made 1 of 2 planned calls" in out and "stopped at the budget" in out
    assert "1 of 2 planned calls not made" in out and "verdicts 1: 1 parsed, 0 errors" in out
    code, out, _ = run_cli(
        capsys, sqlite_url, "judge", run_id, *OPENAI, "--max-cost", "0", "--json"
    )
    assert code == 2 and judges.calls() == 1
    # The advice printed judges exactly the case the budget left (--retry-errors would pick
    # none: that case has no verdict, so no error verdict either).
    assert "judge the rest with --missing-only" in out_of_budget(capsys, sqlite_url, run_id)
    code, out, _ = run_cli(capsys, sqlite_url, "judge", run_id, *OPENAI, "--retry-errors")
    assert (code, judges.calls()) == (0, 1) and "0 cases (3 skipped)" in out
    code, out, _ = run_cli(capsys, sqlite_url, "judge", run_id, *OPENAI, "--missing-only")
    assert (code, judges.calls()) == (0, 2) and "1 cases (2 skipped)" in out


def out_of_budget(capsys: pytest.CaptureFixture[str], db: str, run_id: str) -> str:
    """A pass whose first call does not fit the budget: nothing is called, exit 1."""
    code, out, _ = run_cli(capsys, db, "judge", run_id, *OPENAI, "--max-cost", "0.000001")
    assert code == 1 and "made 0 of 2 planned calls" in out
    return out


def test_max_cost_refuses_a_judge_without_a_price(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    before = count(sqlite_url)
    code, _, err = run_cli(
        capsys, sqlite_url, "judge", run_id, "--judge", "openai:llama-3", "--max-cost", "1"
    )
    assert code == 2 and "max_cost: openai:llama-3 has no price" in err
    assert count(sqlite_url) == before and judges.calls() == 0


def test_a_dry_run_prints_each_planned_call_with_an_estimate(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    code, out, _ = run_cli(capsys, sqlite_url, "judge", run_id, *OPENAI, "--dry-run")
    assert code == 0 and judges.calls() == 0
    assert "— an estimate, not a measurement" in out
    lines = [line for line in out.splitlines() if line.startswith("  would judge ")]
    assert len(lines) == 2 and all("(estimate)" in line for line in lines)


def test_the_error_policy_is_said_beside_the_figures(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    assert judge_error_note(0, JudgeErrorPolicy.SCORE_ZERO) is None
    note = judge_error_note(2, JudgeErrorPolicy.SCORE_ZERO)
    assert (
        note is not None and note.text == "2 judge errors counted as 0 (judge_errors: score_zero)"
    )
    assert note.as_json() == {"judge_errors": 2, "policy": "score_zero", "note": note.text}
    one = judge_error_note(1, JudgeErrorPolicy.UNSCORED)
    assert one is not None and one.text == "1 judge error left unscored (judge_errors: unscored)"
    from fastapi.testclient import TestClient

    from evaledger.api.app import create_app
    from evaledger.api.bootstrap import Settings, build_services

    run_id = import_file(tmp_path, capsys, sqlite_url)
    judges.mode("malformed")
    run_cli(capsys, sqlite_url, "judge", run_id, *OPENAI)
    services = build_services(Settings(db=sqlite_url))
    try:
        with TestClient(create_app(services=services)) as client:
            page = client.get(f"/ui/runs/{run_id}")
            assert page.status_code == 200
            assert "2 judge errors counted as 0 (judge_errors: score_zero)" in page.text
    finally:
        services.close()
    sentence = "2 judge errors counted as 0 (judge_errors: score_zero)"
    _, out, _ = run_cli(capsys, sqlite_url, "show", run_id)
    assert sentence in out
    _, out, _ = run_cli(capsys, sqlite_url, "show", run_id, "--json")
    shown = orjson.loads(out)
    assert shown["judge_error_policy"] == {
        "judge_errors": 2,
        "policy": "score_zero",
        "note": sentence,
    }
    _, out, _ = run_cli(capsys, sqlite_url, "compare", run_id, run_id, "--no-fail-on-thresholds")
    assert f"baseline: {sentence}" in out and f"candidate: {sentence}" in out


def test_agreement_over_two_items_says_insufficient_data(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], judges: FakeJudges
) -> None:
    run_id = import_file(tmp_path, capsys, sqlite_url)
    code, _, err = run_cli(capsys, sqlite_url, "judge", run_id, "--panel")
    assert code == 0, err
    code, out, _ = run_cli(capsys, sqlite_url, "agreement", run_id)
    assert code == 0
    assert "alpha (ordinal) [95% CI]" in out and "insufficient data" in out
    assert "insufficient data (fewer than 10 items rated by two judges): tool_routing" in out
    code, out, _ = run_cli(capsys, sqlite_url, "agreement", run_id, "--json")
    measure = orjson.loads(out)["case_passed"]
    assert (measure["items"], measure["reliability"], measure["alpha_interval"]) == (
        2,
        "insufficient_data",
        None,
    )


def test_the_policy_note_counts_every_shape_of_case_score() -> None:
    from types import SimpleNamespace

    from evaledger.scoring.judge_errors import judge_error_policy_json, run_judge_error_note

    rows: list[Any] = [
        {"judge_error": True},
        {"judge_error": False},
        SimpleNamespace(judge_error=True),
    ]
    expected = {
        "judge_errors": 2,
        "policy": "score_zero",
        "note": "2 judge errors counted as 0 (judge_errors: score_zero)",
    }
    note = run_judge_error_note(rows, JudgeErrorPolicy.SCORE_ZERO)
    assert note is not None
    assert note.as_json() == expected
    assert judge_error_policy_json(2, JudgeErrorPolicy.SCORE_ZERO) == expected
    assert run_judge_error_note([{}], JudgeErrorPolicy.SCORE_ZERO) is None
    assert judge_error_policy_json(0, JudgeErrorPolicy.SCORE_ZERO) is None
