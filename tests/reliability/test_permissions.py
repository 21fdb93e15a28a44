"""Issue 23 item 7: SQLite stores are created 0700/0600; a looser store or key file is reported."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from evaledger.api.bootstrap import Settings, build_services

pytestmark = pytest.mark.reliability


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_sqlite_store_is_the_owners_only(tmp_path: Path) -> None:
    build_services(Settings(db=f"sqlite:///{tmp_path}/store/")).close()
    store = tmp_path / "store"
    assert _mode(store) == 0o700
    assert _mode(store / "events.sqlite") == 0o600
    assert _mode(store / "views.sqlite") == 0o600


def test_a_shared_store_and_key_file_are_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path}/store/"
    build_services(Settings(db=url)).close()
    (tmp_path / "store" / "events.sqlite").chmod(0o644)
    key = tmp_path / "checkpoint.key"
    key.write_text("3f" * 32)
    key.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="evaledger"):
        build_services(Settings(db=url, checkpoint_key_file=str(key))).close()
    messages = [r.getMessage() for r in caplog.records]
    assert f"checkpoint key file {key} is open to other users (mode 644): chmod 600 {key}" in (
        messages
    )
    events = tmp_path / "store" / "events.sqlite"
    assert f"the store file {events} is open to other users (mode 644): chmod 600 {events}" in (
        messages
    )
    key.chmod(0o600)
    events.chmod(0o600)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="evaledger"):
        build_services(Settings(db=url, checkpoint_key_file=str(key))).close()
    assert not [r for r in caplog.records if "open to other users" in r.getMessage()]
