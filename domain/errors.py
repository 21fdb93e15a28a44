"""Domain errors. The API maps each to one HTTP status in one place (api/errors.py)."""

from __future__ import annotations


class EvaledgerError(Exception):
    """Base of every error the ledger raises on purpose."""

    code = "error"

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class ValidationError(EvaledgerError):
    """Input breaks a rule of the event catalogue or the scoring spec (HTTP 422, CLI exit 2)."""

    code = "invalid"


class NotFoundError(EvaledgerError):
    """A run, case or verdict does not exist (HTTP 404)."""

    code = "not_found"


class ConflictError(EvaledgerError):
    """The command contradicts what is already recorded (HTTP 409)."""

    code = "conflict"


class ClosedRunError(ConflictError):
    """The run is completed or canceled; its cases take no more events but overrides."""

    code = "run_closed"


class IdempotencyConflictError(ConflictError):
    """The same idempotency key was sent before with a different body."""

    code = "idempotency_conflict"


class StateError(EvaledgerError):
    """The request is well-formed but the ledger is in the wrong state for it (HTTP 400)."""

    code = "bad_state"


class InfrastructureError(EvaledgerError):
    """The store is unreachable, locked, missing or corrupt (HTTP 503, CLI exit 3)."""

    code = "store_unavailable"


class AuthenticationError(EvaledgerError):
    """No valid token was presented (HTTP 401)."""

    code = "unauthenticated"


class PermissionDeniedError(EvaledgerError):
    """The token is valid but its project or scope does not allow the request (HTTP 403)."""

    code = "forbidden"
