"""OpenAI evals records: the JSON lines `oaieval … --record_path FILE` writes.

The first line is the run's `spec` (eval name, completion functions, run id, time), one line its
`final_report` (the eval's own figures: `accuracy`, `score`, `counts/…`), every other line an
event of a sample (`sample_id`, `type`: `sampling` (prompt and sampled text), `match` (correct,
expected, picked), `metrics` (a model-graded eval's choice and score), `error`, …).

A sample is a case (key `sample_id`); its `sampling` events its transcript; its `match` result
the named score `correct` (whose mean is evals' `accuracy`, recomputed), its `metrics` values
named scores (a reported figure of the same name is recomputed as their mean). Figures of the
final report the ledger cannot recompute (`boostrap_std`, `counts/…`) are shown as reported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import ijson

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
    NamedScore,
    OutcomeResult,
    Role,
    SuiteRef,
    TestCaseSnapshot,
    Turn,
)
from evaledger.domain.spec import RunConfig, ScorerInfo
from evaledger.importers.base import (
    Format,
    PeerImport,
    fail,
    finite,
    named_score,
    parse_time,
    text_of,
)

MATCH_OUTCOME = "The sampled answer matches an expected answer (evals' match: correct)"
SCORE_OUTCOME = "The model grader scores the answer 1 (evals' model-graded score)"
ROLES = frozenset(r.value for r in Role)
MAX_EVENTS_PER_SAMPLE = 10_000
"""A sample's events are held together while its case is built; past this, refused."""


def _lines(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    with path.open("rb") as f:
        try:
            for i, line in enumerate(ijson.items(f, "", multiple_values=True, use_float=True)):
                if not isinstance(line, Mapping):
                    raise fail(path, f"line {i + 1} is not a JSON object", "line")
                yield i + 1, line
        except ijson.common.JSONError as e:
            raise fail(path, f"OpenAI evals record is cut off or not valid JSON ({e})") from None


def _header(path: Path) -> tuple[Mapping[str, Any], dict[str, float], list[str], str | None]:
    """The spec, the final report's numeric figures, the sample ids in order, a model name."""
    spec: Mapping[str, Any] | None = None
    report: dict[str, float] = {}
    samples: dict[str, int] = {}
    model: str | None = None
    for number, line in _lines(path):
        if number == 1:
            spec = line.get("spec")
            if not isinstance(spec, Mapping) or not isinstance(spec.get("run_id"), str):
                raise fail(path, "not an OpenAI evals record (no spec.run_id on line 1)", "spec")
        elif "final_report" in line:
            found = line["final_report"]
            if not isinstance(found, Mapping):
                raise fail(path, f"line {number}: final_report is not an object", "final_report")
            report = {
                str(k): float(v)
                for k, v in found.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
        else:
            sample = line.get("sample_id")
            if not isinstance(sample, str) or not sample:
                raise fail(path, f"line {number}: an event without a sample_id", "sample_id")
            samples[sample] = samples.get(sample, 0) + 1
            if samples[sample] > MAX_EVENTS_PER_SAMPLE:
                raise fail(path, f"sample {sample!r} has more than {MAX_EVENTS_PER_SAMPLE} events")
            data = line.get("data")
            if model is None and isinstance(data, Mapping) and isinstance(data.get("model"), str):
                model = data["model"]
    assert spec is not None  # line 1 was read (detection saw it)
    return spec, report, list(samples), model


def _scorers(report: Mapping[str, float], per_sample: set[str]) -> list[ScorerInfo]:
    scorers = []
    if "accuracy" in report or "correct" in per_sample:
        scorers.append(
            ScorerInfo(
                name="match",
                score="correct",
                semantics="openai-evals",
                value_type="binary",
                metrics=("accuracy",),
                reported={k: v for k, v in report.items() if k in ("accuracy", "boostrap_std")},
                passes_when="correct (the sampled answer matches)",
            )
        )
    for name in sorted(per_sample - {"correct"}):
        scorers.append(
            ScorerInfo(
                name=name,
                score=name,
                semantics="openai-evals",
                value_type="continuous",
                metrics=("mean",),
                reported={"mean": report[name]} if name in report else {},
            )
        )
    shown = {"accuracy", "boostrap_std", *per_sample}
    rest = {k: v for k, v in report.items() if k not in shown}
    if rest:
        scorers.append(
            ScorerInfo(
                name="final_report", score="final_report", semantics="openai-evals", reported=rest
            )
        )
    return scorers


def _metric_names(path: Path) -> set[str]:
    names: set[str] = set()
    for _, line in _lines(path):
        data = line.get("data")
        if line.get("type") == "match":
            names.add("correct")
        elif line.get("type") == "metrics" and isinstance(data, Mapping):
            names.update(
                str(k)
                for k, v in data.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            )
    return names


def open_openai_evals(path: Path) -> PeerImport:
    """The run of one OpenAI evals record file."""
    spec, report, sample_ids, model = _header(path)
    fns = [str(f) for f in spec.get("completion_fns") or []]
    agent = ", ".join(fns) or "completion function"
    run = BundleRun(
        key=f"openai-evals-{spec['run_id']}",
        name=str(spec.get("eval_name") or spec.get("base_eval") or "OpenAI eval"),
        suite=SuiteRef(name=str(spec.get("base_eval") or spec.get("eval_name") or "openai-evals")),
        agent=AgentSnapshot(name=agent, model=model),
        labels={
            "source": "openai-evals",
            "openai-evals.run_id": str(spec["run_id"]),
            "openai-evals.split": str(spec.get("split") or ""),
        },
        config=RunConfig(scorers=tuple(_scorers(report, _metric_names(path)))),
        created_at=parse_time(spec.get("created_at")) or parse_time("1970-01-01T00:00:00Z"),
        dataset=source_dataset(str(spec.get("eval_name") or ""), sample_ids),
    )

    def cases() -> Iterator[BundleCase]:
        # A sample's events may be anywhere in the file (evals samples in threads): grouped.
        events: dict[str, list[Mapping[str, Any]]] = {s: [] for s in sample_ids}
        for number, line in _lines(path):
            if number > 1 and "final_report" not in line:
                events[line["sample_id"]].append(line)
        for sample in sample_ids:
            yield _case(sample, events.pop(sample))

    return PeerImport(format=Format.OPENAI_EVALS, sources=(str(path),), run=run, cases=cases)


def _prompt_turns(prompt: Any) -> list[Turn]:
    if isinstance(prompt, list):  # chat messages
        turns = []
        for m in prompt:
            if isinstance(m, Mapping):
                role = str(m.get("role") or "user")
                turns.append(
                    Turn(
                        role=Role(role) if role in ROLES else Role.USER,
                        content=text_of(m.get("content")),
                    )
                )
        return turns
    return [Turn(role=Role.USER, content=text_of(prompt))]


def _case(sample: str, events: list[Mapping[str, Any]]) -> BundleCase:
    turns: list[Turn] = []
    scores: list[NamedScore] = []
    results: list[OutcomeResult] = []
    metadata: dict[str, Any] = {}
    error: str | None = None
    for event in events:
        kind, data = event.get("type"), event.get("data")
        data = data if isinstance(data, Mapping) else {"value": data}
        if kind == "sampling":
            turns.extend(_prompt_turns(data.get("prompt")))
            sampled = data.get("sampled")
            answer = sampled[0] if isinstance(sampled, list) and sampled else sampled
            turns.append(Turn(role=Role.ASSISTANT, content=text_of(answer)))
        elif kind == "match":
            correct = bool(data.get("correct"))
            scores = [s for s in scores if s.name != "correct"]
            scores.append(named_score("correct", correct))
            expected = text_of(data.get("expected"))
            results = [
                OutcomeResult(
                    statement=MATCH_OUTCOME,
                    passed=correct,
                    justification=f"expected {expected}; picked {text_of(data.get('picked'))}",
                )
            ]
            metadata["match"] = finite(data)
        elif kind == "metrics":
            for key, value in data.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    scores.append(named_score(str(key), value))
            if "score" in data and not results:
                passed = isinstance(data["score"], int | float) and data["score"] >= 1
                results = [
                    OutcomeResult(
                        statement=SCORE_OUTCOME,
                        passed=passed,
                        justification=f"choice {text_of(data.get('choice'))}",
                    )
                ]
            metadata["metrics"] = finite(data)
        elif kind == "error":
            error = text_of(data.get("message") or data) or "error"
        else:
            metadata.setdefault(str(kind), finite(data))
    outcome = results[0].statement if results else None
    return BundleCase(
        test_case=TestCaseSnapshot(
            key=sample,
            name=sample,
            expected_outcomes=[ExpectedOutcome(statement=outcome)] if outcome else [],
        ),
        status=BundleCaseStatus.ERRORED if error else BundleCaseStatus.COMPLETED,
        error=BundleError(message=error, kind="openai_evals_error") if error else None,
        transcript=[] if error else turns,
        named_scores=[BundleNamedScores(scorer="openai-evals", scores=scores, metadata=metadata)]
        if scores
        else [],
        outcomes=[BundleOutcomes(results=results)] if results and not error else [],
    )
