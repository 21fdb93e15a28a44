"""The ledger application service: every write goes through one of its commands.

Each command loads the aggregates it needs, checks invariants, and saves once (one transaction).
It returns the log position of what it wrote so callers can wait for projections. The store and
the write unit the commands run in are `writes.LedgerStore`; a case's facts each have a named
command here (`record_transcript`, `record_verdict`, `override_verdict`, `label_case`, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any, Literal, Required, TypedDict, Unpack
from uuid import UUID

from eventsourcing.persistence import Notification

from evaledger.domain import collector, importing
from evaledger.domain.aggregates import (
    Case,
    IdempotencyRecord,
    Meta,
    MetricCatalogue,
    Run,
    case_id_for,
    catalogue_id_for,
    run_id_for,
)
from evaledger.domain.bundle import BundleCase, BundleRun, RunBundle
from evaledger.domain.case_opening import open_recorded_case
from evaledger.domain.errors import (
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from evaledger.domain.events import (
    HUMAN_ACTS,
    CaseEvent,
    CaseFlagged,
    CaseUnflagged,
    CheckStatus,
    Claim,
    ClaimsVerified,
    ExecutionCanceled,
    ExecutionErrored,
    HumanLabelRecorded,
    JudgeIdentity,
    JudgeVerdictRecorded,
    MetricScore,
    OutcomeEvaluated,
    OutcomeResult,
    ParseStatus,
    ScoreLabel,
    ScoreOverridden,
    StructuralCheckRecorded,
    TokenIssued,
    TokenRevoked,
    TokenScope,
    TranscriptRecorded,
    Turn,
    Usage,
    VerdictInvalidated,
    VerdictOverridden,
    case_digest,
    request_digest,
)
from evaledger.domain.importing import IMPORT_CHUNK, ImportResult
from evaledger.domain.metrics import MetricDefinition
from evaledger.domain.spec import ScoringSpec, resolve_spec
from evaledger.domain.tokens import (
    ApiToken,
    NewToken,
    Principal,
    TokenInfo,
    issued_tokens,
    new_secret,
    secret_hash,
    split_token,
    token_aggregate_id,
)
from evaledger.domain.writes import Context as Context
from evaledger.domain.writes import LedgerApplication as LedgerApplication
from evaledger.domain.writes import LedgerStore
from evaledger.domain.writes import Written as Written
from evaledger.domain.writes import jsonable as jsonable
from evaledger.domain.writes import require_reason as require_reason
from evaledger.domain.writes import utcnow as utcnow


class VerdictFields(TypedDict, total=False):
    """A judge verdict as `Ledger.record_verdict` takes it: the fields of its event.

    Only the fields given are in the command's body (and its request digest).
    """

    verdict_id: Required[UUID]
    judge: JudgeIdentity
    template_id: str | None
    template_hash: str | None
    prompt: str | None
    raw_output: str | None
    parse_status: ParseStatus
    metric_scores: Sequence[MetricScore]
    expected_outcomes: Sequence[OutcomeResult]
    latency_ms: float | None
    usage: Usage | None
    cost_usd: float | None
    error: str | None
    panel_id: UUID | None
    self_judged: bool


class ClaimsFields(TypedDict, total=False):
    """A claim check as `Ledger.record_claims` takes it: the fields of its event."""

    claims: Required[Sequence[Claim]]
    judge: JudgeIdentity | None
    mode: Literal["grounding", "attribution"] | None
    template_id: str | None
    template_hash: str | None
    prompt: str | None
    raw_output: str | None
    error: str | None
    latency_ms: float | None
    usage: Usage | None
    cost_usd: float | None


class Ledger(LedgerStore):
    """Commands (writes) and audit reads over the event store."""

    # -- tokens ------------------------------------------------------------------------------

    def issue_token(
        self, project: str, scope: TokenScope, name: str | None, ctx: Context
    ) -> NewToken:
        """Issue an API token; the returned secret is stored nowhere (only its hash)."""
        ctx.check_admin("issuing a token")
        ctx.check_project(project, f"project {project!r}")
        token_id, token = new_secret()
        parts = split_token(token)
        assert parts is not None
        token_agg = ApiToken.issue(
            token_id,
            Meta(timestamp=self.clock(), actor=ctx.actor),
            project=project,
            scope=scope,
            name=name or f"token-{token_id}",
            secret_sha256=secret_hash(parts[1]),
        )
        position, _ = self._save(token_agg)
        return NewToken(token_id, token, position)

    def revoke_token(self, token_id: str, ctx: Context, reason: str | None = None) -> Written:
        """Revoke a token: from now on it authenticates nothing."""
        ctx.check_admin("revoking a token")
        token = self._find(ApiToken, token_aggregate_id(token_id))
        if token is None:
            raise NotFoundError(f"no token {token_id!r}")
        ctx.check_project(token.issued.project, f"token {token_id!r}")

        def command() -> Written:
            t = self._get(ApiToken, token_aggregate_id(token_id))
            t.revoke(Meta(timestamp=self.clock(), actor=ctx.actor), reason)
            position, n = self._save(t)
            return Written((t.id,), position, n)

        return self._retrying(command)

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a valid, unrevoked token; None otherwise."""
        parts = split_token(token)
        return None if parts is None else self.token_principal(*parts)

    def token_principal(self, token_id: str, secret: str | None = None) -> Principal | None:
        """An unrevoked token's principal (its secret checked if given; a web session has none)."""
        return self._tokens.principal(self._find(ApiToken, token_aggregate_id(token_id)), secret)

    def tokens(self) -> list[TokenInfo]:
        """Every token ever issued, oldest first (read from the log: tokens are few)."""
        topics = (TokenIssued.topic(), TokenRevoked.topic())
        return issued_tokens(self.decode(n) for n in self._notifications_of(topics))

    def has_tokens(self) -> bool:
        """True once any token was ever issued (serving then requires tokens)."""
        return bool(self.app.recorder.select_notifications(None, 1, topics=[TokenIssued.topic()]))

    def _notifications_of(self, topics: Sequence[str]) -> Iterable[Notification]:
        start: int | None = None  # every stored row, a forged one below 1 included
        while True:
            page = self.app.recorder.select_notifications(start, 1000, topics=topics)
            if not page:
                return
            yield from page
            start = page[-1].id + 1

    # -- run commands ------------------------------------------------------------------------

    def create_run(self, run: BundleRun, ctx: Context) -> Written:
        """Create a run with its resolved config snapshot (idempotent on the same body)."""
        run = _in_project(run, ctx)
        body = run.creation_body()
        # Keys are per project: two tenants may pick the same key.
        scope = f"POST /runs\x1f{run.project}"

        def command() -> Written:
            record, done = self._idempotent(scope, ctx, body)
            if done is not None:
                return Written(tuple(done), self.position(), 0)
            created = self._prepare_run(run, ctx)
            self._use_key(record, ctx, body, scope, [created.id])
            position, n = self._save(*_present(record), created)
            return Written((created.id,), position, n)

        return self._retrying(command)

    def _prepare_run(self, run: BundleRun, ctx: Context) -> Run:
        """The run to write to: an existing one with the same body, or a new one (unsaved)."""
        spec = self._resolve(run)
        run_id = run_id_for(run.project, run.key)
        body = run.creation_body()
        digest = request_digest(body)
        existing = self._find(Run, run_id)
        if existing is not None:
            # A run stored by an older body rule (v1) is still the same run.
            if existing.created.request_digest not in run.creation_digests():
                raise ConflictError(
                    f"run {run.key!r} already exists in project {run.project!r} "
                    "with a different body",
                    field="run",
                )
            return existing
        meta = Meta(
            timestamp=self.clock(),
            actor=ctx.actor,
            idempotency_key=ctx.idempotency_key,
            request_digest=digest,
        )
        return Run.create(
            run_id,
            meta,
            run_key=run.key,
            project=run.project,
            name=run.name,
            suite=run.suite,
            agent=run.agent,
            labels=run.labels,
            config=run.config,
            spec=spec,
            created_at=run.created_at,
        )

    def _resolve(self, run: BundleRun) -> ScoringSpec:
        return resolve_spec(run.config, self.catalogue(run.project))

    def _run_command(
        self, run_id: UUID, ctx: Context, action: Callable[[Run, Meta], None]
    ) -> Written:
        def command() -> Written:
            run = self._run_in_scope(run_id, ctx)
            meta = self._meta(ctx, {"run": str(run_id)})
            if not run.seen(meta):
                action(run, meta)
            position, n = self._save(run)
            return Written((run_id,), position, n)

        return self._retrying(command)

    def start_run(self, run_id: UUID, ctx: Context) -> Written:
        """Mark a run as running."""
        return self._run_command(run_id, ctx, lambda run, meta: run.start(meta))

    def complete_run(
        self, run_id: UUID, ctx: Context, completed_at: datetime | None = None
    ) -> Written:
        """Complete a run and seal it over its cases' last hashes."""

        def action(run: Run, meta: Meta) -> None:
            run.complete(meta, completed_at or meta.timestamp, self._last_hashes(run.case_ids))

        return self._run_command(run_id, ctx, action)

    def cancel_run(self, run_id: UUID, ctx: Context, reason: str | None = None) -> Written:
        """Cancel a run."""
        return self._run_command(run_id, ctx, lambda run, meta: run.cancel(meta, reason))

    def fail_run(self, run_id: UUID, ctx: Context, reason: str) -> Written:
        """Mark a run as failed."""
        return self._run_command(run_id, ctx, lambda run, meta: run.fail(meta, reason))

    def approve_baseline(self, run_id: UUID, ctx: Context, reason: str | None = None) -> Written:
        """Approve a completed run as the baseline of its (agent, suite); admin, with a reason."""
        ctx.check_admin("approving a baseline")
        why = require_reason(reason, "approving a baseline")
        return self._run_command(run_id, ctx, lambda run, meta: run.approve_baseline(meta, why))

    def revoke_baseline(self, run_id: UUID, ctx: Context, reason: str | None = None) -> Written:
        """Revoke a run's baseline approval; admin, with a reason."""
        ctx.check_admin("revoking a baseline")
        why = require_reason(reason, "revoking a baseline")
        return self._run_command(run_id, ctx, lambda run, meta: run.revoke_baseline(meta, why))

    def register_metric(
        self, definition: MetricDefinition, ctx: Context, project: str = "default"
    ) -> Written:
        """Add a custom metric to a project's catalogue (idempotent); admin scope."""
        ctx.check_admin("changing the metric catalogue")
        if ctx.project is not None and project != ctx.project:
            raise PermissionDeniedError(
                f"project: this token is for project {ctx.project!r}", field="project"
            )

        def command() -> Written:
            cid = catalogue_id_for(project)
            cat = self._find(MetricCatalogue, cid) or MetricCatalogue(cid)
            meta = self._meta(ctx, definition.model_dump(mode="json"))
            cat.register(definition, meta, project)
            position, n = self._save(cat)
            return Written((cid,), position, n)

        return self._retrying(command)

    # -- case commands -----------------------------------------------------------------------

    def open_case(self, run_id: UUID, case: BundleCase, ctx: Context) -> Written:
        """Open one case, with whatever of its facts the body already holds."""
        return self.ingest_cases(run_id, [case], ctx)

    def ingest_cases(self, run_id: UUID, cases: Sequence[BundleCase], ctx: Context) -> Written:
        """Open many cases with their facts in one transaction (the batch endpoint)."""
        scope = f"POST /runs/{run_id}/cases"
        body = [c.model_dump(mode="json") for c in cases] if ctx.idempotency_key else None

        if any(c.overrides for c in cases):
            ctx.check_admin("recording overrides or invalidations")

        def command() -> Written:
            run = self._run_in_scope(run_id, ctx)
            record, done = self._idempotent(scope, ctx, body)
            if done is not None:
                return Written(tuple(done), self.position(), 0)
            catalogue = self.catalogue(run.created.project)
            built = self._build_cases(run, cases, ctx, catalogue)
            ids = [c.id for c in built] or [run_id]
            self._use_key(record, ctx, body, scope, ids)
            position, n = self._save(*built, *_present(record), run=run)
            return Written(tuple(ids), position, n)

        return self._retrying(command)

    def _build_cases(
        self,
        run: Run,
        cases: Sequence[BundleCase],
        ctx: Context,
        catalogue: Mapping[str, MetricDefinition],
        offset: int = 0,
    ) -> list[Case]:
        built: list[Case] = []
        new_ids: list[UUID] = []
        seen_ids: set[UUID] = set()
        for index, bc in enumerate(cases, start=offset):
            case_id = case_id_for(run.id, bc.test_case.key, bc.repetition, bc.variant)
            if case_id in seen_ids:
                raise ValidationError(
                    f"cases[{index}]: test case {bc.test_case.key!r} repetition {bc.repetition} "
                    "appears twice",
                    field=f"cases[{index}].test_case.key",
                )
            seen_ids.add(case_id)
            # One python-mode dump of the case: its digest and its events' states share it.
            dumped = bc.model_dump()
            digest = case_digest(dumped)
            existing = self._find(Case, case_id) if run.has_case(case_id) else None
            if existing is not None:
                stored = existing.opened.request_digest
                if not bc.is_recorded_as(stored, digest):
                    raise ConflictError(
                        f"cases[{index}]: case {bc.test_case.key!r} repetition {bc.repetition} "
                        "is already recorded with different content",
                        field=f"cases[{index}]",
                    )
                built.append(existing)
                continue
            run.ensure_open()
            meta = Meta(
                timestamp=self.clock(),
                actor=ctx.actor,
                idempotency_key=ctx.idempotency_key,
                request_digest=digest,
            )
            try:
                built.append(
                    open_recorded_case(
                        case_id,
                        run.id,
                        bc,
                        meta,
                        catalogue,
                        # A bundle may name who overrode (an export keeps authors); a token may not.
                        bundle_authors=ctx.project is None,
                        dumped=dumped,
                    )
                )
            except ValidationError as e:
                raise ValidationError(
                    f"cases[{index}].{e.detail}", field=f"cases[{index}].{e.field}"
                ) from None
            new_ids.append(case_id)
        if new_ids:
            run.attach_cases(new_ids, Meta(timestamp=self.clock(), actor=ctx.actor))
        return built

    # -- case facts: one named command per fact ----------------------------------------------

    def record_transcript(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        turns: Sequence[Turn],
        usage: Usage | None = None,
        cost_usd: float | None = None,
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
        duration_ms: float | None = None,
        auto_key: bool = False,
    ) -> Written:
        """Record the case's conversation (once)."""
        body: dict[str, Any] = {"turns": list(turns), "usage": usage, "cost_usd": cost_usd}
        body |= {"started_at": started_at, "ended_at": ended_at, "duration_ms": duration_ms}
        return self._fact(case_id, TranscriptRecorded, ctx, body, auto_key=auto_key)

    def record_verdict(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        judgement: bool = False,
        auto_key: bool = False,
        **verdict: Unpack[VerdictFields],
    ) -> Written:
        """Record one judge verdict (prompt and raw reply verbatim).

        `judgement`: a verdict the ledger's own judge reached about a recorded transcript. Like a
        correction it is allowed on a closed run: it is a fact about the transcript, not a new
        execution, and the run's seal covers only the executions (DESIGN §10, re-judging).
        """
        body = dict(verdict)
        return self._fact(case_id, JudgeVerdictRecorded, ctx, body, judgement, auto_key)

    def record_claims(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        judgement: bool = False,
        auto_key: bool = False,
        **check: Unpack[ClaimsFields],
    ) -> Written:
        """Record a claim decomposition with each claim's support (`judgement`: as a verdict's)."""
        return self._fact(case_id, ClaimsVerified, ctx, dict(check), judgement, auto_key)

    def record_outcomes(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        results: Sequence[OutcomeResult],
        judge: JudgeIdentity | None = None,
        auto_key: bool = False,
    ) -> Written:
        """Record expected-outcome results decided outside a metric verdict."""
        body = {"results": list(results), "judge": judge}
        return self._fact(case_id, OutcomeEvaluated, ctx, body, auto_key=auto_key)

    def record_check(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        check: str,
        status: CheckStatus,
        evidence: str | None = None,
        auto_key: bool = False,
    ) -> Written:
        """Record a structural check (inconclusive when its hook is missing)."""
        body = {"check": check, "status": status, "evidence": evidence}
        return self._fact(case_id, StructuralCheckRecorded, ctx, body, auto_key=auto_key)

    def record_execution_error(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        message: str,
        kind: str | None = None,
        auto_key: bool = False,
    ) -> Written:
        """Record an execution error (a system error of the agent or harness, not a judge's)."""
        body = {"message": message, "kind": kind}
        return self._fact(case_id, ExecutionErrored, ctx, body, auto_key=auto_key)

    def cancel_execution(
        self, case_id: UUID, ctx: Context, *, reason: str | None = None, auto_key: bool = False
    ) -> Written:
        """Cancel the case's execution."""
        return self._fact(case_id, ExecutionCanceled, ctx, {"reason": reason}, auto_key=auto_key)

    def override_verdict(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        verdict_id: UUID,
        reason: str,
        metric_scores: Sequence[MetricScore] | None = None,
        expected_outcomes: Sequence[OutcomeResult] | None = None,
        passed: bool | None = None,
        auto_key: bool = False,
    ) -> Written:
        """An admin's correction of one verdict; the original stays in the history."""
        body = {
            "verdict_id": verdict_id,
            "metric_scores": None if metric_scores is None else list(metric_scores),
            "expected_outcomes": None if expected_outcomes is None else list(expected_outcomes),
            "passed": passed,
            "reason": reason,
        }
        return self._fact(case_id, VerdictOverridden, ctx, body, auto_key=auto_key)

    def invalidate_verdict(
        self, case_id: UUID, ctx: Context, *, verdict_id: UUID, reason: str, auto_key: bool = False
    ) -> Written:
        """An admin rules a verdict out: it stops counting and stays in the history."""
        body = {"verdict_id": verdict_id, "reason": reason}
        return self._fact(case_id, VerdictInvalidated, ctx, body, auto_key=auto_key)

    def override_score(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        score: str,
        value: float,
        reason: str,
        auto_key: bool = False,
    ) -> Written:
        """An admin corrects a source scorer's reading of one of the case's named scores."""
        body = {"score": score, "value": value, "reason": reason}
        return self._fact(case_id, ScoreOverridden, ctx, body, auto_key=auto_key)

    def label_case(
        self,
        case_id: UUID,
        ctx: Context,
        *,
        passed: bool,
        metric_scores: Sequence[MetricScore] = (),
        comment: str | None = None,
        named_scores: Sequence[ScoreLabel] = (),
        auto_key: bool = False,
    ) -> Written:
        """A reviewer's own label of the case (write scope); it feeds judge-vs-human agreement."""
        body: dict[str, Any] = {"passed": passed, "metric_scores": list(metric_scores)}
        if comment is not None:
            body["comment"] = comment
        if named_scores:
            body["named_scores"] = list(named_scores)
        return self._fact(case_id, HumanLabelRecorded, ctx, body, auto_key=auto_key)

    def flag_case(
        self, case_id: UUID, ctx: Context, *, reason: str, auto_key: bool = False
    ) -> Written:
        """Flag the case for a person (it joins the run's review queue); once until unflagged."""
        body = {"reason": reason}
        return self._fact(case_id, CaseFlagged, self._toggled(case_id, ctx, auto_key), body)

    def unflag_case(
        self, case_id: UUID, ctx: Context, *, reason: str | None = None, auto_key: bool = False
    ) -> Written:
        """Clear the case's flag (a conflict when it is not flagged)."""
        body = {"reason": reason}
        return self._fact(case_id, CaseUnflagged, self._toggled(case_id, ctx, auto_key), body)

    def record(
        self,
        case_id: UUID,
        cls: type[CaseEvent],
        ctx: Context,
        body: Mapping[str, Any],
        *,
        judgement: bool = False,
    ) -> Written:
        """Record one fact of a case by its event class (the generic form of the named commands).

        Product code calls the named commands; this form stays for the tests that walk every
        fact alike (`tests/projections/test_rebuild_property.py`, ...).
        """
        return self._fact(case_id, cls, ctx, body, judgement)

    def _toggled(self, case_id: UUID, ctx: Context, auto_key: bool) -> Context:
        """The derived idempotency key of a flag or unflag: it names the case's version.

        A flag toggles, so without a client key the same body sent again after an unflag is a new
        act; a resent request meets the flag it made (409), never a silent replay.
        """
        if not auto_key or ctx.idempotency_key is not None:
            return ctx
        version = self.get_case(case_id).version
        return replace(ctx, idempotency_key=f"auto:toggle:{case_id}:v{version}")

    def _fact(
        self,
        case_id: UUID,
        cls: type[CaseEvent],
        ctx: Context,
        body: Mapping[str, Any],
        judgement: bool = False,
        auto_key: bool = False,
    ) -> Written:
        """Record one fact of a case; the one path every named case command takes.

        `auto_key`: without a client key, the same body re-sent is the same fact, a no-op (its key
        is `auto:{topic}:{digest of the body}`).
        """
        if auto_key and ctx.idempotency_key is None:
            key = f"auto:{cls.topic_name}:{request_digest(jsonable(body))}"
            ctx = replace(ctx, idempotency_key=key)
        act = HUMAN_ACTS.get(cls)  # a person's act: corrections, labels, flags
        overrides = judgement or act is not None
        if act is not None:
            ctx.scope.require(*act)

        def command() -> Written:
            case = self.get_case(case_id)
            run = self._run_in_scope(case.run_id, ctx, f"case {case_id}")
            if not overrides:
                run.ensure_open()
            meta = self._meta(ctx, {"type": cls.topic(), **jsonable(body)})
            if not case.seen(meta):
                case.record(cls, meta, self.catalogue(run.created.project), **body)
            position, n = self._save(case)
            return Written((case_id,), position, n)

        return self._retrying(command)

    # -- bundles -----------------------------------------------------------------------------

    def import_bundle(self, bundle: RunBundle, ctx: Context) -> ImportResult:
        """Import a whole run atomically (one transaction); importing it again writes nothing."""
        bundle = bundle.model_copy(update={"run": _in_project(bundle.run, ctx)})
        if any(c.overrides for c in bundle.cases):
            ctx.check_admin("recording overrides or invalidations")
        return self._retrying(partial(importing.import_bundle, self, bundle, ctx))

    def import_stream(
        self,
        run: BundleRun,
        cases: Callable[[], Iterable[BundleCase]],
        ctx: Context,
        *,
        chunk_size: int = IMPORT_CHUNK,
        progress: Callable[[int, int], None] | None = None,
    ) -> ImportResult:
        """Import a run whose cases arrive as a stream: chunked transactions, sealed at the end.

        `cases` opens the stream afresh each time it is called; it is read twice. The first
        pass builds every chunk without saving it, so every invariant (and every parse error of
        the source) is met before anything is written: bad input stores nothing. The second pass
        writes one transaction per chunk, then the run's lifecycle (the seal) last. Memory stays
        bounded by one chunk plus one id and hash per case. An interrupted second pass leaves the
        run open with the chunks written so far; the same import run again finds those cases
        already recorded with the same content, writes the rest and seals: no duplicates.
        """
        run = _in_project(run, ctx)
        # Parsing, validating and building cases allocate short-lived objects in no cycles: with
        # the collector on, its generation scans were a large share of a streamed import.
        with collector.paused():
            return importing.import_stream(self, run, cases, ctx, chunk_size, progress)

    def _write_chunk(
        self,
        run: Run,
        chunk: Sequence[BundleCase],
        ctx: Context,
        catalogue: Mapping[str, MetricDefinition],
        offset: int,
    ) -> tuple[Run, list[Case], int]:
        """One chunk in one transaction; on a concurrent write, reload the run and retry."""
        attempts = 0

        def command() -> tuple[Run, list[Case], int]:
            nonlocal attempts
            # The run in hand is current unless a concurrent writer made this save fail.
            current = run if attempts == 0 else self.get_run(run.id)
            attempts += 1
            built = self._build_cases(current, chunk, ctx, catalogue, offset)
            _, n = self._save(*built, run=current)
            return current, built, n

        return self._retrying(command)


def _in_project(run: BundleRun, ctx: Context) -> BundleRun:
    """A token's run lands in the token's project (its own unless the body names another)."""
    if ctx.project is None:
        return run
    if "project" not in run.model_fields_set:
        return run.model_copy(update={"project": ctx.project})
    if run.project != ctx.project:
        raise PermissionDeniedError(
            f"run.project: this token is for project {ctx.project!r}, not {run.project!r}",
            field="run.project",
        )
    return run


def _present(record: IdempotencyRecord | None) -> tuple[IdempotencyRecord, ...]:
    return () if record is None else (record,)
