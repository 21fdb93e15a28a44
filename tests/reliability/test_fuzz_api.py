"""Schemathesis against the published OpenAPI: generated requests (valid and not) never get a 5xx.

A real uvicorn server on loopback (one keep-alive session), a bounded number of examples per
operation, on SQLite and PostgreSQL, with a run already stored so the list and report endpoints
answer with data.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
import schemathesis
import uvicorn
from fastapi import FastAPI
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Settings, build_services
from evaledger.api.otlp_errors import OTLP_PATHS, RETRYABLE
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.helpers import bundle

pytestmark = pytest.mark.reliability

MAX_EXAMPLES = 8
NO_INPUT = ["GET /ready", "GET /health"]


@dataclass
class Served:
    app: FastAPI
    base: str
    token: str


@pytest.fixture
def served(store_url: str) -> Iterator[Served]:
    services = build_services(Settings(db=store_url, auth="tokens"))
    try:
        services.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("fixture"))
        # An admin of the seeded project: requests get past authentication into the routes.
        token = services.ledger.issue_token("default", TokenScope.ADMIN, "fuzz", Context("ops"))
        app = create_app(services=services)
        # FastAPI builds the OpenAPI document on first request and caches it; build it here so
        # schemathesis's 10 s read timeout never meets that one-off cost on a loaded machine.
        app.openapi()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30  # a bound on waiting, never an assertion on speed
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield Served(app, f"http://127.0.0.1:{port}", token.token)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    finally:
        services.close()


def otlp_refusal(response: Any) -> Status:
    """An OTLP path's error: a `google.rpc.Status` in the encoding the answer declares.

    `response` is schemathesis' (its headers map lower-cased names to lists of values).
    """
    (media,) = response.headers["content-type"]
    status = Status()
    if media == "application/json":
        json_format.Parse(response.content, status)
    else:
        assert media == "application/x-protobuf", response.headers
        status.ParseFromString(response.content)
    return status


# The server answers in a thread of this process; whatever it draws from the global `random`
# while Hypothesis draws a case looks to Hypothesis like a strategy using `random`, and it warns
# (spuriously, HypothesisWorks/hypothesis#4562: the check compares the global state before and
# after a draw, whichever thread moved it). Seen once, in the negative mode on PostgreSQL.
@pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies"
    ":hypothesis.errors.HypothesisDeprecationWarning"
)
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_gets_a_server_error(served: Served, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{served.base}/openapi.json")
    results = list(schema.get_all_operations())
    operations = [r.ok() for r in results if isinstance(r, Ok)]
    assert len(operations) == len(results), "every operation of the document loads"
    assert len(operations) == sum(len(p) for p in served.app.openapi()["paths"].values())
    session = requests.Session()
    auth = {"Authorization": f"Bearer {served.token}"}
    answered: dict[str, set[int]] = {}

    unbreakable: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def no_server_error(case: Any) -> None:
            response = case.call(session=session, headers=auth)
            answered.setdefault(f"{case.method} {case.path}", set()).add(response.status_code)
            if case.path in OTLP_PATHS and response.status_code >= 400:
                # Every refusal of the OTLP receiver, the shared layers' included: the OTLP
                # specification's Status (`code` its gRPC code, `message` naming the field), 400
                # for bad data (never the API's 422), Retry-After on the retryable ones.
                refusal = otlp_refusal(response)
                assert refusal.code != 0 and refusal.message, response.content
                assert response.status_code != 422
                if response.status_code in RETRYABLE:
                    assert "retry-after" in response.headers
                assert response.status_code < 500 or response.status_code == 503, refusal
                return
            if response.status_code == 503:
                # The store timed out (a loaded machine): an outage answer, not an input failure.
                assert response.json()["code"] == "store_unavailable", response.text
                return
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} → {response.status_code}: "
                f"{response.text[:500]}"
            )
            if response.status_code >= 400:
                error = response.json()
                assert {"detail", "code", "status"} <= set(error), error
                assert error["status"] == response.status_code

        try:
            no_server_error()
        except Unsatisfiable:
            # Nothing to break: an operation without parameters or body has no invalid input.
            assert mode is GenerationMode.NEGATIVE
            unbreakable.append(f"{operation.method.upper()} {operation.path}")
    assert unbreakable == ([] if mode is GenerationMode.POSITIVE else NO_INPUT)
    # The requests reached the routes: not one answered only 401.
    assert len(answered) == len(operations) - len(unbreakable)
    assert [op for op, codes in answered.items() if codes == {401}] == []
    if mode is GenerationMode.POSITIVE:
        succeeded = sorted(op for op, codes in answered.items() if any(c < 300 for c in codes))
        assert {"GET /runs", "GET /health", "GET /config/available-metrics"} <= set(succeeded)
