"""OTLP/HTTP trace exports → spans as plain JSON, read with the official `opentelemetry-proto`.

An export body (`ExportTraceServiceRequest`) is protobuf (`application/x-protobuf`) or OTLP/JSON
(`application/json`: the protobuf JSON mapping, except that trace and span ids are hex, not
base64), optionally gzip-compressed. It is inflated within a byte limit in bounded steps (a gzip
bomb stops at the limit, never inflated whole), JSON nesting is counted on the raw bytes before
any parser runs, and the protobuf parser has its own nesting limit.

Each span becomes one plain JSON object (`span_json`): ids in hex, times in nanoseconds, its
status, attributes, events and links with their attributes as JSON values, and its resource's
attributes and instrumentation scope. Every attribute is kept. A span the ledger cannot store
(invalid ids, NaN, NUL characters, values nested too deep) is rejected on its own, with a
message: the export's other spans are still taken (OTLP's partial success).
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from evaledger.domain.errors import ValidationError
from evaledger.domain.input_limits import DepthScanner

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MEDIA_TYPES = (PROTOBUF, JSON)
MAX_VALUE_DEPTH = 16
"""Deepest nesting of an attribute's value (arrays and key-value lists) a span may carry."""
_INFLATE_STEP = 256 * 1024
_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


class UnsupportedMediaType(ValidationError):
    """The body is neither OTLP protobuf nor OTLP JSON (HTTP 415)."""


class BodyTooLarge(ValidationError):
    """The body, inflated, passes the limit (HTTP 413)."""


@dataclass
class DecodedExport:
    """An export's spans grouped by trace (hex id), and what was rejected with why."""

    traces: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    spans: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def message(self) -> str:
        """The partial-success message: the first reasons (a few are enough to fix a sender)."""
        shown = "; ".join(self.errors[:5])
        more = len(self.errors) - 5
        return f"{shown}; and {more} more" if more > 0 else shown


def inflate(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body, gzip-inflated when `encoding` says so, refused past `limit` bytes inflated."""
    coding = (encoding or "identity").strip().lower()
    if coding in ("", "identity"):
        return body
    if coding not in ("gzip", "deflate"):
        raise UnsupportedMediaType(
            f"Content-Encoding: {coding!r} is not supported (gzip or none)",
            field="Content-Encoding",
        )
    inflater = zlib.decompressobj(wbits=47 if coding == "gzip" else 15)
    out = bytearray()
    data = body
    try:
        while data:
            out += inflater.decompress(data, _INFLATE_STEP)
            if len(out) > limit:
                raise BodyTooLarge(
                    f"body: larger than {limit} bytes once inflated (EVALEDGER_MAX_BODY_BYTES)",
                    field="body",
                )
            data = inflater.unconsumed_tail
        if not inflater.eof:
            raise zlib.error("truncated")
    except zlib.error:
        raise ValidationError(
            f"body: not valid {coding} data (Content-Encoding: {coding})", field="body"
        ) from None
    return bytes(out)


def parse_request(body: bytes, media_type: str) -> ExportTraceServiceRequest:
    """The export request of an (inflated) body of `media_type`."""
    request = ExportTraceServiceRequest()
    if media_type == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError, ValueError) as e:
            raise ValidationError(
                f"body: not an OTLP ExportTraceServiceRequest in protobuf ({e})", field="body"
            ) from None
        return request
    if media_type != JSON:
        raise UnsupportedMediaType(
            f"Content-Type: {media_type or 'none'!r} is not supported; send {PROTOBUF} or {JSON}",
            field="Content-Type",
        )
    DepthScanner("body", "body").feed(body)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ValidationError(f"body: not JSON ({e})", field="body") from None
    if not isinstance(data, dict):
        raise ValidationError("body: an OTLP/JSON export is an object", field="body")
    _ids_to_base64(data)
    try:
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, ValueError, TypeError) as e:
        raise ValidationError(f"body: not an OTLP/JSON export ({e})", field="body") from None
    return request


def _ids_to_base64(data: dict[str, Any]) -> None:
    """OTLP/JSON's hex ids as the protobuf JSON mapping's base64 (in place)."""
    for rs in _items(data, "resourceSpans", "resource_spans"):
        for ss in _items(rs, "scopeSpans", "scope_spans"):
            for span in _items(ss, "spans"):
                _hex_fields(span)
                for link in _items(span, "links"):
                    _hex_fields(link)


def _items(obj: Any, *keys: str) -> Iterator[dict[str, Any]]:
    if not isinstance(obj, dict):
        return
    for key in keys:
        value = obj.get(key)
        if isinstance(value, list):
            yield from (v for v in value if isinstance(v, dict))


def _hex_fields(obj: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            try:
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise ValidationError(f"body: {key} {value[:40]!r} is not hex", field=key) from None


def decode_export(body: bytes, media_type: str, encoding: str | None, limit: int) -> DecodedExport:
    """An export body's spans by trace: inflated within `limit`, parsed, each span checked."""
    request = parse_request(inflate(body, encoding, limit), media_type)
    return spans_of(request)


def spans_of(request: ExportTraceServiceRequest) -> DecodedExport:
    """The request's spans as JSON objects grouped by trace id; unstorable spans rejected."""
    out = DecodedExport()
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes, 0)
        for ss in rs.scope_spans:
            scope = {"name": ss.scope.name, "version": ss.scope.version}
            for span in ss.spans:
                out.spans += 1
                try:
                    item = span_json(span, resource, scope)
                except _Unstorable as e:
                    out.rejected += 1
                    out.errors.append(f"span {span.span_id.hex() or '?'}: {e}")
                    continue
                out.traces.setdefault(item.pop("trace_id"), []).append(item)
    return out


class _Unstorable(ValueError):
    pass


def span_json(span: Span, resource: dict[str, Any], scope: dict[str, Any]) -> dict[str, Any]:
    """One span as stored: hex ids, ns times, status, attributes, events, links, resource."""
    if len(span.trace_id) != 16 or not any(span.trace_id):
        raise _Unstorable("trace_id must be 16 bytes, not all zero")
    if len(span.span_id) != 8 or not any(span.span_id):
        raise _Unstorable("span_id must be 8 bytes, not all zero")
    parent = span.parent_span_id
    if parent and len(parent) != 8:
        raise _Unstorable("parent_span_id must be 8 bytes")
    if span.end_time_unix_nano < span.start_time_unix_nano:
        raise _Unstorable("end_time_unix_nano is before start_time_unix_nano")
    _text(span.name, "name")
    _text(span.status.message, "status.message")
    item: dict[str, Any] = {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": parent.hex() if parent and any(parent) else None,
        "name": span.name,
        "kind": int(span.kind),
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "status": {"code": int(span.status.code), "message": span.status.message},
        "attributes": _attributes(span.attributes, 0),
        "events": [
            {
                "name": _text(e.name, "events.name"),
                "time_ns": e.time_unix_nano,
                "attributes": _attributes(e.attributes, 0),
            }
            for e in span.events
        ],
        "resource": resource,
        "scope": scope,
    }
    if span.links:
        item["links"] = [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "attributes": _attributes(link.attributes, 0),
            }
            for link in span.links
        ]
    return item


def _attributes(pairs: Any, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in pairs:
        assert isinstance(kv, KeyValue)
        out[_text(kv.key, "attribute key")] = _value(kv.value, depth + 1, kv.key)
    return out


def _value(value: AnyValue, depth: int, key: str) -> Any:
    if depth > MAX_VALUE_DEPTH:
        raise _Unstorable(f"attribute {key!r}: nested deeper than {MAX_VALUE_DEPTH} levels")
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "string_value":
        return _text(value.string_value, f"attribute {key!r}")
    if kind == "double_value":
        if not math.isfinite(value.double_value):
            raise _Unstorable(f"attribute {key!r}: NaN and infinity are not stored")
        return value.double_value
    if kind == "array_value":
        return [_value(v, depth + 1, key) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values, depth)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind)


def _text(text: str, where: str) -> str:
    if "\x00" in text:
        raise _Unstorable(f"{where}: NUL characters are not allowed")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _Unstorable(f"{where}: not valid Unicode") from None
    return text
