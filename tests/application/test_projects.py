"""The projects/tokens use cases, called directly on SQLite and PostgreSQL (issue 31)."""

from __future__ import annotations

import pytest

from evaledger.api.bootstrap import Services
from evaledger.application import projects
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import NotFoundError, PermissionDeniedError
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from evaledger.domain.metrics import MetricDefinition, ScoreType, Tier
from evaledger.domain.tokens import OPEN
from tests.helpers import bundle

OWNER = Context(actor="owner")


def _metric(name: str) -> MetricDefinition:
    return MetricDefinition(
        name=name,
        display_name=name.title(),
        description=f"How {name} the agent is.",
        tier=Tier.DELIVERY,
        default_weight=1.0,
        score_type=ScoreType.SCORED,
        rubric="5: always; 0: never",
        include_in_defaults=False,
    )


def test_an_issued_token_authenticates_until_it_is_revoked(store_services: Services) -> None:
    new = projects.issue_token(store_services, "alpha", TokenScope.WRITE, "ci", OWNER)
    principal = projects.authenticate(store_services, new.token)
    assert principal is not None
    assert (principal.project, principal.scope, principal.token_id) == (
        "alpha",
        TokenScope.WRITE,
        new.token_id,
    )
    assert projects.session_principal(store_services, new.token_id) == principal

    written = projects.revoke_token(store_services, new.token_id, OWNER, "rotated")
    assert written.events == 1
    assert projects.authenticate(store_services, new.token) is None
    assert projects.session_principal(store_services, new.token_id) is None
    (listed,) = projects.list_tokens(store_services).data
    assert (listed.token_id, listed.active, listed.revoke_reason) == (
        new.token_id,
        False,
        "rotated",
    )


def test_a_token_is_refused_outside_its_project(store_services: Services) -> None:
    alpha = projects.issue_token(store_services, "alpha", TokenScope.ADMIN, None, OWNER)
    beta = projects.issue_token(store_services, "beta", TokenScope.ADMIN, None, OWNER)
    principal = projects.authenticate(store_services, alpha.token)
    assert principal is not None
    as_alpha = Context.of(principal, "someone")
    # Another project's token does not exist for it, and neither does its catalogue.
    with pytest.raises(NotFoundError):
        projects.revoke_token(store_services, beta.token_id, as_alpha, "not mine")
    with pytest.raises(NotFoundError):
        projects.issue_token(store_services, "beta", TokenScope.READ, None, as_alpha)
    definition = _metric("tone")
    with pytest.raises(PermissionDeniedError):
        projects.register_metric(store_services, definition, as_alpha, "beta")
    # Nor does another project's run.
    imported = store_services.ledger.import_bundle(
        RunBundle.model_validate(bundle(project="beta")), OWNER
    )
    assert projects.project_of(store_services, imported.run_id) == "beta"
    assert projects.aggregate_kind(store_services, imported.run_id) == "run"
    assert projects.authenticate(store_services, beta.token) is not None
    assert projects.authenticate(store_services, alpha.token + "x") is None
    assert projects.authenticate(store_services, "not a token") is None


def test_a_write_token_cannot_issue_tokens(store_services: Services) -> None:
    writer = projects.issue_token(store_services, "alpha", TokenScope.WRITE, None, OWNER)
    principal = projects.authenticate(store_services, writer.token)
    assert principal is not None
    with pytest.raises(PermissionDeniedError):
        projects.issue_token(
            store_services, "alpha", TokenScope.ADMIN, None, Context.of(principal, "x")
        )


def test_tokens_are_listed_by_project(services: Services) -> None:
    a = projects.issue_token(services, "alpha", TokenScope.READ, "reader", OWNER)
    b = projects.issue_token(services, "beta", TokenScope.READ, None, OWNER)
    assert [t.token_id for t in projects.list_tokens(services).data] == [a.token_id, b.token_id]
    only = projects.list_tokens(services, "beta")
    assert (only.count, only.data[0].token_id) == (1, b.token_id)
    assert projects.list_tokens(services, "gamma").count == 0


def test_who_am_i(services: Services) -> None:
    new = projects.issue_token(services, "alpha", TokenScope.READ, "dashboard", OWNER)
    principal = projects.authenticate(services, new.token)
    assert principal is not None
    me = projects.who_am_i(principal)
    assert (me.project, me.scope) == ("alpha", TokenScope.READ)
    assert me.actor == principal.actor and me.actor is not None and "dashboard" in me.actor
    assert projects.who_am_i(OPEN) == projects.Identity(None, TokenScope.ADMIN, None)


def test_a_registered_metric_is_available_in_its_project(store_services: Services) -> None:
    definition = _metric("tone")
    written = projects.register_metric(store_services, definition, OWNER, "alpha")
    assert written.events == 1
    store_services.sync(written.position)
    names = [m.name for m in projects.available_metrics(store_services, "alpha")]
    assert names[-1] == "tone"
    assert "tone" not in [m.name for m in projects.available_metrics(store_services, "beta")]


def test_key_topics_name_the_opening_events() -> None:
    topics = projects.key_topics()
    assert topics.run_created.startswith("evaledger.run.")
    assert topics.case_opened.startswith("evaledger.case.")
    assert topics.events_table.endswith("_events")
