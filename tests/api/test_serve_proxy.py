"""Issue 29: signing in through a TLS-terminating proxy (`serve --public-url --forwarded-allow-ips`).

A real `evaledger serve` behind a real TLS proxy on loopback (tests/tls_proxy.py, a certificate
from a test CA made here), spoken to over real HTTPS the way a browser does: the sign-in form,
its POST with the browser's `Origin`, the session cookie, then a page read with it.
"""

from __future__ import annotations

import http.client
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_serve import launch
from tests.tls_proxy import TlsProxy, free_port, tls_proxy


def _issue_admin_token(db: str) -> str:
    services = build_services(Settings(db=db, auth="tokens"))
    try:
        issued = services.ledger.issue_token(
            "team", TokenScope.ADMIN, "proxy", Context(actor="ops")
        )
    finally:
        services.close()
    return issued.token


def _request(
    proxy: TlsProxy,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPSConnection(
        "localhost", proxy.port, context=proxy.client_context, timeout=60
    )
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        found = {k.lower(): v for k, v in response.getheaders()}
        return response.status, found, response.read().decode()
    finally:
        conn.close()


def _sign_in(proxy: TlsProxy, token: str, origin: str) -> tuple[int, dict[str, str], str]:
    status, _, page = _request(proxy, "GET", "/ui/signin?next=/ui/")
    assert status == 200, page
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match is not None
    form = urlencode({"token": token, "csrf_token": match.group(1), "next": "/ui/"})
    return _request(
        proxy,
        "POST",
        "/ui/signin",
        form.encode(),
        {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin},
    )


@pytest.mark.slow
def test_sign_in_through_a_tls_proxy_sets_a_secure_cookie(tmp_path: Path, store_url: str) -> None:
    token = _issue_admin_token(store_url)
    port = free_port()
    public = f"https://localhost:{port}"
    args = (
        *("--public-url", public, "--forwarded-allow-ips", "127.0.0.1"),
        *("--allowed-hosts", "evals.lan,b.lan"),
    )
    with (
        launch(tmp_path, *args, db=store_url) as server,
        tls_proxy(server.base.removeprefix("http://"), port, tmp_path) as proxy,
    ):
        status, headers, page = _sign_in(proxy, token, public)
        assert status == 303, page
        cookie = headers["set-cookie"]
        assert cookie.startswith("evaledger_session=")
        flags = {f.strip().lower() for f in cookie.split(";")[1:]}
        assert {"secure", "httponly", "samesite=strict"} <= flags, cookie
        # The proxy spoke plain HTTP to the server, with its own address as Host.
        assert b"Host: 127.0.0.1:" in proxy.requests[-1]
        session = cookie.split(";")[0]
        status, _, page = _request(proxy, "GET", "/ui/", headers={"Cookie": session})
        assert status == 200, page
        assert "sign in with an API token" not in page
        # A form posted from another site is still refused through the proxy.
        status, _, _ = _sign_in(proxy, token, "https://attacker.example")
        assert status == 403
        # With tokens, the Host allow-list holds too (issue 29): straight to the server.
        auth = {"Authorization": f"Bearer {token}"}
        for host, expected in (("b.lan", 200), ("localhost", 200), ("attacker.example", 421)):
            direct = http.client.HTTPConnection(server.base.removeprefix("http://"), timeout=60)
            try:
                direct.request("GET", "/runs?project=team", headers={**auth, "Host": host})
                assert direct.getresponse().status == expected, host
            finally:
                direct.close()


@pytest.mark.slow
def test_a_public_url_must_be_an_http_origin(tmp_path: Path) -> None:
    import subprocess

    from tests.api.test_serve import EVALEDGER

    done = subprocess.run(
        [
            str(EVALEDGER),
            "serve",
            "--db",
            f"sqlite:///{tmp_path}/store/",
            "--public-url",
            "evals.example.com/app",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "--public-url" in done.stderr
    assert "Traceback" not in done.stderr
