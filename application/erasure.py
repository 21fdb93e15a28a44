"""Erasure of a case's personal payloads (issue 34): the use case behind `erase` and its route.

The ledger records `PayloadErased` and destroys the case's key and ciphertexts
(`domain/erasure.py`); the read models are brought up to the erasure here, so reads show it at
once and the search index (the one read model holding sealed text, as plaintext) has dropped the
case's transcripts and replies, and on SQLite scrubbed them from the file, before this returns.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from evaledger.application.ports import Services
from evaledger.domain.erasure import Erasure
from evaledger.domain.writes import Context


def erase_case(services: Services, case_id: UUID, ctx: Context, reason: str | None) -> Erasure:
    """Erase a case's sealed payloads (admin scope; another project's case does not exist)."""
    erasure = services.ledger.erase_case(case_id, ctx, reason)
    if erasure.written is not None:
        services.sync(erasure.written.position)
    return erasure


def erase_subject(
    services: Services, subject: str, ctx: Context, reason: str | None
) -> list[Erasure]:
    """Erase a data subject's sealed payloads in the context's project (admin scope)."""
    erasures = services.ledger.erase_subject(subject, ctx, reason)
    written = [e.written.position for e in erasures if e.written is not None]
    if written:
        services.sync(max(written))
    return erasures


def subject_erasure_json(subject: str, erasures: list[Erasure]) -> dict[str, Any]:
    """A subject's erasure as the CLI's `--json` and the API answer it: one entry per case."""
    return {"subject": subject, "cases": [erasure_json(e) for e in erasures]}


def erasure_json(erasure: Erasure) -> dict[str, Any]:
    """An erasure as the CLI's `--json` and the API answer it."""
    return {
        "case_id": str(erasure.case_id),
        "erased_at": erasure.erased_at,
        "erased_by": erasure.erased_by,
        "reason": erasure.reason,
        "refs": list(erasure.refs),
        "recorded": erasure.written is not None,
        "position": None if erasure.written is None else erasure.written.position,
    }


def erasure_of(services: Services, case_id: UUID) -> Erasure | None:
    """The case's erasure, if any (what show, explain and the case page name)."""
    return services.ledger.erasure_of(case_id)
