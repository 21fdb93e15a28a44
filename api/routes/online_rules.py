"""Online evaluators over HTTP: `/projects/{project}/online/rules` (add, list, disable).

Thin adapters over `application/online_rules.py`. A project token reaches its own project's
rules only (another project answers 404); adding and disabling need the admin scope.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from evaledger.api.deps import ContextDep, ServicesDep
from evaledger.api.responses import created, replayed
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


@router.post(
    "/projects/{project}/online/rules",
    status_code=201,
    responses=replayed(OnlineRuleOut),
    operation_id="add_online_rule",
)
def add_rule(
    project: str, body: OnlineRuleInput, services: ServicesDep, ctx: ContextDep, response: Response
) -> OnlineRuleOut:
    """Record a new online evaluator of the project (admin scope).

    The same rule sent again is 200 (nothing written); another rule under a used name is 409.
    """
    added = add_online_rule(services, project, body, ctx)
    created(response, f"/projects/{project}/online/rules", 1 if added.created else 0)
    return added.rule


@router.get("/projects/{project}/online/rules", operation_id="list_online_rules")
def list_rules(project: str, services: ServicesDep, ctx: ContextDep) -> OnlineRulePage:
    """The project's online evaluators, enabled and disabled, with who changed them and when."""
    return list_online_rules(services, project, ctx)


@router.post("/projects/{project}/online/rules/{name}/disable", operation_id="disable_online_rule")
def disable_rule(
    project: str, name: str, body: RuleDisable, services: ServicesDep, ctx: ContextDep
) -> OnlineRuleOut:
    """Disable a rule (admin scope): it samples no more traces; its history stays."""
    return disable_online_rule(services, project, name, body.reason, ctx)
