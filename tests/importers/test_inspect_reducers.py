"""Issue 30: Inspect's epoch reducers by name, held to inspect_ai's own reducers; source figures
rounded as written; old Inspect runs keep their identity."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from evaledger.domain.spec import ScorerInfo
from evaledger.importers.inspect import open_inspect
from evaledger.scoring.scorer_metrics import figure_text, not_recomputed, reducer
from tests.conftest import FIXTURES

NAMES = ["mean", "median", "mode", "max", "at_least_1", "at_least_3", "pass_at_1", "pass_at_2"]
NAMES += ["pass_k_2", "pass_k_4"]


def inspect_reduced(name: str, values: list[str | float]) -> float:
    from inspect_ai.scorer import Score, value_to_float
    from inspect_ai.scorer._reducer import create_reducers

    (reduce,) = create_reducers([name])
    return float(value_to_float()(reduce([Score(value=v) for v in values]).value))


@pytest.mark.parametrize("name", NAMES)
def test_each_named_reducer_gives_inspects_own_value(name: str) -> None:
    rng = random.Random(30)
    to_float = {"C": 1.0, "P": 0.5, "I": 0.0}
    for _ in range(200):
        epochs = rng.randint(1, 5)
        if rng.random() < 0.5:
            raw: list[str | float] = [rng.choice("CCIP") for _ in range(epochs)]
            values = [to_float[str(v)] for v in raw]
        else:
            raw = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(epochs)]
            values = [float(v) for v in raw]
        mine, theirs = reducer(name), inspect_reduced(name, raw)
        assert mine is not None
        got = mine(values)
        if math.isnan(theirs):
            assert math.isnan(got), (name, raw)
        else:
            assert got == theirs, (name, raw)


def test_an_unknown_reducer_is_named_not_guessed() -> None:
    assert reducer("majority") is None
    assert reducer("at_least_0") is None
    scorer = ScorerInfo(name="m (majority)", score="m", semantics="inspect", reducer="majority")
    assert not_recomputed("accuracy", scorer) == "not recomputed: reducer 'majority' unknown"
    plain = ScorerInfo(name="cat", score="cat", semantics="inspect")
    assert not_recomputed("bootstrap_stderr", plain) == "not recomputed: random"
    assert not_recomputed("math", plain) == "not recomputed: a metric the ledger does not compute"
    assert not_recomputed("accuracy", plain) == "NOT reproduced from the cases"


def test_figures_round_half_up_as_written() -> None:
    assert f"{0.60625:.4f}" == "0.6062"  # binary rounding: the float lies below 0.60625
    assert figure_text(0.60625) == "0.6063"
    assert figure_text(0.0625, 3) == "0.063"
    assert figure_text(2 / 3) == "0.6667"
    assert figure_text(1.0) == "1.0000"


DIGESTS = FIXTURES / "inspect_run_digests.v1.json"


@pytest.mark.parametrize("name", sorted(json.loads(DIGESTS.read_text())))
def test_a_run_stored_by_the_v1_importer_is_still_the_same_run(name: str) -> None:
    stored = json.loads(DIGESTS.read_text())[name]
    assert stored in open_inspect(Path(FIXTURES / name)).run.creation_digests()
