"""The loopback fake providers (OpenAI and Anthropic wire formats) for the judging CLI tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fake_judges import FakeJudges, serve


@pytest.fixture
def judges(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeJudges]:
    """The fake providers, their URLs and keys in the environment, no price table of the user's."""
    for server in serve():
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("EVALEDGER_JUDGE_PRICES", raising=False)
        yield server
