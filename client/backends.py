"""Where the client writes and reads: a local store (the ledger in-process) or a server (HTTP).

Both offer the same commands with the same meaning: every write carries a deterministic
idempotency key, so a retried or repeated call stores nothing new, and a refused write raises the
ledger's own typed error (`EvaledgerError` and its subclasses) naming the field.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol
from uuid import UUID

import httpx
import orjson

from evaledger.application import reports, runs
from evaledger.application.compare import compare_runs
from evaledger.application.ingest import ingest_cases
from evaledger.client.services import Services, open_services
from evaledger.domain.bundle import BundleCase, BundleRun, RunBundle
from evaledger.domain.errors import (
    AuthenticationError,
    ClosedRunError,
    ConflictError,
    EvaledgerError,
    IdempotencyConflictError,
    InfrastructureError,
    NotFoundError,
    PermissionDeniedError,
    StateError,
    ValidationError,
)
from evaledger.domain.ledger import Context
from evaledger.domain.spec import RunConfig
from evaledger.projections.queries import RunFilter, RunRow
from evaledger.scoring.comparison import CompareThresholds, RunComparison
from evaledger.scoring.models import CaseScore, RunAggregate

URL_ENV = "EVALEDGER_URL"
TOKEN_ENV = "EVALEDGER_TOKEN"  # noqa: S105 - the variable's name, not a secret
DB_ENV = "EVALEDGER_DB"
ACTOR = "evaledger-client"

CASE_PAGE = 1000
"""Cases per request when reading a run's cases over HTTP (the API's largest page)."""


class Backend(Protocol):
    """The commands and reads the client needs, local or remote."""

    def create_run(self, run: BundleRun, key: str) -> UUID:
        """Create (or find, with the same body) the run; then mark it running."""
        ...

    def record_case(self, run_id: UUID, case: BundleCase, key: str) -> UUID:
        """Open one case with all its facts in one transaction."""
        ...

    def ingest(self, run: BundleRun, cases: Sequence[BundleCase], key: str) -> list[UUID]:
        """Open a batch of cases of the run (created if new) in one transaction; their ids."""
        ...

    def complete_run(self, run_id: UUID, key: str) -> None:
        """Complete the run and seal it over its cases."""
        ...

    def cancel_run(self, run_id: UUID, reason: str, key: str) -> None:
        """Close the run as canceled, with why."""
        ...

    def fail_run(self, run_id: UUID, reason: str, key: str) -> None:
        """Close the run as failed, with why (a run left by an exception)."""
        ...

    def recorded(self, run_id: UUID) -> RunBundle | None:
        """The run as recorded so far (a run bundle), or None when there is no such run."""
        ...

    def run_id_of(self, key: str) -> UUID | None:
        """The id of the run `key` in the default project (a token's own), or None."""
        ...

    def list_runs(self, f: RunFilter) -> list[RunRow]:
        """Runs, newest first."""
        ...

    def find_run(self, run_id: UUID) -> tuple[RunRow, RunAggregate]:
        """A run with its aggregate under its own spec."""
        ...

    def case_scores(self, run_id: UUID) -> list[CaseScore]:
        """Every case of the run scored under the run's own spec, in opening order."""
        ...

    def compare(
        self, baseline: UUID, candidate: UUID, thresholds: CompareThresholds
    ) -> RunComparison:
        """Compare two completed runs."""
        ...

    def rescore(self, run_id: UUID, config: RunConfig) -> dict[str, Any]:
        """The run replayed under another config (no event written)."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


def connect(
    db: str | None = None,
    url: str | None = None,
    token: str | None = None,
    *,
    create: bool = True,
) -> Backend:
    """The backend named by the arguments, else by EVALEDGER_URL / EVALEDGER_DB.

    `url` (or EVALEDGER_URL when no `db` is given) is a server; otherwise a local store, by
    default the CLI's (`sqlite:///.evaledger/`), created unless `create=False` (reads).
    """
    if db is not None and url is not None:
        raise ValidationError("db: give either db= or url=, not both", field="db")
    url = url or (None if db is not None else os.environ.get(URL_ENV) or None)
    if url is not None:
        return HttpBackend(url, token if token is not None else os.environ.get(TOKEN_ENV))
    try:
        return LocalBackend(open_services(db, create=create))
    except ValidationError as e:
        # The store URL's own check speaks of the CLI's `--db`: here it is the `db` argument.
        raise ValidationError(str(e).replace("--db: ", "db: ", 1), field=e.field) from None


# ---------------------------------------------------------------------------------------------
# local store


class LocalBackend:
    """The ledger in this process. Thread-safe: the ledger retries concurrent writers."""

    def __init__(self, services: Services) -> None:
        self.services = services
        # Inline projections catch up under their own lock; one sync at a time keeps the
        # SQLite read models from seeing two catch-ups race for the same positions.
        self._sync_lock = threading.Lock()

    def _ctx(self, key: str) -> Context:
        return Context(actor=ACTOR, idempotency_key=key)

    def create_run(self, run: BundleRun, key: str) -> UUID:
        """Create the run, then mark it running (both idempotent), as the server's two calls."""
        run_id = runs.create_run(self.services, run, self._ctx(key)).id
        runs.start_run(self.services, run_id, self._ctx(f"{key}:start"))
        return run_id

    def record_case(self, run_id: UUID, case: BundleCase, key: str) -> UUID:
        """Open the case with its facts (one transaction)."""
        return runs.record_case(self.services, run_id, case, self._ctx(key)).id

    def ingest(self, run: BundleRun, cases: Sequence[BundleCase], key: str) -> list[UUID]:
        """A batch of cases in one transaction (the use case `POST /ingest` calls)."""
        return list(ingest_cases(self.services, run, cases, self._ctx(key)).case_ids)

    def complete_run(self, run_id: UUID, key: str) -> None:
        """Complete and seal."""
        runs.complete_run(self.services, run_id, self._ctx(key))

    def cancel_run(self, run_id: UUID, reason: str, key: str) -> None:
        """Cancel the run with the reason."""
        runs.cancel_run(self.services, run_id, self._ctx(key), reason)

    def fail_run(self, run_id: UUID, reason: str, key: str) -> None:
        """Fail the run with the reason (RunFailed)."""
        runs.fail_run(self.services, run_id, self._ctx(key), reason)

    def recorded(self, run_id: UUID) -> RunBundle | None:
        """The run exported from its events, or None."""
        return runs.recorded_run(self.services, run_id)

    def run_id_of(self, key: str) -> UUID | None:
        """The run `key` of project "default" (a local store has no token)."""
        return runs.find_run_id(self.services, "default", key)

    def _synced(self) -> Services:
        with self._sync_lock:
            self.services.sync()
        return self.services

    def list_runs(self, f: RunFilter) -> list[RunRow]:
        """Runs, newest first."""
        return reports.list_runs(self._synced(), f).rows

    def find_run(self, run_id: UUID) -> tuple[RunRow, RunAggregate]:
        """A run and its aggregate."""
        services = self._synced()
        return reports.get_run(services, run_id), reports.run_summary(services, run_id).aggregate

    def case_scores(self, run_id: UUID) -> list[CaseScore]:
        """Every case's score."""
        return reports.case_scores(self._synced(), run_id)

    def compare(
        self, baseline: UUID, candidate: UUID, thresholds: CompareThresholds
    ) -> RunComparison:
        """Compare two runs."""
        return compare_runs(self._synced(), baseline, candidate, thresholds)

    def rescore(self, run_id: UUID, config: RunConfig) -> dict[str, Any]:
        """Replay under another config (the answer the server gives)."""
        return runs.rescore_run(self._synced(), run_id, config).to_json()

    def close(self) -> None:
        """Close the store."""
        self.services.close()


# ---------------------------------------------------------------------------------------------
# server

ERRORS: dict[str, type[EvaledgerError]] = {
    cls.code: cls
    for cls in (
        ValidationError,
        NotFoundError,
        ConflictError,
        ClosedRunError,
        IdempotencyConflictError,
        StateError,
        AuthenticationError,
        PermissionDeniedError,
        InfrastructureError,
    )
}
"""The server's error `code` → the same typed error the local store raises."""

RETRY_STATUS = frozenset({429, 502, 503, 504})
ATTEMPTS = 6
BACKOFF_S = 0.2
TIMEOUT_S = 60.0


class HttpBackend:
    """An `evaledger serve` over HTTP (httpx), with a token when the server needs one.

    Every request the client sends is safe to repeat (reads, or writes with an idempotency key),
    so each is retried on a dropped connection, a timeout, 429 or 5xx-unavailable, with jittered
    exponential backoff. (A loop of ten lines: httpx's own transport retries only connection
    attempts, not a 503 or a read timeout.)
    """

    def __init__(self, url: str, token: str | None = None) -> None:
        headers = {"X-Actor": ACTOR}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.url = url.rstrip("/")
        self.token = token
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT_S)

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        key: str | None = None,
        params: Any = None,
    ) -> Any:
        headers = {"content-type": "application/json"} if body is not None else {}
        if key is not None:
            headers["Idempotency-Key"] = key
        content = orjson.dumps(body) if body is not None else None
        for attempt in range(ATTEMPTS):
            last = attempt == ATTEMPTS - 1
            try:
                response = self.http.request(
                    method, path, content=content, headers=headers, params=params
                )
            except httpx.TransportError as e:
                if last:
                    raise InfrastructureError(f"server {self.url} is unreachable: {e}") from None
            else:
                if response.status_code not in RETRY_STATUS or last:
                    return _answer(response)
            time.sleep(random.uniform(0, BACKOFF_S * 2**attempt))  # noqa: S311
        raise AssertionError("unreachable")

    def create_run(self, run: BundleRun, key: str) -> UUID:
        """POST /runs, then /start; a run without a project given is sent without one.

        The server then puts it in the token's project ("default" when serving without tokens)
        and answers its id.
        """
        unset = None if "project" in run.model_fields_set else {"project"}
        written = self._send(
            "POST", "/runs", body=run.model_dump(mode="json", exclude=unset), key=key
        )
        run_id = UUID(written["id"])
        self._send("POST", f"/runs/{run_id}/start", key=f"{key}:start")
        return run_id

    def record_case(self, run_id: UUID, case: BundleCase, key: str) -> UUID:
        """POST /runs/{id}/cases."""
        written = self._send(
            "POST", f"/runs/{run_id}/cases", body=case.model_dump(mode="json"), key=key
        )
        return UUID(written["id"])

    def ingest(self, run: BundleRun, cases: Sequence[BundleCase], key: str) -> list[UUID]:
        """POST /ingest; a run without a project given is sent without one (as `create_run`)."""
        unset = None if "project" in run.model_fields_set else {"project"}
        body = {
            "run": run.model_dump(mode="json", exclude=unset),
            "cases": [c.model_dump(mode="json") for c in cases],
        }
        written = self._send("POST", "/ingest", body=body, key=key)
        return [UUID(i) for i in written["case_ids"]]

    def complete_run(self, run_id: UUID, key: str) -> None:
        """POST /runs/{id}/complete."""
        self._send("POST", f"/runs/{run_id}/complete", key=key)

    def cancel_run(self, run_id: UUID, reason: str, key: str) -> None:
        """POST /runs/{id}/cancel with the reason."""
        self._send("POST", f"/runs/{run_id}/cancel", body={"reason": reason}, key=key)

    def fail_run(self, run_id: UUID, reason: str, key: str) -> None:
        """POST /runs/{id}/fail with the reason."""
        self._send("POST", f"/runs/{run_id}/fail", body={"reason": reason}, key=key)

    def recorded(self, run_id: UUID) -> RunBundle | None:
        """GET /runs/{id}/bundle, or None on 404."""
        try:
            return RunBundle.model_validate(self._send("GET", f"/runs/{run_id}/bundle"))
        except NotFoundError:
            return None

    def token_project(self) -> str:
        """GET /whoami: the token's project ("default" without a token or on an open server)."""
        if not self.token:
            return "default"
        try:
            response = self.http.get("/whoami")
        except httpx.TransportError as e:
            raise InfrastructureError(f"server {self.url} is unreachable: {e}") from None
        if response.status_code == 404:  # a server older than /whoami: its reads say the project
            return "default"
        return str(_answer(response).get("project") or "default")

    def run_id_of(self, key: str) -> UUID | None:
        """GET /runs?key=: the token's project when the server requires tokens."""
        # Without a token the server serves every project: the run's is "default".
        params = {"key": key, "limit": 1, **({} if self.token else {"project": "default"})}
        page = self._send("GET", "/runs", params=params)
        return UUID(page["data"][0]["run_id"]) if page["data"] else None

    def list_runs(self, f: RunFilter) -> list[RunRow]:
        """GET /runs."""
        params = {k: v for k, v in f.model_dump(mode="json").items() if v is not None}
        page = self._send("GET", "/runs", params=params)
        return [RunRow.model_validate(r) for r in page["data"]]

    def find_run(self, run_id: UUID) -> tuple[RunRow, RunAggregate]:
        """GET /runs/{id}."""
        detail = self._send("GET", f"/runs/{run_id}")
        aggregate = RunAggregate.model_validate(detail.pop("aggregate"))
        return RunRow.model_validate(detail), aggregate

    def case_scores(self, run_id: UUID) -> list[CaseScore]:
        """GET /runs/{id}/cases, page by page."""
        return list(self._case_pages(run_id))

    def _case_pages(self, run_id: UUID) -> Iterator[CaseScore]:
        offset = 0
        while True:
            page = self._send(
                "GET", f"/runs/{run_id}/cases", params={"limit": CASE_PAGE, "offset": offset}
            )
            yield from (CaseScore.model_validate(c) for c in page["data"])
            offset += page["count"]
            if page["count"] == 0 or offset >= page["total"]:
                return

    def compare(
        self, baseline: UUID, candidate: UUID, thresholds: CompareThresholds
    ) -> RunComparison:
        """GET /runs/compare (with every case's metric deltas, as the local store gives)."""
        params: dict[str, Any] = {
            "baseline_run_id": str(baseline),
            "candidate_run_id": str(candidate),
            "metric_deltas": "true",
            **{k: v for k, v in thresholds.model_dump().items() if v is not None},
        }
        return RunComparison.model_validate(self._send("GET", "/runs/compare", params=params))

    def rescore(self, run_id: UUID, config: RunConfig) -> dict[str, Any]:
        """POST /runs/{id}/rescore."""
        answer: dict[str, Any] = self._send(
            "POST", f"/runs/{run_id}/rescore", body=config.model_dump(mode="json")
        )
        return answer

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()


def _answer(response: httpx.Response) -> Any:
    """The JSON body of a success, or the server's error raised as the same typed error."""
    body = orjson.loads(response.content) if response.content else None
    if response.is_success:
        return body
    detail = body.get("detail") if isinstance(body, dict) else None
    code = body.get("code") if isinstance(body, dict) else None
    field = body.get("field") if isinstance(body, dict) else None
    if code == "invalid" and field is None and isinstance(body, dict) and body.get("errors"):
        # A request the route's own model refused: name the first field (without "body.").
        loc = [str(x) for x in body["errors"][0].get("loc", ()) if x != "body"]
        field = ".".join(loc) or None
    cls = ERRORS.get(str(code), EvaledgerError)
    if cls is EvaledgerError and response.status_code >= 500:
        cls = InfrastructureError
    raise cls(str(detail or f"HTTP {response.status_code}"), field=field)
