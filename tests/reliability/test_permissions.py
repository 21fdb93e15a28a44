"""Issue 23 item 7: SQLite stores are created 0700/0600; a looser store or key file is reported."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from pathlib import Path

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.errors import ValidationError
from evaledger.domain.store.chain import KEY_ENV
from tests.api.test_serve import EVALEDGER
from tests.conftest import EXAMPLE_BUNDLE

pytestmark = pytest.mark.reliability


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_sqlite_store_is_the_owners_only(tmp_path: Path) -> None:
    build_services(Settings(db=f"sqlite:///{tmp_path}/store/")).close()
    store = tmp_path / "store"
    assert _mode(store) == 0o700
    assert _mode(store / "events.sqlite") == 0o600
    assert _mode(store / "views.sqlite") == 0o600


def test_a_shared_store_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path}/store/"
    build_services(Settings(db=url)).close()
    events = tmp_path / "store" / "events.sqlite"
    events.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="evaledger"):
        build_services(Settings(db=url)).close()
    messages = [r.getMessage() for r in caplog.records]
    assert f"the store file {events} is open to other users (mode 644): chmod 600 {events}" in (
        messages
    )
    events.chmod(0o600)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="evaledger"):
        build_services(Settings(db=url)).close()
    assert not [r for r in caplog.records if "open to other users" in r.getMessage()]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o602, 0o620, 0o666, 0o606])
def test_a_key_file_others_may_read_or_write_is_refused_by_every_command(
    tmp_path: Path, mode: int
) -> None:
    """Issue 29: refused (exit 2, naming the file and its mode), as ssh refuses a private key."""
    url = f"sqlite:///{tmp_path}/store/"
    key = tmp_path / "checkpoint.key"
    key.write_text("3f" * 32)
    key.chmod(0o600)
    build_services(Settings(db=url, checkpoint_key_file=str(key))).close()
    key.chmod(mode)
    env = {k: v for k, v in os.environ.items() if k != "EVALEDGER_DB"}
    env[KEY_ENV] = str(key)
    expected = (
        f"evaledger: error: checkpoint key file '{key}' is open to other users (mode "
        f"0{mode:o}): it must be readable by its owner only (chmod 600 {key})\n"
    )
    commands = [["import", str(EXAMPLE_BUNDLE)], ["verify"]]
    if mode == 0o644:  # the others once: each command opens the store the same way
        commands += [["runs"], ["chain", "adopt", "--reason", "x"], ["token", "list"]]
    for args in commands:
        done = subprocess.run(
            [str(EVALEDGER), *args, "--db", url],
            capture_output=True, text=True, timeout=120, check=False, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert (done.returncode, done.stdout, done.stderr) == (2, "", expected), args
    with pytest.raises(ValidationError, match="is open to other users"):
        build_services(Settings(db=url, checkpoint_key_file=str(key)))
    key.chmod(0o600)
    build_services(Settings(db=url, checkpoint_key_file=str(key))).close()
