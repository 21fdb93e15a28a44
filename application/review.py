"""Review a team can run (DESIGN §18): queues over a rule, reviewers, blind labels, agreement.

The use cases every entry point calls (`evaledger review …`, `/review/queues/…`, `/ui/review/…`):
create a queue from a rule over runs, read it (with inter-reviewer agreement), a reviewer's next
item, one item (blind: nothing of the verdict or the other labels until the reader labelled it),
label, skip, adjudicate, and the gold items export. Who may see what is `ReviewQueue.may_see`;
who may open an item is `item_access` here: the reviewers it was given to, the queue's
adjudicators and admins; anyone else meets a 404, as for a case outside their project.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import TypeAdapter

from evaledger.application.review_queue import CaseRow, judges_disagree
from evaledger.domain.errors import NotFoundError, PermissionDeniedError, ValidationError
from evaledger.domain.events import CaseOpened, TokenScope, TranscriptRecorded
from evaledger.domain.events.review import ReviewAssignment
from evaledger.domain.review import GoldLabel, ReviewQueue, reviewer_name
from evaledger.domain.writes import Context, Written
from evaledger.projections.case_pages import case_scores_by_id
from evaledger.projections.votes import reviewed_cases
from evaledger.scoring.agreement import MeasureAgreement, measure_agreement, shown
from evaledger.scoring.review_rule import ReviewFacts, RuleError, parse_rule

if TYPE_CHECKING:
    from evaledger.application.ports import Services

DEFAULT_PROJECT = "default"
MAX_REVIEWERS = 100
MAX_QUEUE_CASES = 10_000
"""Cases one queue may hold (they are listed in its creation event)."""
AGREEMENT_METHOD = (
    "Cohen's κ (2 reviewers) or Krippendorff's α (ordinal, more reviewers), "
    "bootstrap 95 % percentile interval over items (fixed seed); no figure under 10 items"
)


def context_of(actor: str) -> Context:
    """The context of the store's owner acting as `actor` (the CLI)."""
    return Context(actor=actor)


def queue_project(ctx: Context, project: str | None) -> str:
    """The project a queue is read or written in: the token's own, else as asked (default)."""
    return ctx.project or project or DEFAULT_PROJECT


# -- creating a queue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueCreated:
    """A queue just created: how many cases its rule took."""

    project: str
    name: str
    cases: int
    written: Written


def select_cases(services: Services, run_id: UUID, where: str) -> list[UUID]:
    """The run's cases the rule takes, in the run's order (key, repetition, variant)."""
    try:
        rule = parse_rule(where)
    except RuleError as e:
        raise ValidationError(str(e), field="where") from None
    rows = [CaseRow.of(s) for s in services.reads.case_score_objects(run_id)]
    facts = {str(f.case_id): f for f in services.reads.facts(run_id)}
    flags, _ = reviewed_cases(services.reads.engine, run_id)
    taken = []
    for row in sorted(rows, key=lambda r: (r.test_case_key, r.repetition, r.variant)):
        fact = facts.get(row.case_id)
        subject = ReviewFacts(
            key=row.test_case_key,
            status=row.status,
            passed=row.passed,
            score=row.overall_score,
            metric_scores=row.metric_scores,
            flagged=row.case_id in flags,
            judge_error=row.judge_error,
            judges_disagree=fact is not None and judges_disagree(fact.verdicts),
        )
        if rule.matches(subject):
            taken.append(UUID(row.case_id))
    return taken


def names_list(text: str | Sequence[str] | None, field_name: str) -> list[str]:
    """Reviewer names from `a,b` or a list: trimmed, none empty, at most `MAX_REVIEWERS`."""
    items = text.split(",") if isinstance(text, str) else list(text or [])
    names = [n.strip() for n in items if n.strip()]
    if len(names) > MAX_REVIEWERS:
        raise ValidationError(f"{field_name}: at most {MAX_REVIEWERS} names", field=field_name)
    return names


def create_review_queue(
    services: Services,
    name: str,
    run_ids: Sequence[UUID],
    ctx: Context,
    *,
    where: str = "",
    reviewers: Sequence[str] = (),
    per_item: int = 1,
    blind: bool = False,
    adjudicators: Sequence[str] = (),
) -> QueueCreated:
    """Create a queue over the cases of `run_ids` the rule takes; give them out round-robin."""
    if not name.strip() or len(name) > 200 or "/" in name:
        raise ValidationError("name: 1 to 200 characters, no '/'", field="name")
    if not run_ids:
        raise ValidationError("run: a queue needs at least one run", field="run")
    if not reviewers:
        raise ValidationError("reviewers: name at least one reviewer", field="reviewers")
    projects = {services.ledger.project_of(r) for r in run_ids}
    if None in projects:
        raise NotFoundError("run: no such run")
    if len(projects) != 1:
        raise ValidationError("run: the runs of one queue are of one project", field="run")
    project = str(projects.pop())
    ctx.check_project(project, "run")
    services.sync()
    case_ids = [c for r in dict.fromkeys(run_ids) for c in select_cases(services, r, where)]
    if len(case_ids) > MAX_QUEUE_CASES:
        raise ValidationError(
            f"where: the rule took {len(case_ids)} cases; a queue holds at most "
            f"{MAX_QUEUE_CASES} (narrow the rule)",
            field="where",
        )
    written = services.ledger.create_review_queue(
        project,
        name,
        ctx,
        rule=where.strip(),
        run_ids=list(dict.fromkeys(run_ids)),
        case_ids=case_ids,
        reviewers=reviewers,
        per_item=per_item,
        blind=blind,
        adjudicators=adjudicators,
    )
    return QueueCreated(project, name, len(case_ids), written)


# -- reading a queue ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemLabel:
    """One reviewer's label of an item, as shown."""

    reviewer: str
    passed: bool
    score: float | None
    comment: str | None


@dataclass(frozen=True)
class QueueItemView:
    """One case of a queue, as the queue page lists it for its reader."""

    case_id: UUID
    key: str
    reviewers: list[str]
    labelled_by: list[str]
    skipped_by: list[str]
    visible: bool
    """False: blind, and the reader has not labelled it: no labels, no gold shown."""
    labels: list[ItemLabel]
    gold: GoldLabel | None


@dataclass(frozen=True)
class ReviewerProgress:
    """How far one reviewer is."""

    reviewer: str
    assigned: int
    labelled: int
    skipped: int


@dataclass(frozen=True)
class QueueView:
    """A queue as read by one reader: its definition, items, progress and agreement."""

    project: str
    name: str
    rule: str
    run_ids: list[UUID]
    reviewers: list[str]
    adjudicators: list[str]
    per_item: int
    blind: bool
    created_by: str
    items: list[QueueItemView]
    progress: list[ReviewerProgress]
    agreement: list[MeasureAgreement]
    agreement_method: str = AGREEMENT_METHOD
    gold_items: int = 0
    reader: str | None = None
    may_adjudicate: bool = False
    """The reader may open every item and fix its gold label (an adjudicator, or an admin)."""


def list_review_queues(
    services: Services, ctx: Context, project: str | None = None
) -> list[tuple[str, str]]:
    """(project, name) of the queues the context may see (a token: its project's)."""
    return services.ledger.review_queue_names(ctx.project or project)


def get_queue(services: Services, name: str, ctx: Context, project: str | None) -> ReviewQueue:
    """The queue, if the context may read it."""
    return services.ledger.review_queue(queue_project(ctx, project), name, ctx)


def reviewer_agreement(queue: ReviewQueue) -> list[MeasureAgreement]:
    """Agreement between the queue's reviewers on pass/fail and on the 0-5 score."""
    passed: dict[str, dict[str, float]] = {}
    scores: dict[str, dict[str, float]] = {}
    for case_id, labels in queue.labels.items():
        for reviewer, label in labels.items():
            passed.setdefault(str(case_id), {})[reviewer] = 1.0 if label.passed else 0.0
            if label.score is not None:
                scores.setdefault(str(case_id), {})[reviewer] = float(label.score)
    return [measure_agreement("passed", passed), measure_agreement("score", scores)]


def queue_view(
    services: Services, name: str, ctx: Context, project: str | None = None
) -> QueueView:
    """The queue as `ctx`'s reviewer may see it (blind items hide their labels and gold)."""
    queue = get_queue(services, name, ctx, project)
    me = reviewer_name(ctx.actor)
    keys = _case_keys(services, queue.created.case_ids)
    items = []
    for case_id in queue.created.case_ids:
        labels = queue.labels.get(case_id, {})
        visible = queue.may_see(case_id, me)
        items.append(
            QueueItemView(
                case_id=case_id,
                key=keys.get(case_id, str(case_id)),
                reviewers=queue.assigned.get(case_id, []),
                labelled_by=sorted(labels),
                skipped_by=sorted(queue.skips.get(case_id, set())),
                visible=visible,
                labels=[_shown(lab) for lab in labels.values()] if visible else [],
                gold=queue.gold(case_id) if visible else None,
            )
        )
    c = queue.created
    return QueueView(
        project=c.project,
        name=c.name,
        rule=c.rule,
        run_ids=c.run_ids,
        reviewers=c.reviewers,
        adjudicators=c.adjudicators,
        per_item=c.per_item,
        blind=c.blind,
        created_by=c.actor,
        items=items,
        progress=_progress(queue),
        agreement=reviewer_agreement(queue),
        gold_items=sum(queue.gold(i) is not None for i in c.case_ids),
        reader=me,
        may_adjudicate=queue.may_adjudicate(me) or ctx.scope.allows(TokenScope.ADMIN),
    )


def _shown(label: Any) -> ItemLabel:
    return ItemLabel(label.reviewer, label.passed, label.score, label.comment)


def _progress(queue: ReviewQueue) -> list[ReviewerProgress]:
    rows = []
    named = [r for rs in queue.assigned.values() for r in rs]
    for reviewer in dict.fromkeys([*queue.created.reviewers, *named]):
        given = [c for c, rs in queue.assigned.items() if reviewer in rs]
        rows.append(
            ReviewerProgress(
                reviewer=reviewer,
                assigned=len(given),
                labelled=sum(reviewer in queue.labels.get(c, {}) for c in given),
                skipped=sum(reviewer in queue.skips.get(c, set()) for c in given),
            )
        )
    return rows


def _case_keys(services: Services, case_ids: Sequence[UUID]) -> dict[UUID, str]:
    found = case_scores_by_id(services.reads.engine, [str(c) for c in case_ids])
    return {UUID(k): v["test_case_key"] for k, v in found.items()}


# -- one item -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemVerdict:
    """What the judges and the run's spec made of the case (hidden from a blind reviewer)."""

    status: str
    passed: bool | None
    overall_score: float | None
    metric_scores: dict[str, float | None]
    gate_reason: str


@dataclass(frozen=True)
class ReviewItem:
    """One case of a queue as its reader may see it."""

    queue: str
    case_id: UUID
    run_id: UUID
    key: str
    input: Any
    expected_outcomes: list[str]
    turns: list[dict[str, Any]]
    blind: bool
    hidden: bool
    """True: the reader must label it before seeing the verdict and the other labels."""
    verdict: ItemVerdict | None
    labels: list[ItemLabel]
    gold: GoldLabel | None
    my_label: ItemLabel | None
    assigned_to_me: bool
    next_case: UUID | None
    may_adjudicate: bool
    """The reader may fix the gold label (a named adjudicator, or an admin)."""


def item_access(queue: ReviewQueue, case_id: UUID, ctx: Context) -> None:
    """The reader may open the item: one of its reviewers, an adjudicator, or an admin.

    Anyone else meets a 404 (the item does not exist for them), as for another project's case.
    """
    me = reviewer_name(ctx.actor)
    reviewers = queue.reviewers_of(case_id)
    if me in reviewers or queue.may_adjudicate(me) or ctx.scope.allows(TokenScope.ADMIN):
        return
    raise NotFoundError(f"no case {case_id} for {me!r} in review queue {queue.name!r}")


def review_item(
    services: Services, name: str, case_id: UUID, ctx: Context, project: str | None = None
) -> ReviewItem:
    """One item of the queue for its reader; blind: verdict and others' labels withheld."""
    queue = get_queue(services, name, ctx, project)
    item_access(queue, case_id, ctx)
    me = reviewer_name(ctx.actor)
    opened, turns = _case_events(services, case_id)
    visible = queue.may_see(case_id, me)
    labels = queue.labels.get(case_id, {})
    verdict = None
    if visible:
        found = case_scores_by_id(services.reads.engine, [str(case_id)]).get(str(case_id))
        if found is not None:
            row = CaseRow.of(found)
            verdict = ItemVerdict(
                row.status, row.passed, row.overall_score, row.metric_scores, row.gate_reason
            )
    mine = labels.get(me)
    return ReviewItem(
        queue=queue.name,
        case_id=case_id,
        run_id=opened.run_id,
        key=opened.test_case.key,
        input=first_input(turns),
        expected_outcomes=[o.statement for o in opened.test_case.expected_outcomes],
        turns=turns,
        blind=queue.created.blind,
        hidden=not visible,
        verdict=verdict,
        labels=[_shown(lab) for lab in labels.values()] if visible else [],
        gold=queue.gold(case_id) if visible else None,
        my_label=_shown(mine) if mine is not None else None,
        assigned_to_me=me in queue.assigned.get(case_id, []),
        next_case=queue.next_for(me, after=case_id),
        may_adjudicate=queue.may_adjudicate(me) or ctx.scope.allows(TokenScope.ADMIN),
    )


def _case_events(services: Services, case_id: UUID) -> tuple[CaseOpened, list[dict[str, Any]]]:
    opened: CaseOpened | None = None
    turns: list[dict[str, Any]] = []
    for event in services.ledger.events_of(case_id):
        if isinstance(event, CaseOpened):
            opened = event
        elif isinstance(event, TranscriptRecorded) and not turns:
            turns = [t.model_dump(mode="json", include={"role", "content"}) for t in event.turns]
    if opened is None:
        raise NotFoundError(f"no case {case_id}")
    return opened, turns


def first_input(turns: Sequence[dict[str, Any]]) -> Any:
    """The case's input: its first user turn's text (None without one)."""
    for turn in turns:
        if turn.get("role") == "user":
            return turn.get("content")
    return None


def blind_hold(
    services: Services, aggregate_id: UUID, actor: str, project: str | None
) -> str | None:
    """The blind queue that keeps a run's or a case's results from this reader, if any.

    A reviewer with an item of a blind queue still to label may not read that case (its page,
    history, explanation) nor its run's results (run page, cases, comparisons, exports): they
    would show the verdict. None: nothing is held from them.
    """
    me = reviewer_name(actor)
    for queue_project_, name in services.ledger.review_queue_names(project):
        queue = services.ledger.review_queue(queue_project_, name)
        if not queue.created.blind:
            continue
        pending = [c for c, rs in queue.assigned.items() if me in rs and not queue.may_see(c, me)]
        if aggregate_id in pending:
            return name
        if aggregate_id in queue.created.run_ids and pending:
            return name
    return None


def check_not_blind(
    services: Services, aggregate_id: UUID, actor: str, project: str | None
) -> None:
    """Refuse (403) what `blind_hold` holds: the reader labels their items first."""
    held = blind_hold(services, aggregate_id, actor, project)
    if held is not None:
        raise PermissionDeniedError(
            f"blind review: {reviewer_name(actor)!r} has items of queue {held!r} to label; "
            "their verdicts are hidden until then (open them from the queue)"
        )


def next_item(
    services: Services, name: str, ctx: Context, project: str | None = None
) -> UUID | None:
    """The reader's next case in the queue (None: nothing left for them)."""
    queue = get_queue(services, name, ctx, project)
    return queue.next_for(reviewer_name(ctx.actor))


# -- acts ---------------------------------------------------------------------------------------


def label_item(
    services: Services,
    name: str,
    case_id: UUID,
    ctx: Context,
    *,
    passed: bool,
    score: float | None = None,
    comment: str | None = None,
    project: str | None = None,
) -> Written:
    """The reader labels an item given to them (once)."""
    return services.ledger.label_review_item(
        queue_project(ctx, project), name, case_id, ctx, passed=passed, score=score, comment=comment
    )


def skip_item(
    services: Services,
    name: str,
    case_id: UUID,
    ctx: Context,
    *,
    reason: str | None = None,
    project: str | None = None,
) -> Written:
    """The reader passes on an item given to them."""
    return services.ledger.skip_review_item(queue_project(ctx, project), name, case_id, ctx, reason)


def adjudicate_item(
    services: Services,
    name: str,
    case_id: UUID,
    ctx: Context,
    *,
    passed: bool,
    score: float | None = None,
    reason: str | None = None,
    project: str | None = None,
) -> Written:
    """An adjudicator (or an admin) fixes the item's gold label."""
    return services.ledger.adjudicate_review_item(
        queue_project(ctx, project), name, case_id, ctx, passed=passed, score=score, reason=reason
    )


def assign_items(
    services: Services,
    name: str,
    assignments: dict[UUID, list[str]],
    ctx: Context,
    project: str | None = None,
) -> Written:
    """Give cases of the queue to reviewers explicitly (admin)."""
    given = [ReviewAssignment(case_id=c, reviewers=rs) for c, rs in assignments.items() if rs]
    if not given:
        raise ValidationError("assign: name a case and its reviewers", field="assign")
    return services.ledger.assign_review_items(queue_project(ctx, project), name, given, ctx)


# -- export -------------------------------------------------------------------------------------


def gold_items(
    services: Services, name: str, ctx: Context, project: str | None = None
) -> list[dict[str, Any]]:
    """The queue's settled items in the dataset item format, in queue order.

    `{"key", "input", "expected_outcomes", "tags", "metadata": {run_id, case_id, queue}, "label":
    {"passed", "score", "by"}}`: what `evaledger dataset add NAME FILE` reads.
    """
    queue = get_queue(services, name, ctx, project)
    me = reviewer_name(ctx.actor)
    lines = []
    for case_id in queue.created.case_ids:
        gold = queue.gold(case_id)
        if gold is None or not queue.may_see(case_id, me):
            continue
        opened, turns = _case_events(services, case_id)
        lines.append(
            {
                "key": opened.test_case.key,
                "input": first_input(turns),
                "expected_outcomes": [o.statement for o in opened.test_case.expected_outcomes],
                "tags": list(opened.test_case.tags),
                "metadata": {
                    "run_id": str(opened.run_id),
                    "case_id": str(case_id),
                    "queue": queue.name,
                    "label_how": gold.how,
                },
                "label": {"passed": gold.passed, "score": gold.score, "by": list(gold.by)},
            }
        )
    return lines


# -- for the entry points -----------------------------------------------------------------------


def agreement_line(measure: MeasureAgreement) -> str:
    """One measure's agreement as printed: κ for two reviewers, else α, with its interval."""
    if len(measure.raters) == 2:
        name, value, interval = "Cohen's κ", measure.cohen_kappa, measure.kappa_interval
    else:
        name, value, interval = (
            "Krippendorff's α",
            measure.krippendorff_alpha,
            measure.alpha_interval,
        )
    figure = shown(value, measure.reliability, interval)
    return f"{measure.measure}: {name} {figure} over {measure.items} item(s)"


def case_in_queue(
    services: Services, name: str, ref: str, ctx: Context, project: str | None = None
) -> UUID:
    """A case of the queue named by its id or by its test case key (one case with that key)."""
    try:
        return UUID(ref)
    except ValueError:
        pass
    queue = get_queue(services, name, ctx, project)
    keys = _case_keys(services, queue.created.case_ids)
    found = [c for c, k in keys.items() if k == ref]
    if len(found) != 1:
        what = "no case" if not found else f"{len(found)} cases"
        raise ValidationError(f"case: {what} with key {ref!r} in queue {name!r}", field="case")
    return found[0]


def as_json(value: Any) -> Any:
    """A view of this module (dataclasses, models) as plain JSON values."""
    return TypeAdapter(type(value)).dump_python(value, mode="json")
