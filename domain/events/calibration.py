"""The event of a judge's calibration on a gold set (DESIGN §18, issue 35).

A calibration binds agreement with people to what made the verdicts: the judge's provider and
model and the content hash of its prompt template. A change of either makes it stale.
"""

from __future__ import annotations

from typing import ClassVar
from uuid import UUID

from pydantic import Field

from evaledger.domain.events.base import DomainEvent
from evaledger.domain.events.dataset import DatasetRef
from evaledger.domain.model import FrozenModel


class Estimate(FrozenModel):
    """A figure with its 95 % interval and the method that gave the interval."""

    value: float | None = Field(description="The figure (null when undefined on these items).")
    low: float | None = Field(default=None, description="Lower end of the 95 % interval.")
    high: float | None = Field(default=None, description="Upper end of the 95 % interval.")
    method: str = Field(min_length=1, description="How the interval was computed.")


class CalibrationEvent(DomainEvent):
    """An event of a JudgeCalibration aggregate (one judge of one project)."""


class JudgeCalibrated(CalibrationEvent):
    """A judge's verdicts were compared with a gold set's human labels."""

    topic_name: ClassVar[str] = "evaledger.calibration.judge_calibrated"

    project: str = Field(min_length=1, description="The project of the judge and the gold set.")
    judge: str = Field(min_length=1, description="provider:model of the judge.")
    template_hash: str = Field(
        min_length=1, description="Content hash of the judge's prompt template (its verdicts')."
    )
    rubric_hash: str | None = Field(
        default=None, description="sha256 of the --rubric file the judge was run with, if any."
    )
    gold: DatasetRef = Field(description="The gold set: name, version and content hash.")
    run_id: UUID | None = Field(
        default=None, description="The run whose stored verdicts were compared, if any."
    )
    n: int = Field(ge=1, description="Pairs compared (judge verdict, human label).")
    true_positives: int = Field(ge=0, description="Judge pass, label pass.")
    false_negatives: int = Field(ge=0, description="Judge fail, label pass.")
    true_negatives: int = Field(ge=0, description="Judge fail, label fail.")
    false_positives: int = Field(ge=0, description="Judge pass, label fail.")
    kappa: Estimate = Field(description="Cohen's κ of judge and labels.")
    tpr: Estimate = Field(description="True positive rate: labelled passes the judge passed.")
    tnr: Estimate = Field(description="True negative rate: labelled fails the judge failed.")
    accuracy: Estimate = Field(description="Share of pairs where judge and label agree.")
