"""Issue 29: `GET /verify?views=1` (a full rebuild of the read models) is admin-only and CSRF-safe.

A read token may verify the log but not ask for the rebuild; in open mode a web page of another
site cannot make the browser ask for it (`Sec-Fetch-Site`, `Origin`, `Referer`), while the
server's own pages, the CLI and scripts (no such headers) still can.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context


def test_views_verification_needs_the_admin_scope(store_services: Services) -> None:
    issued = {
        scope: store_services.ledger.issue_token("default", scope, scope.value, Context("ops"))
        for scope in (TokenScope.READ, TokenScope.ADMIN)
    }
    auth = {s: {"Authorization": f"Bearer {i.token}"} for s, i in issued.items()}
    with TestClient(create_app(services=store_services)) as client:
        refused = client.get("/verify?views=1", headers=auth[TokenScope.READ])
        assert (refused.status_code, refused.json()["code"]) == (403, "forbidden"), refused.text
        assert "admin scope" in refused.json()["detail"]
        assert client.get("/health").json()["verify"] is None  # nothing ran
        assert client.get("/verify", headers=auth[TokenScope.READ]).status_code == 200
        done = client.get("/verify?views=1", headers=auth[TokenScope.ADMIN])
        assert done.status_code == 200, done.text
        assert done.json()["views"] is not None


def test_a_cross_site_page_cannot_trigger_the_rebuild_in_open_mode(
    store_services: Services,
) -> None:
    with TestClient(create_app(services=store_services)) as client:
        for headers in (
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},
            {"Origin": "http://attacker.example"},
            {"Referer": "http://attacker.example/page.html"},
            {"Origin": "null"},
        ):
            got = client.get("/verify?views=1", headers=headers)
            assert got.status_code == 403, (headers, got.text)
            assert "another site" in got.json()["detail"]
        assert client.get("/health").json()["verify"] is None  # nothing ran
        # Without views=1 the check is a read, as before.
        assert client.get("/verify", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200
        for headers in (
            {},  # a script, the CLI
            {"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost"},
            {"Sec-Fetch-Site": "none"},  # typed into the address bar
        ):
            got = client.get("/verify?views=1", headers=headers)
            assert got.status_code == 200, (headers, got.text)
            assert got.json()["views"] is not None
