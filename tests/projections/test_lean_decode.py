"""Lean replay decoding gives exactly the rows of the full pydantic decode.

The projections fold the hot case events from their stored state dicts (projections/decode.py,
the lean folds of scoring/facts.py and votes.py). These tests hold them to the reference:
every golden stored event folded both ways, a generated run projected both ways, and a run
whose summary is computed from cached scores against one read back from the table.
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
from evaledger.domain.store.codec import EventMapper, OrjsonTranscoder
from evaledger.projections import encoding as json
from evaledger.projections import projectors as views
from evaledger.projections.decode import LEAN_VERSIONS, Decoded, decode_stored
from evaledger.projections.projectors import CasesProjection, all_projections
from evaledger.projections.runner import ProjectionRunner
from evaledger.projections.tables import make_engine, metadata
from evaledger.projections.votes import JudgeVotesProjection, _vote_row, _vote_row_data
from evaledger.scoring.case import score_case
from evaledger.scoring.facts import (
    LEAN_FACT_TOPICS,
    CaseFacts,
    apply_fact,
    apply_fact_data,
    opened_facts,
    opened_facts_data,
    scoring_view,
)
from tests.conftest import FIXTURES

GOLDEN = FIXTURES / "golden_events"
MAPPER = EventMapper(transcoder=OrjsonTranscoder())
SPECS = [
    resolve_spec(RunConfig()),
    resolve_spec(RunConfig(gate=Gate.BLOCKERS, judge_errors=JudgeErrorPolicy.UNSCORED)),
]


def golden(cls: type[DomainEvent]) -> StoredEvent:
    data = orjson.loads((GOLDEN / f"{cls.topic_name}.json").read_bytes())
    return StoredEvent(
        originator_id=UUID(data["originator_id"]),
        originator_version=data["originator_version"],
        topic=data["topic"],
        state=data["state"].encode(),
    )


def rows_of(facts: CaseFacts) -> list[str]:
    """What the cases table stores of a case, and its scores under two specs."""
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


def test_every_lean_topic_has_a_golden_event_and_a_current_version() -> None:
    assert set(LEAN_VERSIONS) == {CaseOpened, *LEAN_FACT_TOPICS}
    for cls, version in LEAN_VERSIONS.items():
        assert cls.class_version == version
        assert (GOLDEN / f"{cls.topic_name}.json").exists()


@pytest.mark.parametrize("provider", [None, "anthropic"])
def test_golden_events_fold_to_the_same_facts_rows_and_scores(provider: str | None) -> None:
    opened = golden(CaseOpened)
    full_opened = MAPPER.to_domain_event(opened)
    assert isinstance(full_opened, CaseOpened)
    lean_opened = decode_stored(opened, MAPPER.to_domain_event)
    assert lean_opened.lean
    full = opened_facts(full_opened, provider)
    lean = opened_facts_data(lean_opened.oid, lean_opened.version, lean_opened.data, provider)
    assert rows_of(lean) == rows_of(full)
    assert lean == full
    # Each lean topic alone on the opened case, then all of them in sequence.
    topics = sorted(LEAN_FACT_TOPICS, key=lambda c: c.topic_name)
    seq_full, seq_lean = copy.deepcopy(full), copy.deepcopy(lean)
    for cls in topics:
        stored = golden(cls)
        event = MAPPER.to_domain_event(stored)
        decoded = decode_stored(stored, MAPPER.to_domain_event)
        assert decoded.lean
        assert decoded.cls is cls
        one_full, one_lean = copy.deepcopy(full), copy.deepcopy(lean)
        apply_fact(one_full, event)
        apply_fact_data(one_lean, cls, decoded.version, decoded.data)
        assert rows_of(one_lean) == rows_of(one_full), cls.__name__
        apply_fact(seq_full, event)
        apply_fact_data(seq_lean, cls, decoded.version, decoded.data)
        assert rows_of(seq_lean) == rows_of(seq_full), cls.__name__
    assert_every_field_given(seq_lean)
    assert_every_field_given(scoring_view(seq_lean))
    # A second verdict (position 1) and a correction folded (full path) on top of lean facts.
    verdict = golden(JudgeVerdictRecorded)
    decoded = decode_stored(verdict, MAPPER.to_domain_event)
    apply_fact(seq_full, MAPPER.to_domain_event(verdict))
    apply_fact_data(seq_lean, JudgeVerdictRecorded, decoded.version, decoded.data)
    for cls in (VerdictOverridden, VerdictInvalidated, NamedScoresRecorded):
        event = MAPPER.to_domain_event(golden(cls))
        apply_fact(seq_full, event)
        apply_fact(seq_lean, event)
        assert rows_of(seq_lean) == rows_of(seq_full), cls.__name__


def test_golden_verdict_gives_the_same_vote_row() -> None:
    stored = golden(JudgeVerdictRecorded)
    event = MAPPER.to_domain_event(stored)
    assert isinstance(event, JudgeVerdictRecorded)
    decoded = decode_stored(stored, MAPPER.to_domain_event)
    case_id, run_id = str(event.originator_id), "6f1d3c1e-0c6a-5b7e-9d41-1a2b3c4d5e6f"
    assert _vote_row_data(decoded.data, case_id, run_id, 7) == _vote_row(event, case_id, run_id, 7)
    # With the fields added after v1 shipped (stored only when not at their default).
    panel = event.model_copy(
        update={"panel_id": UUID("a1b2c3d4-e5f6-5a7b-8c9d-0e1f2a3b4c5e"), "self_judged": True}
    )
    again = Decoded.of_event(panel)
    assert "panel_id" in again.data
    assert _vote_row_data(again.data, case_id, run_id, 7) == _vote_row(panel, case_id, run_id, 7)


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


def test_a_class_version_the_lean_fold_was_not_written_for_takes_the_full_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ExecutionErrored, "class_version", 2)
    stored = golden(ExecutionErrored)
    # Stored as v1, read as v2: no upcaster registered, so decoding refuses it (as the full path).
    with pytest.raises(KeyError):
        decode_stored(stored, MAPPER.to_domain_event)
    decoded = Decoded(ExecutionErrored, str(stored.originator_id), 3, {"message": "x"})
    assert not decoded.lean


# ---------------------------------------------------------------------------------------------
# A generated run projected both ways


def snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
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
                s.ledger.record(
                    case_id,
                    VerdictOverridden,
                    ctx,
                    {"verdict_id": verdicts[0].verdict_id, "passed": i % 2 == 0, "reason": "x"},
                )
            elif i % 3 == 1:
                s.ledger.record(
                    case_id,
                    VerdictInvalidated,
                    ctx,
                    {"verdict_id": verdicts[0].verdict_id, "reason": "wrong rubric"},
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


def reference() -> list[Any]:
    out = []
    for p in all_projections():
        if isinstance(p, CasesProjection):
            p = CasesProjection(lean=False)
        elif isinstance(p, JudgeVotesProjection):
            p = JudgeVotesProjection(lean=False)
        out.append(p)
    return out


def test_a_generated_run_projects_to_the_same_rows_lean_and_full(
    generated: Services, tmp_path: Path
) -> None:
    topics = {
        type(generated.ledger.decode(n))
        for n in generated.ledger.notifications(1, generated.ledger.position())
    }
    # The generator covers every lean topic (and the corrections, the full path).
    assert {*LEAN_FACT_TOPICS, VerdictOverridden, VerdictInvalidated} <= topics
    assert {ClaimsVerified, StructuralCheckRecorded, OutcomeEvaluated, ExecutionErrored} <= topics
    assert TranscriptRecorded in topics
    full = project(generated, f"sqlite:///{tmp_path}/full.sqlite", reference(), 1000, False)
    lean = project(generated, f"sqlite:///{tmp_path}/lean.sqlite", all_projections(), 1000, False)
    assert lean == full
    assert len(full["cases_v3"]) == 90
    assert len(full["run_summaries_v3"]) == 1  # the closed run only
    # Small pages with every cache dropped between them: facts and scores read back instead.
    small = project(generated, f"sqlite:///{tmp_path}/small.sqlite", all_projections(), 7, True)
    assert small == full


def test_past_the_score_cache_cap_summaries_read_the_scores_back(
    generated: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = project(generated, f"sqlite:///{tmp_path}/full.sqlite", reference(), 1000, False)
    monkeypatch.setattr(views, "MAX_CACHED_SCORES", 10)
    capped = project(generated, f"sqlite:///{tmp_path}/capped.sqlite", all_projections(), 50, False)
    assert capped == full
