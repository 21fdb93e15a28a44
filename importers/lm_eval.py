"""lm-evaluation-harness output: `results_<time>.json` with its `--log_samples` JSONL files.

`lm_eval --output_path DIR --log_samples` writes, in one folder per model, the results JSON
(per task: `METRIC,FILTER` figures and their `METRIC_stderr,FILTER`) and one
`samples_<task>_<time>.jsonl` per task (one line per document and filter: its `doc`, the
requests' `arguments`, the model's `resps` / `filtered_resps`, and each metric's value). Both
files name the same `<time>`; either file finds the other beside it.

A document is a case (key `<task>/<doc_id>`); its metrics under every filter are its named
scores (`<task>/<metric>,<filter>`); each (task, metric, filter) of the results is a scorer whose
`mean` and `stderr` the ledger recomputes from the cases (lm-eval's `mean` and `mean_stderr`)
beside the figures the results JSON reports.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import ijson
import orjson

from evaledger.domain.bundle import BundleCase, BundleNamedScores, BundleOutcomes, BundleRun
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
from evaledger.domain.input_limits import check_json_file
from evaledger.domain.spec import RunConfig, ScorerInfo
from evaledger.importers.base import Format, PeerImport, fail, finite, named_score, parse_time

RESULTS_NAME = re.compile(r"^results_(?P<time>.+)\.json$")
SAMPLES_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<time>[^_]+)\.jsonl$")
MAX_RESULTS_BYTES = 64 * 1024 * 1024
"""A results JSON is read whole (it is small: figures and task configs); past this, refused."""


def is_samples_file(path: Path) -> bool:
    """Whether a path is named as lm-eval names a `--log_samples` file."""
    return SAMPLES_NAME.match(path.name) is not None


def results_of(path: Path) -> Path:
    """The results JSON a samples file belongs to (same folder, same time), or an error."""
    m = SAMPLES_NAME.match(path.name)
    if m is None:
        return path
    found = path.with_name(f"results_{m['time']}.json")
    if not found.is_file():
        raise fail(
            path,
            f"an lm-eval samples file without its results JSON ({found.name} beside it): "
            "give the results file (the samples files beside it are read with it)",
        )
    return found


def group_files(paths: Sequence[Path]) -> list[tuple[Path, list[Path]]]:
    """The lm-eval files given, as (results JSON, the samples files given with it) per run.

    A samples file joins the results file given with it (the same `<time>`, or the one results
    file when only one is given: an upload may rename nothing but keeps no folder), else the
    results file beside it.
    """
    results = [p for p in paths if not is_samples_file(p)]
    by_time = {m["time"]: r for r in results if (m := RESULTS_NAME.match(r.name))}
    groups: dict[Path, list[Path]] = {r: [] for r in results}
    for samples in (p for p in paths if is_samples_file(p)):
        m = SAMPLES_NAME.match(samples.name)
        assert m is not None  # is_samples_file
        owner = by_time.get(m["time"]) or (results[0] if len(results) == 1 else None)
        groups.setdefault(owner or results_of(samples), []).append(samples)
    return list(groups.items())


def _samples_files(results: Path, tasks: list[str], given: Sequence[Path]) -> dict[str, Path]:
    m = RESULTS_NAME.match(results.name)
    found = {}
    for task in tasks:
        named = [p for p in given if p.name.startswith(f"samples_{task}_")]
        beside = results.with_name(f"samples_{task}_{m['time']}.jsonl") if m else None
        if named:
            found[task] = named[0]
        elif beside is not None and beside.is_file():
            found[task] = beside
    if not found:
        raise fail(
            results,
            "lm-eval results without their samples: run lm_eval with --log_samples and give "
            "the samples_<task>_<time>.jsonl files with it (or keep them beside it)",
        )
    return found


def _read_results(path: Path) -> dict[str, Any]:
    if path.stat().st_size > MAX_RESULTS_BYTES:
        raise fail(path, f"an lm-eval results JSON larger than {MAX_RESULTS_BYTES} bytes")
    check_json_file(path)
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise fail(path, f"lm-eval results JSON is cut off or not valid JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise fail(path, "not an lm-eval results JSON (no 'results' object)", "results")
    return data


def _figures(task_results: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, float]]:
    """(metric, filter) → {"mean": figure, "stderr": figure} as the results JSON reports them."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key, value in task_results.items():
        metric, sep, filt = key.rpartition(",")
        if not sep or not isinstance(value, int | float) or isinstance(value, bool):
            continue  # alias, name, sample_len; "N/A" stderrs
        if metric.endswith("_stderr"):
            out.setdefault((metric.removesuffix("_stderr"), filt), {})["stderr"] = float(value)
        else:
            out.setdefault((metric, filt), {})["mean"] = float(value)
    return {k: v for k, v in out.items() if "mean" in v}


def _aggregations(config: Mapping[str, Any]) -> dict[str, str]:
    listed = config.get("metric_list") if isinstance(config, Mapping) else None
    return {
        str(m.get("metric")): str(m.get("aggregation", "mean"))
        for m in listed or []
        if isinstance(m, Mapping)
    }


def _scorers(data: Mapping[str, Any], tasks: list[str]) -> list[ScorerInfo]:
    scorers = []
    configs = data.get("configs") or {}
    for task in tasks:
        aggregations = _aggregations(configs.get(task) or {})
        for i, ((metric, filt), reported) in enumerate(_figures(data["results"][task]).items()):
            recomputed = aggregations.get(metric, "mean") == "mean"
            name = f"{task}/{metric},{filt}"
            scorers.append(
                ScorerInfo(
                    name=name,
                    score=name,
                    semantics="lm-eval",
                    value_type="continuous",
                    # A corpus-level aggregation (f1, bleu, perplexity) is the source's figure.
                    metrics=("mean", "stderr") if recomputed else (),
                    reported=reported if recomputed else {"value": reported["mean"]},
                    # A document passes when its task's first metric is 1 (a correct answer).
                    passes_when=f"{name} >= 1" if i == 0 else None,
                )
            )
    return scorers


def _lines(path: Path) -> Iterator[Mapping[str, Any]]:
    with path.open("rb") as f:
        try:
            for i, line in enumerate(ijson.items(f, "", multiple_values=True, use_float=True)):
                if not isinstance(line, Mapping) or "doc_id" not in line:
                    raise fail(path, f"line {i + 1} is not an lm-eval sample (doc_id)", "doc_id")
                yield line
        except ijson.common.JSONError as e:
            raise fail(path, f"lm-eval samples file is cut off or not valid JSON ({e})") from None


def _doc_scores(path: Path, task: str) -> dict[str, dict[str, Any]]:
    """doc_id → every metric value of the document under each filter (`task/metric,filter`)."""
    scores: dict[str, dict[str, Any]] = {}
    for line in _lines(path):
        filt = str(line.get("filter") or "none")
        found = scores.setdefault(str(line["doc_id"]), {})
        for metric in line.get("metrics") or []:
            if metric in line:
                found[f"{task}/{metric},{filt}"] = line[metric]
    return scores


def _run_key(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return f"lm-eval-{digest[:16]}"


def open_lm_eval(path: Path, given: Sequence[Path] = ()) -> PeerImport:
    """The run of an lm-eval results JSON (or one of its samples files) and its samples.

    `given`: samples files given with it (else those beside it are read).
    """
    results = results_of(path)
    data = _read_results(results)
    tasks = [t for t in data["results"] if isinstance(data["results"][t], Mapping)]
    files = _samples_files(results, tasks, given)
    tasks = [t for t in tasks if t in files]  # groups (mmlu over its subtasks) have no samples
    scorers = _scorers(data, tasks)
    config = data.get("config") or {}
    model = str(data.get("model_name") or config.get("model") or "model")
    source = str(config.get("model") or data.get("model_source") or "")
    labels = {
        "source": "lm-eval",
        "lm-eval.model": source,
        "lm-eval.version": str(data.get("lm_eval_version") or ""),
        "git.commit": str(data.get("git_hash") or ""),
    }
    run = BundleRun(
        key=_run_key(results),
        name=f"lm-eval {model}",
        suite=SuiteRef(name="lm-eval: " + ", ".join(tasks)),
        agent=AgentSnapshot(name=model, provider=source or None, model=model),
        labels={k: v for k, v in labels.items() if v},
        config=RunConfig(scorers=tuple(scorers)),
        created_at=parse_time(_epoch_ms(data.get("date"))) or parse_time("1970-01-01T00:00:00Z"),
        # The tasks' documents, by their case keys (`_case`): one more pass over the samples.
        dataset=source_dataset(
            ", ".join(files),
            [
                f"{task}/{line['doc_id']}"
                for task, samples in files.items()
                for line in _lines(samples)
            ],
        ),
    )
    primary = {
        t: next((s.name for s in scorers if s.name.startswith(f"{t}/")), None) for t in tasks
    }

    def cases() -> Iterator[BundleCase]:
        for task, samples in files.items():
            scores = _doc_scores(samples, task)
            seen: set[str] = set()
            for line in _lines(samples):
                doc_id = str(line["doc_id"])
                if doc_id not in seen:
                    seen.add(doc_id)
                    yield _case(task, line, scores[doc_id], primary[task])

    return PeerImport(format=Format.LM_EVAL, sources=(str(results),), run=run, cases=cases)


def _epoch_ms(value: Any) -> Any:
    # lm-eval writes `date` as epoch seconds (time.time()); parse_time reads epoch ms.
    return value * 1000 if isinstance(value, int | float) and not isinstance(value, bool) else None


def _prompt(arguments: Any) -> str | None:
    if isinstance(arguments, Mapping):  # {"gen_args_0": {"arg_0": context, "arg_1": …}}
        first = next(iter(arguments.values()), None)
        if isinstance(first, Mapping):
            context = first.get("arg_0")
            return context if isinstance(context, str) else orjson.dumps(context).decode()
    if isinstance(arguments, list) and arguments and isinstance(arguments[0], list):
        return str(arguments[0][0])
    return None


def _answer(line: Mapping[str, Any]) -> str | None:
    """The model's answer: its generation, or the choice it gave the highest log-likelihood."""
    filtered = line.get("filtered_resps")
    arguments = line.get("arguments")
    if isinstance(filtered, list) and filtered and all(isinstance(r, list) for r in filtered):
        try:  # multiple choice: [[loglikelihood, is_greedy], …] per choice
            lls = [float(r[0]) for r in filtered]
        except (TypeError, ValueError, IndexError):
            lls = []
        if lls and isinstance(arguments, Mapping):
            choices = [a.get("arg_1") for a in arguments.values() if isinstance(a, Mapping)]
            best = max(range(len(lls)), key=lls.__getitem__)
            if best < len(choices) and isinstance(choices[best], str):
                return choices[best]
    if isinstance(filtered, list) and len(filtered) == 1 and isinstance(filtered[0], str):
        return filtered[0]
    return orjson.dumps(finite(filtered)).decode() if filtered is not None else None


def _case(
    task: str, line: Mapping[str, Any], values: Mapping[str, Any], primary: str | None
) -> BundleCase:
    scores: list[NamedScore] = [named_score(name, value) for name, value in values.items()]
    statement = f"{primary} is 1 (lm-eval's metric for the document)" if primary else None
    main = next((s.number for s in scores if s.name == primary), None)
    turns = [Turn(role=Role.USER, content=_prompt(line.get("arguments")))]
    answer = _answer(line)
    if answer is not None:
        turns.append(Turn(role=Role.ASSISTANT, content=answer))
    return BundleCase(
        test_case=TestCaseSnapshot(
            key=f"{task}/{line['doc_id']}",
            name=f"{task} document {line['doc_id']}",
            expected_outcomes=[ExpectedOutcome(statement=statement)] if statement else [],
            tags=[f"task={task}"],
        ),
        transcript=turns,
        named_scores=[
            BundleNamedScores(
                scorer="lm-eval",
                scores=scores,
                answer=answer,
                metadata=finite(
                    {
                        "target": line.get("target"),
                        "doc": line.get("doc"),
                        "filter": line.get("filter"),
                        "doc_hash": line.get("doc_hash"),
                        "prompt_hash": line.get("prompt_hash"),
                    }
                ),
            )
        ]
        if scores
        else [],
        outcomes=[
            BundleOutcomes(
                results=[
                    OutcomeResult(
                        statement=statement,
                        passed=main >= 1.0,
                        justification=f"{primary} = {main:g}",
                    )
                ]
            )
        ]
        if statement and main is not None
        else [],
    )
