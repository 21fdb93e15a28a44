"""Issue 23 item 6 in a real headless Chromium: a page on another origin cannot write to an open
(token-less) `evaledger serve`, neither by a multipart `fetch` nor by a form post."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.api.test_serve import Server, call
from tests.api.test_web_browser import CHROMIUM, _require_chromium
from tests.conftest import EXAMPLE_BUNDLE

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.reliability]

ATTACK = """<!doctype html><html><body>
<form id="seal" method="post" enctype="application/x-www-form-urlencoded"></form>
<script>
async function attack(target, bundle) {
  const fd = new FormData();
  fd.append("file", new Blob([bundle], {type: "application/json"}), "run.json");
  const r = await fetch(target + "/imports", {method: "POST", body: fd, mode: "no-cors"});
  const j = await fetch(target + "/imports", {
    method: "POST", body: bundle, mode: "no-cors", headers: {"content-type": "text/plain"}});
  return [r.type, j.type];
}
</script></body></html>"""


@pytest.fixture
def attacker_site(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "attacker"
    root.mkdir()
    (root / "index.html").write_text(ATTACK)
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"  # another port: another origin
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_page_on_another_origin_cannot_import_or_post_forms(
    server: Server, attacker_site: str
) -> None:
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = browser.new_page()
            page.goto(f"{attacker_site}/index.html")
            kinds = page.evaluate(
                "([t, b]) => attack(t, b)", [server.base, EXAMPLE_BUNDLE.read_text()]
            )
            assert kinds == ["opaque", "opaque"]  # sent (no preflight); the answer is hidden
            # A cross-origin form post (what sealed a run in the audit), submitted for real.
            with page.expect_navigation():
                page.evaluate(
                    "(t) => { const f = document.getElementById('seal'); "
                    "f.action = t + '/runs'; f.submit(); }",
                    server.base,
                )
            assert "cross_origin" in page.content()
        finally:
            browser.close()
    status, runs = call(server.base, "GET", "/runs")
    assert (status, runs["count"]) == (200, 0)
    log = server.log.read_text()
    assert log.count('"POST /imports HTTP/1.1" 403') == 2, log
    assert '"POST /runs HTTP/1.1" 403' in log
    # The same bundle from a non-browser client (no Origin) is imported: the refusal above was
    # the origin rule, not a bad bundle.
    status, _ = call(server.base, "POST", "/imports", EXAMPLE_BUNDLE.read_bytes())
    assert status == 200
    assert call(server.base, "GET", "/runs")[1]["count"] == 1
