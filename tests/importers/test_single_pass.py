"""The streamed import reads its source once (issue 32 item 4), and bad input still stores nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import orjson
import pytest
from eventsourcing.persistence import StoredEvent

from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import BundleCase
from evaledger.domain.errors import ValidationError
from evaledger.domain.importing import EventSpool
from evaledger.domain.ledger import Context
from evaledger.domain.payloads import Sealed
from evaledger.domain.store.chain import HashedStoredEvent
from evaledger.importers.bundle import open_bundle
from tests.helpers import bundle, case, event_count


def _bundle_file(tmp_path: Path, n: int) -> Path:
    data = bundle()
    data["cases"] = [case(f"tc-{i}") for i in range(n)]
    path = tmp_path / "b.json"
    path.write_bytes(orjson.dumps(data))
    return path


def test_each_case_is_read_once_and_written_in_chunks(
    store_services: Services, tmp_path: Path
) -> None:
    opened = open_bundle(_bundle_file(tmp_path, 7))
    opens = 0
    read = 0

    def cases() -> Iterator[BundleCase]:
        nonlocal opens, read
        opens += 1
        for c in opened.cases():
            read += 1
            yield c

    done = store_services.ledger.import_stream(opened.run, cases, Context(), chunk_size=3)
    assert (opens, read) == (1, 7)
    assert (done.cases, done.new_cases) == (7, 7)
    # The run's creation, three chunks of cases, the seal: one commit each.
    blocks = store_services.ledger.chain_blocks(-(2**62), 100)
    assert len(blocks) == 5
    assert store_services.ledger.get_run(done.run_id).status.value == "completed"


def test_a_bad_case_in_the_last_chunk_stores_nothing(
    store_services: Services, tmp_path: Path
) -> None:
    path = _bundle_file(tmp_path, 7)
    data = orjson.loads(path.read_bytes())
    data["cases"][6]["verdicts"][0]["metric_scores"][0]["metric"] = "no_such_metric"
    path.write_bytes(orjson.dumps(data))
    opened = open_bundle(path)
    with pytest.raises(ValidationError) as refused:
        store_services.ledger.import_stream(opened.run, opened.cases, Context(), chunk_size=3)
    assert refused.value.field is not None and refused.value.field.startswith("cases[6]")
    assert event_count(store_services) == 0


def test_the_spool_gives_back_each_event_with_its_hash_and_sealed_payload() -> None:
    # The chain links a written chunk from the hashes the spool carries (not computed again):
    # they, the state, the topic and the sealed payload come back as they went in.
    events = [
        HashedStoredEvent(UUID(int=1), 1, "t.a/v1", b'{"a":1}', hash="ab" * 32),
        HashedStoredEvent(
            UUID(int=2), 3, "t.b/v2", b"{}", hash="cd" * 32, sealed=Sealed("r", "s", b'{"v":1}')
        ),
        StoredEvent(UUID(int=3), 2, "t.c/v1", b"[]"),
    ]
    with EventSpool() as spool:
        spool.add(events[:2], 1)
        spool.add(events[2:], 0)
        back = list(spool.chunks())
    assert [n for _, n in back] == [1, 0]
    got = [e for chunk, _ in back for e in chunk]
    assert [(e.originator_id, e.originator_version, e.topic, e.state) for e in got] == [
        (e.originator_id, e.originator_version, e.topic, e.state) for e in events
    ]
    assert [(e.hash, e.sealed) for e in got if isinstance(e, HashedStoredEvent)] == [
        ("ab" * 32, None),
        ("cd" * 32, Sealed("r", "s", b'{"v":1}')),
        ("", None),  # an event stored without a hash: the chain computes it
    ]
