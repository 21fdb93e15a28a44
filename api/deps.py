"""FastAPI dependencies: the wired services, the caller's context."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from evaledger.api.bootstrap import Services
from evaledger.domain.ledger import Context


def get_services(request: Request) -> Services:
    """The services built at start-up (lifespan)."""
    services: Services = request.app.state.services
    return services


def get_context(
    request: Request,
    x_actor: Annotated[str | None, Header(description="Who sends the command.")] = None,
    idempotency_key: Annotated[str | None, Header(description="Client idempotency key.")] = None,
) -> Context:
    """Actor and idempotency key of a command."""
    services: Services = request.app.state.services
    return Context(
        actor=x_actor or services.settings.default_actor, idempotency_key=idempotency_key
    )


def get_synced(request: Request) -> Services:
    """Services whose read models reflect every write so far (read-your-writes)."""
    services: Services = request.app.state.services
    services.sync()
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
SyncedDep = Annotated[Services, Depends(get_synced)]
ContextDep = Annotated[Context, Depends(get_context)]
