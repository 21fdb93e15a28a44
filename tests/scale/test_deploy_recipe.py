"""docs/deploy.md's backup and restore recipe runs as written (on the test PostgreSQL)."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from evaledger.api.bootstrap import Settings, build_services
from evaledger.domain.bundle import RunBundle
from evaledger.domain.ledger import Context
from tests.api.test_serve import EVALEDGER
from tests.conftest import drop_pg_database
from tests.helpers import bundle

DEPLOY = Path(__file__).parents[2] / "docs" / "deploy.md"


def recipe(section: str) -> list[str]:
    """The command lines of the first `sh` block after a heading."""
    text = DEPLOY.read_text()
    block = re.search(rf"## {section}\n.*?```sh\n(.*?)```", text, re.S)
    assert block is not None, section
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.postgres
def test_backup_and_restore_then_verify_as_documented(pg_url: str, tmp_path: Path) -> None:
    services = build_services(Settings(db=pg_url))
    try:
        services.ledger.import_bundle(RunBundle.model_validate(bundle()), Context())
    finally:
        services.close()
    source = pg_url.rsplit("/", 1)[1]
    restored = f"evaledger_t_{uuid.uuid4().hex[:12]}"
    lines = recipe("Backup and restore")
    assert lines[0] == "export PGHOST=db PGPORT=5432 PGUSER=evl_migrator"
    env = os.environ | {"PGHOST": "127.0.0.1", "PGPORT": "5432", "PGUSER": "postgres"}
    env["PATH"] = f"{EVALEDGER.parent}:{env['PATH']}"
    try:
        for line in lines[1:]:
            command = line.replace(
                "postgresql://evl_migrator@db:5432/", "postgresql://postgres@127.0.0.1:5432/"
            ).replace("evaledger_restored", restored)
            command = re.sub(r"(\.dump) evaledger$", rf"\1 {source}", command)
            result = subprocess.run(
                command,
                shell=True,
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert result.returncode == 0, (command, result.stdout, result.stderr)
        assert result.stdout.startswith("ok: 13 events in 4 aggregates, 1 sealed runs"), (
            result.stdout
        )
    finally:
        drop_pg_database(restored)
