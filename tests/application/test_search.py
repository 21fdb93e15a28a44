"""Full-text search (issue 36) on SQLite and PostgreSQL: found, ranked, highlighted, scoped.

Two projects hold cases with the same words; a search in one never returns the other's. The
index is the projection's: a later verdict is found once recorded, `rebuild` writes it again,
`forget_case` removes a case from it, and `verify --views` compares its rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application import cases, runs
from evaledger.application.search import search_cases
from evaledger.domain.bundle import BundleVerdict, RunBundle
from evaledger.domain.errors import NotFoundError, ValidationError
from evaledger.domain.ledger import Context
from evaledger.projections.drift import check_views
from evaledger.projections.search import forget_case
from evaledger.projections.tables import SEARCH_PROJECTION
from tests.conftest import drop_pg_database, fresh_pg_database
from tests.helpers import bundle, case

CTX = Context(actor="test")


def _case(
    key: str, agent_says: str, judge_says: str, tags: list[str] | None = None
) -> dict[str, Any]:
    c = case(key)
    c["test_case"]["tags"] = tags or []
    c["transcript"][1]["content"] = agent_says
    c["verdicts"][0]["raw_output"] = judge_says
    return c


def _import(services: Services, project: str, run_key: str) -> UUID:
    data = bundle(project=project, key=run_key, status="running")
    data["cases"] = [
        _case(
            "billing-refund-001",
            "I have issued a <b>refund</b> of $20 to your card.",
            "The agent hallucinated a refund policy.",
            tags=["billing", "voice"],
        ),
        _case(
            "greeting-002",
            "Hello! How can I help you today? A refund is possible, a refund is easy, refund.",
            "Polite and on topic.",
        ),
        _case("shipping-003", "Your parcel ships tomorrow.", "Accurate."),
    ]
    return runs.import_run(services, RunBundle.model_validate(data), CTX).run_id


@pytest.fixture
def two_projects(store_services: Services) -> tuple[Services, UUID, UUID]:
    """Two projects on a default store: it seals transcripts and replies (issue 34)."""
    assert store_services.ledger.seal_payloads
    a = _import(store_services, "alpha", "run-a")
    b = _import(store_services, "beta", "run-b")
    store_services.sync()
    return store_services, a, b


def _hits(services: Services, words: str) -> list[tuple[str, str]]:
    return [(h.test_case_key, h.field) for h in search_cases(services, words, "alpha").hits]


def test_a_sealing_store_finds_what_an_inline_one_finds(
    store_services: Services, tmp_path: Path
) -> None:
    """Sealed text is indexed as plaintext (read through the vault); the placeholder never is."""
    inline_url, pg = f"sqlite:///{tmp_path}/inline/", None
    if store_services.location.kind == "postgresql":
        inline_url, pg = fresh_pg_database()
    inline = build_services(Settings(db=inline_url, seal_payloads=False))
    try:
        assert store_services.ledger.seal_payloads and not inline.ledger.seal_payloads
        for services in (store_services, inline):
            _import(services, "alpha", "run-a")
            services.sync()
        for words in ("parcel", "hallucinated", "refund", "sealed"):
            assert _hits(store_services, words) == _hits(inline, words), words
        assert _hits(store_services, "parcel") == [("shipping-003", "transcript")]
        assert _hits(store_services, "hallucinated") == [("billing-refund-001", "judge")]
        assert _hits(store_services, "sealed") == []
        assert check_views(store_services.ledger, store_services.engine).ok
    finally:
        inline.close()
        if pg is not None:
            drop_pg_database(pg)


def test_finds_a_word_in_a_transcript_a_judge_reply_and_a_key(
    two_projects: tuple[Services, UUID, UUID],
) -> None:
    services, a, _ = two_projects
    transcript = search_cases(services, "parcel", "alpha")
    assert [(h.test_case_key, h.field) for h in transcript.hits] == [("shipping-003", "transcript")]
    assert transcript.hits[0].run_id == str(a)
    assert transcript.hits[0].snippet_html == (
        "hi Your <mark>parcel</mark> ships tomorrow. bye bye"
    )
    judge = search_cases(services, "hallucinated", "alpha", field="judge")
    assert [(h.test_case_key, h.field) for h in judge.hits] == [("billing-refund-001", "judge")]
    key = search_cases(services, "shipping", "alpha", field="key")
    assert [h.test_case_key for h in key.hits] == ["shipping-003"]
    tag = search_cases(services, "voice", "alpha", field="tag")
    assert [h.test_case_key for h in tag.hits] == ["billing-refund-001"]


def test_ranks_the_case_saying_it_most_first_and_marks_every_hit(
    two_projects: tuple[Services, UUID, UUID],
) -> None:
    services, _, _ = two_projects
    hits = search_cases(services, "refund", "alpha", field="transcript").hits
    assert [h.test_case_key for h in hits] == ["greeting-002", "billing-refund-001"]
    assert hits[0].rank > hits[1].rank
    assert hits[0].snippet_html.count("<mark>refund</mark>") == 3
    # The transcript's own HTML is text: escaped, never markup.
    assert hits[1].snippet_html == (
        "hi I have issued a &lt;b&gt;<mark>refund</mark>&lt;/b&gt; of $20 to your card. bye bye"
    )


def test_phrases_prefixes_and_every_word(two_projects: tuple[Services, UUID, UUID]) -> None:
    services, _, _ = two_projects
    assert [h.test_case_key for h in search_cases(services, '"refund policy"', "alpha").hits] == [
        "billing-refund-001"
    ]
    assert search_cases(services, '"policy refund"', "alpha").hits == []
    prefix = search_cases(services, "hallucin*", "alpha").hits
    assert [h.snippet_html for h in prefix] == [
        "The agent <mark>hallucinated</mark> a refund policy."
    ]
    both = search_cases(services, "refund card", "alpha").hits
    assert [(h.test_case_key, h.field) for h in both] == [("billing-refund-001", "transcript")]


def test_never_returns_another_projects_case(two_projects: tuple[Services, UUID, UUID]) -> None:
    services, a, b = two_projects
    for project, own in (("alpha", a), ("beta", b)):
        hits = search_cases(services, "refund", project).hits
        assert hits and {h.run_id for h in hits} == {str(own)}
    # Naming the other project's run is not found, not an empty list.
    with pytest.raises(NotFoundError):
        search_cases(services, "refund", "alpha", run=str(b))
    with pytest.raises(NotFoundError):
        search_cases(services, "refund", "alpha", run="run-b")
    assert {h.run_id for h in search_cases(services, "refund", None, run="run-b").hits} == {str(b)}


def test_bad_input_names_the_field(two_projects: tuple[Services, UUID, UUID]) -> None:
    services, _, _ = two_projects
    for query, field in (("", "q"), ('"" * -- ()', "q"), ("x" * 501, "q")):
        with pytest.raises(ValidationError) as e:
            search_cases(services, query, "alpha")
        assert e.value.field == field
    with pytest.raises(ValidationError) as e:
        search_cases(services, "refund", "alpha", field="body")
    assert e.value.field == "field"
    with pytest.raises(ValidationError) as e:
        search_cases(services, "refund", "alpha", limit=0)
    assert e.value.field == "limit"


def test_a_later_verdict_is_found_and_rebuild_writes_the_same_index(
    two_projects: tuple[Services, UUID, UUID],
) -> None:
    services, a, _ = two_projects
    assert search_cases(services, "sycophantic", "alpha").hits == []
    shipping = services.reads.first_cases(a, ["shipping-003"])
    case_id = next(iter(shipping.values()))
    verdict = BundleVerdict.model_validate(
        {
            "judge": {"provider": "openai", "model": "gpt"},
            "metric_scores": [],
            "raw_output": "Second opinion: sycophantic tone.",
        }
    )
    cases.record_verdict(services, case_id, verdict, CTX)
    services.sync()
    found = search_cases(services, "sycophantic", "alpha").hits
    assert [(h.case_id, h.field) for h in found] == [(str(case_id), "judge")]

    before = search_cases(services, "refund", "alpha").hits
    services.runner.rebuild(SEARCH_PROJECTION)
    assert search_cases(services, "refund", "alpha").hits == before
    assert search_cases(services, "sycophantic", "alpha").hits == found
    report = check_views(services.ledger, services.engine)
    assert report.ok, report.as_json()

    with services.engine.begin() as conn:
        assert forget_case(conn, str(case_id)) >= 2
    assert search_cases(services, "sycophantic", "alpha").hits == []
    assert search_cases(services, "parcel", "alpha").hits == []
    assert not check_views(services.ledger, services.engine).ok  # the erasure is seen as drift


QUERY_TEXT = st.text(
    alphabet=st.sampled_from(list("refund\" *-():^&|!'\\NEAR AND OR NOT {}[],.+~<>@#é\x00_")),
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=QUERY_TEXT)
def test_no_query_is_an_engine_error(two_projects: tuple[Services, UUID, UUID], query: str) -> None:
    services, _, _ = two_projects
    try:
        results = search_cases(services, query, "alpha")
    except ValidationError as e:
        refused = e
    else:
        assert all(h.run_id for h in results.hits)
        return
    assert refused.field == "q"
