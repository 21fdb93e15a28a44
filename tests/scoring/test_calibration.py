"""The pure rules of judge calibration (issue 35): Wilson intervals and the gate's refusals."""

from __future__ import annotations

import pytest

from evaledger.scoring.calibration import (
    CalibrationState,
    calibration_figures,
    calibration_refusals,
    wilson,
)


def test_wilson_matches_the_textbook_interval() -> None:
    # 5 of 6: the Wilson score 95 % interval is [0.4365, 0.9699] (Newcombe 1998's formula).
    f = wilson(5, 6)
    assert f.value == pytest.approx(5 / 6)
    assert f.low == pytest.approx(0.4365, abs=1e-4)
    assert f.high == pytest.approx(0.9699, abs=1e-4)
    assert (wilson(0, 4).low, wilson(4, 4).high) == (0.0, 1.0)
    assert wilson(0, 0).value is None


def test_figures_of_a_judge_that_always_agrees_and_one_that_never_varies() -> None:
    perfect = calibration_figures([(True, True), (False, False)] * 6)
    assert perfect.kappa.value == 1.0 and perfect.accuracy.value == 1.0
    constant = calibration_figures([(True, True), (True, False)] * 6)
    assert constant.kappa.value == 0.0 and constant.tnr.value == 0.0 and constant.tpr.value == 1.0


def test_refusals_name_the_judge_and_why() -> None:
    a, b = "a" * 64, "b" * 64
    good = CalibrationState(a, 0.8, "gold@1")
    assert calibration_refusals({"x:m": {a}}, {"x:m": [good]}, 0.6) == []
    assert calibration_refusals({"x:m": {a}}, {}, 0.6) == ["judge x:m has no calibration"]
    (stale,) = calibration_refusals({"x:m": {b}}, {"x:m": [good]}, 0.6)
    assert stale.startswith("judge x:m has no calibration at template bbbbbbbbbbbb (stale")
    (low,) = calibration_refusals({"x:m": {a}}, {"x:m": [good]}, 0.9)
    assert low == "judge x:m's κ 0.800 on gold@1 is below the minimum 0.9"
    # The latest calibration at a hash counts; one with no template hash never matches.
    worse = CalibrationState(a, 0.1, "gold@2")
    assert calibration_refusals({"x:m": {a}}, {"x:m": [good, worse]}, 0.6) != []
    assert calibration_refusals({"x:m": {None}}, {"x:m": [good]}, 0.6) != []
