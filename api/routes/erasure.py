"""Erasure (issue 34): `POST /cases/{id}/erasure` and `POST /subjects/{subject}/erasure`.

Each destroys sealed payloads (a case's, or every case's of a data subject) on record (admin).
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path, Response
from pydantic import Field

from evaledger.api.deps import ContextDep, ServicesDep
from evaledger.application.erasure import (
    erase_case,
    erase_subject,
    erasure_json,
    subject_erasure_json,
)
from evaledger.domain.model import FrozenModel

router = APIRouter(tags=["cases"])


class EraseBody(FrozenModel):
    """Why the case's payloads are erased (e.g. the deletion request's reference)."""

    reason: str = Field(min_length=1, description="Why (recorded in PayloadErased).")


class ErasureOut(FrozenModel):
    """What the erasure did: when, by whom, why, which payload references."""

    case_id: str
    erased_at: str = Field(description="When the case was erased (UTC, ISO 8601).")
    erased_by: str = Field(description="Who erased it.")
    reason: str
    refs: list[str] = Field(description="The payload references erased (the log keeps them).")
    recorded: bool = Field(description="False: the case was already erased; its vault finished.")
    position: int | None = Field(description="Log position of PayloadErased (when recorded).")


@router.post(
    "/cases/{case_id}/erasure",
    status_code=201,
    responses={200: {"model": ErasureOut, "description": "Already erased (nothing recorded)"}},
)
def erase(
    case_id: UUID, body: EraseBody, services: ServicesDep, ctx: ContextDep, response: Response
) -> ErasureOut:
    """Destroy the case's key and ciphertexts and record `PayloadErased` (admin scope).

    The events keep their references, so `verify` still passes; the case's messages, prompts
    and replies read "erased on DATE by WHO (reason)" from then on. Another project's case is
    404; a case whose text was stored inline (before sealing) or has nothing sealed is 422.
    """
    erasure = erase_case(services, case_id, ctx, body.reason)
    if erasure.written is None:
        response.status_code = 200
    return ErasureOut.model_validate(erasure_json(erasure))


class SubjectErasureOut(FrozenModel):
    """What a subject's erasure did, per case of the subject."""

    subject: str
    cases: list[ErasureOut] = Field(description="One entry per case of the subject erased.")


@router.post(
    "/subjects/{subject}/erasure",
    status_code=201,
    responses={200: {"model": SubjectErasureOut, "description": "Already erased (nothing new)"}},
)
def erase_by_subject(
    subject: Annotated[str, Path(min_length=1, max_length=200)],
    body: EraseBody,
    services: ServicesDep,
    ctx: ContextDep,
    response: Response,
) -> SubjectErasureOut:
    """Destroy a data subject's keys and ciphertexts; `PayloadErased` per case (admin scope).

    The subject is a bundle case's `subject`. Only the token's project is searched: a subject
    with no case there is 404; a case of it whose text was stored inline is 422, nothing stored.
    """
    erasures = erase_subject(services, subject, ctx, body.reason)
    if all(e.written is None for e in erasures):
        response.status_code = 200
    return SubjectErasureOut.model_validate(subject_erasure_json(subject, erasures))
