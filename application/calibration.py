"""Use cases of judge calibration (DESIGN §18, issue 35): calibrate on a gold set, list, gate.

A gold set is a dataset version whose items carry human labels. `calibrate_judge` pairs the
judge's stored verdicts of a run whose cases are the gold items (by key) with the labels and
records a `JudgeCalibrated` event; `calibration_refusals_of` says which judges of a run may not
gate (`gate --require-calibrated`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

import orjson

from evaledger.application.datasets import show_dataset
from evaledger.application.judging import JudgeOptions, Progress, judge_run
from evaledger.application.ports import Services
from evaledger.domain.errors import ValidationError
from evaledger.domain.events import DatasetRef, Estimate, JudgeCalibrated
from evaledger.domain.ledger import Context
from evaledger.judging.report import JudgeReport
from evaledger.judging.rubric import JudgeRubric
from evaledger.projections.queries import RunFilter
from evaledger.projections.votes import judge_passes
from evaledger.scoring.calibration import (
    CalibrationState,
    Figure,
    JudgeGate,
    calibration_figures,
    gate_refusals,
    judge_gates,
)

Calibration = JudgeCalibrated
"""A calibration as the use cases return it: the recorded event (every figure, its author)."""


@dataclass(frozen=True)
class JudgeVerdictPass:
    """One judge's counted verdict of one case: its template hash and the case's pass/fail."""

    case_key: str
    judge: str
    template_hash: str | None
    passed: bool


def run_judge_passes(services: Services, run_id: UUID) -> list[JudgeVerdictPass]:
    """Each judge's latest valid verdict of each case of a run, with its template hash.

    Keys and template hashes come from the case facts (`cases_v6`), no case event is read.
    """
    services.sync()
    facts = services.reads.facts(run_id)
    spec = services.reads.run_spec(run_id)
    passes = judge_passes(services.reads.engine, run_id, spec, facts)
    keys = {str(f.case_id): f.test_case_key for f in facts}
    hashes = {str(v.verdict_id): v.template_hash for f in facts for v in f.verdicts}
    return [
        JudgeVerdictPass(keys[case_id], judge, hashes.get(verdict_id), passed)
        for case_id, judge, verdict_id, passed in passes
    ]


def _estimate(f: Figure) -> Estimate:
    return Estimate(value=f.value, low=f.low, high=f.high, method=f.method)


def calibrate_judge(
    services: Services,
    project: str,
    judge: str,
    gold: str,
    run_id: UUID,
    rubric_hash: str | None,
    ctx: Context,
) -> Calibration:
    """Compare `judge`'s stored verdicts of a run with a gold set's labels; record the figures.

    Pairs are the run's cases whose key is a labelled item of the gold version, one per case
    (repetitions count each). Refused, nothing stored: a version with no label, a run of
    another project, no verdict of the judge on a gold item, verdicts under several templates.
    """
    ctx.check_project(project, f"project {project!r}")
    services.sync()
    if ":" not in judge:
        raise ValidationError(f"judge {judge!r}: expected PROVIDER:MODEL", field="judge")
    version = show_dataset(services, project, gold, ctx)
    labels = {i.key: i.label.passed for i in version.items if i.label is not None}
    if not labels:
        raise ValidationError(
            f"gold: {version.name}@{version.version} has no labelled item (not a gold set)",
            field="gold",
        )
    run = services.reads.get_run(run_id)
    if run.project != project:
        raise ValidationError(
            f"from_run: run {run_id} is not of project {project!r}", field="from_run"
        )
    ctx.check_project(run.project, f"run {run_id}")
    mine = [
        p for p in run_judge_passes(services, run_id) if p.judge == judge and p.case_key in labels
    ]
    if not mine:
        raise ValidationError(
            f"from_run: run {run_id} has no valid verdict of judge {judge} on an item of "
            f"{version.name}@{version.version}",
            field="from_run",
        )
    templates = {p.template_hash for p in mine}
    if len(templates) != 1 or None in templates:
        shown = ", ".join(sorted((h or "none")[:12] for h in templates))
        raise ValidationError(
            f"from_run: judge {judge}'s verdicts must carry one template hash, not {shown}",
            field="from_run",
        )
    figures = calibration_figures([(p.passed, labels[p.case_key]) for p in mine])
    fields = {
        "template_hash": templates.pop(),
        "rubric_hash": rubric_hash,
        "gold": DatasetRef(name=version.name, version=version.version, hash=version.content_hash),
        "run_id": run_id,
        "n": figures.n,
        "true_positives": figures.true_positives,
        "false_negatives": figures.false_negatives,
        "true_negatives": figures.true_negatives,
        "false_positives": figures.false_positives,
        "kappa": _estimate(figures.kappa),
        "tpr": _estimate(figures.tpr),
        "tnr": _estimate(figures.tnr),
        "accuracy": _estimate(figures.accuracy),
    }
    return services.ledger.record_calibration(project, judge, fields, ctx)


RUNS_SEARCHED = 500
"""The newest runs of a project searched for one that ran a gold version."""


def gold_run(services: Services, project: str, gold: str, ctx: Context) -> UUID:
    """The newest run of the project that ran the gold version (its dataset hash); 400 if none."""
    ctx.check_project(project, f"project {project!r}")
    services.sync()
    version = show_dataset(services, project, gold, ctx)
    found, _ = services.reads.list_runs(RunFilter(project=project, limit=RUNS_SEARCHED))
    for row in found:
        ref = services.ledger.run_dataset(row.run_id)
        if ref is not None and ref.hash == version.content_hash:
            return row.run_id
    raise ValidationError(
        f"gold: no run of project {project!r} ran {version.name}@{version.version}: record a "
        "run of it (dataset NAME@V) or name one with --from-run",
        field="gold",
    )


@dataclass(frozen=True)
class JudgedCalibration:
    """A calibration made by calling the judge: the judging pass, then the calibration."""

    report: JudgeReport
    calibration: Calibration | None
    """None when the pass was not complete (an error verdict, the budget, no call reached the
    provider): a calibration on part of the gold set would be biased, so none is recorded."""


def calibrate_by_judging(
    services: Services,
    project: str,
    judge: str,
    gold: str,
    rubrics: Sequence[JudgeRubric],
    rubric_hash: str | None,
    ctx: Context,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
) -> JudgedCalibration:
    """Run the judge on the gold items, then calibrate it on its verdicts.

    The gold items are the cases of the newest run of the gold version; the judge runner judges
    those this judge has not judged yet. Only a complete pass is calibrated
    (`JudgedCalibration.calibration`).
    """
    if ":" not in judge:
        raise ValidationError(f"judge {judge!r}: expected PROVIDER:MODEL", field="judge")
    run_id = gold_run(services, project, gold, ctx)
    options = JudgeOptions(judges=(judge,), missing_only=True, rubrics=tuple(rubrics))
    report = judge_run(services, run_id, options, ctx, progress, env)
    if report.exit_code() != 0:
        return JudgedCalibration(report, None)
    made = calibrate_judge(services, project, judge, gold, run_id, rubric_hash, ctx)
    return JudgedCalibration(report, made)


def list_calibrations(services: Services, project: str, ctx: Context) -> list[Calibration]:
    """A project's calibrations, oldest first."""
    ctx.check_project(project, f"project {project!r}")
    return services.ledger.calibrations(project)


def judges_used(services: Services, run_id: UUID) -> dict[str, set[str | None]]:
    """Each judge of the run's counted verdicts → the template hashes they carry.

    Read once per state of the run (`Reports.run_answer`, keyed by its summary position) and
    kept: the run page asks on every view, and a run's verdicts change only with its cases.
    """

    def compute() -> bytes:
        used: dict[str, set[str | None]] = {}
        for p in run_judge_passes(services, run_id):
            used.setdefault(p.judge, set()).add(p.template_hash)
        return orjson.dumps({k: sorted(v, key=lambda h: h or "") for k, v in used.items()})

    kept = orjson.loads(services.reports.run_answer(run_id, ("calibration judges",), compute))
    return {judge: set(hashes) for judge, hashes in kept.items()}


KEPT_PROJECTS = 16
"""Projects whose calibrations this process keeps, each at the log position it was read at."""

# (id of the ledger, project, log position) → (that ledger, its calibrations). The entry holds
# its ledger so the id cannot be reused by another store's while the entry lives.
_kept: OrderedDict[tuple[int, str, int], tuple[object, list[Calibration]]] = OrderedDict()
_kept_lock = threading.Lock()


def project_calibrations(services: Services, project: str) -> list[Calibration]:
    """A project's calibrations, oldest first, read from the log once per log position.

    Reading them scans the log by topic (≈ 30 ms CPU on a store of a 10,000-case run); the run
    page asks on every view, and the answer at one position of the log never changes.
    """
    ledger = services.ledger
    key = (id(ledger), project, ledger.position())
    with _kept_lock:
        hit = _kept.get(key)
        if hit is not None and hit[0] is ledger:
            _kept.move_to_end(key)
            return hit[1]
    found = ledger.calibrations(project)
    with _kept_lock:
        _kept[key] = (ledger, found)
        while len(_kept) > KEPT_PROJECTS:
            _kept.popitem(last=False)
    return found


def calibration_gate_of(services: Services, run_id: UUID, min_kappa: float) -> list[JudgeGate]:
    """The calibration gate of a run: each judge and template hash, its calibration, accepted.

    The one rule (`scoring.calibration.judge_gates`) `gate --require-calibrated`, the run page
    and `GET /runs/{id}/calibration` show.
    """
    services.sync()
    project = services.reads.get_run(run_id).project
    known: dict[str, list[CalibrationState]] = {}
    for c in project_calibrations(services, project):
        state = CalibrationState(
            c.template_hash,
            c.kappa.value,
            f"{c.gold.name}@{c.gold.version}",
            kappa_low=c.kappa.low,
            kappa_high=c.kappa.high,
            n=c.n,
        )
        known.setdefault(c.judge, []).append(state)
    return judge_gates(judges_used(services, run_id), known, min_kappa)


def calibration_refusals_of(services: Services, run_id: UUID, min_kappa: float) -> list[str]:
    """Why the judges of a run may not gate: none calibrated at its template hash, or κ too low."""
    return gate_refusals(calibration_gate_of(services, run_id, min_kappa), min_kappa)
