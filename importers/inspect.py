"""Inspect AI logs (`.eval` archives and `.json` logs), read with Inspect's own log reader.

Samples × epochs become cases × repetitions; each scorer's score becomes a named score on its
own scale (C/I/P grades, 0-1, booleans) with its answer, explanation and the grader's prompt and
reply; a sample error becomes an execution error. `inspect_ai` is imported only here, and only
when a log is read: it takes seconds to import.
"""

from __future__ import annotations

import math
import zipfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import ijson

from evaledger.domain.bundle import (
    BundleCase,
    BundleCaseStatus,
    BundleError,
    BundleNamedScores,
    BundleRun,
    BundleRunStatus,
)
from evaledger.domain.datasets import source_dataset
from evaledger.domain.errors import EvaledgerError
from evaledger.domain.events import AgentSnapshot, SuiteRef, TestCaseSnapshot, ToolCall, Turn
from evaledger.domain.spec import (
    GroupedMetric,
    Reducers,
    RunConfig,
    ScoreGate,
    ScorerInfo,
    group_tag,
)
from evaledger.importers.base import (
    Format,
    PeerImport,
    arguments_of,
    fail,
    finite,
    named_scores,
    parse_time,
    text_of,
    usage_of,
)

LOG_VERSIONS = (1, 2, 3)
"""Inspect log format versions this importer reads: Inspect 0.3.285 writes 2 and its reader takes 3
(the message-deduplicating `.eval` logs) as it takes 2; no other version is known."""

_RUN_STATUS = {
    "success": BundleRunStatus.COMPLETED,
    "cancelled": BundleRunStatus.CANCELED,
    "error": BundleRunStatus.FAILED,
    "started": BundleRunStatus.RUNNING,
}


def open_inspect(path: Path) -> PeerImport:
    """The run of one Inspect log; its samples are streamed with `read_eval_log_samples`."""
    # lazy: inspect_ai takes seconds to import; only an Inspect log needs it
    from inspect_ai.log import read_eval_log

    version = _stored_version(path)
    if version not in LOG_VERSIONS:
        raise fail(
            path,
            f"Inspect log format version {version!r} is not supported "
            f"(this importer reads versions {', '.join(map(str, LOG_VERSIONS))})",
            field="version",
        )
    try:
        header = read_eval_log(str(path), header_only=True)
    except Exception as e:
        raise fail(path, f"detected an Inspect log that cannot be read: {_reason(e)}") from None
    ev = header.eval
    created_at = _required_time(path, ev.created)
    run = inspect_run(ev, created_at, header)
    return PeerImport(
        format=Format.INSPECT,
        sources=(str(path),),
        run=run,
        cases=lambda: _cases(
            path, list(ev.dataset.sample_ids or []), group_keys(run.config.scorers)
        ),
    )


def inspect_run(ev: Any, created_at: datetime, log: Any = None) -> BundleRun:
    """The run of an Inspect task, from its `EvalSpec` (and its log, once there is one).

    The hook calls it at the task's start with the spec alone; the importer with the log
    (`log`: status, error, results), which adds what is known at the end.

    Everything in the run's identity (`BundleRun.creation_body`) comes from the spec, so the
    hook and the import of the task's log make the same run: the scorers (named as Inspect
    names them, one per reducer view and dict key), their reducers and the score gate.
    """
    results = log.results.scores if log is not None and log.results else []
    status_name = log.status if log is not None else "started"
    declared = declared_scorers(ev)
    # A log older than `eval.scorers`: its results name the scorers.
    scorers = _scorers(results) if declared is None else _with_results(declared, results)
    provider, _, model = ev.model.partition("/")
    labels = {
        "source": "inspect",
        "inspect.eval_id": ev.eval_id,
        "inspect.run_id": ev.run_id,
        "inspect.task_id": ev.task_id,
    }
    if log is not None:
        labels["inspect.status"] = status_name
    if ev.packages.get("inspect_ai"):
        labels["inspect.version"] = ev.packages["inspect_ai"]
    if ev.revision is not None:
        labels["git.commit"] = ev.revision.commit
    if ev.dataset.name:
        labels["dataset"] = ev.dataset.name
    status = _RUN_STATUS.get(status_name, BundleRunStatus.RUNNING)
    reason = None
    if status is BundleRunStatus.FAILED:
        reason = log.error.message if log.error is not None else "the eval errored"
    elif status is BundleRunStatus.CANCELED:
        reason = CANCELED_REASON
    run = BundleRun(
        key=f"inspect-{ev.eval_id}",
        name=f"{ev.task} · {ev.model}",
        suite=SuiteRef(name=ev.task, version=ev.task_version),
        agent=AgentSnapshot(name=ev.model, provider=provider or None, model=model or ev.model),
        labels=labels,
        config=_config(scorers, ev),
        status=status,
        reason=reason,
        created_at=created_at,
        dataset=source_dataset(ev.dataset.name or ev.task, list(ev.dataset.sample_ids or [])),
        completed_at=parse_time(log.stats.completed_at)
        if status is BundleRunStatus.COMPLETED
        else None,
    )
    # What importers before session 7 made of the same log: a run they stored is this run.
    return run.with_legacy_config(_config(_scorers(results), ev))


def _config(scorers: Sequence[ScorerInfo], ev: Any) -> RunConfig:
    # The first scorer is the one Inspect reports first; its accuracy is the run's pass rate
    # when a case passes iff that score reads 1 (C, true, 1.0).
    return RunConfig(
        score_gates=(ScoreGate(score=scorers[0].score, op=">=", value=1.0),) if scorers else (),
        reducers=Reducers(k=max(1, ev.config.epochs or 1)),
        scorers=tuple(scorers),
    )


CANCELED_REASON = "cancelled in Inspect"
"""The reason of a run whose Inspect log (or live task) was cancelled."""

PASSES_WHEN = "value_to_float(value) == 1 (C, true, 1.0); P reads 0.5, I and N 0"
"""When a case passes under an imported Inspect scorer (the first one gates the case)."""


def reducer_views(reducers: Sequence[str] | None) -> list[str | None]:
    """The reducer of each view Inspect reports a scorer under; None for its default (mean).

    Inspect 0.3.285 names even a lone explicit "mean" view; older logs name none. A lone mean
    stays unnamed here, so a scorer keeps one name whichever Inspect wrote the log.
    """
    if not reducers or list(reducers) == ["mean"]:
        return [None]
    return list(dict.fromkeys(reducers))


def shown_name(name: str, reducer: str | None) -> str:
    """A scorer's name with its reducer, as Inspect View shows it: `match (max)`."""
    return name if reducer is None else f"{name} ({reducer})"


def metric_name(definition: Any) -> str:
    """A metric definition's name as Inspect keys it (`inspect_ai/accuracy` → `accuracy`)."""
    return str(getattr(definition, "name", definition)).rpartition("/")[2]


def grouped_metric(definition: Any) -> GroupedMetric | None:
    """Inspect's `grouped(metric, group_key, ...)` as its `EvalMetricDefinition` gives it.

    None for any other metric, or a grouped one whose options do not say what it groups by.
    The options hold only the arguments given: the others are `grouped()`'s defaults.
    """
    options = getattr(definition, "options", None) or {}
    if metric_name(definition) != "grouped" or not isinstance(options.get("group_key"), str):
        return None
    inner = options.get("metric")
    name = inner.get("name") if isinstance(inner, dict) else inner
    given = {
        k: options[k] for k in ("all_label", "name_template") if isinstance(options.get(k), str)
    }
    every = options.get("all", "samples")
    return GroupedMetric(
        metric=str(name or "").rpartition("/")[2] or "unknown",
        group_key=options["group_key"],
        all=every if every in ("samples", "groups") else None,
        **given,
    )


def group_keys(scorers: Sequence[ScorerInfo]) -> list[str]:
    """The sample metadata keys the run's grouped metrics group by (kept on each case as tags)."""
    return list(dict.fromkeys(g.group_key for s in scorers for g in s.grouped))


def declared_scorers(ev: Any) -> list[ScorerInfo] | None:
    """The scorers an `EvalSpec` declares, as `EvalScore`s will report them; None without any.

    One per reducer view of each scorer (Inspect's `eval.config.epochs_reducer`), and for a
    dict-valued scorer (metrics given per key) one per key, reading the named score
    `scorer/key`. Scorer names are made unique as Inspect makes them (`match`, `match1`).
    """
    if not ev.scorers:
        return None
    views = reducer_views(ev.config.epochs_reducer)
    used: list[str] = []
    out: list[ScorerInfo] = []
    for declared in ev.scorers:
        base = name = declared.name.rpartition("/")[2]
        count = 1
        while name in used:  # Inspect's `unique_scorer_name`
            name, count = f"{base}{count}", count + 1
        used.append(name)
        metrics = declared.metrics or []
        simple = (
            [] if isinstance(metrics, dict) else [m for m in metrics if not isinstance(m, dict)]
        )
        keyed: dict[str, list[Any]] = {}
        for group in [metrics] if isinstance(metrics, dict) else metrics:
            if isinstance(group, dict):
                for key, listed in group.items():
                    keyed.setdefault(key, []).extend(listed)
        for view in views:
            if not keyed or simple:
                out.append(
                    ScorerInfo(
                        name=shown_name(name, view),
                        score=name,
                        semantics="inspect",
                        metrics=tuple(metric_name(m) for m in simple),
                        reducer=view,
                        passes_when=PASSES_WHEN,
                        grouped=tuple(filter(None, map(grouped_metric, simple))),
                    )
                )
            out.extend(
                ScorerInfo(
                    name=shown_name(key, view),
                    score=f"{name}/{key}",
                    semantics="inspect",
                    value_type="dict",
                    metrics=tuple(metric_name(m) for m in listed),
                    reducer=view,
                    passes_when=PASSES_WHEN,
                )
                for key, listed in keyed.items()
            )
    return out


def _with_results(scorers: list[ScorerInfo], results: Sequence[Any]) -> list[ScorerInfo]:
    """The declared scorers with the metrics and figures the log's `EvalScore`s report."""
    views = {s.reducer for s in scorers}
    by_name: dict[str, Any] = {}
    for r in results:
        reducer = r.reducer if r.reducer in views else None
        by_name.setdefault(shown_name(r.name, reducer), r)
    out = []
    for s in scorers:
        r = by_name.get(s.name)
        if r is None:
            out.append(s)
            continue
        out.append(
            s.model_copy(
                update={
                    "metrics": tuple(r.metrics),
                    "reported": {
                        k: float(m.value)
                        for k, m in r.metrics.items()
                        if isinstance(m.value, int | float) and math.isfinite(m.value)
                    },
                }
            )
        )
    return out


def _scorers(results: Sequence[Any]) -> list[ScorerInfo]:
    """Each `EvalScore` as a scorer, its metrics' reported figures kept (finite ones).

    What importers before session 7 made of every log, and still of a log whose `eval` lists
    no scorers. A dict-valued scorer gives one `EvalScore` per key, named by the key; its
    cases' named scores are `scorer/key` (see `named_scores`).
    """
    shared = Counter(s.scorer for s in results)
    out = []
    for s in results:
        is_key = shared[s.scorer] > 1 and s.name != s.scorer
        out.append(
            ScorerInfo(
                name=s.name,
                score=f"{s.scorer}/{s.name}" if is_key else s.name,
                semantics="inspect",
                value_type="dict" if is_key else "unknown",
                metrics=tuple(s.metrics),
                reducer=s.reducer,
                reported={
                    k: float(m.value)
                    for k, m in s.metrics.items()
                    if isinstance(m.value, int | float) and math.isfinite(m.value)
                },
                passes_when=PASSES_WHEN,
            )
        )
    return out


def _stored_version(path: Path) -> Any:
    """The log format version as written (Inspect's reader refuses newer ones vaguely)."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                names = set(z.namelist())
                member = "header.json" if "header.json" in names else "_journal/start.json"
                with z.open(member) as f:
                    return next(ijson.items(f, "version"), None)
        with path.open("rb") as f:
            return next(ijson.items(f, "version"), None)
    except (zipfile.BadZipFile, KeyError, ijson.common.JSONError) as e:
        raise fail(path, f"detected an Inspect log that cannot be read: {e}") from None


def _required_time(path: Path, value: Any) -> datetime:
    parsed = parse_time(value)
    if parsed is None:
        raise fail(path, "the log has no eval.created time", field="eval.created")
    return parsed


def _reason(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _cases(
    path: Path, sample_ids: Sequence[str | int], groups: Sequence[str]
) -> Iterator[BundleCase]:
    from inspect_ai.log import read_eval_log  # lazy: inspect_ai, seconds to import

    any_sample = False
    try:
        for sample in _samples(path, sample_ids):
            any_sample = True
            yield sample_case(sample, groups)
    except EvaledgerError:
        raise
    except Exception as e:  # a damaged member, or a sample Inspect refuses
        raise fail(path, f"an Inspect sample cannot be read: {_reason(e)}") from None
    if not any_sample:
        # A log without samples (cancelled before writing them) still has per-sample reductions.
        log = read_eval_log(str(path))
        yield from _reduction_cases(log.reductions or [])


def _samples(path: Path, sample_ids: Sequence[str | int]) -> Iterator[Any]:
    """Each sample once, validated by Inspect's own `EvalSample` model, attachments resolved.

    Inspect's `read_eval_log_samples` re-opens the archive (or re-reads the JSON) for every
    sample, which is quadratic in the sample count; this opens it once and streams the members.
    A sample's `events` (the full model-call log) are skipped, and with them `events_data`, the
    pool of messages the writer deduplicates model-call inputs into: nothing maps them.
    """
    # lazy: inspect_ai, seconds to import
    from inspect_ai.log import EvalSample, resolve_sample_attachments

    def load(data: dict[str, Any]) -> Any:
        data.pop("events", None)
        data.pop("events_data", None)
        return resolve_sample_attachments(EvalSample.model_validate(data), "full")

    if zipfile.is_zipfile(path):
        order = {str(sid): i for i, sid in enumerate(sample_ids)}

        def key(name: str) -> tuple[int, str, int]:
            sid, _, epoch = (
                name.removeprefix("samples/").removesuffix(".json").rpartition("_epoch_")
            )
            return order.get(sid, len(order)), sid, int(epoch or 0)

        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.startswith("samples/") and n.endswith(".json")]
            if any("/" in n.removeprefix("samples/") for n in names):
                raise fail(
                    path,
                    "Inspect's chunked sample layout (samples/ID_epoch_N/…) is not supported: "
                    "the installed inspect_ai cannot read it either",
                    field="samples",
                )
            for name in sorted(names, key=key):
                with z.open(name) as member:
                    yield load(_sample_data(member))
        return
    with path.open("rb") as f:
        for data in ijson.items(f, "samples.item", use_float=True):
            yield load(data)


_UNREAD = frozenset({"events", "events_data"})
"""A sample's members skipped unbuilt: the model-call log and its message pool map to nothing."""


def _sample_data(member: IO[bytes]) -> dict[str, Any]:
    """One sample member parsed as it inflates, its `events` and `events_data` never built.

    The member is never held whole in memory (its inflated size is bounded by `check_zip`).
    """
    builder = ijson.ObjectBuilder()
    skipping = False
    for prefix, event, value in ijson.parse(member, use_float=True):
        if prefix == "":
            if event == "map_key":
                skipping = value in _UNREAD
                if skipping:
                    continue
            builder.event(event, value)
        elif not skipping:
            builder.event(event, value)
    data: dict[str, Any] = builder.value
    return data


def _turns(messages: Sequence[Any]) -> list[Turn]:
    turns: list[Turn] = []
    for m in messages:
        calls = [
            ToolCall(id=c.id, name=c.function, arguments=arguments_of(c.arguments))
            for c in (getattr(m, "tool_calls", None) or [])
        ]
        turns.append(
            Turn(
                role=m.role,
                content=m.text or None,
                tool_calls=calls,
                tool_call_id=getattr(m, "tool_call_id", None),
            )
        )
    return turns


def _grading(metadata: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The grader's prompt and reply from `metadata.grading` (model-graded scorers)."""
    grading = metadata.get("grading")
    if not isinstance(grading, list):
        return None, None
    prompt = [
        m.get("content") for m in grading if isinstance(m, dict) and m.get("role") != "assistant"
    ]
    reply = [
        m.get("content") for m in grading if isinstance(m, dict) and m.get("role") == "assistant"
    ]
    return (
        "\n\n".join(text_of(p) or "" for p in prompt) or None,
        text_of(reply[-1]) if reply else None,
    )


def _scores(
    name: str,
    value: Any,
    answer: Any,
    explanation: Any,
    metadata: Mapping[str, Any] | None,
    extra: dict[str, Any],
) -> BundleNamedScores:
    kept = dict(metadata or {})
    prompt, reply = _grading(kept)
    if prompt is not None or reply is not None:
        kept.pop("grading")
    return BundleNamedScores(
        scorer=name,
        scores=named_scores(name, value),
        answer=text_of(answer),
        explanation=text_of(explanation),
        prompt=prompt,
        raw_output=reply,
        metadata=finite({**extra, **kept}),
    )


def sample_case(sample: Any, groups: Sequence[str]) -> BundleCase:
    """The case of one sample and epoch.

    `groups`: the metadata keys its run's metrics group by (`group_keys`); their values are
    kept as the case's tags (`category=math`).
    """
    prompt_tokens = completion_tokens = 0
    costs: list[float] = []
    for usage in (sample.model_usage or {}).values():
        prompt_tokens += usage.input_tokens or 0
        completion_tokens += usage.output_tokens or 0
        if usage.total_cost is not None:
            costs.append(usage.total_cost)
    extra = {"target": finite(sample.target), "epoch": sample.epoch}
    metadata = sample.metadata or {}
    error = None
    if sample.error is not None:
        error = BundleError(message=sample.error.message or "sample error", kind="inspect_error")
    tags = [group_tag(k, metadata[k]) for k in groups if k in metadata]
    case = BundleCase(
        test_case=TestCaseSnapshot(key=str(sample.id), tags=tags),
        repetition=sample.epoch - 1,
        status=BundleCaseStatus.ERRORED if error else BundleCaseStatus.COMPLETED,
        error=error,
        transcript=_turns(sample.messages),
        usage=usage_of(prompt_tokens, completion_tokens) if sample.model_usage else None,
        cost_usd=sum(costs) if costs else None,
        started_at=parse_time(getattr(sample, "started_at", None)),
        ended_at=parse_time(getattr(sample, "completed_at", None)),
        named_scores=[
            _scores(name, s.value, s.answer, s.explanation, s.metadata, extra)
            for name, s in (sample.scores or {}).items()
        ],
    )
    if not tags:
        return case
    # Importers before session 7 kept no group tags: a case they stored is this case.
    return case.with_legacy(
        case.model_copy(update={"test_case": TestCaseSnapshot(key=case.test_case.key)})
    )


def _reduction_cases(reductions: Sequence[Any]) -> Iterator[BundleCase]:
    by_sample: dict[str, list[BundleNamedScores]] = {}
    for reduction in reductions:
        for s in reduction.samples:
            by_sample.setdefault(str(s.sample_id), []).append(
                _scores(
                    reduction.scorer,
                    s.value,
                    s.answer,
                    s.explanation,
                    s.metadata,
                    {"reduced": True, "reducer": reduction.reducer},
                )
            )
    for key, scores in by_sample.items():
        yield BundleCase(test_case=TestCaseSnapshot(key=key), named_scores=scores)
