"""The run bundle (`evaledger.run-bundle/1`): one run with its config and cases, as JSON."""

from __future__ import annotations

from enum import StrEnum
from functools import partial
from typing import Any, Literal
from uuid import UUID

from pydantic import Field, PrivateAttr, StrictBool, model_validator

from evaledger.domain.events import (
    AgentSnapshot,
    CheckStatus,
    Claim,
    DatasetRef,
    JudgeIdentity,
    MetricScore,
    NamedScore,
    OutcomeResult,
    ParseStatus,
    SkipOutcome,
    SuiteRef,
    TestCaseSnapshot,
    Turn,
    Usage,
    case_digest,
    request_digest,
    same_case_digest,
)
from evaledger.domain.model import FrozenModel
from evaledger.domain.spec import RunConfig
from evaledger.domain.types import MAX_KEY_CHARS, Amount, Index, Instant, JsonObject, Key
from evaledger.domain.types import VARIANT_SEPARATOR as VARIANT_SEPARATOR
from evaledger.domain.types import variant_label as variant_label

BUNDLE_FORMAT = "evaledger.run-bundle/1"


class BundleRunStatus(StrEnum):
    """Lifecycle status of a run in a bundle."""

    CREATED = "created"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELED = "canceled"
    FAILED = "failed"


class BundleCaseStatus(StrEnum):
    """Execution status of a case in a bundle."""

    COMPLETED = "completed"
    """It ran to the end; its transcript (possibly empty: no transcript fails it) is final."""
    ERRORED = "errored"
    """The execution failed (a system error, not a judge failure)."""
    CANCELED = "canceled"
    """Canceled before or while it ran."""
    PENDING = "pending"
    """Not run yet, or still running: no result, so never scored as failed."""
    SKIPPED = "skipped"
    """Not an execution: skipped by its test runner, or an expected failure (`skipped` says
    which); shown apart, out of `total_executions` and the pass rate."""


_EXECUTION_FIELDS = (
    "transcript",
    "usage",
    "cost_usd",
    "started_at",
    "ended_at",
    "verdicts",
    "outcomes",
    "claims",
    "checks",
    "overrides",
)
"""What a case reports about its execution; a pending case has none of it yet."""


class BundleError(FrozenModel):
    """Why a case's execution failed."""

    message: str = Field(min_length=1)
    kind: str | None = None


class BundleSkip(FrozenModel):
    """Why a case is not an execution: the test runner's report (pytest's words)."""

    outcome: SkipOutcome = Field(default="skipped", description="skipped, xfailed or xpassed.")
    reason: str | None = Field(default=None, description="The runner's reason, if any.")


class BundleVerdict(FrozenModel):
    """One judge verdict: identity, prompt, raw reply, parsed scores; or an error."""

    verdict_id: UUID | None = Field(default=None, description="Stable id; derived if absent.")
    judge: JudgeIdentity = Field(default_factory=JudgeIdentity)
    template_id: str | None = None
    template_hash: str | None = None
    metric_scores: list[MetricScore] = Field(default_factory=list)
    expected_outcomes: list[OutcomeResult] = Field(default_factory=list)
    prompt: str | None = None
    raw_output: str | None = None
    parse_status: ParseStatus | None = Field(
        default=None, description="Derived when absent: parsed, or unparseable on error."
    )
    latency_ms: Amount | None = None
    usage: Usage | None = None
    cost_usd: Amount | None = None
    error: str | None = Field(default=None, description="Set on a judge error verdict.")
    recorded_by: str | None = Field(default=None, description="Actor who recorded it (export).")


def verdict_fields(v: BundleVerdict, verdict_id: UUID) -> dict[str, Any]:
    """The fields of JudgeVerdictRecorded for a bundle verdict."""
    status = v.parse_status or (ParseStatus.PARSED if v.error is None else ParseStatus.UNPARSEABLE)
    return {
        "verdict_id": verdict_id,
        "judge": v.judge,
        "template_id": v.template_id,
        "template_hash": v.template_hash,
        "prompt": v.prompt,
        "raw_output": v.raw_output,
        "parse_status": status,
        "metric_scores": v.metric_scores,
        "expected_outcomes": v.expected_outcomes,
        "latency_ms": v.latency_ms,
        "usage": v.usage,
        "cost_usd": v.cost_usd,
        "error": v.error,
    }


class BundleCheck(FrozenModel):
    """A structural check result."""

    check: str = Field(min_length=1)
    status: CheckStatus
    evidence: str | None = None


class BundleOutcomes(FrozenModel):
    """Expected outcomes evaluated outside a metric verdict."""

    results: list[OutcomeResult]
    judge: JudgeIdentity | None = None


class BundleOverride(FrozenModel):
    """A human correction of a verdict (override or invalidation)."""

    kind: Literal["override", "invalidate"] = "override"
    verdict_id: UUID | None = None
    verdict_index: Index | None = Field(default=None, description="Index into verdicts.")
    metric_scores: list[MetricScore] | None = None
    expected_outcomes: list[OutcomeResult] | None = None
    passed: StrictBool | None = None
    reason: str = Field(min_length=1)
    actor: Key | None = None

    @model_validator(mode="after")
    def _names_a_verdict(self) -> BundleOverride:
        if (self.verdict_id is None) == (self.verdict_index is None):
            raise ValueError("give exactly one of verdict_id or verdict_index")
        return self


class BundleNamedScores(FrozenModel):
    """A peer scorer's named scores (not 0-5 rubric metrics), with what the scorer said."""

    scorer: str = Field(min_length=1, description="The peer's scorer or grader name.")
    scores: list[NamedScore] = Field(min_length=1)
    answer: str | None = None
    explanation: str | None = None
    prompt: str | None = Field(default=None, description="The grader's prompt, verbatim.")
    raw_output: str | None = Field(default=None, description="The grader's reply, verbatim.")
    grader: JudgeIdentity | None = None
    metadata: JsonObject = Field(default_factory=dict)
    usage: Usage | None = None
    cost_usd: float | None = Field(default=None, ge=0)


def _empty(value: Any) -> bool:
    return not value


class BundleCase(FrozenModel):
    """One executed case of the run."""

    test_case: TestCaseSnapshot
    repetition: Index = 0
    # `_infer_status` fills an absent status from the content before validation; the factory
    # only keeps the field optional in the schema (no misleading fixed default there).
    status: BundleCaseStatus = Field(
        default_factory=lambda: BundleCaseStatus.PENDING,
        description="Absent: `completed` when the case carries a transcript, usage, cost, "
        "verdicts, outcomes, claims, checks or overrides, else `pending` (opened now, its facts "
        "recorded later). `pending` (not run yet or still running) carries none of those. "
        "`completed` with no transcript is a completed case with no turns: failed.",
    )
    error: BundleError | None = None
    transcript: list[Turn] = Field(default_factory=list)
    usage: Usage | None = None
    cost_usd: Amount | None = None
    started_at: Instant | None = None
    ended_at: Instant | None = None
    verdicts: list[BundleVerdict] = Field(default_factory=list)
    outcomes: list[BundleOutcomes] = Field(default_factory=list)
    claims: list[Claim] = Field(default_factory=list)
    checks: list[BundleCheck] = Field(default_factory=list)
    overrides: list[BundleOverride] = Field(default_factory=list)
    # Left out of the dump when empty, so digests of cases stored before named scores existed
    # are unchanged (re-importing an old bundle stays a no-op).
    named_scores: list[BundleNamedScores] = Field(default_factory=list, exclude_if=_empty)
    # Left out of the dump when absent, as named scores are (issue 30).
    skipped: BundleSkip | None = Field(
        default=None,
        exclude_if=_empty,
        description="A `skipped` case's report (absent: skipped, no reason).",
    )
    # Left out of the dump when false, so cases recorded before it keep their digests (issue 35).
    cached: bool = Field(
        default=False,
        exclude_if=lambda v: not v,
        description="The transcript was served from a cache, not produced by this run (issue "
        "35): shown in comparisons and excluded with `compare --exclude-cached`.",
    )

    # Left out of the dump when absent (issue 34): old bundles keep their bytes and digests.
    subject: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        exclude_if=_empty,
        description="The data subject whose personal text the case holds (e.g. a pseudonymous "
        "end-user id; it stays in the log). With sealing on, the subject's cases of a run share "
        "one key that `evaledger erase --subject` destroys.",
    )

    _legacy: BundleCase | None = PrivateAttr(default=None)
    """Not part of the format: the case an older importer made of the same source record, so a
    case it stored still matches; set with `with_legacy`."""

    def with_legacy(self, case: BundleCase) -> BundleCase:
        """Set the case an older importer made of this record (see `legacy`); returns self."""
        self._legacy = case
        return self

    @property
    def legacy(self) -> BundleCase | None:
        """The case an older importer made of this record, when it differs from this one.

        A stored case whose digest is that case's is this case (Inspect: before group tags).
        """
        return self._legacy

    def is_recorded_as(self, stored: str | None, digest: str) -> bool:
        """Whether a case stored with the digest `stored` is this case (whose digest is `digest`).

        By today's digest or the v1 rule (`same_case_digest`), or as an older importer made it
        (`legacy`).
        """
        if same_case_digest(stored, digest, partial(self.model_dump, mode="json")):
            return True
        old = self._legacy
        return old is not None and same_case_digest(
            stored, case_digest(old.model_dump()), partial(old.model_dump, mode="json")
        )

    @model_validator(mode="before")
    @classmethod
    def _infer_status(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("status") is None:
            if data.get("error") is not None:
                inferred = BundleCaseStatus.ERRORED
            elif data.get("skipped") is not None:
                inferred = BundleCaseStatus.SKIPPED
            elif any(data.get(name) for name in _EXECUTION_FIELDS):
                inferred = BundleCaseStatus.COMPLETED
            else:
                inferred = BundleCaseStatus.PENDING
            data = {**data, "status": inferred}
        return data

    @model_validator(mode="after")
    def _error_matches_status(self) -> BundleCase:
        reported = [name for name in _EXECUTION_FIELDS if getattr(self, name)]
        status = self.status
        if status is BundleCaseStatus.ERRORED and self.error is None:
            raise ValueError("error: an errored case needs an error {message, kind}")
        if status is not BundleCaseStatus.ERRORED and self.error is not None:
            raise ValueError(f"error: a {status.value} case has no error")
        if status is not BundleCaseStatus.SKIPPED and self.skipped is not None:
            raise ValueError(f"skipped: a {status.value} case was not skipped")
        if status is BundleCaseStatus.PENDING and reported:
            raise ValueError(
                f"{reported[0]}: a pending case (not run yet or still running) has no "
                f"{reported[0]} yet; record it when the case has run, or give status completed"
            )
        tc = self.test_case
        _keys(("test_case.key", tc.key), ("test_case.test_id", tc.test_id))
        return self

    @property
    def variant(self) -> str:
        """Configuration/personality label that tells apart runs of the same test case."""
        tc = self.test_case
        if tc.configuration is None and tc.persona is None:
            return ""
        return f"{tc.configuration or ''}{VARIANT_SEPARATOR}{tc.persona or ''}"


class BundleRun(FrozenModel):
    """The run: who ran what, against which config."""

    key: Key = Field(description="Client key, unique in the project.")
    name: str | None = None
    project: Key = "default"
    suite: SuiteRef
    agent: AgentSnapshot
    labels: dict[str, str] = Field(default_factory=dict)
    config: RunConfig = Field(default_factory=RunConfig)
    status: BundleRunStatus = BundleRunStatus.COMPLETED
    reason: str | None = Field(default=None, description="Why a run was canceled or failed.")
    created_at: Instant
    completed_at: Instant | None = None
    dataset: DatasetRef | None = Field(
        default=None,
        description="The dataset version the run ran: {name, version, hash} (issue 35); its "
        "cases link to the dataset's items by test case key.",
    )

    @model_validator(mode="after")
    def _identifiers_fit(self) -> BundleRun:
        suite, agent = self.suite, self.agent
        _keys(
            ("suite.name", suite.name),
            ("suite.version", None if suite.version is None else str(suite.version)),
            ("agent.name", agent.name),
            ("agent.version", agent.version),
            ("agent.provider", agent.provider),
            ("agent.model", agent.model),
            *((f"labels.{k}", k) for k in self.labels),
        )
        return self

    _legacy_config: RunConfig | None = PrivateAttr(default=None)
    """Not part of the format: the config an older importer gave this source's run, so a run
    it stored still matches (`creation_digests`); set with `with_legacy_config`."""

    def with_legacy_config(self, config: RunConfig) -> BundleRun:
        """Set the config an older importer gave this run (see `creation_digests`); returns it."""
        self._legacy_config = config
        return self

    def creation_body(self) -> dict[str, Any]:
        """The part of the run that RunCreated fixes: its identity for "same run, same body".

        Lifecycle fields are excluded, and so is what a source knows only when it ends: its
        scorers' metric names (as its results list them) and reported figures, and the labels in
        `END_LABELS` (a run recorded live, by the
        Inspect hook, is created before them, and importing its log later is the same run).
        """
        body = self._body(self.config)
        labels = body.get("labels") or {}
        for label in END_LABELS:
            labels.pop(label, None)
        for scorer in (body.get("config") or {}).get("scorers") or ():
            for known_at_the_end in ("metrics", "reported"):
                scorer.pop(known_at_the_end, None)
        return body

    def creation_digests(self) -> frozenset[str]:
        """Digests a stored RunCreated may carry for this run: the body's, the v1 body's.

        v1 (before session 7) kept every label and dropped each scorer's reducer (and grouped
        metrics) as well; its config is the legacy config when an importer gave one. Each also
        without the dataset reference: importers before issue 35 recorded none.
        """
        v1 = self._body(self._legacy_config or self.config)
        for scorer in (v1.get("config") or {}).get("scorers") or ():
            for known_at_the_end in ("metrics", "reported", "reducer", "grouped"):
                scorer.pop(known_at_the_end, None)
        found = {request_digest(self.creation_body()), request_digest(v1)}
        if self.dataset is not None:
            # Importers before issue 35 recorded no dataset: a run they stored is this run.
            before = self.model_copy(update={"dataset": None})
            before._legacy_config = self._legacy_config
            found |= before.creation_digests()
        return frozenset(found)

    def _body(self, config: RunConfig) -> dict[str, Any]:
        body = self.model_dump(mode="json", exclude={"status", "reason", "completed_at", "config"})
        body["config"] = config.model_dump(mode="json")
        if body.get("dataset") is None:
            body.pop("dataset", None)  # runs recorded before the field keep their digest
        return dict(sorted(body.items()))


END_LABELS = ("inspect.status",)
"""Labels a source writes only when it ends (Inspect's log status): not in a run's identity."""


class RunBundle(FrozenModel):
    """A whole run, portable between ledgers."""

    format: Literal["evaledger.run-bundle/1"] = Field(description="Format tag and version.")
    run: BundleRun
    cases: list[BundleCase] = Field(default_factory=list)


def _keys(*fields: tuple[str, str | None]) -> None:
    # Identifiers nested in value objects get the edge's key limit here, not in the value
    # objects: stored events stay lenient, so events recorded before the limit still replay.
    for name, value in fields:
        if value is not None and len(value) > MAX_KEY_CHARS:
            raise ValueError(f"{name}: at most {MAX_KEY_CHARS} characters, got {len(value)}")


def bundle_json_schema() -> dict[str, Any]:
    """The published JSON Schema of the bundle format."""
    schema = RunBundle.model_json_schema()
    # The model takes a bare statement for a blocker outcome (a `before` validator the schema
    # generator cannot see); say so, or validators refuse valid bundles.
    outcomes = schema["$defs"]["TestCaseSnapshot"]["properties"]["expected_outcomes"]
    outcomes["items"] = {
        "anyOf": [outcomes["items"], {"type": "string", "minLength": 1}],
        "description": "An outcome, or its statement alone (a blocker).",
    }
    schema["$id"] = "https://evaledger.dev/schemas/run-bundle.v1.schema.json"
    schema["title"] = BUNDLE_FORMAT
    return schema
