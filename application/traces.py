"""Production traces: OTLP exports received, complete traces recorded as cases of online runs.

- `receive_traces` (POST /v1/traces): an export body decoded with the official OTLP messages
  (`importers/otlp.py`), its spans recorded per trace in the ledger (`TraceSpansReceived`, only
  the spans not received before: retries and split exports store each span once).
- `complete_traces` (the server's completion loop, `evaledger worker`, `evaledger online
  complete`): a trace whose root span has arrived (spans are exported when they end) and that
  got no span for `quiet_s` seconds is mapped (`importers/otel.py`) to one case of the online
  run `online/<agent>/<version>/<UTC day>` of its project, created (and started) on first use;
  the case and the trace's `TraceRecorded` are one transaction. `TracesCompleted.recorded` is
  the point online rules hang off: the cases just recorded, by run.
- `seal_online_runs` (`evaledger online seal`, the worker): the open online runs of days that are
  over are completed and sealed, after the traces due are recorded.

Online runs are ordinary runs (suite `online`, label `source=otlp`): every view works on them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from uuid import UUID

from evaledger.application.online_rules import OnlineCase, dispatch_online_rules
from evaledger.application.ports import Services
from evaledger.domain.bundle import BundleCase, BundleRun, BundleRunStatus
from evaledger.domain.errors import ClosedRunError, ConflictError
from evaledger.domain.events import AgentSnapshot, SuiteRef, TraceRecorded, TraceSpansReceived
from evaledger.domain.ledger import Context
from evaledger.domain.store.lanes import lanes_to_read
from evaledger.domain.trace_commands import TraceNotice
from evaledger.domain.traces import Trace
from evaledger.importers.otel import MappedTrace, Span, map_trace, root_span
from evaledger.importers.otlp import decode_export
from evaledger.projections.queries import RunFilter

ONLINE_SUITE = "online"
ONLINE_LABELS = {"source": "otlp"}
DEFAULT_QUIET_S = 30.0
"""Seconds without a new span after which a trace whose root has ended is complete."""
RECORD_BATCH = 200
"""Traces recorded per transaction."""


def online_run_key(agent: str, version: str, day: date) -> str:
    """`online/<agent>/<version>/<YYYY-MM-DD>`: the open run of one agent version on one UTC day."""
    return f"online/{agent}/{version}/{day.isoformat()}"


# -- receive ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TracesReceived:
    """What one OTLP export did: spans recorded, already held, rejected (with why)."""

    accepted: int
    duplicates: int
    rejected: int
    message: str
    position: int


def receive_traces(
    services: Services,
    body: bytes,
    media_type: str,
    encoding: str | None,
    ctx: Context,
    *,
    max_bytes: int,
) -> TracesReceived:
    """Record an OTLP/HTTP trace export in the token's project (the default one without tokens).

    A body that is not an export is a ValidationError (nothing stored); spans the ledger
    cannot store, or that arrive after their trace was recorded, are rejected one by one and
    counted, the rest recorded.
    """
    decoded = decode_export(body, media_type, encoding, max_bytes)
    project = ctx.project or "default"
    stored = services.ledger.receive_spans(project, decoded.traces, ctx)
    errors = list(decoded.errors)
    if stored.late:
        errors.append(f"{stored.late} span(s) of traces already recorded as cases were not taken")
    shown = "; ".join(errors[:5]) + (f"; and {len(errors) - 5} more" if len(errors) > 5 else "")
    return TracesReceived(
        accepted=stored.accepted,
        duplicates=stored.duplicates,
        rejected=decoded.rejected + stored.late,
        message=shown,
        position=stored.position,
    )


# -- complete ---------------------------------------------------------------------------------


@dataclass
class TraceCursor:
    """What a completion loop has read of the log: its position and the traces still open.

    Keep one per loop (process): each pass reads only the trace events logged since, and the
    open traces are kept as the aggregates those events make (a pass loads none again; one
    written since by another process is reloaded when its save conflicts).
    """

    position: int = 0
    """The highest log position read."""
    lanes: dict[int, int] = field(default_factory=dict)
    """Where it is in each write lane: what each pass resumes from (a lane's order is its
    commit order; the log's is not once lanes commit concurrently)."""
    open: dict[UUID, Trace] = field(default_factory=dict)
    rooted: set[UUID] = field(default_factory=set)

    def catch_up(self, services: Services) -> None:
        """Read the trace events logged since the last pass, lane by lane."""
        heads = services.ledger.lane_heads()
        for lane in lanes_to_read(heads, self.lanes):
            while notices := services.ledger.lane_trace_notices(lane, self.lanes.get(lane, 0)):
                for n in notices:
                    self._read(n)
                self.lanes[lane] = notices[-1].lane_position
            self.lanes[lane] = max(self.lanes.get(lane, 0), heads[lane])

    def _read(self, n: TraceNotice) -> None:
        """Fold one trace event into the open traces."""
        self.position = max(self.position, n.position)
        e = n.event
        if isinstance(e, TraceSpansReceived):
            trace = self.open.get(n.trace)
            if trace is None:
                trace = self.open[n.trace] = Trace(n.trace)
            if e.originator_version == trace.version + 1:
                trace.apply(e)
            if any(not s.get("parent_span_id") for s in e.spans):
                self.rooted.add(n.trace)
        elif isinstance(e, TraceRecorded):
            self.open.pop(n.trace, None)
            self.rooted.discard(n.trace)

    def close(self, trace: UUID) -> None:
        """Forget a trace just recorded."""
        self.open.pop(trace, None)
        self.rooted.discard(trace)


@dataclass(frozen=True)
class TracesCompleted:
    """What a completion pass recorded: case ids by online run; traces still open."""

    recorded: dict[UUID, list[UUID]]
    waiting: int
    position: int
    online: list[OnlineCase] = field(default_factory=list)
    """The cases recorded, with what online rules' filters read of their traces."""

    @property
    def cases(self) -> int:
        """Cases recorded by the pass."""
        return sum(len(v) for v in self.recorded.values())


def complete_traces(
    services: Services,
    ctx: Context,
    *,
    quiet_s: float = DEFAULT_QUIET_S,
    now: datetime | None = None,
    cursor: TraceCursor | None = None,
) -> TracesCompleted:
    """Record each complete trace (its root arrived, then quiet for `quiet_s`) as an online case."""
    cursor = cursor if cursor is not None else TraceCursor()
    cursor.catch_up(services)
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(seconds=quiet_s)
    due = [
        t
        for agg, t in cursor.open.items()
        if agg in cursor.rooted and t.last_received is not None and t.last_received <= cutoff
    ]
    groups: dict[tuple[str, str], list[tuple[Trace, MappedTrace]]] = defaultdict(list)
    for trace in due:
        if trace.recorded is not None or trace.project is None or trace.trace_id is None:
            continue
        if root_span(trace.spans) is None:
            continue
        mapped = map_trace(trace.trace_id, trace.spans)
        key = online_run_key(mapped.agent, mapped.version, mapped.day)
        groups[(trace.project, key)].append((trace, mapped))
    recorded: dict[UUID, list[UUID]] = defaultdict(list)
    cases: list[OnlineCase] = []
    position = services.ledger.position()
    for (project, key), items in groups.items():
        for start in range(0, len(items), RECORD_BATCH):
            chunk = items[start : start + RECORD_BATCH]
            run_id = _open_run(services, project, key, chunk[0][1], ctx, now)
            pairs = [(trace, m.case) for trace, m in chunk]
            written = _record(services, run_id, pairs, project, chunk[0][1], ctx, now)
            recorded[written[0]].extend(written[1])
            position = max(position, written[2])
            for (trace, mapped), case_id in zip(chunk, written[1], strict=True):
                cursor.close(trace.id)
                facts = trace_facts(trace.spans, mapped)
                cases.append(OnlineCase(project, written[0], case_id, str(trace.trace_id), facts))
    # The hook of online rules: each trace is recorded once, so its judgments are sent once.
    dispatch_online_rules(services, cases)
    return TracesCompleted(dict(recorded), len(cursor.open), position, cases)


def trace_facts(spans: Sequence[Span], mapped: MappedTrace) -> dict[str, str]:
    """What an online rule's filter reads of a trace: agent, version, model, service, attributes.

    `attribute.NAME` is a scalar attribute of the root span, else of its resource (`true` /
    `false` for booleans, numbers as written).
    """
    root = root_span(spans) or {}
    resource = root.get("resource") or {}
    facts: dict[str, str] = {}
    for attrs in (resource, root.get("attributes") or {}):  # the span's own win
        for name, value in attrs.items():
            if isinstance(value, bool):
                facts[f"attribute.{name}"] = "true" if value else "false"
            elif isinstance(value, str | int | float):
                facts[f"attribute.{name}"] = str(value)
    facts.update(agent=mapped.agent, version=mapped.version)
    if mapped.model:
        facts["model"] = mapped.model
    if isinstance(resource.get("service.name"), str):
        facts["service"] = resource["service.name"]
    return facts


def _record(
    services: Services,
    run_id: UUID,
    pairs: Sequence[tuple[Trace, BundleCase]],
    project: str,
    sample: MappedTrace,
    ctx: Context,
    now: datetime,
) -> tuple[UUID, list[UUID], int]:
    """Record the pairs in their day's run; in today's when that day's run is sealed already."""
    try:
        w = services.ledger.record_traces(run_id, pairs, ctx)
    except ClosedRunError:
        key = online_run_key(sample.agent, sample.version, now.date())
        run_id = _open_run(services, project, key, sample, ctx, now)
        w = services.ledger.record_traces(run_id, pairs, ctx)
    return run_id, list(w.ids), w.position


def _open_run(
    services: Services, project: str, key: str, sample: MappedTrace, ctx: Context, now: datetime
) -> UUID:
    """The id of the online run `key` of `project`, created and started on first use."""
    found = services.ledger.find_run(project, key)
    if found is not None:
        return found.id
    run = BundleRun(
        key=key,
        name=key,
        project=project,
        suite=SuiteRef(name=ONLINE_SUITE),
        agent=AgentSnapshot(
            name=sample.agent,
            version=sample.version,
            provider=sample.provider,
            model=sample.model,
        ),
        labels=dict(ONLINE_LABELS),
        status=BundleRunStatus.RUNNING,
        created_at=now,
    )
    try:
        run_id = services.ledger.create_run(run, ctx).id
    except ConflictError:  # another process created it first (with its own first trace)
        again = services.ledger.find_run(project, key)
        if again is None:
            raise
        return again.id
    services.ledger.start_run(run_id, ctx)
    return run_id


# -- seal -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OnlineRunSealed:
    """One online run completed and sealed."""

    run_id: UUID
    run_key: str
    project: str
    cases: int


def seal_online_runs(
    services: Services,
    ctx: Context,
    *,
    now: datetime | None = None,
    quiet_s: float = DEFAULT_QUIET_S,
    project: str | None = None,
    cursor: TraceCursor | None = None,
) -> list[OnlineRunSealed]:
    """Seal the open online runs whose UTC day is over (after recording the traces due).

    A day is over `quiet_s` after its midnight, so the traces that ended before midnight are
    recorded before its run is sealed. A trace of a sealed day completing later goes to the
    run of the day it completed on.
    """
    now = now or datetime.now(UTC)
    complete_traces(services, ctx, quiet_s=quiet_s, now=now, cursor=cursor)
    services.sync()
    last_over = (now - timedelta(seconds=quiet_s)).date() - timedelta(days=1)
    due = []
    for status in ("running", "created"):
        offset = 0
        while True:
            rows, total = services.reads.list_runs(
                RunFilter(
                    project=project or ctx.project,
                    suite=ONLINE_SUITE,
                    status=status,
                    limit=500,
                    offset=offset,
                )
            )
            due += [r for r in rows if r.labels == ONLINE_LABELS and _over(r.run_key, last_over)]
            offset += len(rows)
            if not rows or offset >= total:
                break
    sealed: list[OnlineRunSealed] = []
    for row in due:
        services.ledger.complete_run(row.run_id, ctx)
        sealed.append(OnlineRunSealed(row.run_id, row.run_key, row.project, row.case_count))
    return sealed


def _over(run_key: str, last_over: date) -> bool:
    """Whether `run_key` is an online run of a day up to `last_over`."""
    if not run_key.startswith("online/"):
        return False
    try:
        return date.fromisoformat(run_key.rsplit("/", 1)[-1]) <= last_over
    except ValueError:
        return False
