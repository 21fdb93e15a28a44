"""Projects, tokens and who is asking: issue, revoke and list tokens; authenticate a request.

The use cases every entry point calls for a project's access (DESIGN §13): the CLI's `token`
commands, the API's authentication (`api/deps.py`), the web sign-in and its sessions, `/whoami`
and the project's metric catalogue (`/config/...`). The ledger's token commands check the
caller's scope and project (`Context`); a token's secret is returned once, by `issue_token`.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from evaledger.application.ports import Services
from evaledger.domain.events import CaseOpened, RunCreated, TokenScope
from evaledger.domain.kinds import Kind, kind_of
from evaledger.domain.ledger import Context, LedgerApplication, Written
from evaledger.domain.metrics import MetricDefinition
from evaledger.domain.tokens import NewToken, Principal, TokenInfo


@dataclass(frozen=True)
class Tokens:
    """The tokens listed (never a secret), oldest first."""

    data: tuple[TokenInfo, ...]

    @property
    def count(self) -> int:
        """How many are listed."""
        return len(self.data)


@dataclass(frozen=True)
class Identity:
    """Who a request acts as (`GET /whoami`): the token's project, scope and actor."""

    project: str | None
    scope: TokenScope
    actor: str | None


def issue_token(
    services: Services, project: str, scope: TokenScope, name: str | None, ctx: Context
) -> NewToken:
    """Issue a token for one project and scope (admin); its secret is in the result only."""
    return services.ledger.issue_token(project, scope, name, ctx)


def revoke_token(
    services: Services, token_id: str, ctx: Context, reason: str | None = None
) -> Written:
    """Revoke a token (admin): from now on it authenticates nothing."""
    return services.ledger.revoke_token(token_id, ctx, reason)


def list_tokens(services: Services, project: str | None = None) -> Tokens:
    """Every token ever issued (of `project` only, when given), never its secret."""
    tokens = services.ledger.tokens()
    if project is not None:
        tokens = [t for t in tokens if t.project == project]
    return Tokens(tuple(tokens))


def authenticate(services: Services, token: str) -> Principal | None:
    """The principal of a valid, unrevoked bearer token; None for any other string."""
    return services.ledger.authenticate(token)


def session_principal(services: Services, token_id: str) -> Principal | None:
    """The principal of a web session's token, by its public id; None once revoked."""
    return services.ledger.token_principal(token_id)


def who_am_i(principal: Principal) -> Identity:
    """The request's token: its project, scope and actor (the open user: no project, admin)."""
    return Identity(project=principal.project, scope=principal.scope, actor=principal.actor)


def project_of(services: Services, aggregate_id: UUID) -> str | None:
    """The project of a run or a case (None for any other id, or none recorded)."""
    return services.ledger.project_of(aggregate_id)


def aggregate_kind(services: Services, aggregate_id: UUID) -> Kind | None:
    """Whether an id names a run, a case, or neither (from its first event)."""
    return kind_of(services.ledger, aggregate_id)


def available_metrics(services: Services, project: str) -> list[MetricDefinition]:
    """Every registered metric of a project: the built-in ones, then its custom ones."""
    return services.reads.available_metrics(project)


def register_metric(
    services: Services, definition: MetricDefinition, ctx: Context, project: str = "default"
) -> Written:
    """Add a custom metric to a project's catalogue (admin; idempotent)."""
    return services.ledger.register_metric(definition, ctx, project)


@dataclass(frozen=True)
class KeyTopics:
    """What a key completion reads from the log beside the read models (cheap, no ledger)."""

    run_created: str
    case_opened: str
    events_table: str
    """The PostgreSQL events table."""


def key_topics() -> KeyTopics:
    """The topics of a run's and a case's opening events, and the events table's name."""
    return KeyTopics(
        run_created=RunCreated.topic(),
        case_opened=CaseOpened.topic(),
        events_table=f"{LedgerApplication.name}_events",
    )
