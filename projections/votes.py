"""`judge_votes_v1`: every judge verdict as its judge gave it, with the human corrections beside it.

Case facts fold overrides into the verdict they correct (what scoring needs); agreement needs both
the judge's original values and the human's, so they get their own read model. The agreement
report is computed from these rows by the pure functions of `scoring/agreement.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    delete,
    select,
    update,
)

from evaledger.domain.events import (
    CaseFlagged,
    CaseOpened,
    CaseUnflagged,
    HumanLabelRecorded,
    JudgeIdentity,
    JudgeVerdictRecorded,
    ParseStatus,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.spec import ScoringSpec, Severity
from evaledger.projections import encoding
from evaledger.projections.decode import Decoded, DecodedBatch
from evaledger.projections.tables import VOTES_PROJECTION, flags, labels, vote_cases, votes
from evaledger.scoring.agreement import (
    AgreementReport,
    HumanAgreement,
    HumanValue,
    human_agreement,
    judge_vs_human_pairs,
    measure_agreement,
)
from evaledger.scoring.case import score_case
from evaledger.scoring.facts import CaseFacts, MetricFact, OutcomeFact, VerdictFact


def judge_label(judge: JudgeIdentity) -> str:
    """`provider:model` (or the judge kind when there is no provider)."""
    return ":".join(x for x in (judge.provider or judge.kind, judge.model) if x)


class JudgeVotesProjection:
    """Folds verdicts, overrides, invalidations, human labels and flags into `judge_votes_v1`.

    (From state dicts.) Labels and flags have their own tables, added after the projection
    shipped: no stored event of their topics existed before, so no rebuild is needed.
    """

    name = VOTES_PROJECTION
    tables: Sequence[Table] = (votes, vote_cases, labels, flags)

    def reset(self) -> None:
        """Nothing cached."""

    def process(self, conn: Connection, batch: DecodedBatch) -> None:
        """Insert verdicts (batched), mark corrections."""
        runs: dict[str, str] = {}
        new_cases: list[dict[str, Any]] = []
        new_votes: list[dict[str, Any]] = []

        def flush() -> None:
            # Inserts are batched; a correction needs the rows it updates written first.
            if new_cases:
                conn.execute(vote_cases.insert(), new_cases)
                new_cases.clear()
            if new_votes:
                conn.execute(votes.insert(), new_votes)
                new_votes.clear()

        def run_of(cid: str) -> str:
            found = runs.get(cid)
            if found is None:
                found = conn.execute(
                    select(vote_cases.c.run_id).where(vote_cases.c.case_id == cid)
                ).scalar_one()
                runs[cid] = found
            return found

        for position, decoded in batch:
            cls = decoded.cls
            if cls not in _TOPICS:
                continue
            cid = decoded.oid
            if cls is CaseOpened:
                run_id = decoded.data["run_id"]
                runs[cid] = run_id
                new_cases.append({"case_id": cid, "run_id": run_id})
            elif cls is JudgeVerdictRecorded:
                new_votes.append(vote_row(decoded, run_of(cid), position))
            elif cls in _REVIEW_TOPICS:
                flush()
                _review_act(conn, decoded, run_of(cid), position)
            else:
                values = correction_values(decoded)
                if values:
                    flush()
                    verdict_id = str(UUID(decoded.data["verdict_id"]))
                    conn.execute(
                        update(votes).where(votes.c.verdict_id == verdict_id).values(**values)
                    )
        flush()


_REVIEW_TOPICS = frozenset({HumanLabelRecorded, CaseFlagged, CaseUnflagged})
_TOPICS = frozenset(
    {CaseOpened, JudgeVerdictRecorded, VerdictInvalidated, VerdictOverridden, *_REVIEW_TOPICS}
)


def _review_act(conn: Connection, act: Decoded, run_id: str, position: int) -> None:
    """A label is added; a flag replaces the case's flag; an unflag removes it."""
    data, cid = act.data, act.oid
    if act.cls is HumanLabelRecorded:
        conn.execute(
            labels.insert().values(
                position=position,
                case_id=cid,
                run_id=run_id,
                actor=data.get("actor") or "",
                passed=bool(data["passed"]),
                metric_scores=_scores_json(data.get("metric_scores") or ()),
            )
        )
        return
    conn.execute(delete(flags).where(flags.c.case_id == cid))
    if act.cls is CaseFlagged:
        conn.execute(
            flags.insert().values(
                case_id=cid,
                run_id=run_id,
                reason=data["reason"],
                actor=data.get("actor") or "",
                position=position,
            )
        )


def _scores_json(scores: Any) -> str:
    return encoding.dumps(
        [
            {"metric": m["metric"], "score": m.get("score"), "passed": m.get("passed")}
            for m in scores
        ]
    )


def standing_flag(engine: Engine, case_id: UUID) -> Any | None:
    """A case's standing flag (reason, actor, position), None when it is not flagged."""
    with engine.connect() as conn:
        return conn.execute(select(flags).where(flags.c.case_id == str(case_id))).first()


def reviewed_cases(engine: Engine, run_id: UUID) -> tuple[dict[str, str], set[str]]:
    """One run's flagged cases (case id → the reason of its standing flag), labelled cases."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(flags.c.case_id, flags.c.reason).where(flags.c.run_id == str(run_id))
        )
        flagged = {r.case_id: r.reason for r in rows}
        labelled = set(
            conn.scalars(select(labels.c.case_id).where(labels.c.run_id == str(run_id)).distinct())
        )
    return flagged, labelled


def vote_row(verdict: Decoded, run_id: str, position: int) -> dict[str, Any]:
    """The `judge_votes_v1` row of a JudgeVerdictRecorded, from its state dict."""
    data = verdict.data
    judge = data["judge"]
    panel_id = data.get("panel_id")
    return {
        "verdict_id": str(UUID(data["verdict_id"])),
        "case_id": verdict.oid,
        "run_id": run_id,
        "judge": ":".join(
            x for x in (judge.get("provider") or judge.get("kind", "llm"), judge.get("model")) if x
        ),
        "panel_id": None if panel_id is None else str(UUID(panel_id)),
        "self_judged": bool(data.get("self_judged", False)),
        "valid": data.get("error") is None
        and data.get("parse_status", ParseStatus.PARSED) == ParseStatus.PARSED,
        "invalidated": False,
        "metric_scores": _scores_json(data.get("metric_scores") or ()),
        "outcomes": encoding.dumps(
            [
                {"statement": o["statement"], "passed": o["passed"]}
                for o in data.get("expected_outcomes") or ()
            ]
        ),
        "human_scores": None,
        "human_passed": None,
        "position": position,
    }


def correction_values(correction: Decoded) -> dict[str, Any]:
    """What a VerdictInvalidated or VerdictOverridden changes of its verdict's row."""
    data = correction.data
    if correction.cls is VerdictInvalidated:
        return {"invalidated": True}
    values: dict[str, Any] = {}
    scores = data.get("metric_scores")
    if scores is not None:
        values["human_scores"] = _scores_json(scores)
    if data.get("passed") is not None:
        values["human_passed"] = data["passed"]
    return values


def _value(m: dict[str, Any]) -> float | None:
    if m.get("passed") is not None:
        return 1.0 if m["passed"] else 0.0
    return None if m.get("score") is None else float(m["score"])


def _verdict_fact(row: Any, case_facts: CaseFacts) -> VerdictFact:
    """The verdict as its judge gave it (corrections left out)."""
    declared = {o.statement: o.severity for o in case_facts.expected_outcomes}
    return VerdictFact(
        verdict_id=UUID(row.verdict_id),
        position=0,
        metric_scores=[MetricFact(**m) for m in encoding.loads(row.metric_scores)],
        expected_outcomes=[
            OutcomeFact(
                statement=o["statement"],
                passed=o["passed"],
                severity=declared.get(o["statement"], Severity.BLOCKER),
            )
            for o in encoding.loads(row.outcomes)
        ],
    )


def _passed_alone(row: Any, case_facts: CaseFacts, spec: ScoringSpec) -> bool | None:
    """Case pass/fail as this one verdict decides it under the spec."""
    alone = case_facts.model_copy(update={"verdicts": [_verdict_fact(row, case_facts)]})
    return score_case(alone, spec).passed


def agreement_report(
    engine: Engine, run_id: UUID, spec: ScoringSpec, facts: Sequence[CaseFacts]
) -> AgreementReport:
    """Per metric and case pass/fail: α over all judges, κ for pairs, judge vs human."""
    with engine.connect() as conn:
        rows = list(
            conn.execute(
                select(votes)
                .where(votes.c.run_id == str(run_id), votes.c.invalidated.is_(False))
                .order_by(votes.c.position)
            )
        )
        # A case's latest label is its reviewers' word (an earlier one stays in the history).
        case_labels = {
            row.case_id: row
            for row in conn.execute(
                select(labels).where(labels.c.run_id == str(run_id)).order_by(labels.c.position)
            )
        }
    by_case = {str(f.case_id): f for f in facts}
    # A judge that judged a case twice (re-judging) counts with its latest valid verdict.
    latest: dict[tuple[str, str], Any] = {}
    for row in rows:
        if row.valid:
            latest[(row.case_id, row.judge)] = row
    metric_ratings: dict[str, dict[str, dict[str, float]]] = {m.metric: {} for m in spec.metrics}
    passed_ratings: dict[str, dict[str, float]] = {}
    for (case_id, judge), row in latest.items():
        values = {m["metric"]: _value(m) for m in encoding.loads(row.metric_scores)}
        for metric, ratings in metric_ratings.items():
            value = values.get(metric)
            if value is not None:
                ratings.setdefault(case_id, {})[judge] = value
        case_facts = by_case.get(case_id)
        if case_facts is not None:
            passed = _passed_alone(row, case_facts, spec)
            if passed is not None:
                passed_ratings.setdefault(case_id, {})[judge] = 1.0 if passed else 0.0
    human = _human(rows, latest, case_labels, spec, by_case)
    return AgreementReport(
        run_id=str(run_id),
        judges=sorted({judge for _, judge in latest}),
        self_judged=sorted({row.judge for row in latest.values() if row.self_judged}),
        metrics=[measure_agreement(m, r) for m, r in metric_ratings.items()],
        case_passed=measure_agreement("case_passed", passed_ratings),
        human=human,
    )


def _human(
    rows: Sequence[Any],
    latest: dict[tuple[str, str], Any],
    case_labels: dict[str, Any],
    spec: ScoringSpec,
    by_case: dict[str, CaseFacts],
) -> list[HumanAgreement]:
    selected = {m.metric for m in spec.metrics}
    corrections: list[HumanValue] = []
    for row in rows:
        if not row.valid:
            continue
        if row.human_scores is not None:
            judged = {m["metric"]: _value(m) for m in encoding.loads(row.metric_scores)}
            for m in encoding.loads(row.human_scores):
                before, after = judged.get(m["metric"]), _value(m)
                if m["metric"] in selected and before is not None and after is not None:
                    corrections.append((row.case_id, row.judge, m["metric"], before, after))
        passed = _passed_of(row, by_case, spec) if row.human_passed is not None else None
        if passed is not None:
            human = 1.0 if row.human_passed else 0.0
            corrections.append((row.case_id, row.judge, "case_passed", passed, human))
    labelled: list[HumanValue] = []
    for (case_id, judge), row in latest.items():
        label = case_labels.get(case_id)
        if label is None:
            continue
        judged = {m["metric"]: _value(m) for m in encoding.loads(row.metric_scores)}
        for m in encoding.loads(label.metric_scores):
            before, after = judged.get(m["metric"]), _value(m)
            if m["metric"] in selected and before is not None and after is not None:
                labelled.append((case_id, judge, m["metric"], before, after))
        passed = _passed_of(row, by_case, spec)
        if passed is not None:
            labelled.append((case_id, judge, "case_passed", passed, 1.0 if label.passed else 0.0))
    pairs = judge_vs_human_pairs(corrections, labelled)
    order = {m.metric: i for i, m in enumerate(spec.metrics)}
    return [
        human_agreement(judge, measure, values)
        for (judge, measure), values in sorted(
            pairs.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], len(order)))
        )
    ]


def _passed_of(row: Any, by_case: dict[str, CaseFacts], spec: ScoringSpec) -> float | None:
    """Case pass/fail (1/0) as this verdict alone decides it, None when it decides nothing."""
    case_facts = by_case.get(row.case_id)
    passed = None if case_facts is None else _passed_alone(row, case_facts, spec)
    return None if passed is None else (1.0 if passed else 0.0)


def judge_passes(
    engine: Engine, run_id: UUID, spec: ScoringSpec, facts: Sequence[CaseFacts]
) -> list[tuple[str, str, str, bool]]:
    """(case id, judge, verdict id, pass) of each judge's latest valid verdict of each case.

    The pass/fail is the case's as that one verdict decides it under the spec, as the judge
    gave it (corrections left out): what a calibration compares with a human label.
    """
    with engine.connect() as conn:
        rows = list(
            conn.execute(
                select(votes)
                .where(votes.c.run_id == str(run_id), votes.c.invalidated.is_(False))
                .order_by(votes.c.position)
            )
        )
    latest: dict[tuple[str, str], Any] = {}
    for row in rows:
        if row.valid:
            latest[(row.case_id, row.judge)] = row
    by_case = {str(f.case_id): f for f in facts}
    out: list[tuple[str, str, str, bool]] = []
    for (case_id, judge), row in latest.items():
        case_facts = by_case.get(case_id)
        passed = None if case_facts is None else _passed_alone(row, case_facts, spec)
        if passed is not None:
            out.append((case_id, judge, row.verdict_id, passed))
    return out
