"""Search over sealed text (issue 34 × 36), on SQLite and PostgreSQL.

A default store seals transcripts and judges' replies; the search projection reads them through
the vault, so they are found. `erase` must purge them from the index too: a plaintext index that
outlived the erasure would be a privacy hole. So after it the words are not found, no store file
(nor a `pg_dump`) holds them, and a rebuild writes the same rows the catch-up left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
from sqlalchemy import select

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.application.erasure import erase_case, erase_subject
from evaledger.application.search import search_cases
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import BY_TOPIC_NAME, split_topic
from evaledger.domain.ledger import Context
from evaledger.domain.payloads import SEALED_FIELDS
from evaledger.projections.drift import check_views
from evaledger.projections.search import SEALED_SEARCH_FIELDS, texts_of
from evaledger.projections.tables import SEARCH_FTS, SEARCH_PROJECTION, search_docs
from tests.domain.test_erasure import _case_ids, _pg_hex, _store_bytes
from tests.domain.test_erasure_subject import ALICE
from tests.domain.test_erasure_subject import _bundle as subject_bundle
from tests.helpers import bundle, case

WORD = "qxzsealedword7731"
"""A word said only in the secret case's conversation and its judge's reply."""
PLAIN = "zzplainreason4242"
"""A word of the secret case's judge justification: never sealed, so it survives erasure."""


def _bundle() -> RunBundle:
    secret = case("secret")
    secret["transcript"][0]["content"] = f"my card is {WORD}"
    secret["verdicts"][0]["prompt"] = f"judge this: {WORD}"
    secret["verdicts"][0]["raw_output"] = f"the user said {WORD}"
    for score in secret["verdicts"][0].get("metric_scores") or []:
        score["justification"] = f"because {PLAIN}"
    data = bundle(key="r1", status="completed")
    data["cases"] = [secret, case("other")]
    return RunBundle.model_validate(data)


def _found(services: Services, words: str) -> list[tuple[str, str]]:
    hits = search_cases(services, words, None).hits
    return sorted((h.test_case_key, h.field) for h in hits)


def _rows(services: Services) -> list[dict[str, Any]]:
    with services.engine.connect() as conn:
        query = select(search_docs).order_by(search_docs.c.position)
        return [dict(r) for r in conn.execute(query).mappings()]


def _sealed_services(store_url: str) -> Services:
    services = build_services(Settings(db=store_url))
    assert services.ledger.seal_payloads  # the default
    services.ledger.import_bundle(_bundle(), Context("alice"))
    services.sync()
    return services


def test_sealed_words_are_found_and_erasure_purges_them(store_url: str, tmp_path: Path) -> None:
    services = _sealed_services(store_url)
    try:
        secret = _case_ids(services)["secret"]
        assert _found(services, WORD) == [("secret", "judge"), ("secret", "transcript")]
        plain = _found(services, PLAIN)
        assert ("secret", "justification") in plain
        blob = _store_bytes(services, tmp_path)
        assert WORD.encode() in blob  # the index holds the plaintext (what erasure must purge)

        erase_case(services, secret, Context("dpo"), "deletion request 21")

        assert _found(services, WORD) == []
        assert _found(services, PLAIN) == plain  # text that was never sealed stays
        assert ("other", "transcript") in _found(services, "hi")  # the other case untouched
        assert _found(services, "erased") == []  # nor is the tombstone's wording indexed
        for dump in (_store_bytes(services, tmp_path),):
            assert WORD.encode() not in dump
            assert _pg_hex(WORD.encode()) not in dump
        if services.location.kind == "sqlite":  # the FTS5 index itself, not only its table
            with services.engine.connect() as conn:
                matched = conn.exec_driver_sql(
                    f"SELECT count(*) FROM {SEARCH_FTS} WHERE {SEARCH_FTS} MATCH '{WORD}'"
                ).scalar()
            assert matched == 0
        caught_up = _rows(services)
        assert {r["field"] for r in caught_up if r["case_id"] == str(secret)}.isdisjoint(
            SEALED_SEARCH_FIELDS
        )
        assert check_views(services.ledger, services.engine).ok  # catch-up == a fresh fold

        services.runner.rebuild(SEARCH_PROJECTION)

        assert _rows(services) == caught_up
        assert _found(services, WORD) == []
        dump = _store_bytes(services, tmp_path)
        assert WORD.encode() not in dump and _pg_hex(WORD.encode()) not in dump
    finally:
        services.close()


def test_a_rebuild_after_erasure_writes_the_rows_of_the_catch_up(store_url: str) -> None:
    """Rebuilt, the erased payloads do not open: none of their text, the rest as before."""
    services = _sealed_services(store_url)
    try:
        secret = _case_ids(services)["secret"]
        erase_case(services, secret, Context("dpo"), "deletion request 22")
        caught_up = _rows(services)
        assert caught_up and all(WORD not in r["body"] for r in caught_up)
        services.runner.rebuild(SEARCH_PROJECTION)
        assert _rows(services) == caught_up
        assert _found(services, WORD) == []
    finally:
        services.close()


@pytest.mark.parametrize("kind", ["transcript", "verdict"])
def test_the_sealed_search_fields_are_exactly_the_sealed_text(store_url: str, kind: str) -> None:
    """`SEALED_SEARCH_FIELDS` against the vault: placeholders give none, plaintext gives them."""
    services = _sealed_services(store_url)
    try:
        secret: UUID = _case_ids(services)["secret"]
        seen: set[str] = set()
        for stored in services.ledger.stored_events_of(secret):
            name, _ = split_topic(stored.topic)
            if name not in SEALED_FIELDS or kind not in name:
                continue
            cls = BY_TOPIC_NAME[name]
            state = orjson.loads(stored.state)
            assert set(texts_of(cls, state)).isdisjoint(SEALED_SEARCH_FIELDS)
            opened = services.ledger.opened(state)
            assert opened is not None and opened is not state
            fields = set(texts_of(cls, opened)) & set(SEALED_SEARCH_FIELDS)
            assert all(WORD in texts_of(cls, opened)[f] for f in fields)
            seen |= fields
            assert "payload_ref" in state  # the stored state was left as it was
        assert seen == {"transcript" if kind == "transcript" else "judge"}
    finally:
        services.close()


def test_erasing_a_subject_purges_its_cases_only(store_url: str, tmp_path: Path) -> None:
    """`erase --subject`: one `PayloadErased` per case, each purges its case's sealed rows."""
    services = build_services(Settings(db=store_url))
    try:
        services.ledger.import_bundle(subject_bundle("r1"), Context("alice"))
        services.sync()
        alice = [("r1-a1", "judge"), ("r1-a1", "transcript")]
        alice += [("r1-a2", "judge"), ("r1-a2", "transcript")]
        assert _found(services, "4410") == alice  # ALICE's digits
        bob = _found(services, "5520")
        assert bob == [("r1-b", "judge"), ("r1-b", "transcript")]

        erase_subject(services, "u-alice", Context("dpo"), "deletion request 23")

        assert _found(services, "4410") == []
        assert _found(services, "5520") == bob
        dump = _store_bytes(services, tmp_path)
        assert ALICE.encode() not in dump and _pg_hex(ALICE.encode()) not in dump
        caught_up = _rows(services)
        services.runner.rebuild(SEARCH_PROJECTION)
        assert _rows(services) == caught_up
    finally:
        services.close()
