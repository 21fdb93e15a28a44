"""Shared pieces of the benchmarks: a deterministic bundle generator, timers, raw baselines, tables.

Every benchmark prints each figure beside a *physical baseline* measured in the same run (raw
`sqlite3`/psycopg writes of the same bytes, raw reads + orjson decode of the same rows), so a
figure reads as "this fraction of what the hardware and the driver can do", not as an absolute
that drifts with the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import os
import pstats
import random
import resource
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import orjson

from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context, Ledger

T = TypeVar("T")

FORMAT = "evaledger.run-bundle/1"
METRICS = (
    "tool_routing",
    "parameter_extraction",
    "result_interpretation",
    "grounding_fidelity",
    "instruction_compliance",
    "information_gathering",
    "conversation_management",
    "response_delivery",
)
FAILURE_CODES = {
    "tool_routing": ("wrong_tool_selected", "missing_tool_call", "redundant_tool_call"),
    "parameter_extraction": ("wrong_parameter", "fabricated_parameter", "missing_parameter"),
    "result_interpretation": ("misread_tool_result", "ignored_tool_error"),
    "grounding_fidelity": ("hallucinated_fact", "contradicts_tool_result"),
    "instruction_compliance": ("policy_violation", "missed_detail"),
    "information_gathering": ("missing_verification", "asked_known_information"),
    "conversation_management": ("lost_context", "repeated_question", "abrupt_ending"),
    "response_delivery": ("too_verbose", "unclear_answer", "wrong_tone"),
}
JUSTIFICATIONS = {
    5: "The agent {did} exactly as the policy requires, with no unnecessary steps.",
    4: "The agent {did} correctly, with one minor deviation that did not affect the outcome.",
    3: "The agent {did} in the end, but only after a detour at turn {turn}.",
    2: "The agent {did} only partly; the step at turn {turn} was wrong and confused the user.",
    1: "The agent barely {did}; most of what it said at turn {turn} was not grounded.",
    0: "The agent never {did}, and the answer at turn {turn} contradicts the tool result.",
}
METRIC_ACTIONS = {
    "tool_routing": "called the right tools in the right order",
    "parameter_extraction": "passed the order number and amount taken from the user",
    "result_interpretation": "read the tool result and acted on it",
    "grounding_fidelity": "kept to facts from the tool results",
    "instruction_compliance": "followed the refund and verification policy",
    "information_gathering": "verified the customer's identity and order",
    "conversation_management": "kept the conversation on track",
    "response_delivery": "answered clearly and concisely",
}
TOOLS = (
    ("lookup_order", "Fetch an order by its number.", ("order_id",)),
    ("issue_refund", "Refund an order, fully or partly.", ("order_id", "amount_usd")),
    ("change_address", "Change the delivery address of an open order.", ("order_id", "address")),
    ("find_flights", "Search flights between two airports on a date.", ("origin", "dest", "date")),
    ("transfer_to_human", "Hand the conversation to a human agent.", ("summary",)),
)
USER_LINES = (
    "Hi, my order {order} was supposed to arrive on {day} and it is still not here.",
    "I want my {amount} dollars back for order {order}, now.",
    "Can you change the delivery address of {order} to {street}?",
    "I need a flight from {origin} to {dest} on {day}, preferably in the morning.",
    "That does not sound right, the tracking page says it left the warehouse {day}.",
    "Yes please, go ahead.",
    "No, I would rather speak to a person about this.",
    "How long will the refund take to show up on my card?",
    "Actually, can you also check order {order2}?",
    "Thanks, that is all for today.",
)
ASSISTANT_LINES = (
    "I am sorry about the delay. Order {order} is {status}; I can refund the {fee} dollar "
    "shipping fee right now. Would you like that?",
    "I checked order {order}: it shipped on {day} and should arrive within two business days.",
    "Done, the {amount} dollars are on their way back to you and should appear in 3 to 5 days.",
    "Refunds above 100 dollars need a supervisor's approval, so I am transferring you now.",
    "I found three flights from {origin} to {dest} on {day}; the earliest leaves at 07:{minute}.",
    "The delivery address of {order} is now {street}. Is there anything else I can help with?",
    "Could you confirm the email address on the account before I make that change?",
    "I understand. I have added a note to the order and a colleague will follow up by email.",
)
CLAIMS = (
    "Order {order} is delayed.",
    "The shipping fee is {fee} dollars.",
    "{amount} dollars were refunded.",
    "The refund takes 3 to 5 business days.",
    "The earliest flight leaves at 07:{minute}.",
    "Order {order} shipped on {day}.",
)
OUTCOMES = (
    ("Agent MUST look up the order before offering a refund", "blocker"),
    ("Agent offers a refund of the shipping fee", "medium"),
    ("Agent MUST NOT issue a refund above 100 USD without a supervisor", "blocker"),
    ("Agent confirms the new address back to the user", "low"),
    ("Agent asks for verification before changing account data", "blocker"),
)
PERSONAS = (
    "polite customer in a hurry",
    "angry customer",
    "confused elderly customer",
    "terse power user",
    "non-native speaker",
    None,
)
CONFIGURATIONS = ("voice-default", "voice-low-latency", "chat")
SCENARIOS = ("refunds", "order-status", "address-change", "flights", "escalation")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "the 12th", "last week")
CITIES = ("SFO", "JFK", "ORD", "LHR", "CDG", "SEA", "BOS", "MIA")
STREETS = ("12 Elm Street", "4 Harbour Road", "221 Baker Street", "9 Rue Lafayette")
STATUSES = ("delayed", "in transit", "held at customs", "out for delivery")
RUBRIC = (
    "## Scoring Rules\nYou are an impartial evaluator of a customer-service agent. Score every "
    "metric from 0 (critical fail) to 5 (excellent) using the rubric below, cite the turns that "
    "justify a score below 4, and give a failure code from the list when a metric fails.\n"
    + "\n".join(f"### {m}\n5: flawless. 3: acceptable with issues. 0: missing." for m in METRICS)
)
SYSTEM_PROMPT = (
    "You are Ava, the voice assistant of Northwind Outfitters. Verify the order number before "
    "discussing an order. Never promise refunds above 100 USD without a supervisor. Keep answers "
    "under three sentences and confirm every change back to the customer."
)
BASE_TIME = datetime(2026, 1, 5, 2, 0, tzinfo=UTC)


def _slots(rng: random.Random) -> dict[str, str]:
    amount = rng.choice((12, 35, 60, 99, 140, 240, 480))
    return {
        "order": f"N-{rng.randrange(1000, 99999)}",
        "order2": f"N-{rng.randrange(1000, 99999)}",
        "day": rng.choice(DAYS),
        "amount": str(amount),
        "fee": f"{rng.choice((4.5, 7.5, 9.99, 12.0)):.2f}",
        "street": rng.choice(STREETS),
        "origin": rng.choice(CITIES),
        "dest": rng.choice(CITIES),
        "status": rng.choice(STATUSES),
        "minute": f"{rng.randrange(60):02d}",
    }


def _transcript(rng: random.Random, slots: dict[str, str], n_turns: int) -> list[dict[str, Any]]:
    """user → assistant (tool call) → tool → assistant (text) → user ..., `n_turns` long."""
    turns: list[dict[str, Any]] = []
    call = 0
    while len(turns) < n_turns:
        turns.append({"role": "user", "content": rng.choice(USER_LINES).format(**slots)})
        if len(turns) >= n_turns:
            break
        if rng.random() < 0.7 and len(turns) + 2 < n_turns:
            call += 1
            name, _, params = TOOLS[rng.randrange(len(TOOLS))]
            args: dict[str, Any] = {p: slots.get(p.split("_")[0], slots["order"]) for p in params}
            turns.append(
                {
                    "role": "assistant",
                    "content": None,
                    "latency_ms": rng.randrange(250, 1400),
                    "tool_calls": [{"id": f"call_{call}", "name": name, "arguments": args}],
                    "usage": {
                        "prompt_tokens": rng.randrange(800, 3000),
                        "completion_tokens": rng.randrange(10, 60),
                    },
                }
            )
            result = {"status": slots["status"], "order_id": slots["order"], "ok": True}
            turns.append(
                {"role": "tool", "tool_call_id": f"call_{call}", "content": orjson.dumps(result)}
            )
        turns.append(
            {
                "role": "assistant",
                "content": rng.choice(ASSISTANT_LINES).format(**slots),
                "latency_ms": rng.randrange(300, 2500),
                "usage": {
                    "prompt_tokens": rng.randrange(800, 3000),
                    "completion_tokens": rng.randrange(20, 160),
                },
                "cost_usd": round(rng.uniform(0.0002, 0.004), 6),
            }
        )
    for t in turns:
        if isinstance(t.get("content"), bytes):
            t["content"] = t["content"].decode()
    return turns[:n_turns]


def _render_prompt(turns: list[dict[str, Any]], criteria: str | None) -> str:
    lines = [RUBRIC, "\n## Conversation"]
    for i, t in enumerate(turns):
        text = t.get("content")
        if text is None and t.get("tool_calls"):
            text = "calls " + ", ".join(c["name"] for c in t["tool_calls"])
        lines.append(f"[{i}] {t['role']}: {text}")
    if criteria:
        lines.append(f"\n## Additional criteria\n{criteria}")
    lines.append("\nAnswer with one JSON object: {metric: {score, justification, failure_code}}.")
    return "\n".join(lines)


def _verdict(
    rng: random.Random,
    turns: list[dict[str, Any]],
    outcomes: list[tuple[str, str]],
    criteria: str | None,
    quality: float,
) -> dict[str, Any]:
    judge = {"provider": "anthropic", "model": "claude-sonnet-4-5", "temperature": 0.0}
    prompt = _render_prompt(turns, criteria)
    usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": rng.randrange(400, 900)}
    common: dict[str, Any] = {
        "judge": judge,
        "template_id": "connexity-judge/v3",
        "template_hash": hashlib.sha256(RUBRIC.encode()).hexdigest(),
        "prompt": prompt,
        "latency_ms": rng.randrange(1200, 9000),
        "usage": usage,
        "cost_usd": round(usage["prompt_tokens"] * 3e-6 + usage["completion_tokens"] * 1.5e-5, 6),
    }
    if rng.random() < 0.01:  # a judge error verdict: unparseable reply
        return {
            **common,
            "raw_output": '{"tool_routing": {"score": 4, "justification": "The agent cal',
            "parse_status": "unparseable",
            "error": "judge reply is not valid JSON (truncated at 64 characters)",
        }
    scores = []
    reply: dict[str, Any] = {}
    for m in METRICS:
        score = max(0, min(5, round(rng.gauss(quality, 1.1))))
        turn = rng.randrange(len(turns))
        justification = JUSTIFICATIONS[score].format(did=METRIC_ACTIONS[m], turn=turn)
        failure = rng.choice(FAILURE_CODES[m]) if score <= 2 else None
        cited = sorted({turn, rng.randrange(len(turns))}) if score <= 3 else []
        scores.append(
            {
                "metric": m,
                "score": score,
                "justification": justification,
                "failure_code": failure,
                "turns": cited,
            }
        )
        reply[m] = {"score": score, "justification": justification, "failure_code": failure}
    results = [
        {
            "statement": statement,
            "passed": rng.random() < 0.8,
            "justification": f"Checked against turn {rng.randrange(len(turns))}.",
        }
        for statement, _ in outcomes
    ]
    return {
        **common,
        "raw_output": orjson.dumps(reply).decode(),
        "metric_scores": scores,
        "expected_outcomes": results,
    }


def generate_bundle(
    cases: int, seed: int = 0, run_key: str = "bench-run", project: str = "bench"
) -> dict[str, Any]:
    """A deterministic, realistic run bundle (plain JSON data) with `cases` cases.

    Per case: ~12 turns (user / assistant with tool calls and latency / tool), one verdict with
    the 8 default metrics (integer scores, one-sentence justifications, failure codes, valid
    turn indices), the rendered judge prompt and raw reply; expected outcomes on ~30%, claims on
    ~40%, structural checks on ~20%, separate outcome evaluations on ~10%, ~1% judge error
    verdicts and ~1% errored executions. Test cases run twice (repetitions 0 and 1).
    """
    bundle = bundle_header(cases, run_key, project)
    bundle["cases"] = list(generate_cases(cases, seed, run_key))
    return bundle


def write_bundle(
    path: Path, cases: int, seed: int = 0, run_key: str = "bench-run", project: str = "bench"
) -> int:
    """`generate_bundle` written to `path` case by case (flat memory at any size); its bytes."""
    head = orjson.dumps(bundle_header(cases, run_key, project) | {"cases": []})
    assert head.endswith(b"[]}")
    size = 0
    with path.open("wb") as f:
        size += f.write(head[:-3] + b"[")
        for i, case in enumerate(generate_cases(cases, seed, run_key)):
            size += f.write((b"," if i else b"") + orjson.dumps(case))
        size += f.write(b"]}")
    return size


def generate_cases(cases: int, seed: int, run_key: str) -> Iterator[dict[str, Any]]:
    """The cases of `generate_bundle`, one at a time."""
    rng = random.Random(f"{seed}:{run_key}")
    for i in range(cases):
        slots = _slots(rng)
        scenario = SCENARIOS[(i // 2) % len(SCENARIOS)]
        outcomes = rng.sample(OUTCOMES, rng.randint(1, 3)) if rng.random() < 0.3 else []
        criteria = "Weigh verification of the order number heavily." if i % 7 == 0 else None
        test_case = {
            "key": f"{scenario}-{i // 2:06d}",
            "name": f"{scenario.replace('-', ' ').capitalize()} #{i // 2}",
            "expected_outcomes": [
                s if sev == "blocker" else {"statement": s, "severity": sev} for s, sev in outcomes
            ],
            "evaluation_criteria_override": criteria,
            "tags": [scenario, rng.choice(("happy-path", "edge-case", "policy"))],
            "persona": PERSONAS[(i // 2) % len(PERSONAS)],
            "configuration": CONFIGURATIONS[(i // 2) % len(CONFIGURATIONS)],
            "scenario": scenario,
        }
        started = BASE_TIME + timedelta(seconds=i * 3)
        case: dict[str, Any] = {"test_case": test_case, "repetition": i % 2}
        if rng.random() < 0.01:
            partial = _transcript(rng, slots, rng.randint(1, 3))
            case.update(
                status="errored",
                error={"message": "Agent endpoint timed out after 120000 ms", "kind": "timeout"},
                transcript=partial,
                started_at=started.isoformat(),
            )
            yield case
            continue
        turns = _transcript(rng, slots, rng.randint(10, 14))
        quality = rng.choice((4.4, 4.0, 3.5, 2.5))
        prompt_tokens = sum(t.get("usage", {}).get("prompt_tokens", 0) for t in turns)
        completion_tokens = sum(t.get("usage", {}).get("completion_tokens", 0) for t in turns)
        case.update(
            status="completed",
            transcript=turns,
            usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
            cost_usd=round(prompt_tokens * 4e-7 + completion_tokens * 1.6e-6, 6),
            started_at=started.isoformat(),
            ended_at=(started + timedelta(seconds=rng.randrange(20, 240))).isoformat(),
            verdicts=[_verdict(rng, turns, outcomes, criteria, quality)],
        )
        if outcomes and rng.random() < 0.3:
            case["outcomes"] = [
                {
                    "results": [
                        {"statement": s, "passed": rng.random() < 0.85, "severity": sev}
                        for s, sev in outcomes
                    ],
                    "judge": {"kind": "human", "provider": None, "model": None},
                }
            ]
        if rng.random() < 0.4:
            case["claims"] = [
                {
                    "claim": rng.choice(CLAIMS).format(**slots),
                    "support": rng.choices(("supported", "unsupported", "contradicted"), (8, 1, 1))[
                        0
                    ],
                    "source": "tool:lookup_order",
                }
                for _ in range(rng.randint(1, 5))
            ]
        if rng.random() < 0.2:
            case["checks"] = [
                {
                    "check": "tool_called_before_answer",
                    "status": rng.choices(("passed", "failed", "inconclusive"), (7, 2, 1))[0],
                    "evidence": f"lookup_order at turn {rng.randrange(len(turns))}",
                }
            ]
        yield case


def bundle_header(cases: int, run_key: str, project: str) -> dict[str, Any]:
    """The bundle without its cases (`cases` sizes the run's timestamps)."""
    tools = [
        {
            "name": name,
            "description": desc,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string"} for p in params},
                "required": list(params),
            },
        }
        for name, desc, params in TOOLS
    ]
    created = BASE_TIME - timedelta(minutes=5)
    return {
        "format": FORMAT,
        "run": {
            "key": run_key,
            "name": f"Northwind support agent, benchmark run {run_key}",
            "project": project,
            "suite": {"name": "northwind-support-bench", "version": 1},
            "agent": {
                "name": "northwind-support",
                "version": "12",
                "provider": "openai",
                "model": "gpt-4.1-mini",
                "system_prompt": SYSTEM_PROMPT,
                "tools": tools,
            },
            "labels": {"git_sha": hashlib.sha1(run_key.encode()).hexdigest()[:7]},
            "config": {
                "metrics_pass_threshold": 80.0,
                "cases_pass_threshold": 100.0,
                "judge": {"metrics": None, "pass_threshold": 75.0, "provider": "anthropic"},
            },
            "status": "completed",
            "created_at": created.isoformat(),
            "completed_at": (BASE_TIME + timedelta(seconds=cases * 3 + 60)).isoformat(),
        },
    }


# ---------------------------------------------------------------------------------------------
# timing and memory


@dataclass
class Timer:
    """Wall-clock seconds of a `with` block."""

    seconds: float = 0.0
    _start: float = 0.0

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """Run `fn` once; its result and its wall-clock seconds."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def cpu_timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """Run `fn` once; its result, wall-clock seconds and this process's CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def machine_note() -> str:
    """CPUs and load average: other processes on the machine skew wall-clock figures."""
    one, five, fifteen = os.getloadavg()
    return (
        f"{os.cpu_count()} CPUs, load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min)"
    )


def median_seconds(fn: Callable[[], object], repeat: int) -> tuple[float, list[float]]:
    """Median wall-clock seconds of `repeat` runs of `fn`, with every run's time."""
    times = []
    for _ in range(repeat):
        _, s = timed(fn)
        times.append(s)
    ordered = sorted(times)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return median, times


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (MB).

    Linux `VmHWM` when available: unlike `ru_maxrss`, it is not inherited from the parent across
    fork + exec, so a child process reports its own peak.
    """
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def progress(message: str) -> None:
    """A progress line on stderr (tables go to stdout)."""
    print(f"  .. {message}", file=sys.stderr, flush=True)


_MISSING = object()


class PhaseTimer:
    """Exclusive wall time of wrapped functions (nested wrapped calls are subtracted)."""

    def __init__(self) -> None:
        self.exclusive: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[float] = []
        self._undo: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, attr: str, label: str) -> None:
        """Replace `owner.attr` by a timing wrapper (undone by `restore`)."""
        original = getattr(owner, attr)
        stack = self._stack
        exclusive = self.exclusive
        calls = self.calls
        exclusive.setdefault(label, 0.0)
        calls.setdefault(label, 0)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            stack.append(0.0)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                children = stack.pop()
                exclusive[label] += elapsed - children
                calls[label] += 1
                if stack:
                    stack[-1] += elapsed

        self._undo.append((owner, attr, vars(owner).get(attr, _MISSING)))
        setattr(owner, attr, wrapper)

    def restore(self) -> None:
        """Undo every wrap."""
        for owner, attr, raw in reversed(self._undo):
            if raw is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, raw)
        self._undo.clear()


@dataclass(frozen=True)
class ProfileLine:
    """One function of a cProfile run."""

    name: str
    calls: str
    tottime: float
    cumtime: float


def profile(fn: Callable[[], T]) -> tuple[T, float, list[ProfileLine]]:
    """Run `fn` under cProfile: result, total profiled seconds, every function's figures."""
    prof = cProfile.Profile()
    result = prof.runcall(fn)
    stats = pstats.Stats(prof).get_stats_profile()
    root = str(Path(__file__).resolve().parents[1])
    lines = []
    for name, fp in stats.func_profiles.items():
        where = fp.file_name.replace(root + "/", "")
        if "site-packages/" in where:
            where = where.split("site-packages/", 1)[1]
        label = f"{where}:{fp.line_number}({name})" if fp.line_number else name
        lines.append(ProfileLine(label, fp.ncalls, fp.tottime, fp.cumtime))
    return result, stats.total_tt, lines


def print_profile(title: str, total: float, lines: list[ProfileLine], top: int) -> None:
    """Top functions by cumulative time (wrappers at ~100% left out) and by own time."""
    cum = [x for x in lines if x.cumtime < 0.985 * total]
    cum.sort(key=lambda x: x.cumtime, reverse=True)
    rows = [[x.name, x.calls, f"{x.cumtime:.3f}", pct(x.cumtime, total)] for x in cum[:top]]
    print_table(
        f"{title}: top {top} by cumulative time", ["function", "calls", "cum s", "cum %"], rows
    )
    own = sorted(lines, key=lambda x: x.tottime, reverse=True)
    rows = [[x.name, x.calls, f"{x.tottime:.3f}", pct(x.tottime, total)] for x in own[:top]]
    print_table(f"{title}: top {top} by own time", ["function", "calls", "own s", "own %"], rows)


# ---------------------------------------------------------------------------------------------
# formatting


def pct(part: float, whole: float) -> str:
    """`part` as a percentage of `whole`."""
    return f"{100 * part / whole:.1f}%" if whole else "-"


def ratio(ours: float, raw: float) -> str:
    """Our rate over the baseline's, as a fraction and a percentage."""
    return f"{ours / raw:.3f} ({100 * ours / raw:.1f}%)" if raw else "-"


def num(x: float, digits: int = 0) -> str:
    """A number with thousands separators."""
    return f"{x:,.{digits}f}"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A compact aligned table on stdout (numbers right-aligned)."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def is_num(s: str) -> bool:
        return bool(s) and (s[0].isdigit() or s[0] in "-+.") and s != "-"

    def line(r: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(r):
            out.append(c.rjust(widths[i]) if i and is_num(c) else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    print(f"\n== {title}")
    print(line(list(headers)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print(line(r))
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# stores and raw baselines

SQLITE_EVENTS_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    "originator_id TEXT, originator_version INTEGER, topic TEXT, state BLOB, "
    "PRIMARY KEY (originator_id, originator_version))"
)
"""The schema eventsourcing 9.5.6's SQLiteApplicationRecorder gives `stored_events`."""

PG_EVENTS_DDL = (
    "CREATE TABLE {table} ("
    "originator_id uuid NOT NULL, originator_version bigint NOT NULL, topic text, state bytea, "
    "notification_id bigserial, PRIMARY KEY (originator_id, originator_version)); "
    "CREATE UNIQUE INDEX {table}_notification_id_idx ON {table} (notification_id ASC)"
)
"""The schema eventsourcing 9.5.6's PostgresApplicationRecorder gives `evaledger_events`."""

Row = tuple[str, int, str, bytes]


def sqlite_rows(path: Path, where: str = "", params: Sequence[object] = ()) -> list[Row]:
    """The stored events of a SQLite events file, in log order."""
    con = sqlite3.connect(path)
    try:
        cur = con.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            f"{where} ORDER BY rowid",
            tuple(params),
        )
        return [(r[0], r[1], r[2], bytes(r[3])) for r in cur]
    finally:
        con.close()


def sqlite_raw_insert(rows: Sequence[Row], path: Path, one_by_one: bool = False) -> float:
    """Seconds to insert `rows` into a fresh table of identical schema, in one transaction.

    Same journal mode as the ledger (WAL, default synchronous). `one_by_one` uses a loop of
    `execute` (what eventsourcing's SQLite application recorder does to get each rowid) instead
    of `executemany`.
    """
    return sqlite_raw_insert_timed(rows, path, one_by_one)[0]


def sqlite_raw_insert_timed(
    rows: Sequence[Row], path: Path, one_by_one: bool = False
) -> tuple[float, float]:
    """`sqlite_raw_insert`'s wall seconds and this process's CPU seconds (user + system)."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(SQLITE_EVENTS_DDL.format(table="raw_events"))
        sql = "INSERT INTO raw_events VALUES (?,?,?,?)"
        start, cpu = time.perf_counter(), time.process_time()
        con.execute("BEGIN")
        if one_by_one:
            cur = con.cursor()
            for r in rows:
                cur.execute(sql, r)
        else:
            con.executemany(sql, rows)
        con.execute("COMMIT")
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        con.close()


@dataclass
class Decoded:
    """A raw read + orjson decode of stored rows."""

    rows: int = 0
    state_bytes: int = 0
    seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def sqlite_raw_decode(path: Path, where: str = "", params: Sequence[object] = ()) -> Decoded:
    """Select rows of the notification log with sqlite3 and `orjson.loads` every state."""
    con = sqlite3.connect(path)
    try:
        out = Decoded()
        loads = orjson.loads
        start = time.perf_counter()
        cur = con.execute(
            "SELECT rowid, originator_id, originator_version, topic, state FROM stored_events "
            f"{where} ORDER BY rowid",
            tuple(params),
        )
        while batch := cur.fetchmany(1000):
            for r in batch:
                loads(r[4])
                out.state_bytes += len(r[4])
            out.rows += len(batch)
        out.seconds = time.perf_counter() - start
        return out
    finally:
        con.close()


def pg_admin_url() -> str:
    """The PostgreSQL server the benchmarks may create databases on."""
    return os.environ.get("EVALEDGER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def pg_available(admin: str) -> bool:
    """True when the server answers."""
    import psycopg

    try:
        with psycopg.connect(admin, connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


@contextlib.contextmanager
def pg_database(admin: str) -> Iterator[str]:
    """A fresh `evaledger_bench_<random>` database, dropped at the end; yields its URL."""
    import psycopg

    name = f"evaledger_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


PgRow = tuple[uuid.UUID, int, str, bytes]


def pg_rows(url: str, where: str = "", params: Sequence[object] = ()) -> list[PgRow]:
    """The stored events of a PostgreSQL ledger, in log order."""
    import psycopg

    with psycopg.connect(url) as conn:
        cur = conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM evaledger_events "
            f"{where} ORDER BY notification_id",
            tuple(params),
        )
        return [(r[0], r[1], r[2], bytes(r[3])) for r in cur]


def pg_raw_insert(rows: Sequence[PgRow], url: str, method: str, run: int = 0) -> float:
    """Seconds to insert `rows` into a fresh table of identical schema in one transaction.

    `method` is `executemany` (psycopg pipelines it) or `copy` (binary COPY FROM STDIN).
    """
    import psycopg

    table = f"raw_events_{method}_{run}"
    with psycopg.connect(url, autocommit=True) as conn:
        for stmt in PG_EVENTS_DDL.format(table=table).split("; "):
            conn.execute(stmt.encode())
        start = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur:
            if method == "copy":
                copy_sql = (
                    f"COPY {table} (originator_id, originator_version, topic, state) "
                    "FROM STDIN (FORMAT BINARY)"
                )
                with cur.copy(copy_sql.encode()) as copy:
                    copy.set_types(["uuid", "int8", "text", "bytea"])
                    for r in rows:
                        copy.write_row(r)
            else:
                cur.executemany(
                    f"INSERT INTO {table} (originator_id, originator_version, topic, state) "
                    "VALUES (%s, %s, %s, %s)".encode(),
                    rows,
                )
        return time.perf_counter() - start


def pg_raw_decode(url: str, where: str = "", params: Sequence[object] = ()) -> Decoded:
    """Select rows of the notification log with psycopg (server-side cursor) and decode them."""
    import psycopg

    out = Decoded()
    loads = orjson.loads
    with psycopg.connect(url) as conn:
        start = time.perf_counter()
        with conn.cursor(name="bench_decode") as cur:
            cur.itersize = 1000
            cur.execute(
                "SELECT notification_id, originator_id, originator_version, topic, state "
                f"FROM evaledger_events {where} ORDER BY notification_id".encode(),
                tuple(params),
            )
            for r in cur:
                loads(r[4])
                out.state_bytes += len(r[4])
                out.rows += 1
        out.seconds = time.perf_counter() - start
    return out


# ---------------------------------------------------------------------------------------------
# command line


def base_parser(description: str) -> argparse.ArgumentParser:
    """Options every benchmark takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small smoke run (seconds)")
    p.add_argument(
        "--pg",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run on PostgreSQL (skipped with a note when the server is down)",
    )
    p.add_argument("--pg-admin", default=pg_admin_url(), help="server to create databases on")
    p.add_argument("--seed", type=int, default=0, help="generator seed")
    p.add_argument("--tmp", default=None, help="folder for the SQLite stores (default: temp)")
    return p


def add_repo_root() -> None:
    """Make `domain`, `projections`, `api` and `bench` importable when run as a script."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)


# ---------------------------------------------------------------------------------------------
# importing


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise TimeoutError in the main thread after `seconds` (so a hang cannot stall a run)."""
    import signal

    def fire(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"{what}: no answer after {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def import_in_batches(
    ledger: Ledger, bundle: RunBundle, batch: int, ctx: Context
) -> tuple[uuid.UUID, int, int]:
    """The batch path: create_run, ingest_cases per `batch` cases, complete_run.

    Returns (run id, last position, events written).
    """
    w = ledger.create_run(bundle.run, ctx)
    run_id = w.id
    events = w.events
    for i in range(0, len(bundle.cases), batch):
        w = ledger.ingest_cases(run_id, bundle.cases[i : i + batch], ctx)
        events += w.events
    w = ledger.complete_run(run_id, ctx, completed_at=bundle.run.completed_at)
    events += w.events
    return run_id, w.position, events


# ---------------------------------------------------------------------------------------------
# the goals of issue 13 (bench/README.md "Goals"): every script prints its rows of that table


@dataclass
class Goal:
    """One row of the goal table: the ledger's figure beside its same-run raw baseline."""

    figure: str
    ledger: str
    baseline: str
    ratio: str
    goal: str
    met: bool | None
    """None: not measured in this run (say why in `ratio`)."""


def ratio_goal(figure: str, ours: float, raw: float, unit: str, baseline: str, aim: float) -> Goal:
    """A throughput goal: ours / raw must reach `aim` (a fraction)."""
    got = ours / raw if raw else 0.0
    return Goal(
        figure,
        f"{num(ours)} {unit}",
        f"{baseline} {num(raw)} {unit}",
        f"{got:.1%}",
        f">= {aim:.0%}",
        got >= aim,
    )


def print_goals(title: str, goals: Sequence[Goal]) -> None:
    """The goal rows with met / not met."""
    verdict = {True: "met", False: "NOT met", None: "not measured"}
    print_table(
        title,
        ["figure", "ledger", "baseline (same run)", "ratio", "goal", "verdict"],
        [[g.figure, g.ledger, g.baseline, g.ratio, g.goal, verdict[g.met]] for g in goals],
    )
