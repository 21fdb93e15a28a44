"""Connexity runs as its API returns them, with its test-case files as the cases' snapshots.

A run file is `{"run": RunPublic, "results": [TestCaseResultPublic] | {"data": [...], "count"},
"test_cases": [TestCasePublic]?}` (GET /runs/{id} beside GET /runs/{id}/results). Test-case files
(`test-cases/*.json` in either schema revision, or a TestCasesExport) give the snapshot of the
results whose test case they name: by `id`, else by `name` through the run file's `test_cases`.
Verdicts keep their 0-5 metric scores, failure codes and turns; expected-outcome results keep
their justifications.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import ijson
import orjson

from evaledger.domain.bundle import (
    BundleCase,
    BundleCaseStatus,
    BundleError,
    BundleRun,
    BundleRunStatus,
    BundleVerdict,
)
from evaledger.domain.events import (
    AgentSnapshot,
    JudgeIdentity,
    MetricScore,
    OutcomeResult,
    Role,
    SuiteRef,
    TestCaseSnapshot,
    ToolCall,
    Turn,
)
from evaledger.domain.spec import JudgeConfig, MetricSelection, RunConfig
from evaledger.importers.base import (
    Format,
    PeerImport,
    arguments_of,
    fail,
    parse_time,
    usage_of,
)

_RUN_STATUS = {
    "completed": BundleRunStatus.COMPLETED,
    "cancelled": BundleRunStatus.CANCELED,
    "failed": BundleRunStatus.FAILED,
    "running": BundleRunStatus.RUNNING,
    "pending": BundleRunStatus.CREATED,
}
_BINARY_PASS = 5
"""Connexity writes a binary metric as score 5 (pass) or 0 (fail)."""


def is_test_case(data: Any) -> bool:
    """A Connexity test case (current or older revision) or a TestCasesExport."""
    if not isinstance(data, Mapping):
        return False
    if "run" in data:
        return False
    return "test_cases" in data or ("name" in data and "expected_outcomes" in data)


def open_connexity(run_file: Path, test_case_files: Sequence[Path]) -> PeerImport:
    """One run file with any number of test-case files."""
    run_data = _run_header(run_file)
    named = _test_cases(test_case_files)
    listed = {str(t["id"]): t for t in run_data.get("test_cases") or [] if "id" in t}
    snapshots: dict[str, Mapping[str, Any]] = {}
    for case_id, listing in listed.items():
        snapshots[case_id] = named.get(case_id) or named.get(str(listing.get("name"))) or listing
    for case in named.values():
        if "id" in case:
            snapshots.setdefault(str(case["id"]), case)
    unused = [n for n, c in named.items() if c not in snapshots.values()]
    if unused:
        raise fail(
            test_case_files[0],
            f"test case {unused[0]!r} is not a test case of run {run_data['run'].get('id')} "
            "(give the run file's test_cases with ids and names)",
            field="test_cases",
        )
    r = run_data["run"]
    config = r.get("config") or {}
    judge = config.get("judge") or {}
    status = _RUN_STATUS.get(str(r.get("status")), BundleRunStatus.RUNNING)
    created = parse_time(r.get("created_at"))
    if created is None:
        raise fail(run_file, "run.created_at is missing", "run.created_at")
    run = BundleRun(
        key=f"connexity-{r['id']}",
        name=r.get("name"),
        suite=SuiteRef(
            name=f"connexity eval config {r.get('eval_config_id')}",
            version=r.get("eval_config_version"),
        ),
        agent=AgentSnapshot(
            name=str(r.get("agent_id") or "agent"),
            version=None if r.get("agent_version") is None else str(r["agent_version"]),
            provider=r.get("agent_provider"),
            model=r.get("agent_model"),
            system_prompt=r.get("agent_system_prompt"),
        ),
        labels={"source": "connexity", "connexity.run_id": str(r["id"])}
        | ({"baseline": "true"} if r.get("is_baseline") else {}),
        config=RunConfig(
            metrics_pass_threshold=config.get("metrics_pass_threshold", 80.0),
            cases_pass_threshold=config.get("cases_pass_threshold", 100.0),
            judge=JudgeConfig(
                metrics=[MetricSelection(**m) for m in judge.get("metrics") or []] or None,
                pass_threshold=judge.get("pass_threshold", 75.0),
                provider=judge.get("provider"),
                model=judge.get("model"),
            ),
        ),
        status=status,
        reason="cancelled in Connexity" if status is BundleRunStatus.CANCELED else None,
        created_at=created,
        completed_at=parse_time(r.get("completed_at")),
    )
    if status is BundleRunStatus.FAILED:
        run = run.model_copy(update={"reason": "failed in Connexity"})
    return PeerImport(
        format=Format.CONNEXITY,
        sources=(str(run_file), *map(str, test_case_files)),
        run=run,
        cases=lambda: (_case(res, snapshots) for res in _results(run_file)),
    )


def _run_header(path: Path) -> dict[str, Any]:
    """The run and the test-case listing (not the results, which are streamed)."""
    data: dict[str, Any] = {}
    try:
        with path.open("rb") as f:
            data["run"] = next(ijson.items(f, "run", use_float=True), None)
        with path.open("rb") as f:
            data["test_cases"] = next(ijson.items(f, "test_cases", use_float=True), None)
    except ijson.common.JSONError as e:
        raise fail(path, f"Connexity run file is cut off or not valid JSON ({e})") from None
    if not isinstance(data["run"], Mapping) or "id" not in data["run"]:
        raise fail(path, "detected a Connexity run file without run.id", "run.id")
    return data


def _results(path: Path) -> Iterator[Mapping[str, Any]]:
    with path.open("rb") as f:
        try:
            for prefix, event, _ in ijson.parse(f):
                if prefix == "results" and event in ("start_array", "start_map"):
                    break
            else:
                return
        except ijson.common.JSONError as e:
            raise fail(path, f"Connexity run file is cut off or not valid JSON ({e})") from None
    # A bare list (`results`) or a paginated TestCaseResultsPublic (`results.data`).
    item = "results.item" if event == "start_array" else "results.data.item"
    with path.open("rb") as f:
        try:
            yield from ijson.items(f, item, use_float=True)
        except ijson.common.JSONError as e:
            raise fail(path, f"Connexity run file is cut off or not valid JSON ({e})") from None


def _test_cases(paths: Sequence[Path]) -> dict[str, Mapping[str, Any]]:
    """Test cases by id (when they have one) and by name."""
    found: dict[str, Mapping[str, Any]] = {}
    for path in paths:
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as e:
            raise fail(path, f"test case file is not valid JSON ({e})") from None
        if not is_test_case(data):
            raise fail(path, "not a Connexity test case (name, expected_outcomes)")
        for case in data.get("test_cases") or [data]:
            found[str(case.get("id") or case["name"])] = case
    return found


def _outcome_statements(case: Mapping[str, Any]) -> list[str]:
    outcomes = case.get("expected_outcomes") or []
    if isinstance(outcomes, Mapping):
        # The legacy schema: a map of outcome → expected boolean.
        return [str(k) for k, v in outcomes.items() if v]
    return [str(o) for o in outcomes]


def _snapshot(test_case_id: str, case: Mapping[str, Any] | None) -> TestCaseSnapshot:
    if case is None:
        return TestCaseSnapshot(key=test_case_id)
    tags = [str(t) for t in case.get("tags") or []]
    if case.get("difficulty"):
        tags.append(f"difficulty:{case['difficulty']}")
    return TestCaseSnapshot(
        key=test_case_id,
        name=case.get("name"),
        expected_outcomes=_outcome_statements(case),
        evaluation_criteria_override=case.get("evaluation_criteria_override"),
        tags=tags,
    )


def _turn(t: Mapping[str, Any]) -> Turn:
    calls = [
        ToolCall(
            id=c.get("id"),
            name=(c.get("function") or {}).get("name") or "tool",
            arguments=arguments_of((c.get("function") or {}).get("arguments")),
        )
        for c in t.get("tool_calls") or []
    ]
    return Turn(
        role=Role(t["role"]),
        content=t.get("content"),
        tool_calls=calls,
        tool_call_id=t.get("tool_call_id"),
        latency_ms=t.get("latency_ms"),
        metrics={"token_count": float(t["token_count"])}
        if t.get("token_count") is not None
        else {},
    )


def _tokens(usage: Any) -> Any:
    if not isinstance(usage, Mapping):
        return None
    return usage_of(
        usage.get("prompt_tokens", usage.get("input_tokens")),
        usage.get("completion_tokens", usage.get("output_tokens")),
    )


def _verdict(v: Mapping[str, Any]) -> BundleVerdict:
    scores = []
    for m in v.get("metric_scores") or []:
        binary = bool(m.get("is_binary"))
        scores.append(
            MetricScore(
                metric=m["metric"],
                score=None if binary else int(m["score"]),
                passed=(m["score"] == _BINARY_PASS) if binary else None,
                justification=m.get("justification"),
                failure_code=m.get("failure_code") or None,
                turns=list(m.get("turns") or []),
            )
        )
    return BundleVerdict(
        judge=JudgeIdentity(provider=v.get("judge_provider"), model=v.get("judge_model")),
        metric_scores=scores,
        expected_outcomes=[
            OutcomeResult(
                statement=o["statement"], passed=o["passed"], justification=o.get("justification")
            )
            for o in v.get("expected_outcome_results") or []
        ],
        raw_output=v.get("raw_judge_output"),
        latency_ms=v.get("judge_latency_ms"),
        usage=_tokens(v.get("judge_token_usage")),
        cost_usd=v.get("judge_cost_usd"),
    )


def _case(result: Mapping[str, Any], snapshots: Mapping[str, Mapping[str, Any]]) -> BundleCase:
    tc_id = str(result["test_case_id"])
    error = result.get("error_message")
    transcript = [_turn(t) for t in result.get("transcript") or []]
    verdict = result.get("verdict")
    return BundleCase(
        test_case=_snapshot(tc_id, snapshots.get(tc_id)),
        repetition=int(result.get("repetition_index") or 0),
        status=BundleCaseStatus.ERRORED if error else BundleCaseStatus.COMPLETED,
        error=BundleError(message=error, kind="connexity_error") if error else None,
        transcript=transcript,
        usage=_tokens(result.get("agent_token_usage")),
        cost_usd=result.get("agent_cost_usd"),
        started_at=parse_time(result.get("started_at")),
        ended_at=parse_time(result.get("completed_at")),
        verdicts=[_verdict(verdict)] if isinstance(verdict, Mapping) else [],
    )
