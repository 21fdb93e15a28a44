"""A loopback HTTP server speaking the OpenAI Chat Completions and Anthropic Messages wire formats.

Tests script what it answers per request (status, body, headers, delay); by default it answers a
well-formed verdict for whatever schema the request asks for, so the real SDKs, their retries and
timeouts are exercised end to end without the internet.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response


@dataclass
class Answer:
    """One scripted answer: a reply text (wrapped in the wire format) or a raw HTTP answer."""

    text: str | None = None
    status: int = 200
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def well_formed(schema: dict[str, Any], score: int = 4) -> dict[str, Any]:
    """A valid reply for a requested schema: every metric `score` (binary: passed; categorical:
    its first label)."""
    reply: dict[str, Any] = {}
    for name, prop in schema["properties"].items():
        if name == "expected_outcomes":
            reply[name] = []
            continue
        if "label" in prop["properties"]:
            reply[name] = {
                "label": prop["properties"]["label"]["enum"][0],
                "justification": "fits the first label",
                "failure_code": None,
                "turns": [],
            }
        elif "passed" in prop["properties"]:
            reply[name] = {
                "passed": True,
                "justification": "done",
                "failure_code": None,
                "turns": [],
            }
        else:
            reply[name] = {
                "score": score,
                "justification": f"{name} looks fine",
                "failure_code": "" if score >= 3 else "minor_issue",
                "turns": [1],
            }
    return reply


Script = Callable[[str, dict[str, Any]], Answer]
"""(wire format `openai`|`anthropic`, request body) → answer."""


def _schema_of(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    if kind == "openai":
        schema: dict[str, Any] = body["response_format"]["json_schema"]["schema"]
    else:
        schema = body["output_config"]["format"]["schema"]
    return schema


def default_script(kind: str, body: dict[str, Any]) -> Answer:
    """A well-formed verdict, outcomes all passed."""
    reply = well_formed(_schema_of(kind, body))
    if "expected_outcomes" in reply:
        user = body["messages"][-1]["content"]
        section = user.split("Expected outcomes:\n", 1)[1].split("\nAgent system prompt:", 1)[0]
        statements = [
            line.split(". ", 1)[1]
            for line in section.splitlines()
            if line.split(". ", 1)[0].isdigit()
        ]
        reply["expected_outcomes"] = [
            {"statement": s, "passed": True, "justification": "seen"} for s in statements
        ]
    return Answer(text=orjson.dumps(reply).decode())


def malformed_script(kind: str, body: dict[str, Any]) -> Answer:
    """Mode `malformed`: prose instead of JSON (an unparseable reply)."""
    return Answer(text="The agent did fine, I would say 4 out of 5.")


def partial_script(kind: str, body: dict[str, Any]) -> Answer:
    """Mode `partial`: valid JSON with the first metric's block missing."""
    reply = orjson.loads(default_script(kind, body).text or "{}")
    reply.pop(next(iter(reply)))
    return Answer(text=orjson.dumps(reply).decode())


def server_error_script(kind: str, body: dict[str, Any]) -> Answer:
    """Mode `500`: an internal server error on every call."""
    return Answer(status=500, body=b'{"error": {"message": "upstream exploded"}}')


def rate_limited_once(retry_after_s: float = 0.2) -> Script:
    """Mode `429`: the first call is rate limited with `Retry-After`, then every call is ok."""
    seen = {"n": 0}
    lock = threading.Lock()

    def script(kind: str, body: dict[str, Any]) -> Answer:
        with lock:
            seen["n"] += 1
            first = seen["n"] == 1
        if first:
            return Answer(
                status=429,
                body=b'{"error": {"message": "rate limited", "type": "rate_limit"}}',
                headers={"retry-after": str(retry_after_s)},
            )
        return default_script(kind, body)

    return script


def slow_script(delay_s: float) -> Script:
    """Mode `slow`: a well-formed verdict after `delay_s` seconds."""

    def script(kind: str, body: dict[str, Any]) -> Answer:
        answer = default_script(kind, body)
        answer.delay_s = delay_s
        return answer

    return script


MODES: dict[str, Callable[[], Script]] = {
    "ok": lambda: default_script,
    "malformed": lambda: malformed_script,
    "partial": lambda: partial_script,
    "500": lambda: server_error_script,
    "429": rate_limited_once,
    "slow": lambda: slow_script(1.5),
}
"""The provider behaviours tests script by name (issue 22)."""


class FakeJudges:
    """The server; `script` decides each answer, `requests` keeps what was asked."""

    def __init__(self) -> None:
        self.script: Script = default_script
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.times: list[float] = []
        """`time.monotonic()` at each request's arrival (same order as `requests`)."""
        self._lock = threading.Lock()
        self.port = _free_port()
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self._endpoint("openai"))
        self.app.post("/v1/messages")(self._endpoint("anthropic"))
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        config.timeout_graceful_shutdown = 1
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def openai_url(self) -> str:
        """OPENAI_BASE_URL for the SDK."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        """ANTHROPIC_BASE_URL for the SDK."""
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Keys and base URLs of both providers, pointing here."""
        return {
            "OPENAI_API_KEY": "sk-test-openai",
            "OPENAI_BASE_URL": self.openai_url,
            "ANTHROPIC_API_KEY": "sk-test-anthropic",
            "ANTHROPIC_BASE_URL": self.anthropic_url,
        }

    def mode(self, name: str) -> None:
        """Answer every request as mode `name` does (see MODES)."""
        self.script = MODES[name]()

    def calls(self, kind: str | None = None) -> int:
        """Requests received (of one wire format)."""
        return sum(1 for k, _, _ in self.requests if kind is None or k == kind)

    def _endpoint(self, kind: str) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            body = orjson.loads(await request.body())
            with self._lock:
                self.requests.append((kind, body, dict(request.headers)))
                self.times.append(time.monotonic())
            answer = self.script(kind, body)
            if answer.delay_s:
                await asyncio.sleep(answer.delay_s)
            if answer.text is None:
                return Response(
                    content=answer.body or b"{}",
                    status_code=answer.status,
                    headers=answer.headers,
                    media_type="application/json",
                )
            payload = _wire(kind, body, answer.text)
            return Response(
                content=orjson.dumps(payload), status_code=200, media_type="application/json"
            )

        return handle

    def start(self) -> None:
        """Serve until stopped."""
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake judge server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop serving."""
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _wire(kind: str, body: dict[str, Any], text: str) -> dict[str, Any]:
    if kind == "openai":
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1764000000,
            "model": f"{body['model']}-2025-04-14",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500},
        }
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": f"{body['model']}-20250929",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1000, "output_tokens": 250},
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def serve() -> Iterator[FakeJudges]:
    """Start a server for one test and stop it afterwards (use as a fixture body)."""
    server = FakeJudges()
    server.start()
    try:
        yield server
    finally:
        server.stop()
