"""A long catch-up (the first read after a big import) shows progress on a terminal."""

from __future__ import annotations

import io
import logging

import pytest

from evaledger.api import bootstrap
from evaledger.api.bootstrap import CatchUpProgress, Services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from tests.helpers import bundle


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_long_catch_up_draws_a_bar_on_a_terminal(services: Services) -> None:
    services.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("a"))
    head = services.ledger.position()
    services.runner.page_size = 3
    out = Terminal()
    progress = CatchUpProgress(stream=out, min_events=5)
    try:
        assert services.runner.catch_up(progress=progress) == head
        assert progress._bar is not None
    finally:
        progress.close()
    assert "catching up read models" in out.getvalue()
    assert progress._bar is None


def test_a_short_catch_up_or_no_terminal_shows_nothing(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    services.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("a"))
    services.runner.page_size = 3
    short, plain = Terminal(), io.StringIO()
    quiet = CatchUpProgress(stream=short, min_events=10_000)
    quiet(3, 30)
    quiet(30, 30)
    quiet.close()
    assert short.getvalue() == ""
    with caplog.at_level(logging.INFO, logger=bootstrap.__name__):
        logged = CatchUpProgress(stream=plain, min_events=5)
        assert services.runner.catch_up(progress=logged) == services.ledger.position()
        logged.close()
    assert plain.getvalue() == ""
    assert "events to project" in caplog.text


def test_sync_catches_up_with_progress(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    services.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("a"))
    services.runner.page_size = 3
    seen: list[tuple[int, int]] = []

    class Recording(CatchUpProgress):
        def __call__(self, position: int, target: int) -> None:
            seen.append((position, target))
            super().__call__(position, target)

    monkeypatch.setattr(bootstrap, "CatchUpProgress", Recording)
    services.sync()
    head = services.ledger.position()
    assert seen[-1] == (head, head)
    assert services.runner.position() == head
