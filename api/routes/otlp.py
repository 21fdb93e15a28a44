"""POST /v1/traces: the OTLP/HTTP trace receiver (protobuf or JSON, gzip, bearer token).

Per the OTLP/HTTP specification: the answer is an `ExportTraceServiceResponse` in the request's
encoding, with `partial_success` (rejected spans and why) when some spans were refused; a body
that is not an export is 400, a body over the limit (sent or inflated) 413, another media type or
content coding 415, too many exports in flight 429 and a store that cannot take them 503, both
with Retry-After so exporters retry. Errors carry a `google.rpc.Status` in the request's
encoding, its message naming the field: one definition (`api/otlp_errors.py`) for the route and
the shared layers before it. The spans land in the token's project.
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter, Request
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from evaledger.api.deps import ContextDep, ServicesDep
from evaledger.api.errors import status_of
from evaledger.api.otlp_errors import answer_media, encode, status_response
from evaledger.application.traces import receive_traces
from evaledger.domain.errors import ConflictError, EvaledgerError, InfrastructureError
from evaledger.importers.otlp import JSON, PROTOBUF, BodyTooLarge, UnsupportedMediaType

router = APIRouter(tags=["otlp"])

MAX_IN_FLIGHT = 8
"""Exports handled at once by one server process; more are answered 429 (retry later)."""

_in_flight = threading.BoundedSemaphore(MAX_IN_FLIGHT)

_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "An OTLP `ExportTraceServiceRequest` (Content-Encoding: gzip allowed).",
        "content": {
            PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
            JSON: {"schema": {"type": "object"}},
        },
    },
}


class PartialSuccess(BaseModel):
    """Spans refused (OTLP `ExportTracePartialSuccess`, protobuf JSON mapping)."""

    rejectedSpans: int | str = Field(description="How many spans were refused (int64).")
    errorMessage: str = Field(description="Why, for the first of them.")


class ExportResponse(BaseModel):
    """OTLP `ExportTraceServiceResponse`: `partialSuccess` only when spans were refused."""

    partialSuccess: PartialSuccess | None = None


@router.post(
    "/v1/traces",
    operation_id="export_traces",
    openapi_extra=_BODY,
    response_class=Response,
    responses={
        200: {
            "model": ExportResponse,
            "description": "`ExportTraceServiceResponse` in the request's encoding (protobuf "
            "or JSON). Every error of this path (400 for bad data, never 422; 401, 403, 413, "
            "415; 429 and 503 with Retry-After) is a `google.rpc.Status` in the request's "
            "encoding, not the API's error shape, as OTLP says.",
            "content": {PROTOBUF: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def export_traces(request: Request, services: ServicesDep, ctx: ContextDep) -> Response:
    """Receive an OTLP/HTTP trace export: each span recorded once, in the token's project."""
    headers = request.headers
    if not _in_flight.acquire(blocking=False):
        return status_response(429, "too many exports in flight", headers)
    try:
        body = await request.body()
        limit = services.settings.max_body_bytes
        encoding = headers.get("content-encoding")
        media = headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            done = await run_in_threadpool(
                receive_traces, services, body, media, encoding, ctx, max_bytes=limit
            )
        except UnsupportedMediaType as e:
            return status_response(415, e.detail, headers)
        except BodyTooLarge as e:
            return status_response(413, e.detail, headers)
        except (InfrastructureError, ConflictError) as e:
            # The store is away or too contended: retryable, the exporter sends again.
            return status_response(503, e.detail, headers)
        except EvaledgerError as e:
            return status_response(status_of(e), e.detail, headers)
    finally:
        _in_flight.release()
    response = ExportTraceServiceResponse()
    if done.rejected:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=done.rejected, error_message=done.message)
        )
    kind = answer_media(headers)
    return Response(
        encode(response, kind),
        200,
        media_type=kind,
        headers={"X-Evaledger-Position": str(done.position)},
    )
