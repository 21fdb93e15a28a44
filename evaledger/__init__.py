"""evaledger: an event-sourced evaluation ledger for LLM and voice-agent evaluations.

The repository keeps its layers as top-level folders (`domain/`, `projections/`, `api/`,
`judging/`, `importers/`, `client/`); the package installs them as `evaledger.domain`,
`evaledger.api`, … so nothing generic lands in a user's site-packages.

`evaledger.run(...)`, `evaledger.open(...)`, the error types and `__version__` are loaded on
first use, so `evaledger --version` imports no more than it needs.
"""

from __future__ import annotations

from importlib import import_module
from pkgutil import extend_path
from typing import TYPE_CHECKING, Any

# A checkout's own `evaledger/` folder may shadow the installed package when Python runs from the
# repository root; extending the path lets `evaledger.domain` and friends resolve either way.
__path__ = extend_path(__path__, __name__)


def installed_version() -> str:
    """The installed distribution's version (`__version__`, read when first asked)."""
    # lazy: importlib.metadata and its scan of the installed distributions cost a CLI command
    # as much as a third of `import pydantic` (start-up, issue 32); only a version needs them
    from importlib import metadata

    try:
        return metadata.version("evaledger")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


if TYPE_CHECKING:
    from evaledger.client import CaseRecorder, Reader, RunRecorder, RunReport, open, run
    from evaledger.domain.errors import (
        AuthenticationError,
        ConflictError,
        EvaledgerError,
        InfrastructureError,
        NotFoundError,
        PermissionDeniedError,
        StateError,
        ValidationError,
    )

_LAZY = {
    "run": "evaledger.client",
    "open": "evaledger.client",
    "RunRecorder": "evaledger.client",
    "CaseRecorder": "evaledger.client",
    "Reader": "evaledger.client",
    "RunReport": "evaledger.client",
    "EvaledgerError": "evaledger.domain.errors",
    "ValidationError": "evaledger.domain.errors",
    "NotFoundError": "evaledger.domain.errors",
    "ConflictError": "evaledger.domain.errors",
    "StateError": "evaledger.domain.errors",
    "InfrastructureError": "evaledger.domain.errors",
    "AuthenticationError": "evaledger.domain.errors",
    "PermissionDeniedError": "evaledger.domain.errors",
}

__all__ = [
    "AuthenticationError",
    "CaseRecorder",
    "ConflictError",
    "EvaledgerError",
    "InfrastructureError",
    "NotFoundError",
    "PermissionDeniedError",
    "Reader",
    "RunRecorder",
    "RunReport",
    "StateError",
    "ValidationError",
    "__version__",
    "open",
    "run",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = version = installed_version()
        return version
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'evaledger' has no attribute {name!r}")
