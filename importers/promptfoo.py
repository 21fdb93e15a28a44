"""promptfoo eval output / export JSON (`promptfoo eval -o out.json`, `promptfoo export`).

Each result row (test × prompt × provider) is a case; the provider (and the prompt, when there
are several) is its configuration. The test's own pass/fail, its weighted score and its
`namedScores` are named scores; every assertion's verdict (nested assert-sets included) is an
outcome result with its reason. The rows are streamed with ijson: memory stays flat however
many rows the file holds.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

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
from evaledger.domain.events import (
    AgentSnapshot,
    ExpectedOutcome,
    NamedScore,
    OutcomeResult,
    Role,
    ScoreScale,
    SuiteRef,
    TestCaseSnapshot,
    Turn,
)
from evaledger.domain.input_limits import load_yaml
from evaledger.domain.spec import RunConfig, ScoreGate, ScorerInfo
from evaledger.importers.base import (
    Format,
    PeerImport,
    fail,
    finite,
    named_score,
    parse_time,
    text_of,
    usage_of,
)

OUTPUT_VERSIONS = (2, 3)
"""`results.version` values promptfoo writes (3 today; 2 in outputs of older releases)."""
PASS_SCORE = "success"  # noqa: S105 - a score name, not a secret
"""The named score holding promptfoo's own pass/fail of a row; the run's gate is on it."""
ROWS = "results.results.item"
_SKIPPED = ("results.results", "results.table")
_TURN = re.compile(r"^\[Turn \d+\] (user|assistant|system|tool): ", re.MULTILINE)
_ERROR_FAILURE = 2
"""promptfoo's `failureReason` for a provider/runtime error (1 is an assertion failure)."""


def is_yaml(path: Path) -> bool:
    """Whether a file starts like YAML rather than JSON (promptfoo's `-o out.yaml`)."""
    with path.open("rb") as f:
        head = f.read(64).lstrip()
    return bool(head) and head[:1] not in (b"{", b"[")


def open_output(path: Path) -> BinaryIO:
    """A promptfoo output as a JSON byte stream: a JSON file as is, a YAML one converted.

    promptfoo writes its YAML output as a YAML dump of the same document as its JSON output,
    so one reader serves both; a YAML file is loaded whole (PyYAML cannot stream a mapping).
    """
    if not is_yaml(path):
        return path.open("rb")
    try:
        data = load_yaml(path, path.name)
    except ValueError as e:
        raise fail(path, f"detected promptfoo YAML output that cannot be read ({e})") from None
    return io.BytesIO(orjson.dumps(data, default=str))


def _header(path: Path) -> dict[str, Any]:
    """Everything but the result rows (and v2's table), in one streaming pass."""
    builder = ijson.ObjectBuilder()
    try:
        with open_output(path) as f:
            for prefix, event, value in ijson.parse(f, use_float=True):
                if prefix.startswith(_SKIPPED):
                    # Keep the rows' container (an empty list) so the builder stays balanced.
                    if prefix in _SKIPPED and event in ("start_array", "end_array"):
                        builder.event(event, value)
                    continue
                builder.event(event, value)
    except ijson.common.JSONError as e:
        raise fail(path, f"detected promptfoo output that is not valid JSON ({e})") from None
    if not isinstance(builder.value, dict):
        raise fail(path, "detected promptfoo output that is not a JSON object")
    return builder.value


def open_promptfoo(path: Path) -> PeerImport:
    """The run of one promptfoo output file in JSON or YAML (`-o out.json`).

    Its row-shaped forms (JSONL, CSV) open in `promptfoo_rows` (`load.open_promptfoo_file`
    picks the form).
    """
    head = _header(path)
    results = head.get("results")
    if not isinstance(results, dict) or "version" not in results:
        raise fail(path, "detected promptfoo output without 'results.version'", "results.version")
    version = results["version"]
    if version not in OUTPUT_VERSIONS:
        raise fail(
            path,
            f"promptfoo results version {version!r} is not supported "
            f"(this importer reads versions {', '.join(map(str, OUTPUT_VERSIONS))})",
            field="results.version",
        )
    config = head.get("config") or {}
    meta = head.get("metadata") or {}
    eval_id = head.get("evalId") or path.stem
    providers = _providers(results, config)
    provider, _, model = providers[0].partition(":") if len(providers) == 1 else ("", "", "")
    labels = {"source": "promptfoo", "promptfoo.evalId": str(eval_id)}
    labels.update(
        {f"promptfoo.{k}": str(meta[k]) for k in ("promptfooVersion", "author") if meta.get(k)}
    )
    created = parse_time(meta.get("evaluationCreatedAt") or results.get("timestamp"))
    if created is None:
        raise fail(path, "no evaluation time (metadata.evaluationCreatedAt)", "metadata")
    description = config.get("description") or "promptfoo eval"
    run = BundleRun(
        key=f"promptfoo-{eval_id}",
        name=description,
        suite=SuiteRef(name=description),
        agent=AgentSnapshot(
            name=", ".join(providers) or "promptfoo",
            provider=provider or None,
            model=model or None,
        ),
        labels=labels,
        config=RunConfig(
            score_gates=(ScoreGate(score=PASS_SCORE, op=">=", value=1.0),),
            scorers=_scorers(results),
        ),
        created_at=created,
        completed_at=parse_time(meta.get("exportedAt")),
    )
    several_prompts = (
        len({p.get("label") or p.get("raw") for p in results.get("prompts") or []}) > 1
    )
    places: list[dict[int, tuple[str, int]]] = []

    def cases() -> Iterator[BundleCase]:
        if not places:  # one pass over the rows first, for the repetitions (then kept)
            places.append(_places(path))
        return _cases(path, several_prompts, places[0])

    return PeerImport(format=Format.PROMPTFOO, sources=(str(path),), run=run, cases=cases)


def is_rows_jsonl(path: Path) -> bool:
    """Whether a JSON file's first value is one result row (`-o out.jsonl`), not an output.

    A YAML output is not. Only the first value's top-level keys are read, streamed: an output's
    rows are never built.
    """
    if is_yaml(path):
        return False
    keys: set[str] = set()
    with path.open("rb") as f:
        try:
            for prefix, event, value in ijson.parse(f, multiple_values=True):
                if prefix == "" and event == "map_key":
                    keys.add(value)
                    if value == "evalId":
                        return False
                    if {"testCase", "success"} <= keys:
                        return True
                elif prefix == "" and event in ("end_map", "end_array"):
                    break
        except ijson.common.JSONError:
            return False
    return False


def repetition_places(seen: Iterator[tuple[int, bytes]]) -> dict[int, tuple[str, int]]:
    """Each testIdx → (test case key, repetition), from every row's (testIdx, test identity).

    promptfoo gives every repetition of `--repeat` (and every expanded vars combination) a
    testIdx of its own. Rows with one identity (the test case and its vars) are repetitions of
    one test: its key is `test-<first testIdx>` (`test-<testIdx>` without repetitions, as
    before), their repetition the rank of their testIdx.
    """
    groups: dict[bytes, set[int]] = {}
    for idx, identity in seen:
        groups.setdefault(identity, set()).add(idx)
    places: dict[int, tuple[str, int]] = {}
    for indices in groups.values():
        ordered = sorted(indices)
        for repetition, idx in enumerate(ordered):
            places[idx] = (f"test-{ordered[0]}", repetition)
    return places


def identity(*parts: Any) -> bytes:
    """A digest naming one test (its definition and vars) within one eval."""
    data = orjson.dumps(list(parts), option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.sha256(data).digest()


def row_identity(row: Mapping[str, Any]) -> bytes:
    """The test a result row is of: its test case and vars (the same in its repetitions)."""
    return identity(row.get("testCase"), row.get("vars"))


def _places(path: Path) -> dict[int, tuple[str, int]]:
    """Each testIdx → (test case key, repetition), over every row (`repetition_places`)."""

    def seen() -> Iterator[tuple[int, bytes]]:
        with open_output(path) as f:
            try:
                for row in ijson.items(f, ROWS, use_float=True):
                    if isinstance(row, Mapping) and isinstance(row.get("testIdx"), int):
                        yield row["testIdx"], row_identity(row)
            except ijson.common.JSONError as e:
                raise fail(path, f"promptfoo output is cut off or not valid JSON ({e})") from None

    return repetition_places(seen())


def _scorers(results: Mapping[str, Any]) -> tuple[ScorerInfo, ...]:
    """Promptfoo's per-prompt metrics: pass rate, average score, each named metric's average.

    With several prompts or providers each one is a variant and its scorers carry it in their
    name (`promptfoo@openai:gpt-4o/pass_rate`), as promptfoo's viewer shows a column each.
    """
    prompts = [p for p in results.get("prompts") or [] if isinstance(p, Mapping)]

    def info(
        name: str, score: str, metric: str, reported: float, variant: str | None
    ) -> ScorerInfo:
        return ScorerInfo(
            name=name if variant is None else f"{name}@{variant.removesuffix(chr(0x1F))}",
            score=score,
            semantics="promptfoo",
            metrics=(metric,),
            reported={metric: reported},
            passes_when="promptfoo's own pass/fail of the row (every assertion passes)",
            variant=variant,
        )

    several_prompts = len({p.get("label") or p.get("raw") for p in prompts}) > 1
    out: list[ScorerInfo] = []
    for i, p in enumerate(prompts):
        metrics = p.get("metrics") or {}
        rows = sum(
            int(metrics.get(k) or 0) for k in ("testPassCount", "testFailCount", "testErrorCount")
        )
        configuration = str(p.get("provider") or "provider")
        if several_prompts:
            configuration += f" | {p.get('label') or i}"
        variant = f"{configuration}\x1f" if len(prompts) > 1 else None
        named = metrics.get("namedScores") or {}
        counts = metrics.get("namedScoresCount") or {}

        if rows:
            out.append(
                info(
                    "promptfoo",
                    PASS_SCORE,
                    "pass_rate",
                    metrics.get("testPassCount", 0) / rows,
                    variant,
                )
            )
            if isinstance(metrics.get("score"), int | float):
                out.append(info("score", "score", "mean", metrics["score"] / rows, variant))
        for name, total in named.items():
            count = counts.get(name) or rows
            if isinstance(total, int | float) and count:
                out.append(info(name, name, "mean", total / count, variant))
    return tuple(out)


def _providers(results: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    for p in results.get("prompts") or []:
        name = p.get("provider")
        if isinstance(name, str) and name not in found:
            found.append(name)
    if not found:
        for p in config.get("providers") or []:
            name = p if isinstance(p, str) else (p.get("label") or p.get("id"))
            if isinstance(name, str) and name not in found:
                found.append(name)
    return found


def _cases(
    path: Path, several_prompts: bool, places: Mapping[int, tuple[str, int]]
) -> Iterator[BundleCase]:
    with open_output(path) as f:
        try:
            for row in ijson.items(f, ROWS, use_float=True):
                yield case_of(row, several_prompts, places)
        except ijson.common.JSONError as e:
            raise fail(path, f"promptfoo output is cut off or not valid JSON ({e})") from None


def provider_name(row: Mapping[str, Any]) -> str:
    """A result row's provider: its label, else its id."""
    p = row.get("provider")
    if isinstance(p, Mapping):
        return str(p.get("label") or p.get("id") or "provider")
    return str(p or "provider")


def _statement(assertion: Any) -> str:
    """An assertion as a readable statement: `contains 'Bonjour'`, `latency <= 3000`."""
    if not isinstance(assertion, Mapping):
        return "assertion"
    kind = str(assertion.get("type") or "assertion")
    value = assertion.get("value")
    threshold = assertion.get("threshold")
    text = kind
    if value is not None and not isinstance(value, list | dict):
        text += f" {value!r}" if isinstance(value, str) else f" {value}"
    elif isinstance(value, list | dict):
        text += " " + (text_of(value) or "")[:200]
    if threshold is not None:
        text += f" (threshold {threshold})"
    if assertion.get("metric"):
        text += f" [{assertion['metric']}]"
    return text


def _components(results: Any, asserts: Any) -> Iterator[tuple[OutcomeResult, str | None]]:
    """Outcome results of every assertion, with each model grader's rendered prompt.

    An assert-set's result carries no `assertion` (its test case's `assert` entry names it);
    promptfoo lists the set's members again after it, so they are not walked twice.
    """
    declared = asserts if isinstance(asserts, list) else []
    for i, c in enumerate(results or []):
        if not isinstance(c, Mapping):
            continue
        assertion = c.get("assertion") or (declared[i] if i < len(declared) else None)
        statement = _statement(assertion)
        if statement == "assertion":
            statement = f"assertion {i + 1}"
        yield (
            OutcomeResult(
                statement=statement,
                passed=bool(c.get("pass")),
                justification=text_of(c.get("reason")),
            ),
            text_of((c.get("metadata") or {}).get("renderedGradingPrompt")),
        )


def _transcript(row: Mapping[str, Any]) -> list[Turn]:
    response = row.get("response") or {}
    prompt = row.get("prompt") or {}
    output = response.get("output") if isinstance(response, Mapping) else None
    text = output if isinstance(output, str) else text_of(output)
    tokens = response.get("tokenUsage") or {} if isinstance(response, Mapping) else {}
    latency = row.get("latencyMs")
    if text is not None and _TURN.match(text):
        # conversation-replay renders a whole conversation as `[Turn n] role: text` blocks.
        parts = _TURN.split(text)[1:]
        return [
            Turn(role=Role(role), content=body.strip().removesuffix("---").strip())
            for role, body in zip(parts[::2], parts[1::2], strict=True)
        ]
    turns = []
    raw = prompt.get("raw") if isinstance(prompt, Mapping) else None
    if raw:
        turns.append(Turn(role=Role.USER, content=str(raw)))
    if text is not None:
        turns.append(
            Turn(
                role=Role.ASSISTANT,
                content=text,
                latency_ms=float(latency) if isinstance(latency, int | float) else None,
                usage=usage_of(tokens.get("prompt"), tokens.get("completion")),
                cost_usd=row.get("cost") if isinstance(row.get("cost"), int | float) else None,
            )
        )
    return turns


def case_of(
    row: Mapping[str, Any], several_prompts: bool, places: Mapping[int, tuple[str, int]]
) -> BundleCase:
    """One result row as a case; `places` names the test and repetition of each testIdx."""
    test = row.get("testCase") or {}
    grading = row.get("gradingResult") or {}
    repetition = 0
    if "testIdx" in row:
        key, repetition = places.get(row["testIdx"], (f"test-{row['testIdx']}", 0))
    else:
        # Older outputs have no test index: the test's vars name it (the same across providers).
        digest = hashlib.sha256(orjson.dumps(row.get("vars") or {}, option=orjson.OPT_SORT_KEYS))
        key = f"vars-{digest.hexdigest()[:12]}"
    configuration = provider_name(row)
    if several_prompts:
        prompt = row.get("prompt") or {}
        configuration += f" | {prompt.get('label') or row.get('promptIdx')}"
    asserts = test.get("assert") if isinstance(test, Mapping) else None
    components = list(_components(grading.get("componentResults"), asserts))
    prompts = [p for _, p in components if p]
    scores = [NamedScore(name=PASS_SCORE, value=bool(row.get("success")), scale=ScoreScale.BOOLEAN)]
    if isinstance(row.get("score"), int | float):
        scores.append(named_score("score", row["score"]))
    named = {**(grading.get("namedScores") or {}), **(row.get("namedScores") or {})}
    scores.extend(
        named_score(name, value)
        for name, value in named.items()
        if name not in (PASS_SCORE, "score")
    )
    used = grading.get("tokensUsed") or {}
    failure = row.get("failureReason")
    error = None
    if failure == _ERROR_FAILURE or (row.get("error") and not grading):
        error = BundleError(
            message=str(row.get("error") or "provider error"), kind="promptfoo_error"
        )
    response = row.get("response") or {}
    tokens = response.get("tokenUsage") or {} if isinstance(response, Mapping) else {}
    description = test.get("description") if isinstance(test, Mapping) else None
    return BundleCase(
        test_case=TestCaseSnapshot(
            key=key,
            name=description,
            expected_outcomes=[ExpectedOutcome(statement=o.statement) for o, _ in components],
            configuration=configuration,
        ),
        repetition=repetition,
        status=BundleCaseStatus.ERRORED if error else BundleCaseStatus.COMPLETED,
        error=error,
        transcript=_transcript(row),
        usage=usage_of(tokens.get("prompt"), tokens.get("completion")),
        cost_usd=row.get("cost") if isinstance(row.get("cost"), int | float) else None,
        named_scores=[
            BundleNamedScores(
                scorer="promptfoo",
                scores=scores,
                explanation=text_of(grading.get("reason")),
                prompt="\n\n---\n\n".join(prompts) if prompts else None,
                usage=usage_of(used.get("prompt"), used.get("completion")),
                metadata=finite(
                    {
                        "id": row.get("id"),
                        "vars": row.get("vars"),
                        "failureReason": failure,
                        "error": row.get("error"),
                    }
                ),
            )
        ],
        outcomes=[BundleOutcomes(results=[o for o, _ in components])] if components else [],
    )
