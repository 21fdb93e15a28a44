"""The columnar rescore (scoring.rescore) equals the reference `score_case` + `summarize_run`.

Exact equality, floats included: per case (status, passed, overall_score) and the run aggregate,
on varied facts (panels, judge errors, outcomes and blockers, checks, overrides, invalidations,
pending, no transcript, errored, canceled, named scores) under varied specs. Then through a
store: `ReadModels.rescore` equals the reference computation, and its cached inputs follow an
override of a closed run.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid5

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, update

from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import CheckStatus, ClaimSupport, ParseStatus, Role
from evaledger.domain.ledger import Context
from evaledger.domain.metrics import DEFAULT_METRIC_NAMES
from evaledger.domain.spec import (
    Gate,
    JudgeConfig,
    JudgeErrorPolicy,
    MetricSelection,
    PanelPolicy,
    RunConfig,
    ScoreGate,
    ScoringSpec,
    Severity,
    SeverityWeights,
    resolve_spec,
)
from evaledger.projections import queries
from evaledger.projections.queries import ReadModels, Rescoring
from evaledger.projections.tables import rescore_inputs
from evaledger.scoring.case import score_case, summarize_run
from evaledger.scoring.facts import (
    CaseFacts,
    CheckFact,
    MessageFact,
    MetricFact,
    OutcomeFact,
    VerdictFact,
)
from evaledger.scoring.rescore import INPUTS_FORMAT, RunInputs, rescore_run
from tests.helpers import bundle, case

RUN_ID = UUID("00000000-0000-0000-0000-0000000000b2")
METRICS = [*DEFAULT_METRIC_NAMES[:4], "task_completion"]  # task_completion is binary
STATEMENTS = ["greets", "refunds", "closes"]


def _id(*parts: object) -> UUID:
    return uuid5(RUN_ID, "/".join(map(str, parts)))


outcome_st = st.builds(
    OutcomeFact,
    statement=st.sampled_from(STATEMENTS),
    passed=st.booleans(),
    severity=st.sampled_from(list(Severity)),
)


@st.composite
def verdict_st(draw: st.DrawFn) -> dict[str, Any]:
    metrics = []
    for name in draw(st.lists(st.sampled_from(METRICS), max_size=7)):  # repeats: first counts
        kind = draw(st.sampled_from(["score", "pass", "none", "both"]))
        metrics.append(
            MetricFact(
                metric=name,
                score=draw(st.integers(-1, 7)) if kind in ("score", "both") else None,
                passed=draw(st.booleans()) if kind in ("pass", "both") else None,
            )
        )
    full = draw(st.booleans())
    if full:  # most verdicts are complete: score every scored metric, pass every binary one
        metrics = [
            MetricFact(
                metric=n,
                score=None if n == "task_completion" else draw(st.integers(0, 5)),
                passed=draw(st.booleans()) if n == "task_completion" else None,
            )
            for n in METRICS
        ] + metrics
    return {
        "judge_provider": draw(st.sampled_from([None, "anthropic", "openai"])),
        "parse_status": draw(st.sampled_from([ParseStatus.PARSED] * 4 + [ParseStatus.UNPARSEABLE])),
        "error": draw(st.sampled_from([None] * 5 + ["timeout", "Judge evaluation failed: x"])),
        "metric_scores": metrics,
        "expected_outcomes": draw(st.lists(outcome_st, max_size=3)),
        "invalidated": draw(st.sampled_from([False] * 4 + [True])),
        "forced_passed": draw(st.sampled_from([None] * 4 + [True, False])),
        "override_reasons": draw(st.lists(st.just("checked by hand"), max_size=1)),
        "cost_usd": draw(st.sampled_from([None, 0.01, 0.125])),
    }


@st.composite
def facts_st(draw: st.DrawFn, i: int) -> CaseFacts:
    shape = draw(
        st.sampled_from(["judged"] * 6 + ["opened", "errored", "canceled", "bare", "skipped"])
    )
    latencies = draw(st.lists(st.integers(0, 5000), max_size=22))
    has_transcript = shape != "opened" and draw(st.booleans() if shape == "bare" else st.just(True))
    turns = draw(st.sampled_from([0] + [1] * 6)) if has_transcript else 0
    # A skipped test (issue 30) may carry anything a judged one does: none of it counts.
    verdicts = (
        draw(st.lists(verdict_st(), max_size=3))
        if shape in ("judged", "errored", "skipped")
        else []
    )
    return CaseFacts(
        case_id=_id("case", i),
        run_id=RUN_ID,
        test_case_key=f"tc-{draw(st.integers(0, 5))}",
        test_id="t",
        repetition=i,
        has_transcript=has_transcript,
        turn_count=turns and len(latencies) + 1,
        messages=[MessageFact(role=Role.ASSISTANT, latency_ms=float(x)) for x in latencies]
        if turns
        else [],
        prompt_tokens=draw(st.integers(0, 100)),
        completion_tokens=draw(st.integers(0, 100)),
        cost_usd=draw(st.sampled_from([None, 0.1, 0.3])),
        errored=shape == "errored",
        canceled=shape == "canceled" or (shape == "errored" and draw(st.booleans())),
        skipped=draw(st.sampled_from(["skipped", "xfailed"])) if shape == "skipped" else None,
        verdicts=[
            VerdictFact(verdict_id=_id("verdict", i, n), position=n, **v)
            for n, v in enumerate(verdicts)
        ],
        outcome_evaluations=draw(st.lists(st.lists(outcome_st, max_size=2), max_size=2))
        if shape == "judged"
        else [],
        claims=draw(st.lists(st.sampled_from(list(ClaimSupport)), max_size=2))
        if shape == "judged"
        else [],
        checks=[
            CheckFact(check=c, status=s)
            for c, s in draw(
                st.lists(
                    st.tuples(st.sampled_from(["json", "sql"]), st.sampled_from(list(CheckStatus))),
                    max_size=2,
                )
            )
        ]
        if shape in ("judged", "bare")
        else [],
        agent_provider=draw(st.sampled_from([None, "anthropic"])),
        named_scores=draw(
            st.dictionaries(
                st.sampled_from(["accuracy", "match"]), st.sampled_from([0.0, 0.5, 1.0])
            )
        )
        if shape in ("judged", "bare", "skipped")
        else {},
    )


@st.composite
def spec_st(draw: st.DrawFn) -> ScoringSpec:
    chosen = draw(st.lists(st.sampled_from(METRICS), unique=True, max_size=4))
    selection = [
        MetricSelection(
            metric=m,
            weight=draw(st.sampled_from([None, 0.0, 1.0, 3.0, 0.3]))
            if m != "task_completion"
            else draw(st.sampled_from([1.0, 2.5])),
        )
        for m in chosen
    ]
    if selection and sum(s.weight if s.weight is not None else 1 for s in selection) == 0:
        selection[0] = MetricSelection(metric=selection[0].metric, weight=1.0)
    return resolve_spec(
        RunConfig(
            judge=JudgeConfig(
                metrics=selection or None, pass_threshold=draw(st.sampled_from([0, 50, 62.5, 75]))
            ),
            gate=draw(st.sampled_from(list(Gate))),
            judge_errors=draw(st.sampled_from(list(JudgeErrorPolicy))),
            panel=draw(st.sampled_from(list(PanelPolicy))),
            severity_weights=SeverityWeights(blocker=draw(st.sampled_from([0.0, 4.0]))),
            score_gates=draw(
                st.sampled_from(
                    [
                        (),
                        (ScoreGate(score="accuracy", value=0.5),),
                        (ScoreGate(score="match", op="<", value=1.0),),
                    ]
                )
            ),
            metrics_pass_threshold=draw(st.sampled_from([0, 50, 80])),
            cases_pass_threshold=draw(st.sampled_from([0, 50, 100])),
        )
    )


def reference(facts: list[CaseFacts], spec: ScoringSpec) -> tuple[list[Any], bytes]:
    scores = [score_case(f, spec) for f in facts]
    decisions = [(s.overall_score, s.passed, s.status.value) for s in scores]
    return decisions, summarize_run(scores, spec).model_dump_json().encode()


def lean(facts: list[CaseFacts], spec: ScoringSpec) -> tuple[list[Any], bytes]:
    out = rescore_run(RunInputs.build(facts, {}), spec)
    assert out is not None
    return out.decisions, out.aggregate.model_dump_json().encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_lean_rescore_equals_score_case_and_summarize_run(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 12))
    facts = [data.draw(facts_st(i)) for i in range(n)]
    specs = data.draw(st.lists(spec_st(), min_size=1, max_size=3))
    built = RunInputs.build(facts, {})
    stored = RunInputs.from_bytes(built.to_bytes())  # as a new process reads them
    assert stored is not None
    for spec in specs:  # one RunInputs serves every spec
        want_decisions, want_aggregate = reference(facts, spec)
        for inputs in (built, stored):
            got = rescore_run(inputs, spec)
            assert got is not None
            # orjson keeps 0 apart from 0.0 and True from 1: the types are equal too.
            assert orjson.dumps(got.decisions) == orjson.dumps(want_decisions)
            assert got.aggregate.model_dump_json().encode() == want_aggregate


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_specs_sharing_metric_weights_reuse_the_overall_scores_and_equal_the_reference(
    data: st.DataObject,
) -> None:
    """The overall scores kept per weighting serve specs that differ in threshold, gate or
    judge-error policy; each rescore still equals the reference."""
    facts = [data.draw(facts_st(i)) for i in range(data.draw(st.integers(1, 12)))]
    base = data.draw(spec_st())
    inputs = RunInputs.build(facts, {})
    variants = [
        base,
        *(
            base.model_copy(
                update={"pass_threshold": threshold, "gate": gate, "judge_errors": errors}
            )
            for threshold, gate, errors in data.draw(
                st.lists(
                    st.tuples(
                        st.sampled_from([0, 50, 62.5, 75, 100]),
                        st.sampled_from(list(Gate)),
                        st.sampled_from(list(JudgeErrorPolicy)),
                    ),
                    min_size=1,
                    max_size=3,
                )
            )
        ),
    ]
    for spec in [*variants, base]:
        got = rescore_run(inputs, spec)
        assert got is not None
        want_decisions, want_aggregate = reference(facts, spec)
        assert orjson.dumps(got.decisions) == orjson.dumps(want_decisions)
        assert got.aggregate.model_dump_json().encode() == want_aggregate
    if base.metrics and len({m.metric for m in base.metrics}) == len(base.metrics):
        assert len(inputs.weightings) == 1  # one weighting of the metrics: computed once


def test_a_judge_error_under_score_zero_counts_zero_and_fails() -> None:
    broken = VerdictFact(verdict_id=_id("v"), position=0, error="timeout")
    facts = CaseFacts(
        case_id=_id("c"),
        run_id=RUN_ID,
        test_case_key="k",
        test_id="k",
        has_transcript=True,
        turn_count=2,
        verdicts=[broken],
    )
    spec = resolve_spec(RunConfig())
    assert lean([facts], spec) == reference([facts], spec)
    assert lean([facts], spec)[0] == [(0.0, False, "failed")]


def test_a_spec_selecting_no_metric_or_one_twice_takes_the_reference_path() -> None:
    spec = resolve_spec(RunConfig())
    twice = spec.model_copy(update={"metrics": (spec.metrics[0], spec.metrics[0])})
    assert rescore_run(RunInputs.build([], {}), twice) is None
    assert rescore_run(RunInputs.build([], {}), spec.model_copy(update={"metrics": ()})) is None


# ---------------------------------------------------------------------------------------------
# Through a store


def _reference_rescore(services: Services, run_id: UUID, spec: ScoringSpec) -> dict[str, Any]:
    facts = services.reads.scoring_facts(run_id)
    scores = [score_case(f, spec) for f in facts]
    own = {str(s.case_id): s for s in services.reads.case_scores(run_id)}
    changed = [
        (str(s.case_id), s.overall_score, s.passed, s.status.value)
        for s in scores
        if (
            own[str(s.case_id)].overall_score,
            own[str(s.case_id)].passed,
            own[str(s.case_id)].status,
        )
        != (s.overall_score, s.passed, s.status)
    ]
    return {"after": summarize_run(scores, spec).model_dump(mode="json"), "changed": changed}


def _observed(rescoring: Rescoring) -> dict[str, Any]:
    result = rescoring.to_json()
    return {
        "after": result["after"]["aggregate"],
        "changed": [
            (
                c["case_id"],
                c["after"]["overall_score"],
                c["after"]["passed"],
                c["after"]["status"],
            )
            for c in result["changed_cases"]
        ],
    }


def _stricter(services: Services, run_id: UUID, threshold: float) -> ScoringSpec:
    config = dict(services.reads.get_run(run_id).config)
    config["judge"] = {**config.get("judge", {}), "pass_threshold": threshold}
    return resolve_spec(RunConfig.model_validate(config), services.ledger.catalogue())


def test_rescore_equals_the_reference_and_follows_an_override(services: Services) -> None:
    data = bundle()
    data["cases"] = [case(f"k{i}", score=3 + i % 3, repetition=0) for i in range(6)]
    result = services.ledger.import_bundle(RunBundle.model_validate(data), Context(actor="test"))
    services.sync()
    run_id = result.run_id
    spec = _stricter(services, run_id, 85.0)
    first = services.reads.rescore(run_id, spec)
    assert _observed(first) == _reference_rescore(services, run_id, spec)
    assert first["changed_cases"], "the stricter threshold fails some case"
    # A human forces a failed case to pass: the cached inputs must not survive it.
    failed = next(c for c in first["changed_cases"] if c["after"]["passed"] is False)
    verdict_id = services.reads.case_score(UUID(failed["case_id"]))[0].verdicts[0].verdict_id
    services.ledger.override_verdict(
        UUID(failed["case_id"]),
        Context(actor="qa"),
        verdict_id=verdict_id,
        passed=True,
        reason="checked by hand",
    )
    services.sync()
    second = services.reads.rescore(run_id, spec)
    assert _observed(second) == _reference_rescore(services, run_id, spec)
    assert second["after"]["aggregate"]["passed_count"] == (
        first["after"]["aggregate"]["passed_count"] + 1
    )
    # A spec the lean path declines (a metric selected twice) takes the reference path.
    twice = spec.model_copy(update={"metrics": (spec.metrics[0], *spec.metrics)})
    assert _observed(services.reads.rescore(run_id, twice)) == _reference_rescore(
        services, run_id, twice
    )


def test_rescore_of_an_open_run_follows_new_cases(services: Services) -> None:
    data = bundle()
    first_cases = [case(f"k{i}", score=3 + i % 3) for i in range(4)]
    run = RunBundle.model_validate({**data, "cases": first_cases})
    run_id = services.ledger.create_run(run.run, Context(actor="test")).id
    services.ledger.ingest_cases(run_id, run.cases, Context(actor="test"))
    services.sync()
    spec = _stricter(services, run_id, 85.0)
    first = services.reads.rescore(run_id, spec)
    assert _observed(first) == _reference_rescore(services, run_id, spec)
    assert first["after"]["aggregate"]["total_executions"] == 4
    # No stored summary yet: "before" is the run summarised under its own spec, when read.
    assert first["before"]["aggregate"] == services.reads.summary(run_id).aggregate.model_dump(
        mode="json"
    )
    more = RunBundle.model_validate({**data, "cases": [case("k9", score=5)]})
    services.ledger.ingest_cases(run_id, more.cases, Context(actor="test"))
    services.sync()
    second = services.reads.rescore(run_id, spec)
    assert _observed(second) == _reference_rescore(services, run_id, spec)
    assert second["after"]["aggregate"]["total_executions"] == 5


def test_stored_inputs_serve_a_new_reader_and_another_format_is_rebuilt(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bundle()
    data["cases"] = [case(f"k{i}", score=3 + i % 3) for i in range(5)]
    run_id = services.ledger.import_bundle(
        RunBundle.model_validate(data), Context(actor="t")
    ).run_id
    services.sync()
    spec = _stricter(services, run_id, 85.0)
    want = _reference_rescore(services, run_id, spec)
    assert _observed(services.reads.rescore(run_id, spec)) == want
    with services.engine.connect() as conn:
        stored = conn.execute(select(rescore_inputs.c.marker, rescore_inputs.c.inputs)).one()
    assert stored.marker.startswith(INPUTS_FORMAT)
    # A new process (a new ReadModels) reads the stored row; facts are not decoded again.
    with monkeypatch.context() as m:
        m.setattr(queries, "load_facts", _no_facts)
        assert _observed(ReadModels(services.engine).rescore(run_id, spec)) == want
    # Inputs an older format stored are rebuilt from the facts, never read.
    with services.engine.begin() as conn:
        conn.execute(
            update(rescore_inputs).values(inputs=orjson.dumps({"format": "evaledger.old/0"}))
        )
    assert _observed(ReadModels(services.engine).rescore(run_id, spec)) == want


def _no_facts(*args: object, **kwargs: object) -> None:
    raise AssertionError("the stored inputs should have been read, not the facts")


@pytest.mark.parametrize("seed", [5, 6])
def test_catch_up_stores_the_inputs_the_first_rescore_would_build(
    store_url: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 19: the cases projection writes a closing run's rescore inputs while it folds. They
    # must be byte for byte what the reference path (decode the `scoring` column, build) makes.
    from bench.common import generate_bundle
    from evaledger.api.bootstrap import Settings, build_services
    from evaledger.projections.rows import closed_inputs_marker, load_facts
    from evaledger.projections.tables import cases, run_summaries

    services = build_services(Settings(db=store_url))
    try:
        data = generate_bundle(80, seed=seed, run_key=f"warm-{seed}")
        run_id = services.ledger.import_bundle(
            RunBundle.model_validate(data), Context(actor="t")
        ).run_id
        services.sync()
        key = str(run_id)
        with services.engine.connect() as conn:
            stored = conn.execute(
                select(rescore_inputs.c.marker, rescore_inputs.c.inputs).where(
                    rescore_inputs.c.run_id == key
                )
            ).one()
            position = conn.scalar(
                select(run_summaries.c.position).where(run_summaries.c.run_id == key)
            )
            old = {
                r.case_id: (r.overall_score, r.passed, r.status)
                for r in conn.execute(
                    select(cases.c.case_id, cases.c.overall_score, cases.c.passed, cases.c.status)
                )
            }
            reference = RunInputs.build(load_facts(conn, run_id), old)
        assert position is not None
        assert stored.marker == closed_inputs_marker(position)
        assert stored.inputs == reference.to_bytes()
        # The first rescore of the run, in a new process's reader, decodes no facts.
        spec = _stricter(services, run_id, 85.0)
        want = _reference_rescore(services, run_id, spec)
        with monkeypatch.context() as m:
            m.setattr(queries, "load_facts", _no_facts)
            assert _observed(ReadModels(services.engine).rescore(run_id, spec)) == want
    finally:
        services.close()


def test_a_run_closed_without_every_case_seen_stores_no_inputs(services: Services) -> None:
    # A projection that restarted mid-run has not seen every case: the first rescore builds
    # the inputs from the table, as before, and still equals the reference.
    data = bundle()
    run = RunBundle.model_validate(
        {**data, "cases": [case(f"k{i}", score=2 + i) for i in range(3)]}
    )
    run_id = services.ledger.create_run(run.run, Context(actor="t")).id
    services.ledger.ingest_cases(run_id, run.cases, Context(actor="t"))
    services.sync()
    for projection in services.runner.projections:
        projection.reset()
    services.ledger.complete_run(run_id, Context(actor="t"))
    services.sync()
    with services.engine.connect() as conn:
        assert conn.execute(select(rescore_inputs.c.run_id)).all() == []
    spec = _stricter(services, run_id, 85.0)
    assert _observed(services.reads.rescore(run_id, spec)) == _reference_rescore(
        services, run_id, spec
    )
