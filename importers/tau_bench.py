"""tau-bench trajectories (a JSON list of `{task_id, trial, reward, info, traj}` records).

Task × trial becomes case × repetition; the reward is the case's expected-outcome result (and a
named score); the trajectory's system message is the agent's system prompt, the rest its
transcript with tool calls. The run's reducer `k` is the number of trials, so pass^k is reported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import ijson

from evaledger.domain.bundle import BundleCase, BundleNamedScores, BundleOutcomes, BundleRun
from evaledger.domain.events import (
    AgentSnapshot,
    ExpectedOutcome,
    OutcomeResult,
    Role,
    SuiteRef,
    TestCaseSnapshot,
    ToolCall,
    Turn,
)
from evaledger.domain.events.run import UNDATED
from evaledger.domain.spec import Reducers, RunConfig, ScorerInfo
from evaledger.importers.base import Format, PeerImport, arguments_of, fail, finite, named_score

REWARD_OUTCOME = (
    "The task is solved: the final database state matches the expected actions and every "
    "required output is given (reward 1)"
)
"""The one expected outcome tau-bench checks, as a statement; the reward decides it."""


def _records(path: Path) -> Iterator[Mapping[str, Any]]:
    with path.open("rb") as f:
        try:
            for i, record in enumerate(ijson.items(f, "item", use_float=True)):
                if not isinstance(record, Mapping) or "task_id" not in record:
                    raise fail(path, f"[{i}] is not a tau-bench record (task_id, trial, reward)")
                yield record
        except ijson.common.JSONError as e:
            raise fail(path, f"tau-bench file is cut off or not valid JSON ({e})") from None


def open_tau_bench(path: Path) -> PeerImport:
    """The run of one tau-bench trajectories file."""
    trials: set[int] = set()
    system_prompt: str | None = None
    for record in _records(path):
        trials.add(int(record.get("trial", 0)))
        if system_prompt is None:
            system_prompt = next(
                (m.get("content") for m in record.get("traj") or [] if m.get("role") == "system"),
                None,
            )
    run = BundleRun(
        key=f"tau-bench-{path.stem}",
        name=path.stem,
        suite=SuiteRef(name="tau-bench"),
        agent=AgentSnapshot(name=path.stem, system_prompt=system_prompt),
        labels={"source": "tau-bench"},
        config=RunConfig(
            reducers=Reducers(k=max(1, len(trials))),
            scorers=(
                ScorerInfo(
                    name="reward",
                    score="reward",
                    semantics="tau-bench",
                    value_type="binary",
                    metrics=("mean",),
                    passes_when="reward == 1 (the task is solved)",
                ),
            ),
        ),
        created_at=UNDATED,
    )
    return PeerImport(
        format=Format.TAU_BENCH,
        sources=(str(path),),
        run=run,
        cases=lambda: (_case(r) for r in _records(path)),
    )


def _turns(traj: list[Mapping[str, Any]]) -> list[Turn]:
    turns = []
    for m in traj:
        if m.get("role") == "system":
            continue
        turns.append(
            Turn(
                role=Role(m["role"]),
                content=m.get("content"),
                tool_calls=[
                    ToolCall(
                        id=c.get("id"),
                        name=c["function"]["name"],
                        arguments=arguments_of(c["function"].get("arguments")),
                    )
                    for c in m.get("tool_calls") or []
                ],
                tool_call_id=m.get("tool_call_id"),
            )
        )
    return turns


def _case(record: Mapping[str, Any]) -> BundleCase:
    info = record.get("info") or {}
    task = info.get("task") or {}
    reward = float(record.get("reward") or 0.0)
    reward_info = info.get("reward_info") or {}
    actions = ", ".join(
        f"{a.get('name')}({', '.join(f'{k}={v!r}' for k, v in (a.get('kwargs') or {}).items())})"
        for a in task.get("actions") or []
    )
    why = f"reward {reward:g}; expected actions: {actions or 'none'}"
    if task.get("outputs"):
        why += f"; required outputs: {', '.join(map(str, task['outputs']))}"
    return BundleCase(
        test_case=TestCaseSnapshot(
            key=f"task-{record['task_id']}",
            name=f"task {record['task_id']} ({task.get('user_id', '?')})",
            expected_outcomes=[ExpectedOutcome(statement=REWARD_OUTCOME)],
        ),
        repetition=int(record.get("trial", 0)),
        transcript=_turns(record.get("traj") or []),
        named_scores=[
            BundleNamedScores(
                scorer="tau-bench",
                scores=[named_score("reward", reward)],
                explanation=why,
                metadata=finite(
                    {
                        "instruction": task.get("instruction"),
                        "reward_info": reward_info,
                        "user_cost": info.get("user_cost"),
                    }
                ),
            )
        ],
        outcomes=[
            BundleOutcomes(
                results=[
                    OutcomeResult(statement=REWARD_OUTCOME, passed=reward >= 1.0, justification=why)
                ]
            )
        ],
    )
