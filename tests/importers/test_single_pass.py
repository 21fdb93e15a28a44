"""The streamed import reads its source once (issue 32 item 4), and bad input still stores nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import BundleCase
from evaledger.domain.errors import ValidationError
from evaledger.domain.ledger import Context
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
