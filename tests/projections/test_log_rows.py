"""The direct cursor replay reads (`Ledger.log_rows`) gives the notification log's events.

Issue 32: catch-up and rebuild read plain tuples instead of notification objects; every field
must be what the notification gives (the aggregate id as canonical UUID text), on both stores,
and the page decode must be the per-event decode of the same rows.
"""

from __future__ import annotations

from evaledger.api.bootstrap import Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from evaledger.projections.decode import decode_rows, decode_stored
from tests.helpers import bundle


def test_log_rows_are_the_notifications(store_services: Services) -> None:
    s = store_services
    s.ledger.import_bundle(RunBundle.model_validate(bundle()), Context(actor="t"))
    s.ledger.import_bundle(RunBundle.model_validate(bundle(key="second")), Context(actor="t"))
    head = s.ledger.position()
    notes = s.ledger.notifications(1, head)
    for start, limit in ((1, head), (1, 3), (4, 5), (head, 10), (head + 1, 10)):
        rows = s.ledger.log_rows(start, limit)
        expected = [
            (n.id, str(n.originator_id), n.originator_version, n.topic, bytes(n.state))
            for n in notes
            if n.id >= start
        ][:limit]
        assert [(*r[:4], bytes(r[4])) for r in rows] == expected


def test_decode_rows_is_the_per_event_decode(store_services: Services) -> None:
    s = store_services
    s.ledger.import_bundle(RunBundle.model_validate(bundle()), Context(actor="t"))
    rows = s.ledger.log_rows(1, 10_000)
    notes = s.ledger.notifications(1, 10_000)
    decoded = decode_rows(rows, s.ledger.decode)
    assert len(decoded) == len(notes)
    for (position, d), n in zip(decoded, notes, strict=True):
        one = decode_stored(n, s.ledger.decode)
        assert (position, d.cls, d.oid, d.version, d.data) == (
            n.id,
            one.cls,
            one.oid,
            one.version,
            one.data,
        )
        assert d.event == one.event


def test_decode_rows_stops_at_the_first_undecodable_row() -> None:
    seen: list[int] = []
    rows = [
        (1, "00000000-0000-0000-0000-000000000001", 1, "evaledger.run.nope/v1", b"{}"),
        (2, "00000000-0000-0000-0000-000000000001", 2, "evaledger.run.started/v1", b"{}"),
    ]
    assert decode_rows(rows, None, lambda row, e: seen.append(row[0])) == []
    assert seen == [1]
    assert decode_rows([rows[1], (3, rows[1][1], 3, rows[1][3], b"not json")]) != []
