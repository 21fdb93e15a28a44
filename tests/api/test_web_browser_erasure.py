"""An erased case's page in a real headless Chromium (issue 34).

A store that seals payloads is written and one case erased; `evaledger serve` answers on a
loopback port and the case page is read as a person sees it: the erasure named (when, by whom,
why), the text replaced by the erasure's wording, the scores still there, the marker nowhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.ledger import Context
from tests.api.test_web_browser import Site, _require_chromium, shot, text
from tests.api.test_web_browser import browser as browser  # the fixtures
from tests.api.test_web_browser import page as page
from tests.browser import live_server
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
    with live_server(db, root, env) as base:
        yield Site(base), str(ids["secret"]), str(ids["other"])


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
