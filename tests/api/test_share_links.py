"""Share links (issue 36, item 4) on both stores: a signed, read-only, revocable link to one page.

Served with tokens required: the link opens its page without a token, and nothing else
(another path through it, the API, the other pages, another project); a forged, modified,
revoked or expired link is refused; creation and revocation are events with their author;
a bad request stores nothing. The browser tests (`test_share_links_browser.py`) do the same in
Chromium against `evaledger serve`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.share_key import share_key
from evaledger.application import sharing
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import NotFoundError, PermissionDeniedError, ValidationError
from evaledger.domain.events import ShareLinkCreated, ShareLinkRevoked, TokenScope
from evaledger.domain.ledger import Context
from evaledger.domain.sharing import share_aggregate_id, signature, verify_signature
from evaledger.domain.writes import utcnow
from tests.api.test_web_signin import ORIGIN, csrf_of
from tests.helpers import bundle, case, event_count

OWNER = Context(actor="ops")
ALPHA = Context(actor="alice (token a)", project="alpha", scope=TokenScope.WRITE)


@dataclass
class Shop:
    services: Services
    client: TestClient
    runs: dict[str, str]
    tokens: dict[str, str]

    def share(self, *runs: str, ctx: Context = ALPHA, lasts: timedelta | None = None) -> str:
        page = "run" if len(runs) == 1 else "compare"
        made = sharing.share_page(
            self.services,
            share_key(self.services.engine),
            page,
            [UUID(self.runs[r]) for r in runs],
            ctx,
            lasts,
        )
        return made.path


@pytest.fixture
def shop(store_url: str) -> Iterator[Shop]:
    services = build_services(Settings(db=store_url, auth="tokens"))
    tokens = {
        "alpha": services.ledger.issue_token("alpha", TokenScope.WRITE, "alice", OWNER).token,
        "alpha-read": services.ledger.issue_token("alpha", TokenScope.READ, "rita", OWNER).token,
    }
    try:
        with TestClient(create_app(services=services)) as client:
            runs = {}
            for project, key, score in (
                ("alpha", "alpha-base", 4),
                ("alpha", "alpha-cand", 2),
                ("beta", "beta-secret", 3),
            ):
                data = bundle(project=project, key=key, name=f"{key} name")
                data["cases"] = [case("good", score), case("other", 4)]
                runs[key] = _import(services, data)
            services.sync()
            yield Shop(services, client, runs, tokens)
    finally:
        services.close()


def _import(services: Services, data: dict[str, Any]) -> str:
    return str(services.ledger.import_bundle(RunBundle.model_validate(data), OWNER).run_id)


def test_a_link_opens_its_page_without_a_token_and_nothing_else(shop: Shop) -> None:
    link = shop.share("alpha-base")
    page = shop.client.get(link)
    assert page.status_code == 200, page.text
    assert "alpha-base name" in page.text and 'data-field="shared"' in page.text
    assert "alpha-cand" not in page.text and "beta" not in page.text  # no other run named
    assert 'id="share-button"' not in page.text and "csrf_token" not in page.text
    for other in (
        f"{link}/",
        f"{link}/x",
        f"{link}/../../runs/{shop.runs['alpha-base']}",
        f"{link}/ui/runs/{shop.runs['alpha-cand']}",
        f"{link}/runs",
    ):
        r = shop.client.get(other, follow_redirects=False)
        assert r.status_code in (303, 401, 404), other
        assert "alpha-base name" not in r.text and "good" not in r.text
    # The rest of the site still asks for a token, link or no link.
    assert shop.client.get(f"/runs/{shop.runs['alpha-base']}").status_code == 401
    r = shop.client.get(f"/ui/runs/{shop.runs['alpha-cand']}", follow_redirects=False)
    assert r.status_code == 303 and "/ui/signin" in r.headers["location"]
    compare = shop.client.get(shop.share("alpha-base", "alpha-cand"))
    assert compare.status_code == 200 and "Verdict:" in compare.text
    assert 'id="c-base"' not in compare.text  # no run picker listing the project's runs


def test_a_forged_or_modified_link_is_refused(shop: Shop) -> None:
    link = shop.share("alpha-base")
    other = shop.share("alpha-cand")
    link_id, sig = link.removeprefix("/share/").split(".")
    other_id, other_sig = other.removeprefix("/share/").split(".")
    flipped = sig[:-1] + ("A" if sig[-1] != "A" else "B")
    for forged in (
        f"/share/{link_id}.{flipped}",
        f"/share/{link_id}.{other_sig}",  # another link's signature
        f"/share/{other_id}.{sig}",
        f"/share/{link_id}",
        f"/share/{link_id}.{sig}x",
        f"/share/{'0' * 16}.{sig}",
    ):
        r = shop.client.get(forged)
        assert r.status_code == 404, forged
        assert "alpha-base name" not in r.text
    created = shop.services.ledger.share_link(link_id)
    assert created is not None
    # The signature covers what the link opens: another run, project or expiry breaks it.
    for change in (
        {"run_ids": [UUID(shop.runs["beta-secret"])]},
        {"project": "beta"},
        {"expires_at": utcnow() + timedelta(days=9999)},
    ):
        widened = created.created.model_copy(update=change)
        assert not verify_signature(share_key(shop.services.engine), widened, sig)
    assert signature(b"another store's key" * 2, created.created) != sig


def test_a_link_of_one_project_never_shows_another(shop: Shop) -> None:
    before = event_count(shop.services)
    with pytest.raises(NotFoundError):
        shop.share("beta-secret")  # alpha's writer cannot share beta's run
    with pytest.raises(NotFoundError):
        shop.share("alpha-base", "beta-secret")
    assert event_count(shop.services) == before  # nothing stored
    beta = Context(actor="bob", project="beta", scope=TokenScope.WRITE)
    beta_link = shop.share("beta-secret", ctx=beta)
    alpha_link = shop.share("alpha-base")
    assert "beta-secret name" in shop.client.get(beta_link).text
    assert "beta-secret name" not in shop.client.get(alpha_link).text
    alpha_id = alpha_link.removeprefix("/share/").split(".")[0]
    with pytest.raises(NotFoundError):  # beta cannot revoke (or see) alpha's link
        sharing.revoke_share(shop.services, alpha_id, beta)
    assert [s.project for s in sharing.list_shares(shop.services, "beta")] == ["beta"]


def test_revoked_and_expired_links_stop_working_and_both_are_events(shop: Shop) -> None:
    link = shop.share("alpha-base")
    link_id = link.removeprefix("/share/").split(".")[0]
    assert shop.client.get(link).status_code == 200
    sharing.revoke_share(shop.services, link_id, ALPHA, "sent to the wrong person")
    r = shop.client.get(link)
    assert r.status_code == 404 and "revoked" in r.text
    events = shop.services.ledger.events_of(share_aggregate_id(link_id))
    assert [type(e) for e in events] == [ShareLinkCreated, ShareLinkRevoked]
    assert {e.actor for e in events} == {ALPHA.actor}
    assert isinstance(events[1], ShareLinkRevoked)
    assert events[1].reason == "sent to the wrong person"
    with pytest.raises(Exception, match="already revoked"):
        sharing.revoke_share(shop.services, link_id, ALPHA)
    ledger = shop.services.ledger
    real = ledger.clock
    ledger.clock = lambda: real() - timedelta(hours=2)  # made two hours ago, for one hour
    try:
        old = shop.share("alpha-base", lasts=timedelta(hours=1))
    finally:
        ledger.clock = real
    r = shop.client.get(old)
    assert r.status_code == 404 and "expired" in r.text
    states = {s.link_id: s.state(utcnow()) for s in sharing.list_shares(shop.services, "alpha")}
    assert sorted(states.values()) == ["expired", "revoked"]


def test_bad_requests_are_refused_and_store_nothing(shop: Shop) -> None:
    before = event_count(shop.services)
    read_only = Context(actor="rita", project="alpha", scope=TokenScope.READ)
    with pytest.raises(PermissionDeniedError):
        shop.share("alpha-base", ctx=read_only)
    for bad in ("9y", "0d", "400d", "soon", ""):
        if bad == "":
            continue
        with pytest.raises(ValidationError) as e:
            sharing.expiry(bad)
        assert e.value.field == "expires"
    assert sharing.expiry(None) == timedelta(days=7) and sharing.expiry("never") is None
    with pytest.raises(ValidationError):
        sharing.share_page(
            shop.services, b"k" * 32, "matrix", [UUID(shop.runs["alpha-base"])], ALPHA, None
        )
    case_id = UUID(int=1)
    with pytest.raises(NotFoundError):
        sharing.share_page(shop.services, b"k" * 32, "run", [case_id], ALPHA, None)
    assert event_count(shop.services) == before


def test_the_share_button_makes_a_link_that_opens_without_a_session(shop: Shop) -> None:
    c = shop.client
    form = c.get("/ui/signin?next=/ui/").text
    r = c.post(
        "/ui/signin",
        data={"token": shop.tokens["alpha"], "csrf_token": csrf_of(form), "next": "/ui/"},
        headers=ORIGIN,
        follow_redirects=False,
    )
    assert r.status_code == 303
    run_page = c.get(f"/ui/runs/{shop.runs['alpha-base']}").text
    assert 'id="share-button"' in run_page
    made = c.post(
        "/ui/share",
        data={
            "csrf_token": csrf_of(run_page),
            "page": "run",
            "runs": shop.runs["alpha-base"],
            "expires": "1d",
        },
        headers=ORIGIN,
    )
    assert made.status_code == 200, made.text
    url = re.search(r'data-field="share_url" readonly size="90" value="([^"]+)"', made.text)
    assert url is not None
    path = "/share/" + url.group(1).split("/share/", 1)[1]
    forged = c.post(
        "/ui/share",
        data={"page": "run", "runs": shop.runs["alpha-base"], "expires": "1d"},
        headers=ORIGIN,
    )
    assert forged.status_code == 403  # no CSRF token: nothing made
    assert len(sharing.list_shares(shop.services, "alpha")) == 1
    c.cookies.clear()
    assert c.get(f"/ui/runs/{shop.runs['alpha-base']}", follow_redirects=False).status_code == 303
    opened = c.get(path)
    assert opened.status_code == 200 and "alpha-base name" in opened.text
