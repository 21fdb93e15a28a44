"""A run approved as (or withdrawn from being) the baseline of its (agent, suite).

Both are admin commands with a reason (`Ledger.approve_baseline`, `Ledger.revoke_baseline`);
the read side (which run is the baseline) is `application.reports.baseline_run`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from evaledger.application.ports import Services
    from evaledger.domain.ledger import Context, Written


def approve_baseline(
    services: Services, run_id: UUID, ctx: Context, reason: str | None = None
) -> Written:
    """Approve a completed run as the baseline of its (agent, suite); admin, with a reason."""
    return services.ledger.approve_baseline(run_id, ctx, reason)


def revoke_baseline(
    services: Services, run_id: UUID, ctx: Context, reason: str | None = None
) -> Written:
    """Revoke a run's baseline approval; admin, with a reason."""
    return services.ledger.revoke_baseline(run_id, ctx, reason)
