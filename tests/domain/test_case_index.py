"""A streamed import keeps its per-case state on disk (issue 32 item 4: memory flat in run size).

`CaseIndex` (a private temporary SQLite file) holds each case's id and last hash; the run's seal
is read back from it in id order (`seal_in_order`) and must be the seal the in-memory rule gives
(`seal_of`, which sorts the ids as text) for any ids and hashes.
"""

from __future__ import annotations

import hashlib
import sqlite3
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaledger.domain.aggregates import seal_in_order, seal_of
from evaledger.domain.store.scratch import CaseIndex

HASHES = st.binary(min_size=1, max_size=8).map(lambda b: hashlib.sha256(b).hexdigest())


@settings(max_examples=60, deadline=None)
@given(
    cases=st.dictionaries(st.uuids(), HASHES, max_size=40),
    batches=st.integers(min_value=1, max_value=5),
)
def test_the_seal_read_back_in_id_order_is_the_in_memory_seal(
    cases: dict[UUID, str], batches: int
) -> None:
    items = list(cases.items())
    with CaseIndex() as index:
        for k in range(batches):  # added in several chunks, as a stream adds them
            index.add(items[k::batches])
        assert len(index) == len(cases)
        assert all(cid in index for cid in cases)
        assert index.known(list(cases)) == set(cases)
        seal = seal_in_order(index.in_id_order())
    assert (seal.digest, seal.case_count) == (seal_of(cases), len(cases))


def test_an_id_held_twice_is_refused_and_ids_not_held_are_not_known() -> None:
    a, b = UUID(int=1), UUID(int=2)
    with CaseIndex() as index:
        index.add([(a, "ab" * 32)])
        assert index.known([a, b]) == {a}
        assert b not in index and "not a uuid" not in index
        with pytest.raises(sqlite3.IntegrityError):
            index.add([(a, "cd" * 32)])
        with pytest.raises(AssertionError, match="is not hex"):
            index.add([(b, "AB" * 32)])
        index.add([(b, "cd" * 32)])  # a refused batch left nothing behind
        assert [c for c, _ in index.in_id_order()] == [a, b] and len(index) == 2
