"""Share links in real headless Chromium against `evaledger serve` with tokens required.

A signed-in admin clicks Share on the compare page; a browser with no token and no session
opens the link and sees that comparison; any other path through the link is a 404 and the rest
of the site asks for a sign-in; a forged link is refused; the link stops working once revoked
(`evaledger share revoke`) and a link past its expiry is refused; a link of another project shows
that project's run only, never this one's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from uuid import UUID

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.api.share_key import share_key
from evaledger.application import sharing
from evaledger.domain.events import TokenScope
from evaledger.domain.ledger import Context
from tests.api.test_serve import EVALEDGER, STARTUP_LIMIT_S, free_port
from tests.api.test_web_browser import CHROMIUM, WAIT_LIMIT_MS, _require_chromium, shot
from tests.helpers import bundle, case

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@dataclass
class SharedSite:
    root: Path
    db: str
    env: dict[str, str]
    base: str
    token: str
    runs: dict[str, str]

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [str(EVALEDGER), *args, "--db", self.db],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedSite]:
    _require_chromium()
    root = tmp_path_factory.mktemp("share")
    db = f"sqlite:///{root}/store/"
    env = {k: v for k, v in os.environ.items() if k not in ("EVALEDGER_DB", "EVALEDGER_PUBLIC_URL")}
    s = SharedSite(root, db, env, "", "", {})
    for project, key, score in (
        ("default", "nightly-base", 4),
        ("default", "nightly-cand", 1),
        ("other-team", "other-secret", 3),
    ):
        data = bundle(project=project, key=key, name=f"{key} name")
        data["cases"] = [case("refund", score), case("greeting", 4)]
        path = root / f"{key}.json"
        path.write_text(json.dumps(data))
        s.cli("import", str(path))
    for project in ("default", "other-team"):
        for r in json.loads(s.cli("runs", "--project", project, "--json"))["data"]:
            s.runs[r["run_key"]] = r["run_id"]
    s.token = json.loads(
        s.cli("token", "create", "--project", "default", "--scope", "write", "--name", "ana",
              "--json")
    )["token"]  # fmt: skip
    port = free_port()
    s.base = f"http://127.0.0.1:{port}"
    log = root / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(EVALEDGER), "serve", "--port", str(port), "--db", db],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"serve exited with {proc.returncode}:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(s.base + "/health", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"serve did not answer /health:\n{log.read_text()}")
            time.sleep(0.1)
        yield s
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def chromium(site: SharedSite) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield b
        finally:
            b.close()


def fresh_page(chromium: Any) -> Any:
    """A browser context with no cookie and no token, kept on loopback."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()

    def offline(route: Any) -> None:
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            route.abort()

    page.route("**/*", offline)
    page.set_default_timeout(WAIT_LIMIT_MS)
    return page


def test_a_shared_compare_page_opens_without_a_token_and_nothing_else(
    site: SharedSite, chromium: Any
) -> None:
    owner = fresh_page(chromium)
    owner.goto(site.base + "/ui/")
    owner.wait_for_url("**/ui/signin?**")
    owner.locator("#token").fill(site.token)
    owner.get_by_role("button", name="Sign in").click()
    owner.wait_for_url("**/ui/")
    b, c = site.runs["nightly-base"], site.runs["nightly-cand"]
    owner.goto(site.base + f"/ui/compare?baseline={b}&candidate={c}")
    owner.locator("#share-expires").select_option("1d")
    owner.locator("#share-button").click()
    owner.wait_for_url("**/ui/share")
    link = owner.locator('[data-field="share_url"]').input_value()
    assert link.startswith(site.base + "/share/")
    owner.context.close()

    reader = fresh_page(chromium)
    styles: list[int] = []
    reader.on("response", lambda r: styles.append(r.status) if r.url.endswith(".css") else None)
    response = reader.goto(link)
    assert response.status == 200 and reader.url == link  # no sign-in on the way
    assert reader.locator('[data-field="shared"]').inner_text() == "read-only shared page"
    assert "nightly-base name" in reader.content() and "nightly-cand name" in reader.content()
    assert reader.locator("#case-classes").count() == 1 and styles == [200]
    assert reader.locator("#share-button").count() == 0 and reader.locator("#c-base").count() == 0
    assert reader.evaluate("document.cookie") == ""
    shot(reader, "share-1-compare")
    for other in (link + "/x", link + "/runs", link + f"/ui/runs/{b}"):
        assert reader.goto(other).status == 404, other
    reader.goto(site.base + f"/ui/runs/{b}")
    assert "/ui/signin" in reader.url  # the rest of the site still asks for a sign-in
    assert reader.goto(site.base + f"/runs/{b}").status == 401
    forged = link[:-1] + ("A" if link[-1] != "A" else "B")
    assert reader.goto(forged).status == 404
    link_id = link.rsplit("/", 1)[1].split(".")[0]
    site.cli("share", "revoke", link_id, "--reason", "wrong channel")
    gone = reader.goto(link)
    assert gone.status == 404 and "revoked" in reader.content()
    assert "nightly-base name" not in reader.content()
    reader.context.close()


def test_an_expired_link_and_another_projects_link(site: SharedSite, chromium: Any) -> None:
    services = build_services(Settings(db=site.db))
    try:
        key = share_key(services.engine)
        ledger = services.ledger
        real = ledger.clock
        ledger.clock = lambda: real() - timedelta(hours=3)  # made 3 h ago, for 1 h
        try:
            ctx = Context(actor="ana", project="default", scope=TokenScope.WRITE)
            old = sharing.share_page(
                services, key, "run", [UUID(site.runs["nightly-base"])], ctx, timedelta(hours=1)
            ).path
        finally:
            ledger.clock = real
        theirs = Context(actor="olga", project="other-team", scope=TokenScope.WRITE)
        other = sharing.share_page(
            services, key, "run", [UUID(site.runs["other-secret"])], theirs, None
        ).path
    finally:
        services.close()
    page = fresh_page(chromium)
    expired = page.goto(site.base + old)
    assert expired.status == 404 and "expired" in page.content()
    assert "nightly-base name" not in page.content()
    assert page.goto(site.base + other).status == 200
    assert "other-secret name" in page.content()
    assert "nightly-base" not in page.content() and "nightly-cand" not in page.content()
    shot(page, "share-2-run")
    page.context.close()
