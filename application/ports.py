"""What a use case is given: the wired store (built by the composition root, `api/bootstrap.py`).

A structural type, so the application layer names what it uses of the composition without
importing it (the API layer sits above this one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from evaledger.domain.ledger import Ledger
    from evaledger.projections.queries import ReadModels
    from evaledger.projections.reports import Reports


class Services(Protocol):
    """A ledger (commands, the log), the read models (queries) and the reports over one store."""

    @property
    def ledger(self) -> Ledger:
        """The ledger: the domain's named commands and the log."""

    @property
    def reads(self) -> ReadModels:
        """The read models (read-only queries)."""

    @property
    def reports(self) -> Reports:
        """Comparisons, grades and roll-ups over the read models."""

    @property
    def job_queue(self) -> Any:
        """The durable judge-job queue (PostgreSQL), or None."""

    def sync(self, position: int | None = None) -> None:
        """Make reads reflect writes up to `position` (or everything written so far)."""
