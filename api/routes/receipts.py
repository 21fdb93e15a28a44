"""A run's receipt: what an auditor verifies offline with the bundle and the public key."""

from __future__ import annotations

import os
from typing import Any
from uuid import UUID

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, Field

from evaledger.api.deps import ServicesDep
from evaledger.api.responses import OrjsonResponse
from evaledger.application import receipts

router = APIRouter(tags=["runs"])


class Receipt(BaseModel):
    """A run's signed receipt (`evaledger.receipt/1`, see docs/audit.md)."""

    statement: dict[str, Any] = Field(
        description="Signed: the run (seal, spec id, judge templates, verdict summary), the "
        "bundle's SHA-256, the run's events as Merkle leaves, the seal event, the checkpoint."
    )
    proofs: dict[str, list[str]] = Field(
        description="Per leaf index, its RFC 6962 inclusion proof (hex) against the checkpoint."
    )
    signature: dict[str, str] = Field(description="The Ed25519 signature of the statement.")


def server_signing() -> receipts.Signing:
    """The server's signing key, from its environment (the same variables as the CLI's)."""
    return receipts.signing_from(
        os.environ.get("EVALEDGER_SIGNING_KEY_FILE"),
        os.environ.get("EVALEDGER_SIGNING_KEY"),
        (),
        os.environ.get("EVALEDGER_HEADS_DIR"),
    )


@router.get(
    "/runs/{run_id}/receipt",
    response_model=None,
    responses={
        200: {
            "model": Receipt,
            "description": "The run's signed receipt (`evaledger receipt verify` checks it "
            "offline with the run's bundle and the public key)",
        }
    },
)
def run_receipt(run_id: UUID, services: ServicesDep) -> Response:
    """The run's receipt, against a tree head signed now with the server's Ed25519 key."""
    return OrjsonResponse(receipts.issue_receipt(services, run_id, server_signing()))
