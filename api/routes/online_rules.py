"""Online evaluators over HTTP: `/projects/{project}/online/rules` (add, list, disable).

Thin adapters over `application/online_rules.py`. A project token reaches its own project's
rules only (another project answers 404); adding and disabling need the admin scope.
"""

from __future__ import annotations

from fastapi import APIRouter

from evaledger.api.deps import ContextDep, ServicesDep
from evaledger.application.online_rules import (
    OnlineRuleInput,
    OnlineRuleOut,
    OnlineRulePage,
    add_online_rule,
    disable_online_rule,
    list_online_rules,
)
from evaledger.domain.model import FrozenModel

router = APIRouter(tags=["online"])


class RuleDisable(FrozenModel):
    """POST …/disable: why (optional, recorded)."""

    reason: str | None = None


@router.post("/projects/{project}/online/rules", status_code=201, operation_id="add_online_rule")
def add_rule(
    project: str, body: OnlineRuleInput, services: ServicesDep, ctx: ContextDep
) -> OnlineRuleOut:
    """Record a new online evaluator of the project (admin scope); 409 when the name is used."""
    return add_online_rule(services, project, body, ctx)


@router.get("/projects/{project}/online/rules", operation_id="list_online_rules")
def list_rules(project: str, services: ServicesDep, ctx: ContextDep) -> OnlineRulePage:
    """The project's online evaluators, enabled and disabled, with who changed them and when."""
    return list_online_rules(services, project, ctx)


@router.post(
    "/projects/{project}/online/rules/{name}/disable", operation_id="disable_online_rule"
)
def disable_rule(
    project: str, name: str, body: RuleDisable, services: ServicesDep, ctx: ContextDep
) -> OnlineRuleOut:
    """Disable a rule (admin scope): it samples no more traces; its history stays."""
    return disable_online_rule(services, project, name, body.reason, ctx)
