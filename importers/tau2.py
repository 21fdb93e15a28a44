"""τ²-bench results (`tau2 run --save-to NAME`): one JSON, or a folder of one file per simulation.

The current τ² format is `Results`: `{timestamp, info, tasks, simulations}` in one JSON, or the
directory format (`results.json` without `simulations`, one `simulations/<id>.json` per
simulation, listed in `simulation_index`). Every domain (airline, retail, telecom, banking,
mock) reads the same; a voice run (`mode: full_duplex`, audio-native agent) keeps its mode,
speech complexity and audio model as labels, and its transcript is the messages' text.

A simulation is a case (key `task-<task_id>`, repetition `trial`); its reward the named score
`reward` and the one expected outcome, passed as τ² counts a success (reward within 1e-6 of 1);
the run's `reward/mean` is τ²'s average reward and its pass^k τ²'s. A simulation ended by an
infrastructure error is an execution error (τ² leaves it out of its metrics; so does the mean).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import ijson
import orjson

from evaledger.domain.bundle import (
    BundleCase,
    BundleCaseStatus,
    BundleError,
    BundleNamedScores,
    BundleOutcomes,
    BundleRun,
)
from evaledger.domain.datasets import source_dataset
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
from evaledger.domain.input_limits import check_json_file
from evaledger.domain.spec import Reducers, RunConfig, ScorerInfo
from evaledger.importers.base import (
    Format,
    PeerImport,
    arguments_of,
    fail,
    finite,
    named_score,
    parse_time,
    text_of,
    usage_of,
)

REWARD_OUTCOME = (
    "The task is solved: τ²'s reward is 1 (database state, actions, communicated information "
    "and assertions as the task's reward basis requires)"
)
SUCCESS_TOLERANCE = 1e-6
"""τ²'s `is_successful`: a reward within 1e-6 of 1."""
SIMULATIONS_DIR = "simulations"
INFRASTRUCTURE_ERROR = "infrastructure_error"


def is_results_dir(path: Path) -> bool:
    """Whether a path is a τ² results folder (a `results.json` beside `simulations/`)."""
    return path.is_dir() and (path / "results.json").is_file()


def _header(path: Path) -> dict[str, Any]:
    """Everything of the results JSON but its simulations (streamed past, never held)."""
    check_json_file(path)
    header: dict[str, Any] = {}
    with path.open("rb") as f:
        try:
            for key, value in ijson.kvitems(f, "", use_float=True):
                if key != "simulations":
                    header[key] = value
        except ijson.common.JSONError as e:
            raise fail(path, f"τ² results file is cut off or not valid JSON ({e})") from None
    info = header.get("info")
    if not isinstance(info, Mapping) or not isinstance(header.get("tasks"), list):
        raise fail(path, "not τ² results (no info and tasks)", "info")
    return header


def _simulations(path: Path) -> Iterator[Mapping[str, Any]]:
    """The simulations of a results JSON, or of its `simulations/` folder, in τ²'s order."""
    folder = path.parent / SIMULATIONS_DIR
    if folder.is_dir():
        index = _header(path).get("simulation_index") or []
        names = [f"{e['id']}.json" for e in index if isinstance(e, Mapping) and "id" in e]
        for name in names or sorted(p.name for p in folder.glob("*.json")):
            file = folder / Path(name).name
            if not file.is_file():
                raise fail(path, f"simulation {name} is listed but missing", "simulation_index")
            check_json_file(file)
            try:
                sim = orjson.loads(file.read_bytes())
            except orjson.JSONDecodeError as e:
                raise fail(file, f"τ² simulation is cut off or not valid JSON ({e})") from None
            yield _checked(file, sim)
        return
    with path.open("rb") as f:
        try:
            for sim in ijson.items(f, "simulations.item", use_float=True):
                yield _checked(path, sim)
        except ijson.common.JSONError as e:
            raise fail(path, f"τ² results file is cut off or not valid JSON ({e})") from None


def _checked(path: Path, sim: Any) -> Mapping[str, Any]:
    if not isinstance(sim, Mapping) or "task_id" not in sim:
        raise fail(path, "a simulation without a task_id", "simulations.task_id")
    reward = _obj(sim.get("reward_info")).get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, int | float)):
        raise fail(path, f"reward {reward!r} is not a number", "simulations.reward_info.reward")
    return sim


def _key(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return f"tau2-{digest.hexdigest()[:16]}"


def open_tau2(path: Path) -> PeerImport:
    """The run of a τ² results JSON (or the folder that holds it)."""
    if is_results_dir(path):
        path = path / "results.json"
    header = _header(path)
    info: Mapping[str, Any] = header["info"]
    env = info.get("environment_info") or {}
    agent_info = info.get("agent_info") or {}
    user_info = info.get("user_info") or {}
    audio = info.get("audio_native_config") or {}
    domain = str(env.get("domain_name") or "unknown")
    llm = str(audio.get("model") or agent_info.get("llm") or agent_info.get("implementation"))
    provider, _, model = llm.rpartition("/") if "/" in llm else ("", "", llm)
    labels = {
        "source": "tau2-bench",
        "tau2.domain": domain,
        "tau2.agent": str(agent_info.get("implementation") or ""),
        "tau2.user": str(user_info.get("implementation") or ""),
        "tau2.user_llm": str(user_info.get("llm") or ""),
        "tau2.speech_complexity": str(info.get("speech_complexity") or ""),
        "tau2.audio_provider": str(audio.get("provider") or ""),
        "git.commit": str(info.get("git_commit") or ""),
    }
    trials = int(info.get("num_trials") or 1)
    tasks = {str(t.get("id")): t for t in header["tasks"] if isinstance(t, Mapping) and "id" in t}
    task_keys = [f"task-{task_id}" for task_id in tasks]
    run = BundleRun(
        key=_key(path),
        name=f"τ² {domain} {llm}",
        suite=SuiteRef(name=f"tau2-{domain}"),
        agent=AgentSnapshot(
            name=llm,
            provider=provider or str(audio.get("provider") or "") or None,
            model=model,
            system_prompt=text_of(env.get("policy")),
        ),
        labels={k: v for k, v in labels.items() if v},
        config=RunConfig(
            reducers=Reducers(k=max(1, trials)),
            scorers=(
                ScorerInfo(
                    name="reward",
                    score="reward",
                    semantics="tau-bench",
                    value_type="continuous",
                    metrics=("mean",),
                    passes_when="reward == 1 (τ²'s success: within 1e-6)",
                ),
            ),
        ),
        created_at=parse_time(header.get("timestamp")) or parse_time("1970-01-01T00:00:00Z"),
        # The domain's tasks this run was given, by their case keys (`_case`).
        dataset=source_dataset(f"tau2-{domain}" if env.get("domain_name") else "", task_keys),
    )
    return PeerImport(
        format=Format.TAU2,
        sources=(str(path),),
        run=run,
        cases=lambda: (
            _case(sim, tasks.get(str(sim["task_id"])) or {}, domain) for sim in _simulations(path)
        ),
    )


def _obj(value: Any) -> Mapping[str, Any]:
    """A value that should be an object, or an empty one."""
    return value if isinstance(value, Mapping) else {}


def _turn(m: Mapping[str, Any]) -> Turn | None:
    role = m.get("role")
    if role not in ("assistant", "user", "tool", "system"):
        return None
    seconds = m.get("generation_time_seconds")
    usage = _obj(m.get("usage"))
    return Turn(
        role=Role(role),
        content=text_of(m.get("content")),
        tool_calls=[
            ToolCall(
                id=c.get("id"), name=str(c["name"]), arguments=arguments_of(c.get("arguments"))
            )
            for c in m.get("tool_calls") or []
            if isinstance(c, Mapping) and c.get("name")
        ],
        tool_call_id=m.get("id") if role == "tool" else None,
        latency_ms=round(seconds * 1000, 3) if isinstance(seconds, int | float) else None,
        usage=usage_of(usage.get("prompt_tokens"), usage.get("completion_tokens")),
        cost_usd=m.get("cost") if isinstance(m.get("cost"), int | float) and m["cost"] else None,
    )


def _tick_messages(ticks: list[Any]) -> list[dict[str, Any]]:
    """A full-duplex (voice) simulation's messages from its ticks, as τ²'s `get_messages` does.

    Each tick's chunks and tool traffic, in time order; consecutive speech chunks of one speaker
    are one turn (their text joined), so a spoken turn reads as one message.
    """
    found: list[Mapping[str, Any]] = []
    for tick in ticks:
        if not isinstance(tick, Mapping):
            continue
        for name in ("agent_chunk", "user_chunk"):
            chunk = _obj(tick.get(name))
            if chunk and (chunk.get("content") or chunk.get("tool_calls")):
                found.append(chunk)
        for name in ("agent_tool_results", "user_tool_results"):
            found.extend(_obj(m) for m in tick.get(name) or [])
    turns: list[dict[str, Any]] = []
    for m in found:
        last = turns[-1] if turns else None
        speech = m.get("content") and not m.get("tool_calls") and m.get("role") != "tool"
        if last is not None and speech and last["role"] == m.get("role") and last["speech"]:
            last["content"] = f"{last['content']}{m['content']}"
        else:
            turns.append({**m, "speech": bool(speech)})
    return turns


def _why(reward: float, info: Mapping[str, Any]) -> str:
    parts = [f"reward {reward:g}"]
    if info.get("reward_breakdown"):
        parts.append(
            "breakdown " + ", ".join(f"{k} {v:g}" for k, v in info["reward_breakdown"].items())
        )
    db = info.get("db_check")
    if isinstance(db, Mapping):
        parts.append(f"database {'matches' if db.get('db_match') else 'does NOT match'}")
    for check in info.get("action_checks") or []:
        action = check.get("action") or {}
        mark = "done" if check.get("action_match") else "MISSING"
        parts.append(f"action {action.get('name')} {mark}")
    for check in (info.get("nl_assertions") or []) + (info.get("communicate_checks") or []):
        what = check.get("nl_assertion") or check.get("info")
        parts.append(f"{'met' if check.get('met') else 'NOT met'}: {what}")
    return "; ".join(parts)


def _case(sim: Mapping[str, Any], task: Mapping[str, Any], domain: str) -> BundleCase:
    description = _obj(task.get("description"))
    termination = str(sim.get("termination_reason") or "")
    reward_info = _obj(sim.get("reward_info"))
    reward = reward_info.get("reward")
    errored = termination == INFRASTRUCTURE_ERROR
    messages = sim.get("messages")
    if messages is None and isinstance(sim.get("ticks"), list):
        messages = _tick_messages(sim["ticks"])
    turns = [t for m in messages or [] if isinstance(m, Mapping) if (t := _turn(m))]
    case = BundleCase(
        test_case=TestCaseSnapshot(
            key=f"task-{sim['task_id']}",
            name=str(description.get("purpose") or f"task {sim['task_id']}"),
            expected_outcomes=[ExpectedOutcome(statement=REWARD_OUTCOME)],
            tags=[f"domain={domain}", *([f"mode={sim['mode']}"] if sim.get("mode") else [])],
        ),
        repetition=int(sim.get("trial") or 0),
        status=BundleCaseStatus.ERRORED if errored else BundleCaseStatus.COMPLETED,
        error=BundleError(message=f"τ² ended the simulation: {termination}", kind="tau2_error")
        if errored
        else None,
        transcript=[] if errored else turns,
        cost_usd=sim.get("agent_cost") if isinstance(sim.get("agent_cost"), int | float) else None,
        started_at=parse_time(sim.get("start_time")),
        ended_at=parse_time(sim.get("end_time")),
    )
    if errored or reward is None:
        return case
    why = _why(float(reward), reward_info)
    review = _obj(sim.get("review"))
    return case.model_copy(
        update={
            "named_scores": [
                BundleNamedScores(
                    scorer="tau2-bench",
                    scores=[named_score("reward", float(reward))],
                    explanation=why
                    + (f"; review: {review['summary']}" if review.get("summary") else ""),
                    metadata=finite(
                        {
                            "reward_info": reward_info,
                            "termination_reason": termination,
                            "simulation_id": sim.get("id"),
                            "duration": sim.get("duration"),
                            "user_cost": sim.get("user_cost"),
                            "mode": sim.get("mode"),
                        }
                    ),
                )
            ],
            "outcomes": [
                BundleOutcomes(
                    results=[
                        OutcomeResult(
                            statement=REWARD_OUTCOME,
                            passed=abs(float(reward) - 1.0) <= SUCCESS_TOLERANCE,
                            justification=why,
                        )
                    ]
                )
            ],
        }
    )
