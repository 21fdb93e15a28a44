"""`case_times_v1`: when each case happened, for trends (issue 33, DESIGN §16).

A case's time is its transcript's end (`TranscriptRecorded.ended_at`: an online case's root span
ended then), else its start; a case whose transcript has neither (or that has no transcript) has
no row, and the series query places it at its run's listed time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table

from evaledger.domain.events import TranscriptRecorded
from evaledger.projections.decode import DecodedBatch
from evaledger.projections.rows import upsert
from evaledger.projections.tables import CASE_TIMES_PROJECTION, case_times


def utc_text(value: Any) -> str | None:
    """An ISO instant (text or datetime) as UTC ISO text, so that text order is time order."""
    if value is None:
        return None
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat()


class CaseTimesProjection:
    """Folds each case's transcript times into one row (the latest transcript wins)."""

    name = CASE_TIMES_PROJECTION
    tables: Sequence[Table] = (case_times,)

    def reset(self) -> None:
        """Nothing cached."""

    def process(self, conn: Connection, batch: DecodedBatch) -> None:
        """Upsert the time of every case whose transcript names one."""
        rows: dict[str, dict[str, Any]] = {}
        for _, decoded in batch:
            if decoded.cls is not TranscriptRecorded:
                continue
            data = decoded.data
            at = utc_text(data.get("ended_at") or data.get("started_at"))
            if at is not None:
                rows[decoded.oid] = {"case_id": decoded.oid, "at": at}
        upsert(conn, case_times, list(rows.values()))
