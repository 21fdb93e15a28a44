"""Issue 30: Inspect's epoch reducers by name, held to inspect_ai's own reducers; grouped()
metrics recomputed per group as inspect_ai computes them; source figures rounded as written;
old Inspect runs keep their identity."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from evaledger.domain.spec import GroupedMetric, ScorerInfo
from evaledger.importers.inspect import open_inspect
from evaledger.scoring.models import CaseScore
from evaledger.scoring.scorer_metrics import (
    figure_text,
    not_recomputed,
    reducer,
    reported_mismatches,
    scorer_metrics,
)
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


def sample_scores(rows: list[tuple[str, str | None, float]]) -> list[CaseScore]:
    """One case per (sample, group, value): only what the source metrics read is set."""
    return [
        CaseScore.model_construct(  # type: ignore[call-arg]
            test_case_key=key,
            variant="",
            named_scores={"s": value},
            groups={} if group is None else {"category": group},
        )
        for key, group, value in rows
    ]


def inspect_grouped(rows: list[tuple[str, str | None, float]], **options: object) -> object:
    """inspect_ai's own `grouped(accuracy(), "category", ...)` over the same samples."""
    from inspect_ai.scorer import SampleScore, Score, accuracy, grouped

    metric = grouped(accuracy(), "category", **options)  # type: ignore[arg-type]
    samples: list[Any] = [  # inspect_ai's stub types a metric's input as list[Score]
        SampleScore(score=Score(value=v), sample_id=k, sample_metadata={"category": g})
        for k, g, v in sorted(rows)
    ]
    return metric(samples)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"all": "groups", "all_label": "overall"},
        {"all": False, "name_template": "c_{group_name}"},
    ],
)
def test_grouped_metrics_are_inspects_own_per_group(options: dict[str, object]) -> None:
    rng = random.Random(30)
    rows: list[tuple[str, str | None, float]] = [
        (f"s{i:02}", rng.choice("abc"), rng.choice([0.0, 0.5, 1.0])) for i in range(30)
    ]
    every = options.get("all", "samples")
    grouped = GroupedMetric(
        metric="accuracy",
        group_key="category",
        all=None if every is False else every,
        **{k: v for k, v in options.items() if k != "all"},
    )
    scorer = ScorerInfo(name="m", score="s", semantics="inspect", grouped=(grouped,))
    got = scorer_metrics(sample_scores(rows), [scorer])
    theirs = inspect_grouped(rows, **options)
    assert isinstance(theirs, dict)
    assert got == pytest.approx({f"m/{k}": v for k, v in theirs.items()}, rel=1e-12)


def test_grouped_figures_of_cases_without_their_group_are_the_sources_not_recomputed() -> None:
    # A run stored before cases kept their group (or a case without it): nothing is computed,
    # the source's figures are shown as reported, and say why.
    grouped = GroupedMetric(metric="accuracy", group_key="category")
    reported = {"a": 1.0, "b": 0.0, "all": 0.5}
    new = ScorerInfo(
        name="m", score="s", semantics="inspect", grouped=(grouped,), reported=reported
    )
    old = new.model_copy(update={"grouped": ()})
    cases = sample_scores([("s0", "a", 1.0), ("s1", None, 0.0)])
    for scorer in (new, old):
        computed = scorer_metrics(cases, [scorer])
        assert computed == {}
        assert reported_mismatches(computed, [scorer]) == {"m/a": 1.0, "m/all": 0.5, "m/b": 0.0}
    assert not_recomputed("a", new).startswith("not recomputed: a case has no group (category)")
    assert not_recomputed("a", old) == "not recomputed: a metric the ledger does not compute"
    assert "grouped" not in old.model_dump()  # old scorers keep their bytes (and digests)
