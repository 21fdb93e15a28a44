"""Refusals of the OTLP receiver's paths, as the OTLP/HTTP specification says exporters read them.

Every refusal of `/v1/traces` — the route's own and those of the shared layers before it (the
browser guard, the body limit, authentication, the input checks, the error handlers) — is a
`google.rpc.Status` in the request's encoding: protobuf unless the request is JSON. Its HTTP status
is the one the specification gives: bad data is 400 (the API's 422 becomes 400), not retried;
429, 502, 503 and 504 are retryable and carry `Retry-After`. The API's other paths keep
`{detail, code, status}` (`api/errors.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc.code_pb2 import Code
from google.rpc.status_pb2 import Status
from starlette.responses import Response
from starlette.types import Scope

from evaledger.importers.otlp import JSON, PROTOBUF

OTLP_PATHS = frozenset({"/v1/traces"})
"""Paths whose errors follow the OTLP/HTTP specification, not the API's shape."""
RETRY_AFTER_S = 2
"""Seconds an exporter waits before sending a refused export again (429 and 5xx retryable)."""
RETRYABLE = frozenset({429, 502, 503, 504})
"""Statuses OTLP exporters retry (the specification's "retryable response codes")."""

_GRPC_CODES: dict[int, int] = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND,
    405: Code.UNIMPLEMENTED,
    409: Code.ABORTED,
    413: Code.INVALID_ARGUMENT,
    415: Code.INVALID_ARGUMENT,
    421: Code.FAILED_PRECONDITION,
    429: Code.RESOURCE_EXHAUSTED,
    500: Code.INTERNAL,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    504: Code.DEADLINE_EXCEEDED,
}


def is_otlp(scope: Scope) -> bool:
    """True for a request to an OTLP receiver path."""
    return scope.get("type") == "http" and scope.get("path") in OTLP_PATHS


def answer_media(headers: Mapping[str, str]) -> str:
    """The encoding of the answer: JSON for a JSON request, protobuf otherwise (OTLP's default)."""
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    return JSON if media == JSON else PROTOBUF


def scope_headers(scope: Scope) -> dict[str, str]:
    """A request's headers from its ASGI scope, names lower-cased."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def encode(message: Message, media: str) -> bytes:
    """A protobuf message in `media`: the protobuf JSON mapping, or the binary encoding."""
    if media == JSON:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def status_response(status: int, message: str, headers: Mapping[str, str]) -> Response:
    """The refusal `status` (an API status) as OTLP answers it: a `google.rpc.Status` body.

    `headers` are the request's (lower-cased names): they choose the encoding.
    """
    status = 400 if status == 422 else status
    media = answer_media(headers)
    code = _GRPC_CODES.get(status, Code.UNKNOWN)
    retry = {"Retry-After": str(RETRY_AFTER_S)} if status in RETRYABLE else None
    body = encode(Status(code=code, message=message), media)
    return Response(body, status, headers=retry, media_type=media)
