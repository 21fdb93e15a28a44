"""Aggregates: Run, Case and the project's metric catalogue.

Each aggregate is rebuilt by applying its events in order (`apply` is pure with respect to the
outside world); commands check invariants, then `_trigger` a new event whose time, actor and
idempotency data were decided by the caller.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar, cast
from uuid import NAMESPACE_URL, UUID, uuid5

from evaledger.domain.bundle import (
    BundleCase,
    BundleCaseStatus,
    BundleSkip,
    verdict_fields,
)
from evaledger.domain.errors import (
    ClosedRunError,
    ConflictError,
    IdempotencyConflictError,
    ValidationError,
)
from evaledger.domain.events import (
    GENESIS_HASH,
    BaselineApproved,
    BaselineRevoked,
    CaseEvent,
    CaseFlagged,
    CaseOpened,
    CasesAttached,
    CaseUnflagged,
    CatalogueEvent,
    ClaimsVerified,
    DomainEvent,
    ExecutionCanceled,
    ExecutionErrored,
    ExecutionSkipped,
    HumanLabelRecorded,
    IdempotencyKeyUsed,
    JudgeVerdictRecorded,
    MetricRegistered,
    MetricScore,
    NamedScoresRecorded,
    OutcomeEvaluated,
    OutcomeResult,
    RunCanceled,
    RunCompleted,
    RunCreated,
    RunEvent,
    RunFailed,
    RunStarted,
    ScoreLabel,
    ScoreOverridden,
    SourceResultsRecorded,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.metrics import BUILTIN_BY_NAME, MetricDefinition, ScoreType
from evaledger.domain.payloads import SEALED_FIELDS, subject_key
from evaledger.domain.spec import ScorerInfo

NAMESPACE = uuid5(NAMESPACE_URL, "https://evaledger.dev/ids")
E = TypeVar("E", bound=DomainEvent)
Catalogue = Mapping[str, MetricDefinition]


def run_id_for(project: str, run_key: str) -> UUID:
    """Deterministic run id: the same (project, key) always names the same run."""
    return uuid5(NAMESPACE, f"run\x1f{project}\x1f{run_key}")


def case_id_for(run_id: UUID, case_key: str, repetition: int, variant: str) -> UUID:
    """Deterministic case id `uuid5(run_id, case_key, repetition, variant)`."""
    return uuid5(run_id, f"{case_key}\x1f{repetition}\x1f{variant}")


def catalogue_id_for(project: str) -> UUID:
    """Id of a project's metric catalogue."""
    return uuid5(NAMESPACE, f"catalogue\x1f{project}")


@dataclass(frozen=True)
class Meta:
    """What every event of one command shares, decided before any event is created."""

    timestamp: datetime
    actor: str
    idempotency_key: str | None = None
    request_digest: str | None = None
    seal: bool = False
    """Seal the personal strings of the events (`domain/payloads.py`): the store's setting."""


class RunStatus(StrEnum):
    """Lifecycle of a run."""

    CREATED = "created"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELED = "canceled"
    FAILED = "failed"

    @property
    def is_closed(self) -> bool:
        """Closed runs take no more case events (overrides excepted)."""
        return self in (RunStatus.COMPLETED, RunStatus.CANCELED, RunStatus.FAILED)


class Aggregate:
    """Common mechanics: id, version, hash chain, pending events, idempotency keys."""

    def __init__(self, aggregate_id: UUID) -> None:
        self.id = aggregate_id
        self.version = 0
        self.last_hash = GENESIS_HASH
        self.idempotency: dict[str, str | None] = {}
        self._pending: list[DomainEvent] = []

    def __deepcopy__(self, memo: dict[int, Any]) -> Aggregate:
        """The copy eventsourcing's aggregate cache hands to each command.

        Events and value objects are immutable, so only the containers are copied (a generic
        deep copy of a 10,000-case run walked every case id and its creation event, ~270 ms).
        """
        clone = object.__new__(type(self))
        state = clone.__dict__
        for name, value in self.__dict__.items():
            kind = type(value)
            state[name] = kind(value) if kind in (list, set, dict) else value
        return clone

    def collect_events(self) -> list[DomainEvent]:
        """Pending events, handed over once (eventsourcing's CollectEventsProtocol)."""
        pending, self._pending = self._pending, []
        return pending

    def seen(self, meta: Meta) -> bool:
        """True when this idempotency key was already recorded with the same body."""
        if meta.idempotency_key is None or meta.idempotency_key not in self.idempotency:
            return False
        if self.idempotency[meta.idempotency_key] != meta.request_digest:
            raise IdempotencyConflictError(
                f"idempotency key {meta.idempotency_key!r} was used before with a different body"
            )
        return True

    def _trigger(self, cls: type[E], meta: Meta, **fields: Any) -> E:
        """Build, apply and keep one event."""
        return self._trigger_with(cls, meta, None, fields)

    def _trigger_with(
        self, cls: type[E], meta: Meta, dumped: Mapping[str, Any] | None, fields: Mapping[str, Any]
    ) -> E:
        """`_trigger`, for fields taken from a validated bundle case when `dumped` is given.

        `dumped` is the python-mode dump of the fields holding value objects (from the case's
        dump). The event is then built without validating those values again
        (`DomainEvent.trusted`) and its state is encoded from `dumped`
        (`DomainEvent.encode_with`) instead of dumping the event again. The command's own
        values (actor, time) are still checked here.
        """
        header = {
            "originator_id": self.id,
            "originator_version": self.version + 1,
            "timestamp": meta.timestamp,
            "actor": meta.actor,
            "idempotency_key": meta.idempotency_key,
            "request_digest": meta.request_digest,
            "prev_hash": self.last_hash,
        }
        seal = self.seal_subject() if meta.seal and cls.topic_name in SEALED_FIELDS else None
        if dumped is not None and meta.actor and meta.timestamp.utcoffset() is not None:
            event = cls.trusted({**header, **fields})
            event.encode_with(dumped, seal)
        else:
            event = cls(**header, **fields)
            if seal is not None:
                event.seal_payload(seal)
        self.apply(event)
        self._pending.append(event)
        return event

    def seal_subject(self) -> str:
        """The vault key name of this aggregate's sealed payloads (the aggregate by default)."""
        return str(self.id)

    def apply(self, event: DomainEvent) -> None:
        """Apply one event: advance version and chain, then the aggregate's own mutation."""
        self.version = event.originator_version
        self.last_hash = event.hash()
        if event.idempotency_key is not None:
            self.idempotency[event.idempotency_key] = event.request_digest
        self._mutate(event)

    def _mutate(self, event: DomainEvent) -> None:
        raise NotImplementedError


A = TypeVar("A", bound=Aggregate)


def replay(cls: type[A], events: Iterable[DomainEvent], start: A | None = None) -> A | None:
    """Projector function for eventsourcing's Repository: fold events into an aggregate."""
    aggregate = start
    for event in events:
        if aggregate is None:
            aggregate = cls(event.originator_id)
        aggregate.apply(event)
    return aggregate


class Run(Aggregate):
    """One evaluation run: config snapshot, lifecycle, its cases' ids, baseline approval."""

    created: RunCreated
    status: RunStatus
    case_ids: list[UUID]
    baseline: bool

    @classmethod
    def create(cls, run_id: UUID, meta: Meta, **fields: Any) -> Run:
        """Record RunCreated."""
        run = cls(run_id)
        run.case_ids = []
        run._trigger(RunCreated, meta, **fields)
        return run

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, RunCreated):
            self.created = event
            self.status = RunStatus.CREATED
            self.case_ids = []
            self._case_set: set[UUID] = set()
            self.baseline = False
            self.end_labels: dict[str, str] = dict(event.labels)
            self.end_scorers = event.config.scorers
        elif isinstance(event, RunStarted):
            self.status = RunStatus.RUNNING
        elif isinstance(event, CasesAttached):
            self.case_ids.extend(event.case_ids)
            self._case_set.update(event.case_ids)
        elif isinstance(event, RunCompleted):
            self.status = RunStatus.COMPLETED
        elif isinstance(event, RunCanceled):
            self.status = RunStatus.CANCELED
        elif isinstance(event, RunFailed):
            self.status = RunStatus.FAILED
        elif isinstance(event, SourceResultsRecorded):
            self.end_labels = {**self.end_labels, **event.labels}
            self.end_scorers = event.scorers
        elif isinstance(event, BaselineApproved):
            self.baseline = True
        elif isinstance(event, BaselineRevoked):
            self.baseline = False

    def has_case(self, case_id: UUID) -> bool:
        """True when the case was attached to this run."""
        return case_id in self._case_set

    def ensure_open(self) -> None:
        """Closed runs take no new cases or case events."""
        if self.status.is_closed:
            raise ClosedRunError(f"run {self.id} is {self.status.value}; it takes no more cases")

    def start(self, meta: Meta) -> None:
        """Record RunStarted (once)."""
        self.ensure_open()
        if self.status is RunStatus.CREATED:
            self._trigger(RunStarted, meta)

    def attach_cases(self, case_ids: Sequence[UUID], meta: Meta) -> None:
        """Record the ids of newly opened cases."""
        self.ensure_open()
        new = [c for c in dict.fromkeys(case_ids) if c not in self._case_set]
        if new:
            self._trigger(CasesAttached, meta, case_ids=new)

    def complete(
        self, meta: Meta, completed_at: datetime, case_hashes: Mapping[UUID, str] | Seal
    ) -> None:
        """Record RunCompleted with a seal over the last hash of every case (or that seal)."""
        self.ensure_open()
        seal = (
            case_hashes
            if isinstance(case_hashes, Seal)
            else Seal(seal_of(case_hashes), len(case_hashes))
        )
        self._trigger(
            RunCompleted,
            meta,
            completed_at=completed_at,
            seal=seal.digest,
            case_count=seal.case_count,
        )

    def release_attached(self, before: int) -> list[UUID]:
        """Drop from memory (and give) the case ids attached after the first `before`.

        For a streamed import only, which keeps them on disk (`CaseIndex`) and seals from there;
        the recorded `CasesAttached` events are unchanged. Afterwards only closing may use it.
        """
        released = self.case_ids[before:]
        del self.case_ids[before:]
        self._case_set.difference_update(released)
        return released

    def cancel(self, meta: Meta, reason: str | None) -> None:
        """Record RunCanceled."""
        self.ensure_open()
        self._trigger(RunCanceled, meta, reason=reason)

    def fail(self, meta: Meta, reason: str) -> None:
        """Record RunFailed."""
        self.ensure_open()
        self._trigger(RunFailed, meta, reason=reason)

    def record_source_results(
        self, meta: Meta, labels: Mapping[str, str], scorers: Sequence[ScorerInfo]
    ) -> None:
        """Record what the source knew only at its end, if the run does not say it yet.

        Allowed on a closed run: a live run closes before its log is imported. Only scorers
        that are the run's own (same names, scores and reducers) take new figures.
        """
        new_labels = {k: v for k, v in labels.items() if self.end_labels.get(k) != v}
        own = [(s.name, s.score, s.reducer) for s in self.end_scorers]
        same = own == [(s.name, s.score, s.reducer) for s in scorers]
        new_scorers = same and tuple(scorers) != tuple(self.end_scorers)
        if new_labels or new_scorers:
            self._trigger(
                SourceResultsRecorded,
                meta,
                labels=new_labels,
                scorers=tuple(scorers) if same else self.end_scorers,
            )

    def approve_baseline(self, meta: Meta, reason: str | None) -> None:
        """Approve this completed run as the baseline of its (agent, suite)."""
        if self.status is not RunStatus.COMPLETED:
            raise ConflictError(
                f"run {self.id} is {self.status.value}; only a completed run can be a baseline"
            )
        self._trigger(
            BaselineApproved,
            meta,
            agent=self.created.agent.name,
            suite=self.created.suite.name,
            reason=reason,
        )

    def revoke_baseline(self, meta: Meta, reason: str | None) -> None:
        """Revoke this run's baseline approval."""
        if not self.baseline:
            raise ConflictError(f"run {self.id} is not an approved baseline")
        self._trigger(
            BaselineRevoked,
            meta,
            agent=self.created.agent.name,
            suite=self.created.suite.name,
            reason=reason,
        )


def seal_of(case_hashes: Mapping[UUID, str]) -> str:
    """Digest over (case id, last hash) of every case, in id order."""
    return seal_in_order((c, case_hashes[c]) for c in sorted(case_hashes, key=str)).digest


@dataclass(frozen=True)
class Seal:
    """A run's seal and how many cases it covers."""

    digest: str
    case_count: int


def seal_in_order(pairs: Iterable[tuple[UUID, str]]) -> Seal:
    """`seal_of` over (case id, last hash) pairs already in id order (read back from disk)."""
    h = hashlib.sha256()
    count = 0
    for case_id, digest in pairs:
        h.update(f"{case_id}:{digest}\n".encode())
        count += 1
    return Seal(h.hexdigest(), count)


class Case(Aggregate):
    """One executed case: test case snapshot, transcript, verdicts, outcomes, claims, checks."""

    opened: CaseOpened
    turn_count: int
    has_transcript: bool
    errored: bool
    canceled: bool
    verdict_ids: set[UUID]
    scores: set[str]
    """The case's named scores that have a numeric reading (an override or label names one)."""
    flag: str | None
    """The reason of the case's standing flag (None: not flagged)."""

    @classmethod
    def open(
        cls, case_id: UUID, meta: Meta, *, dumped: Mapping[str, Any] | None = None, **fields: Any
    ) -> Case:
        """Record CaseOpened."""
        case = cls(case_id)
        case._trigger_with(CaseOpened, meta, dumped, fields)
        return case

    @classmethod
    def open_from_bundle(
        cls,
        case_id: UUID,
        run_id: UUID,
        bc: BundleCase,
        meta: Meta,
        catalogue: Catalogue,
        *,
        bundle_authors: bool,
        dumped: Mapping[str, Any] | None = None,
    ) -> Case:
        """Open a case with every fact its bundle case holds (unsaved).

        The order of the events is part of the stored log (and of every hash over it): the
        transcript, the verdicts, named scores, outcomes, claims, checks, corrections, and how
        the execution ended. `meta` is the opening's; the facts follow at its time by its actor.
        `bundle_authors`: an override's own `actor` is kept (an export keeps authors; a token's
        caller may not name one). `dumped` (the case's python-mode dump) gives each event's value
        objects already dumped: every state is encoded from it (`DomainEvent.encode_with`), not
        dumped again.
        """
        d = bc.model_dump() if dumped is None else dumped
        case = cls.open(
            case_id,
            meta,
            run_id=run_id,
            test_case=bc.test_case,
            repetition=bc.repetition,
            variant=bc.variant,
            subject=bc.subject,
            cached=bc.cached,
            dumped={"test_case": d["test_case"]},
        )
        follow = Meta(timestamp=meta.timestamp, actor=meta.actor, seal=meta.seal)
        case._record_transcript(bc, d, follow, catalogue)
        verdict_ids = case._record_verdicts(bc, d, follow, catalogue)
        case._record_scores_and_checks(bc, d, follow, catalogue)
        case._record_corrections(bc, d, follow, catalogue, verdict_ids, bundle_authors)
        case._record_ending(bc, follow, catalogue)
        return case

    def _record_transcript(
        self, bc: BundleCase, d: Mapping[str, Any], follow: Meta, catalogue: Catalogue
    ) -> None:
        # A completed case always records its transcript, even an empty one: that is what tells
        # "completed with no turns" (failed) from "pending" (only CaseOpened) in the events.
        if bc.status is BundleCaseStatus.COMPLETED or (
            bc.transcript or bc.usage is not None or bc.cost_usd is not None
        ):
            self.record(
                TranscriptRecorded,
                follow,
                catalogue,
                turns=bc.transcript,
                usage=bc.usage,
                cost_usd=bc.cost_usd,
                started_at=bc.started_at,
                ended_at=bc.ended_at,
                dumped={"turns": d["transcript"], "usage": d["usage"]},
            )

    def _record_verdicts(
        self, bc: BundleCase, d: Mapping[str, Any], follow: Meta, catalogue: Catalogue
    ) -> list[UUID]:
        """Record the judges' verdicts; their ids, in order (overrides may name them by index)."""
        verdict_ids: list[UUID] = []
        for i, v in enumerate(bc.verdicts):
            vid = v.verdict_id or uuid5(self.id, f"verdict\x1f{i}")
            verdict_ids.append(vid)
            vd = d["verdicts"][i]
            nested = {k: vd[k] for k in ("judge", "metric_scores", "expected_outcomes", "usage")}
            try:
                self.record(
                    JudgeVerdictRecorded, follow, catalogue, dumped=nested, **verdict_fields(v, vid)
                )
            except ValidationError as e:
                raise ValidationError(
                    f"verdicts[{i}].{e.detail}", field=f"verdicts[{i}].{e.field}"
                ) from None
        return verdict_ids

    def _record_scores_and_checks(
        self, bc: BundleCase, d: Mapping[str, Any], follow: Meta, catalogue: Catalogue
    ) -> None:
        for k, named in enumerate(bc.named_scores):
            nd = d["named_scores"][k]
            self.record(
                NamedScoresRecorded,
                follow,
                catalogue,
                dumped={f: nd[f] for f in ("scores", "grader", "metadata", "usage")},
                **dict(named),
            )
        for k, outcome in enumerate(bc.outcomes):
            od = d["outcomes"][k]
            self.record(
                OutcomeEvaluated,
                follow,
                catalogue,
                dumped={"results": od["results"], "judge": od["judge"]},
                results=outcome.results,
                judge=outcome.judge,
            )
        if bc.claims:
            self.record(
                ClaimsVerified, follow, catalogue, dumped={"claims": d["claims"]}, claims=bc.claims
            )
        for c in bc.checks:
            self.record(
                StructuralCheckRecorded,
                follow,
                catalogue,
                check=c.check,
                status=c.status,
                evidence=c.evidence,
                dumped={},
            )

    def _record_corrections(
        self,
        bc: BundleCase,
        d: Mapping[str, Any],
        follow: Meta,
        catalogue: Catalogue,
        verdict_ids: list[UUID],
        bundle_authors: bool,
    ) -> None:
        for i, o in enumerate(bc.overrides):
            if o.verdict_index is not None and o.verdict_index >= len(verdict_ids):
                raise ValidationError(
                    f"overrides[{i}].verdict_index: no verdict {o.verdict_index}",
                    field=f"overrides[{i}].verdict_index",
                )
            vid = o.verdict_id or verdict_ids[cast(int, o.verdict_index)]
            author = o.actor if o.actor and bundle_authors else follow.actor
            who = Meta(timestamp=follow.timestamp, actor=author)
            if o.kind == "invalidate":
                self.record(
                    VerdictInvalidated, who, catalogue, dumped={}, verdict_id=vid, reason=o.reason
                )
            else:
                od = d["overrides"][i]
                self.record(
                    VerdictOverridden,
                    who,
                    catalogue,
                    dumped={f: od[f] for f in ("metric_scores", "expected_outcomes")},
                    verdict_id=vid,
                    metric_scores=o.metric_scores,
                    expected_outcomes=o.expected_outcomes,
                    passed=o.passed,
                    reason=o.reason,
                )

    def _record_ending(self, bc: BundleCase, follow: Meta, catalogue: Catalogue) -> None:
        if bc.status is BundleCaseStatus.ERRORED:
            assert bc.error is not None
            self.record(
                ExecutionErrored,
                follow,
                catalogue,
                dumped={},
                message=bc.error.message,
                kind=bc.error.kind,
            )
        elif bc.status is BundleCaseStatus.CANCELED:
            self.record(ExecutionCanceled, follow, catalogue, dumped={}, reason=None)
        elif bc.status is BundleCaseStatus.SKIPPED:
            skip = bc.skipped or BundleSkip()
            self.record(
                ExecutionSkipped,
                follow,
                catalogue,
                dumped={},
                outcome=skip.outcome,
                reason=skip.reason,
            )

    def seal_subject(self) -> str:
        """The case's data subject's key in its run, or the case's own (`subject_key`)."""
        return subject_key(self.opened.run_id, self.opened.subject, self.id)

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, CaseOpened):
            self.opened = event
            self.turn_count = 0
            self.has_transcript = False
            self.errored = False
            self.canceled = False
            self.verdict_ids = set()
            self.scores = set()
            self.flag = None
        elif isinstance(event, TranscriptRecorded):
            self.turn_count = len(event.turns)
            self.has_transcript = True
        elif isinstance(event, ExecutionErrored):
            self.errored = True
        elif isinstance(event, ExecutionCanceled):
            self.canceled = True
        elif isinstance(event, JudgeVerdictRecorded):
            self.verdict_ids.add(event.verdict_id)
        elif isinstance(event, NamedScoresRecorded):
            self.scores.update(s.name for s in event.scores if s.number is not None)
        elif isinstance(event, CaseFlagged):
            self.flag = event.reason
        elif isinstance(event, CaseUnflagged):
            self.flag = None

    @property
    def run_id(self) -> UUID:
        """The run this case belongs to."""
        return self.opened.run_id

    def record(
        self,
        cls: type[CaseEvent],
        meta: Meta,
        catalogue: Mapping[str, MetricDefinition],
        *,
        dumped: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> CaseEvent:
        """Check the invariants of one case event, then record it (`dumped`: `_trigger_with`)."""
        if fields.get("metric_scores") is not None:
            # Internal callers may pass plain dicts; check them as the event will.
            fields["metric_scores"] = [
                s if isinstance(s, MetricScore) else MetricScore.model_validate(s)
                for s in fields["metric_scores"]
            ]
        if cls is TranscriptRecorded and self.has_transcript:
            raise ConflictError(f"case {self.id} already has a transcript", field="transcript")
        if cls is JudgeVerdictRecorded:
            if fields["verdict_id"] in self.verdict_ids:
                raise ConflictError(f"verdict {fields['verdict_id']} is already recorded")
            self._check_scores(fields.get("metric_scores") or [], catalogue, "metric_scores")
        if cls in (VerdictOverridden, VerdictInvalidated):
            if fields["verdict_id"] not in self.verdict_ids:
                raise ValidationError(
                    f"verdict_id: no verdict {fields['verdict_id']} in case {self.id}",
                    field="verdict_id",
                )
            if fields.get("metric_scores") is not None:
                self._check_scores(fields["metric_scores"], catalogue, "metric_scores")
        if cls is HumanLabelRecorded:
            self._check_scores(fields.get("metric_scores") or [], catalogue, "metric_scores")
            for i, label in enumerate(fields.get("named_scores") or ()):
                name = label.score if isinstance(label, ScoreLabel) else label.get("score")
                self._check_named(name, f"named_scores[{i}].score")
        if cls is ScoreOverridden:
            self._check_named(fields.get("score"), "score")
        self._check_flag(cls)
        return self._trigger_with(cls, meta, dumped, fields)

    def _check_named(self, name: object, field: str) -> None:
        """A scorer override or label names one of the case's own numeric named scores."""
        if isinstance(name, str) and name in self.scores:
            return
        known = ", ".join(sorted(self.scores)) or "none"
        raise ValidationError(
            f"{field}: the case has no named score {name!r} (it has: {known})", field=field
        )

    def _check_flag(self, cls: type[CaseEvent]) -> None:
        """A case is flagged once until unflagged; only a flagged case can be unflagged."""
        if cls is CaseFlagged and self.flag is not None:
            raise ConflictError(f"case {self.id} is already flagged: {self.flag}", field="reason")
        if cls is CaseUnflagged and self.flag is None:
            raise ConflictError(f"case {self.id} is not flagged", field="reason")

    def _check_scores(
        self, scores: Sequence[MetricScore], catalogue: Mapping[str, MetricDefinition], where: str
    ) -> None:
        seen: set[str] = set()
        for i, s in enumerate(scores):
            at = f"{where}[{i}]"
            definition = catalogue.get(s.metric)
            if definition is None:
                raise ValidationError(
                    f"{at}.metric: unknown metric {s.metric!r}", field=f"{at}.metric"
                )
            if s.metric in seen:
                raise ValidationError(
                    f"{at}.metric: {s.metric!r} is scored twice", field=f"{at}.metric"
                )
            seen.add(s.metric)
            if definition.score_type is ScoreType.BINARY:
                if s.score is not None or s.passed is None:
                    raise ValidationError(
                        f"{at}: {s.metric!r} is a binary metric; "
                        "give 'passed' (true/false), not a score",
                        field=f"{at}.passed",
                    )
            elif s.score is None or s.passed is not None:
                raise ValidationError(
                    f"{at}.score: {s.metric!r} is a scored metric; give an integer score 0-5",
                    field=f"{at}.score",
                )
            for t in s.turns:
                if not 0 <= t < self.turn_count:
                    raise ValidationError(
                        f"{at}.turns: turn {t} is outside the transcript ({self.turn_count} turns)",
                        field=f"{at}.turns",
                    )


def idempotency_id_for(scope: str, key: str) -> UUID:
    """Id of the record of one idempotency key in one scope."""
    return uuid5(NAMESPACE, f"idempotency\x1f{scope}\x1f{key}")


class IdempotencyRecord(Aggregate):
    """Remembers what a creating command did under a client idempotency key."""

    used: IdempotencyKeyUsed | None = None

    def check(self, digest: str | None) -> list[UUID] | None:
        """The ids created before under this key with the same body; None if never used."""
        if self.used is None:
            return None
        if self.used.request_digest != digest:
            raise IdempotencyConflictError(
                f"idempotency key {self.used.idempotency_key!r} was used before with a "
                "different body"
            )
        return list(self.used.result_ids)

    def use(self, meta: Meta, scope: str, result_ids: Sequence[UUID]) -> None:
        """Record the key's first use."""
        self._trigger(IdempotencyKeyUsed, meta, scope=scope, result_ids=list(result_ids))

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, IdempotencyKeyUsed):
            self.used = event


class MetricCatalogue(Aggregate):
    """A project's custom metrics (the built-ins are code, not events)."""

    custom: dict[str, MetricDefinition]

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.custom = {}

    def metrics(self) -> dict[str, MetricDefinition]:
        """Built-in and custom metrics by id."""
        return {**BUILTIN_BY_NAME, **self.custom}

    def register(self, definition: MetricDefinition, meta: Meta, project: str) -> bool:
        """Record MetricRegistered; False when the same definition is already registered."""
        if definition.name in BUILTIN_BY_NAME:
            raise ConflictError(f"metric {definition.name!r} is built in", field="name")
        existing = self.custom.get(definition.name)
        if existing == definition:
            return False
        if existing is not None:
            raise ConflictError(
                f"metric {definition.name!r} is already registered differently", field="name"
            )
        self._trigger(MetricRegistered, meta, project=project, definition=definition)
        return True

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, MetricRegistered):
            self.custom[event.definition.name] = event.definition


__all__ = [
    "Case",
    "CaseEvent",
    "CatalogueEvent",
    "Meta",
    "MetricCatalogue",
    "OutcomeResult",
    "Run",
    "RunEvent",
    "RunStatus",
]
