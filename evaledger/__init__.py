"""evaledger: an event-sourced evaluation ledger for LLM and voice-agent evaluations.

The repository keeps its layers as top-level folders (`domain/`, `projections/`, `api/`,
`judging/`, `importers/`); the package installs them as `evaledger.domain`, `evaledger.api`, … so
nothing generic lands in a user's site-packages.
"""

from importlib import metadata
from pkgutil import extend_path

# A checkout's own `evaledger/` folder may shadow the installed package when Python runs from the
# repository root; extending the path lets `evaledger.domain` and friends resolve either way.
__path__ = extend_path(__path__, __name__)

try:
    __version__ = metadata.version("evaledger")
except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"
