"""The one fold (case events from their stored state dicts) gives exactly the reference's rows.

The projections fold every case event from its stored, upcast state dict (projections/fold.py,
the vote rows of projections/votes.py). These tests hold them to the reference fold over
validated pydantic events (tests/oracles/fold.py): every golden stored event folded both ways,
a generated run projected both ways, and a run whose summary is computed from cached scores
against one read back from the table. A class version that moves on without its fold fails.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
from eventsourcing.persistence import StoredEvent
from pydantic import BaseModel
from sqlalchemy import Engine, select

from bench.common import generate_bundle
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import (
    EVENT_CLASSES,
    CaseEvent,
    CaseOpened,
    ClaimsVerified,
    DomainEvent,
    ExecutionErrored,
    JudgeVerdictRecorded,
    NamedScoresRecorded,
    OutcomeEvaluated,
    StructuralCheckRecorded,
    TranscriptRecorded,
    VerdictInvalidated,
    VerdictOverridden,
)
from evaledger.domain.ledger import Context
from evaledger.domain.spec import Gate, JudgeErrorPolicy, RunConfig, resolve_spec
from evaledger.domain.store.codec import UPCASTERS, EventMapper, OrjsonTranscoder
from evaledger.projections import encoding as json
from evaledger.projections import projectors
from evaledger.projections.decode import Decoded, decode_stored
from evaledger.projections.fold import (
    FOLDED_VERSIONS,
    fold_event,
    fold_events,
    open_case,
)
from evaledger.projections.projectors import all_projections
from evaledger.projections.runner import ProjectionRunner
from evaledger.projections.tables import cases, make_engine, metadata
from evaledger.projections.votes import correction_values, vote_row
from evaledger.scoring.case import score_case
from evaledger.scoring.facts import CaseFacts, scoring_view
from tests.conftest import FIXTURES
from tests.oracles import fold as reference
from tests.oracles.rescore_inputs import CACHE_TABLES, check_stored_inputs

GOLDEN = FIXTURES / "golden_events"
MAPPER = EventMapper(transcoder=OrjsonTranscoder())
SPECS = [
    resolve_spec(RunConfig()),
    resolve_spec(RunConfig(gate=Gate.BLOCKERS, judge_errors=JudgeErrorPolicy.UNSCORED)),
]
CASE_TOPICS = [c for c in EVENT_CLASSES if issubclass(c, CaseEvent)]
FOLLOWING = sorted(
    (c for c in CASE_TOPICS if c not in (CaseOpened, VerdictOverridden, VerdictInvalidated)),
    key=lambda c: c.topic_name,
)
"""The case topics folded on an opened case; the corrections follow once a verdict is there."""


def golden(cls: type[DomainEvent]) -> StoredEvent:
    data = orjson.loads((GOLDEN / f"{cls.topic_name}.json").read_bytes())
    return StoredEvent(
        originator_id=UUID(data["originator_id"]),
        originator_version=data["originator_version"],
        topic=data["topic"],
        state=data["state"].encode(),
    )


def rows_of(facts: CaseFacts) -> list[str]:
    """What the cases table stores of a case (facts, score), its scores under another spec and
    its scoring view (what rescore inputs keep of a case they hold whole)."""
    return [
        json.dumps(facts),
        json.dumps(scoring_view(facts)),
        *(json.dumps(score_case(facts, spec)) for spec in SPECS),
    ]


def assert_every_field_given(model: BaseModel) -> None:
    """Models built by the trusted constructors hold every field (no default left out)."""
    assert model.model_fields_set == set(type(model).model_fields), type(model).__name__
    for value in model.__dict__.values():
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, BaseModel):
                assert_every_field_given(item)
            elif isinstance(item, list):
                for inner in item:
                    assert_every_field_given(inner)


def stale_folds() -> list[str]:
    """Case topics whose class version is not the one their fold reads (or that have none)."""
    return sorted(
        c.__name__ for c in CASE_TOPICS if FOLDED_VERSIONS.get(c) != c.class_version
    ) + sorted(c.__name__ for c in FOLDED_VERSIONS if c not in CASE_TOPICS)


def test_every_case_topic_is_folded_at_its_current_class_version() -> None:
    assert stale_folds() == []
    assert set(FOLDED_VERSIONS) == set(CASE_TOPICS)
    for cls in CASE_TOPICS:
        assert (GOLDEN / f"{cls.topic_name}.json").exists()


def test_a_class_version_moved_on_without_its_fold_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ExecutionErrored, "class_version", 2)
    assert stale_folds() == ["ExecutionErrored"]


def test_an_older_stored_version_reaches_the_fold_upcast(monkeypatch: pytest.MonkeyPatch) -> None:
    stored = golden(ExecutionErrored)
    monkeypatch.setattr(ExecutionErrored, "class_version", 2)
    # Stored as v1, read as v2: without an upcaster decoding refuses it, as the full path does.
    with pytest.raises(KeyError):
        decode_stored(stored, MAPPER.to_domain_event)

    def v1_to_v2(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "message": f"upcast: {state['message']}"}

    monkeypatch.setitem(UPCASTERS, (ExecutionErrored.topic_name, 1), v1_to_v2)
    decoded = decode_stored(stored, MAPPER.to_domain_event)
    facts = open_case(decode_stored(golden(CaseOpened)))
    fold_event(facts, decoded)
    assert facts.errored
    assert facts.error_message == "upcast: " + orjson.loads(stored.state)["message"]
    assert facts.last_version == stored.originator_version


@pytest.mark.parametrize("provider", [None, "anthropic"])
def test_golden_events_fold_to_the_reference_facts_rows_and_scores(provider: str | None) -> None:
    opened = golden(CaseOpened)
    full_opened = MAPPER.to_domain_event(opened)
    assert isinstance(full_opened, CaseOpened)
    full = reference.opened_facts(full_opened, provider)
    facts = open_case(decode_stored(opened, MAPPER.to_domain_event), provider)
    assert rows_of(facts) == rows_of(full)
    assert facts == full
    # Each topic alone on the opened case, then all of them in sequence.
    seq_full, seq = copy.deepcopy(full), copy.deepcopy(facts)
    for cls in FOLLOWING:
        stored = golden(cls)
        event = MAPPER.to_domain_event(stored)
        decoded = decode_stored(stored, MAPPER.to_domain_event)
        assert decoded.cls is cls
        one_full, one = copy.deepcopy(full), copy.deepcopy(facts)
        reference.apply_fact(one_full, event)
        fold_event(one, decoded)
        assert rows_of(one) == rows_of(one_full), cls.__name__
        reference.apply_fact(seq_full, event)
        fold_event(seq, decoded)
        assert rows_of(seq) == rows_of(seq_full), cls.__name__
    # The golden ScoreOverridden sets `match` (issue 30), with its reason.
    assert seq.named_scores == {"model_graded_fact": 1.0, "Tone": 0.6, "refused": 0.0, "match": 1.0}
    assert seq.score_overrides == {"match": "the answer is right; the target spells it differently"}
    assert seq.canceled and seq.errored
    assert_every_field_given(seq)
    assert_every_field_given(scoring_view(seq))
    # A second verdict (position 1), then the corrections of the golden verdict id.
    verdict = golden(JudgeVerdictRecorded)
    reference.apply_fact(seq_full, MAPPER.to_domain_event(verdict))
    fold_event(seq, decode_stored(verdict, MAPPER.to_domain_event))
    for cls in (VerdictOverridden, VerdictInvalidated, NamedScoresRecorded):
        stored = golden(cls)
        reference.apply_fact(seq_full, MAPPER.to_domain_event(stored))
        fold_event(seq, decode_stored(stored, MAPPER.to_domain_event))
        assert rows_of(seq) == rows_of(seq_full), cls.__name__
    assert [v.overridden and v.invalidated for v in seq.verdicts] == [True, True]
    assert seq == seq_full


def test_golden_verdict_and_corrections_give_the_reference_vote_rows() -> None:
    stored = golden(JudgeVerdictRecorded)
    event = MAPPER.to_domain_event(stored)
    assert isinstance(event, JudgeVerdictRecorded)
    decoded = decode_stored(stored, MAPPER.to_domain_event)
    run_id = "6f1d3c1e-0c6a-5b7e-9d41-1a2b3c4d5e6f"
    assert vote_row(decoded, run_id, 7) == reference.vote_row(event, run_id, 7)
    # With the fields added after v1 shipped (stored only when not at their default).
    panel = event.model_copy(
        update={"panel_id": UUID("a1b2c3d4-e5f6-5a7b-8c9d-0e1f2a3b4c5e"), "self_judged": True}
    )
    again = Decoded.of_event(panel)
    assert "panel_id" in again.data
    assert vote_row(again, run_id, 7) == reference.vote_row(panel, run_id, 7)
    for cls in (VerdictOverridden, VerdictInvalidated):
        correction = golden(cls)
        values = correction_values(decode_stored(correction, MAPPER.to_domain_event))
        assert values == reference.correction_values(MAPPER.to_domain_event(correction))
        assert values


def test_decoded_event_is_the_full_decode_made_once() -> None:
    stored = golden(JudgeVerdictRecorded)
    calls: list[StoredEvent] = []

    def decode(s: StoredEvent) -> DomainEvent:
        calls.append(s)
        return MAPPER.to_domain_event(s)  # type: ignore[no-any-return]

    decoded = decode_stored(stored, decode)
    assert not calls  # nothing validated until asked
    assert decoded.event == MAPPER.to_domain_event(stored)
    assert decoded.event is decoded.event
    assert len(calls) == 1
    assert decoded.describe() == f"JudgeVerdictRecorded of {stored.originator_id} v5"
    assert decoded.data == orjson.loads(stored.state)


# ---------------------------------------------------------------------------------------------
# A generated run projected both ways


def snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            if table.name in CACHE_TABLES:
                check_stored_inputs(conn)
                continue
            rows = conn.execute(select(table)).all()
            out[table.name] = sorted((tuple(r) for r in rows), key=repr)
    return out


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[Services]:
    """A store holding two generated runs (one still open) with corrections on a few cases."""
    s = build_services(Settings(db=f"sqlite:///{tmp_path}/store/"))
    try:
        ctx = Context("alice")
        done = s.ledger.import_bundle(
            RunBundle.model_validate(generate_bundle(60, seed=3, run_key="one")), ctx
        )
        data = generate_bundle(30, seed=4, run_key="two")
        data["run"]["status"] = "running"
        del data["run"]["completed_at"]
        data["run"]["config"]["gate"] = Gate.BLOCKERS.value
        s.ledger.import_bundle(RunBundle.model_validate(data), ctx)
        for i, case_id in enumerate(done.case_ids[:12]):
            verdicts = [
                e for e in s.ledger.events_of(case_id) if isinstance(e, JudgeVerdictRecorded)
            ]
            if not verdicts:
                continue
            if i % 3 == 0:
                s.ledger.override_verdict(
                    case_id,
                    ctx,
                    verdict_id=verdicts[0].verdict_id,
                    passed=i % 2 == 0,
                    reason="x",
                )
            elif i % 3 == 1:
                s.ledger.invalidate_verdict(
                    case_id, ctx, verdict_id=verdicts[0].verdict_id, reason="wrong rubric"
                )
        yield s
    finally:
        s.close()


def project(services: Services, url: str, projections: list[Any], page: int, reset: bool) -> Any:
    engine = make_engine(url)
    runner = ProjectionRunner(services.ledger, engine, projections, page_size=page)

    def forget(_position: int, _target: int) -> None:
        if reset:  # as a restart between pages: caches rebuilt from the tables
            for p in projections:
                p.reset()

    runner.catch_up(progress=forget)
    assert runner.position() == services.ledger.position()
    assert runner.failures() == []
    rows = snapshot(engine)
    engine.dispose()
    return rows


def project_reference(services: Services, url: str, page: int) -> Any:
    """The rows of every projection with each case event folded by the reference."""
    with pytest.MonkeyPatch.context() as patch:
        reference.use_reference_folds(patch)
        return project(services, url, all_projections(), page, False)


def test_a_generated_run_projects_to_the_reference_rows(
    generated: Services, tmp_path: Path
) -> None:
    topics = {
        type(generated.ledger.decode(n))
        for n in generated.ledger.notifications(1, generated.ledger.position())
    }
    # The generator covers every topic the facts read.
    assert {CaseOpened, TranscriptRecorded, JudgeVerdictRecorded, OutcomeEvaluated} <= topics
    assert {ClaimsVerified, StructuralCheckRecorded, ExecutionErrored} <= topics
    assert {VerdictOverridden, VerdictInvalidated} <= topics
    full = project_reference(generated, f"sqlite:///{tmp_path}/full.sqlite", 1000)
    folded = project(generated, f"sqlite:///{tmp_path}/one.sqlite", all_projections(), 1000, False)
    assert folded == full
    assert len(full["cases_v6"]) == 90
    assert len(full["run_summaries_v6"]) == 1  # the closed run only
    # Small pages with every cache dropped between them: facts and scores read back instead.
    small = project(generated, f"sqlite:///{tmp_path}/small.sqlite", all_projections(), 7, True)
    assert small == full


def test_past_the_score_cache_cap_summaries_read_the_scores_back(
    generated: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = project_reference(generated, f"sqlite:///{tmp_path}/full.sqlite", 1000)
    monkeypatch.setattr(projectors, "MAX_CACHED_SCORES", 10)
    capped = project(generated, f"sqlite:///{tmp_path}/capped.sqlite", all_projections(), 50, False)
    assert capped == full


def test_the_audit_fold_of_every_generated_case_is_the_reference_and_the_row(
    generated: Services, tmp_path: Path
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/rows.sqlite")
    ProjectionRunner(generated.ledger, engine, all_projections()).catch_up()
    with engine.connect() as conn:
        rows = {row.case_id: row.facts for row in conn.execute(select(cases))}
    engine.dispose()
    assert len(rows) == 90
    for case_id, stored in rows.items():
        events = generated.ledger.events_of(UUID(case_id))
        opened = events[0]
        assert isinstance(opened, CaseOpened)
        provider = generated.ledger.get_run(opened.run_id).created.agent.provider
        facts = fold_events(events, provider)
        assert facts == reference.fold_reference(events, provider)
        assert json.dumps(facts) == stored
