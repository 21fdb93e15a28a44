"""The JudgeCalibration aggregate and its commands (DESIGN §18, issue 35).

One aggregate per project and judge (provider:model): its calibrations, oldest first, each at
the template hash its verdicts carried. Calibrations are few: reads take them from the log by
topic (`calibrations`), as tokens are read.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid5

from evaledger.domain.aggregates import NAMESPACE, Aggregate, Meta
from evaledger.domain.errors import ValidationError
from evaledger.domain.events.base import DomainEvent
from evaledger.domain.events.calibration import JudgeCalibrated
from evaledger.domain.writes import Context, LedgerStore


def calibration_id_for(project: str, judge: str) -> UUID:
    """Id of the JudgeCalibration aggregate of `judge` (provider:model) in `project`."""
    return uuid5(NAMESPACE, f"calibration\x1f{project}\x1f{judge}")


class JudgeCalibration(Aggregate):
    """A judge's calibrations in one project."""

    calibrations: list[JudgeCalibrated]

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.calibrations = []

    def calibrate(self, meta: Meta, **fields: Any) -> JudgeCalibrated:
        """Record one calibration (every figure is the event's, checked by its model)."""
        return self._trigger(JudgeCalibrated, meta, **fields)

    def _mutate(self, event: DomainEvent) -> None:
        if isinstance(event, JudgeCalibrated):
            self.calibrations.append(event)


class CalibrationCommands(LedgerStore):
    """Record a judge's calibration; read a project's calibrations."""

    def record_calibration(
        self, project: str, judge: str, fields: dict[str, Any], ctx: Context
    ) -> JudgeCalibrated:
        """Record a `JudgeCalibrated` of `judge` in `project` (fields: the event's others)."""
        ctx.check_project(project, f"project {project!r}")
        if ":" not in judge:
            raise ValidationError(f"judge {judge!r}: expected PROVIDER:MODEL", field="judge")

        def command() -> JudgeCalibrated:
            agg_id = calibration_id_for(project, judge)
            calibration = self._find(JudgeCalibration, agg_id) or JudgeCalibration(agg_id)
            event = calibration.calibrate(self._meta(ctx), project=project, judge=judge, **fields)
            self._save(calibration, project=project)
            return event

        return self._retrying(command)

    def calibrations(self, project: str) -> list[JudgeCalibrated]:
        """Every calibration of a project, oldest first (from the log, by topic)."""
        out: list[JudgeCalibrated] = []
        start: int | None = None
        topics = [JudgeCalibrated.topic()]
        while True:
            page = self.app.recorder.select_notifications(start, 1000, topics=topics)
            if not page:
                return out
            for n in page:
                event = self.decode(n)
                if isinstance(event, JudgeCalibrated) and event.project == project:
                    out.append(event)
            start = page[-1].id + 1
