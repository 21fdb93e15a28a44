"""`evaledger.run(...)`: record a run case by case from your own code.

A case's facts are gathered as they are given (each checked at once) and written when its
`with` block ends, in one transaction: one event per fact, nothing half-stored. With
`batch_size` > 1 the cases are sent in batches instead (`client/batches.py`: one request and one
transaction per batch, the rest when the run ends; the pytest plugin does so). Every write
carries an idempotency key derived from the run and case ids, so a retried write stores nothing
new. A case left by an exception is recorded as errored, a run as failed, with the error text;
the exception still propagates.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, Self
from uuid import UUID, uuid4

from evaledger.client.backends import Backend, connect
from evaledger.client.batches import DEFAULT_INTERVAL, CaseBatches
from evaledger.client.validation import build
from evaledger.domain.aggregates import case_id_for, run_id_for
from evaledger.domain.bundle import (
    BundleCase,
    BundleCaseStatus,
    BundleError,
    BundleNamedScores,
    BundleOutcomes,
    BundleRun,
    BundleRunStatus,
    BundleSkip,
    BundleVerdict,
)
from evaledger.domain.datasets import parse_ref
from evaledger.domain.errors import (
    AuthenticationError,
    ConflictError,
    EvaledgerError,
    IdempotencyConflictError,
    InfrastructureError,
    PermissionDeniedError,
    StateError,
    ValidationError,
)
from evaledger.domain.events import (
    GRADE_VALUES,
    AgentSnapshot,
    DatasetRef,
    JudgeIdentity,
    MetricScore,
    NamedScore,
    OutcomeResult,
    ScoreScale,
    SkipOutcome,
    SuiteRef,
    TestCaseSnapshot,
    Turn,
    Usage,
)
from evaledger.domain.spec import RunConfig, ScoreGate
from evaledger.domain.types import MAX_KEY_CHARS

ScoreValue = bool | int | float | str


def run(
    suite: str,
    *,
    agent: str,
    agent_version: str | None = None,
    db: str | None = None,
    url: str | None = None,
    token: str | None = None,
    key: str | None = None,
    name: str | None = None,
    project: str | None = None,
    suite_version: str | int | None = None,
    model: str | None = None,
    provider: str | None = None,
    labels: Mapping[str, str] | None = None,
    config: RunConfig | Mapping[str, Any] | None = None,
    thresholds: Mapping[str, float] | None = None,
    dataset: str | Mapping[str, Any] | None = None,
    batch_size: int = 1,
    flush_interval: float = DEFAULT_INTERVAL,
) -> RunRecorder:
    """A run to record as a `with` block: created on entry, completed and sealed on exit.

    `key` names the run in its project (default: the suite, the UTC time and a random suffix,
    so each call is a new run); `project` defaults to the token's project on a server that
    requires one, else "default"; `thresholds` are gates on named scores (`{"exact_match": 1.0}`:
    a case passes iff each score is at least its threshold), added to `config`'s.
    `batch_size` > 1 sends cases in batches of that many (one request and one transaction
    each), a batch at most `flush_interval` seconds after its first case, the rest when the run
    ends; 1 (the default) writes each case when its block ends. `dataset` names the dataset
    version the run runs: `"name@3"` (or `"name"`: the latest), its hash filled in by the store,
    or `{"name", "version", "hash"}`; each case links to the item whose key is its test case key.
    """
    header = run_header(
        suite,
        agent=agent,
        agent_version=agent_version,
        key=key,
        name=name,
        project=project,
        suite_version=suite_version,
        model=model,
        provider=provider,
        labels=labels,
        config=config,
        thresholds=thresholds,
        dataset=dataset,
    )
    # Connected on entry: a recorder never entered holds no connection.
    return RunRecorder(
        lambda: connect(db=db, url=url, token=token),
        header,
        owns_backend=True,
        rerun=key is not None,
        checked_gates=True,
        batch_size=batch_size,
        flush_interval=flush_interval,
    )


def run_header(
    suite: str,
    *,
    agent: str,
    agent_version: str | None = None,
    key: str | None = None,
    name: str | None = None,
    project: str | None = None,
    suite_version: str | int | None = None,
    model: str | None = None,
    provider: str | None = None,
    labels: Mapping[str, str] | None = None,
    config: RunConfig | Mapping[str, Any] | None = None,
    thresholds: Mapping[str, float] | None = None,
    dataset: str | Mapping[str, Any] | None = None,
) -> BundleRun:
    """The run's header from keyword arguments (checked: a refusal names the argument).

    Without `project` the header leaves it unset: the store puts the run in the token's project
    (a server with project tokens), else in "default".
    """
    now = datetime.now(UTC)
    if isinstance(config, RunConfig):
        run_config = config
    else:
        run_config = build(RunConfig, "config", **dict(config or {}))
    if thresholds:
        gates = [
            build(ScoreGate, f"thresholds.{score}", score=score, op=">=", value=value)
            for score, value in thresholds.items()
        ]
        run_config = run_config.model_copy(
            update={"score_gates": (*run_config.score_gates, *gates)}
        )
    return build(
        BundleRun,
        "run",
        # The default key fits the key limit whatever the suite's length (the suite's own limit
        # is then the one that speaks).
        key=key or f"{suite[: MAX_KEY_CHARS - 26]}-{now:%Y%m%dT%H%M%SZ}-{uuid4().hex[:8]}",
        name=name,
        **({"project": project} if project is not None else {}),
        suite=build(SuiteRef, "suite", name=suite, version=suite_version),
        agent=build(
            AgentSnapshot,
            "agent",
            name=agent,
            version=agent_version,
            model=model,
            provider=provider,
        ),
        labels=dict(labels or {}),
        config=run_config,
        status="running",
        created_at=now,
        **({"dataset": dataset_ref(dataset)} if dataset is not None else {}),
    )


def dataset_ref(dataset: str | Mapping[str, Any]) -> DatasetRef:
    """`"name@V"`, `"name"` or `{"name", "version", "hash"}` as a run's dataset reference."""
    if isinstance(dataset, str):
        name, version = parse_ref(dataset)
        return build(DatasetRef, "dataset", name=name, version=version)
    return build(DatasetRef, "dataset", **dict(dataset))


class RunRecorder:
    """One run being recorded. Safe to share between threads (one case per thread at a time)."""

    def __init__(
        self,
        backend: Backend | Callable[[], Backend],
        header: BundleRun,
        *,
        owns_backend: bool = False,
        rerun: bool = False,
        checked_gates: bool = False,
        batch_size: int = 1,
        flush_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValidationError("batch_size: a whole number from 1", field="batch_size")
        if isinstance(flush_interval, bool) or not (
            isinstance(flush_interval, int | float) and 0 < flush_interval < 86_400
        ):
            raise ValidationError(
                "flush_interval: seconds, more than 0 and less than a day", field="flush_interval"
            )
        self._batches = (
            CaseBatches(self._send_batch, batch_size, float(flush_interval))
            if batch_size > 1
            else None
        )
        self._backend: Backend | None = None if callable(backend) else backend
        self._connect = backend if callable(backend) else None
        self.header = header
        self.id: UUID = run_id_for(header.project, header.key)
        """The run's id (deterministic: the project and key name it). Without a project given,
        the store's answer on `start` (a token's project names it there)."""
        self._create_key = f"run-{self.id}"
        self._owns_backend = owns_backend
        # The run's score gates are the user's `thresholds` (`evaledger.run`): checked at close.
        # An Inspect task's gate is its importer's, which an all-errored task never meets.
        self._checked_gates = checked_gates
        self._rerun = rerun
        self._recorded_times: dict[UUID, dict[str, Any]] = {}
        self._started = False
        self._closed = False
        self._lock = threading.Lock()
        self.case_ids: list[UUID] = []
        """The cases recorded so far, in order."""
        self._score_names: set[str] = set()
        """Every named score a recorded case of this run holds (for the thresholds' check)."""

    @property
    def backend(self) -> Backend:
        """Where the run is recorded (connected on first use)."""
        if self._backend is None:
            assert self._connect is not None
            self._backend = self._connect()
        return self._backend

    @property
    def started(self) -> bool:
        """Whether the run was created (or joined) and takes cases."""
        return self._started

    @property
    def key(self) -> str:
        """The run's key in its project."""
        return self.header.key

    def start(self) -> Self:
        """Create the run and mark it running (a no-op the second time)."""
        if not self._started:
            if self._rerun:
                self._adopt_recorded_times()
            self.id = self.backend.create_run(self.header, self._create_key)
            self._started = True
        return self

    def _adopt_recorded_times(self) -> None:
        """Reuse the wall-clock times of a run of this explicit key recorded before.

        The same block run again then sends the very bodies it sent before (a no-op), a changed
        one conflicts, and an unfinished run gets its missing cases.
        """
        if "project" not in self.header.model_fields_set:
            # The project is the store's to say (a token's own): find the run by its key there.
            found = self.backend.run_id_of(self.key)
            if found is None:
                return
            self.id = found
        recorded = self.backend.recorded(self.id)
        if recorded is None:
            return
        self.header = self.header.model_copy(update={"created_at": recorded.run.created_at})
        for case in recorded.cases:
            self._score_names |= score_names(case)
            case_id = case_id_for(self.id, case.test_case.key, case.repetition, case.variant)
            self._recorded_times[case_id] = {
                "started_at": case.started_at,
                "ended_at": case.ended_at,
            }

    def join(self) -> Self:
        """Record into a run another process created (an xdist worker joins the controller's)."""
        self._started = True
        return self

    def end(self, error: BaseException | None = None) -> None:
        """Close the run, then disconnect.

        Without an error it is completed and sealed; an exception fails it with its text; an
        interruption (Ctrl-C, `sys.exit`) cancels it, as it cancels the case it was in.
        """
        if error is None:
            try:
                self.flush()
            except Exception as e:
                # A case the store refused: the run is failed with why (its good cases stored).
                self.fail(error_text(e))
                raise
            unknown = self.unknown_thresholds()
            if unknown is not None:
                # Every case would have failed on a score it never had: the run is failed, not
                # completed as if its cases had been judged.
                self.fail(unknown.detail)
                raise unknown
            self._close(lambda: self.backend.complete_run(self.id, f"complete-{self.id}"))
        elif isinstance(error, Exception):
            self.fail(error_text(error))
        else:
            self.cancel(error_text(error))

    def unknown_thresholds(self) -> ValidationError | None:
        """The error for thresholds naming no score this run's cases recorded, else None.

        A threshold is a gate on a named score; one no case recorded (a typo: `exact_mach`)
        fails every case silently. Known once the run closes (any case may still record it
        before then); a run with no case recorded is not checked.
        """
        with self._lock:
            recorded, names = bool(self.case_ids or self._recorded_times), set(self._score_names)
        gates = [g.score for g in self.header.config.score_gates] if self._checked_gates else []
        missing = [g for g in dict.fromkeys(gates) if g not in names]
        if not recorded or not missing:
            return None
        known = ", ".join(repr(n) for n in sorted(names)) or "none"
        parts = []
        for name in missing:
            close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
            parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return ValidationError(
            f"thresholds: {', '.join(parts)} "
            f"{'names no score' if len(missing) == 1 else 'name no scores'} this run's cases "
            f"recorded (they recorded: {known})",
            field=f"thresholds.{missing[0]}",
        )

    def fail(self, reason: str) -> None:
        """Close the run as failed, with why (its buffered cases sent first); then disconnect."""
        self._close(lambda: self.backend.fail_run(self.id, reason, f"fail-{self.id}"))

    def cancel(self, reason: str) -> None:
        """Close the run as canceled, with why (its buffered cases sent first); then disconnect."""
        self._close(lambda: self.backend.cancel_run(self.id, reason, f"cancel-{self.id}"))

    def flush(self) -> None:
        """Send the cases still buffered (with `batch_size` > 1); raises what the store refused."""
        if self._batches is not None:
            self._batches.flush()

    def flushed(self) -> EvaledgerError | None:
        """`flush`, answering the store's refusal (a typed error) instead of raising it."""
        try:
            self.flush()
        except EvaledgerError as e:
            return e
        return None

    def _close(self, command: Callable[[], None]) -> None:
        try:
            if self._batches is not None and self._started:
                with contextlib.suppress(EvaledgerError):
                    # Closing for a reason of its own: a case refused here stays refused.
                    self._batches.flush()
            command()
            self._closed = True
        finally:
            self._disconnect()

    def _disconnect(self) -> None:
        if self._batches is not None:
            self._batches.close()
        if self._owns_backend and self._backend is not None:
            self._backend.close()
            self._backend = None

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self._disconnect()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end(exc)

    def case(
        self,
        key: str,
        *,
        input: str | None = None,
        repetition: int = 0,
        name: str | None = None,
        tags: Sequence[str] = (),
        expected_outcomes: Sequence[str] = (),
        configuration: str | None = None,
        persona: str | None = None,
        scenario: str | None = None,
    ) -> CaseRecorder:
        """A case to record as a `with` block; written when the block ends."""
        if not self._started:
            raise StateError("run: start the run first (`with evaledger.run(...) as run:`)")
        if self._closed:
            raise StateError(
                f"run: run {self.key!r} is closed; record its cases inside its `with` block"
            )
        snapshot = build(
            TestCaseSnapshot,
            "case",
            key=key,
            name=name,
            tags=list(tags),
            expected_outcomes=list(expected_outcomes),
            configuration=configuration,
            persona=persona,
            scenario=scenario,
        )
        if isinstance(repetition, bool) or not isinstance(repetition, int) or repetition < 0:
            raise ValidationError("case.repetition: a whole number from 0", field="case.repetition")
        recorder = CaseRecorder(snapshot, repetition, input, self.write)
        recorder.bundle()  # the case as it would be written: refused now, not after the work
        return recorder

    def write(self, case: BundleCase) -> UUID:
        """Record a whole case built elsewhere (the Inspect hook's) into this run."""
        variant = case.variant
        case_id = case_id_for(self.id, case.test_case.key, case.repetition, variant)
        if case_id in self._recorded_times:
            case = case.model_copy(update=self._recorded_times[case_id])
        if self._batches is not None:
            self._batches.add(case)
            with self._lock:
                self.case_ids.append(case_id)
                self._score_names |= score_names(case)
            return case_id
        written = self._write_one(case_id, case)
        with self._lock:
            self.case_ids.append(written)
            self._score_names |= score_names(case)
        return written

    def _send_batch(self, cases: list[BundleCase]) -> None:
        """One batch in one transaction; refused as a whole, its cases one by one."""
        ids = [case_id_for(self.id, c.test_case.key, c.repetition, c.variant) for c in cases]
        digest = hashlib.sha256(b"".join(i.bytes for i in ids)).hexdigest()[:32]
        header = self.header.model_copy(update={"status": BundleRunStatus.RUNNING})
        try:
            self.backend.ingest(header, cases, f"cases-{self.id}-{digest}")
            return
        except (InfrastructureError, AuthenticationError, PermissionDeniedError):
            raise
        except EvaledgerError:
            pass
        refused: EvaledgerError | None = None
        for case_id, case in zip(ids, cases, strict=True):
            try:
                self._write_one(case_id, case)
            except EvaledgerError as e:
                refused = refused or e
        if refused is not None:
            raise refused

    def _write_one(self, case_id: UUID, case: BundleCase) -> UUID:
        """One case in one transaction, under its own idempotency key."""
        variant = case.variant
        try:
            return self.backend.record_case(self.id, case, f"case-{case_id}")
        except ConflictError as e:
            # The key names the case (or, sent in a batch before, its content does): the same
            # case key and repetition were recorded before.
            if not isinstance(e, IdempotencyConflictError) and not (e.field or "").startswith(
                "cases["
            ):
                raise
            variant_text = f", variant {variant!r}" if variant else ""
            raise IdempotencyConflictError(
                f"case {case.test_case.key!r} (repetition {case.repetition}{variant_text}) is "
                f"already recorded in run {self.key!r} with other facts: give each case its own "
                "key, or `repetition=N` for another try",
                field="case.key",
            ) from None


def score_names(case: BundleCase) -> set[str]:
    """The names of a case's named scores (what a threshold names)."""
    return {score.name for named in case.named_scores for score in named.scores}


class CaseRecorder:
    """One case's facts, gathered as they are given and written when the `with` block ends."""

    def __init__(
        self,
        test_case: TestCaseSnapshot,
        repetition: int,
        input: str | None,
        write: Callable[[BundleCase], UUID],
    ) -> None:
        self.test_case = test_case
        self.repetition = repetition
        self.input = input
        self._write = write
        self.id: UUID | None = None
        """The case's id, once written."""
        self.written: BundleCase | None = None
        """The case as it was written (what a retry sends again)."""
        self.turns: list[Turn] = []
        self.named_scores: list[BundleNamedScores] = []
        self.outcomes: list[BundleOutcomes] = []
        self.verdicts: list[BundleVerdict] = []
        self._usage: Usage | None = None
        self._cost_usd: float | None = None
        self.started_at = datetime.now(UTC)

    def __enter__(self) -> Self:
        self.started_at = datetime.now(UTC)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.record(exc)

    def turn(
        self,
        role: Literal["system", "user", "assistant", "tool"] | str,
        content: str | None = None,
        *,
        latency_ms: float | None = None,
        tool_calls: Sequence[Mapping[str, Any]] = (),
        tool_call_id: str | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        cost_usd: float | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """One message of the conversation, with its latency and usage when known."""
        where = f"turns[{len(self.turns)}]"
        usage = None
        if prompt_tokens is not None or completion_tokens is not None:
            usage = build(
                Usage,
                f"{where}.usage",
                prompt_tokens=prompt_tokens or 0,
                completion_tokens=completion_tokens or 0,
            )
        self.turns.append(
            build(
                Turn,
                where,
                role=role,
                content=content,
                latency_ms=latency_ms,
                tool_calls=[dict(c) for c in tool_calls],
                tool_call_id=tool_call_id,
                usage=usage,
                cost_usd=cost_usd,
                metrics=dict(metrics or {}),
            )
        )

    def score(
        self,
        name: str,
        value: ScoreValue,
        *,
        scorer: str | None = None,
        answer: str | None = None,
        explanation: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """A named score: a number (0-1 a fraction), a bool, a grade (C/I/P/N) or a label."""
        where = f"scores[{len(self.named_scores)}]"
        scale = _scale(value, where)
        named = build(NamedScore, where, name=name, value=value, scale=scale)
        self.named_scores.append(
            build(
                BundleNamedScores,
                where,
                scorer=scorer or name,
                scores=[named],
                answer=answer,
                explanation=explanation,
                metadata=dict(metadata or {}),
            )
        )

    def outcome(
        self,
        statement: str,
        *,
        passed: bool,
        severity: Literal["blocker", "medium", "low"] | None = None,
        justification: str | None = None,
    ) -> None:
        """Whether an expected outcome held."""
        where = f"outcomes[{len(self.outcomes)}]"
        result = build(
            OutcomeResult,
            where,
            statement=statement,
            passed=passed,
            severity=severity,
            justification=justification,
        )
        self.outcomes.append(BundleOutcomes(results=[result]))

    def verdict(
        self,
        scores: Mapping[str, int | bool] | None = None,
        *,
        outcomes: Mapping[str, bool] | None = None,
        prompt: str | None = None,
        raw_reply: str | None = None,
        judge_model: str | None = None,
        judge_provider: str | None = None,
        judge_kind: Literal["llm", "human", "structural"] = "llm",
        latency_ms: float | None = None,
        cost_usd: float | None = None,
        error: str | None = None,
    ) -> None:
        """A judge's verdict: metric scores (0-5, or pass/fail), with its prompt and raw reply."""
        where = f"verdicts[{len(self.verdicts)}]"
        metric_scores = [
            build(
                MetricScore,
                f"{where}.scores.{metric}",
                metric=metric,
                **({"passed": value} if isinstance(value, bool) else {"score": value}),
            )
            for metric, value in (scores or {}).items()
        ]
        self.verdicts.append(
            build(
                BundleVerdict,
                where,
                judge=build(
                    JudgeIdentity,
                    f"{where}.judge",
                    kind=judge_kind,
                    model=judge_model,
                    provider=judge_provider,
                ),
                metric_scores=metric_scores,
                expected_outcomes=[
                    {"statement": statement, "passed": passed}
                    for statement, passed in (outcomes or {}).items()
                ],
                prompt=prompt,
                raw_output=raw_reply,
                latency_ms=latency_ms,
                cost_usd=cost_usd,
                error=error,
            )
        )

    def usage(
        self, prompt_tokens: int = 0, completion_tokens: int = 0, cost_usd: float | None = None
    ) -> None:
        """The case's total token usage and cost."""
        self._usage = build(
            Usage, "usage", prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
        if cost_usd is not None:
            self._cost_usd = _cost(cost_usd)

    def bundle(
        self,
        error: BaseException | None = None,
        *,
        canceled: bool = False,
        skipped: BundleSkip | None = None,
    ) -> BundleCase:
        """The case as the ledger stores it; an exception makes it errored (or canceled).

        `skipped`: not an execution (a skipped or xfailed test), counted apart.
        """
        turns = list(self.turns)
        if self.input is not None and not (
            turns and turns[0].role == "user" and turns[0].content == self.input
        ):
            # The test case snapshot has no input field: the input is the conversation's opening.
            turns.insert(0, build(Turn, "input", role="user", content=self.input))
        status = BundleCaseStatus.COMPLETED
        failure = None
        if isinstance(error, Exception):
            status = BundleCaseStatus.ERRORED
            failure = BundleError(message=error_text(error), kind=type(error).__name__)
        elif error is not None or canceled:
            status = BundleCaseStatus.CANCELED
        elif skipped is not None:
            status = BundleCaseStatus.SKIPPED
        return build(
            BundleCase,
            "case",
            test_case=self.test_case,
            repetition=self.repetition,
            status=status,
            error=failure,
            transcript=turns,
            usage=self._usage,
            cost_usd=self._cost_usd,
            started_at=self.started_at,
            ended_at=datetime.now(UTC),
            verdicts=self.verdicts,
            outcomes=self.outcomes,
            named_scores=self.named_scores,
            skipped=skipped,
        )

    def record(self, error: BaseException | None = None) -> UUID:
        """Write the case (once); what `with` does on exit."""
        if self.id is None:
            self.written = self.bundle(error)
            self.id = self._write(self.written)
        return self.id

    def cancel(self) -> UUID:
        """Write the case as canceled (it did not run)."""
        if self.id is None:
            self.written = self.bundle(canceled=True)
            self.id = self._write(self.written)
        return self.id

    def skip(self, outcome: SkipOutcome = "skipped", reason: str | None = None) -> UUID:
        """Write the case as not an execution: a skipped, xfailed or xpassed test."""
        if self.id is None:
            self.written = self.bundle(skipped=BundleSkip(outcome=outcome, reason=reason))
            self.id = self._write(self.written)
        return self.id


def _scale(value: object, where: str) -> ScoreScale:
    if isinstance(value, bool):
        return ScoreScale.BOOLEAN
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValidationError(
                f"{where}.value: a finite number, got {value}", field=f"{where}.value"
            )
        return ScoreScale.FRACTION if 0.0 <= value <= 1.0 else ScoreScale.NUMBER
    if isinstance(value, str):
        return ScoreScale.GRADE if value in GRADE_VALUES else ScoreScale.LABEL
    raise ValidationError(
        f"{where}.value: a number, a bool or a string, got {type(value).__name__}",
        field=f"{where}.value",
    )


def _cost(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e12:
        raise ValidationError("cost_usd: a finite amount from 0", field="cost_usd")
    return float(value)


def error_text(error: BaseException) -> str:
    """What an exception said, as recorded: its type and message."""
    message = str(error).strip()
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
