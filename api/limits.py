"""Request body limit (`EVALEDGER_MAX_BODY_BYTES`): larger bodies get 413, never reach a route."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evaledger.api.errors import HTTP_CODES, error_body
from evaledger.api.otlp_errors import is_otlp, scope_headers, status_response
from evaledger.api.responses import OrjsonResponse
from evaledger.domain.errors import ValidationError
from evaledger.domain.input_limits import DepthScanner


class BodyLimit:
    """ASGI middleware: refuse a body over the limit (declared or streamed) with 413.

    A declared Content-Length over the limit is answered at once; a streamed body stops being
    read as soon as it passes the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with a counting `receive`."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            detail = self._detail()
            response = (
                status_response(413, detail, scope_headers(scope))
                if is_otlp(scope)
                else OrjsonResponse(error_body(detail, HTTP_CODES[413], 413), 413)
            )
            await response(scope, receive, send)
            return
        seen = 0
        media = dict(scope["headers"]).get(b"content-type", b"").split(b";")[0].strip()
        # Nesting is checked on the raw bytes as they arrive, before any JSON parser runs.
        # A compressed body is checked once inflated, by its route (POST /v1/traces).
        coded = dict(scope["headers"]).get(b"content-encoding", b"identity").strip()
        plain = coded in (b"", b"identity")
        depth = DepthScanner("body", "body") if media.endswith(b"json") and plain else None

        async def counting() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                body = message.get("body", b"")
                seen += len(body)
                if seen > self.max_bytes:
                    # Raised inside the route's body read (FastAPI lets HTTPException through):
                    # the app's error handler answers 413 (in OTLP's shape on its paths).
                    raise HTTPException(413, self._detail())
                if depth is not None:
                    try:
                        depth.feed(body)
                    except ValidationError as e:
                        raise HTTPException(422, e.detail) from None
            return message

        await self.app(scope, counting, send)

    def _detail(self) -> str:
        return f"request body larger than {self.max_bytes} bytes (EVALEDGER_MAX_BODY_BYTES)"
