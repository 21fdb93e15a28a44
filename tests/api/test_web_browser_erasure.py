"""An erased case's page in a real headless Chromium (issue 34).

A store that seals payloads is written and one case erased; `evaledger serve` answers on a
loopback port and the case page is read as a person sees it: the erasure named (when, by whom,
why), the text replaced by the erasure's wording, the scores still there, the marker nowhere.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.ledger import Context
from tests.api.test_serve import EVALEDGER, STARTUP_LIMIT_S, call, free_port
from tests.api.test_web_browser import Site, _require_chromium, shot, text
from tests.api.test_web_browser import browser as browser  # the fixtures
from tests.api.test_web_browser import page as page
from tests.domain.test_erasure import MARKER, _bundle, _case_ids

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def erased_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, str, str]]:
    _require_chromium()
    root: Path = tmp_path_factory.mktemp("erasure")
    db = f"sqlite:///{root}/store/"
    services = build_services(Settings(db=db, seal_payloads=True))
    try:
        services.ledger.import_bundle(_bundle("r1"), Context("alice"))
        ids = _case_ids(services)
        services.ledger.erase_case(ids["secret"], Context("dpo"), "deletion request 12")
    finally:
        services.close()
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    port = free_port()
    log = root / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(EVALEDGER), "serve", "--port", str(port), "--db", db],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"serve exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if call(base, "GET", "/health")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"serve did not answer /health:\n{log.read_text()}")
            time.sleep(0.1)
        yield Site(base), str(ids["secret"]), str(ids["other"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def site(erased_site: tuple[Site, str, str]) -> Site:
    return erased_site[0]


def test_the_erased_case_page_names_the_erasure_and_keeps_its_scores(
    erased_site: tuple[Site, str, str], page: Any
) -> None:
    site, secret, other = erased_site
    page.goto(f"{site.base}/ui/cases/{secret}")
    banner = text(page, "#erased-status")
    assert banner.startswith("Personal text erased on") and "by dpo (deletion request 12)" in banner
    body = page.locator("body").inner_text()
    assert MARKER not in body
    assert "[erased on" in body and "by dpo (deletion request 12)]" in body
    # Scored as before: the same verdict as the untouched twin case, shown on the page.
    scored = site.api(f"/cases/{secret}")["score"]
    assert scored["overall_score"] is not None
    assert scored["overall_score"] == site.api(f"/cases/{other}")["score"]["overall_score"]
    assert text(page, '[data-field="passed"]') not in ("", "—")
    shot(page, "case-erased")
    page.goto(f"{site.base}/ui/cases/{other}")
    assert page.locator("#erased-status").count() == 0
    assert "[erased on" not in page.locator("body").inner_text()
