"""`evaledger share` (issue 36): make, list and revoke links; bad input exits 2 storing nothing;
after `migrate`, a two-role PostgreSQL app role shares (the key table is made and granted)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from evaledger.api.bootstrap import Settings, build_services
from tests.api.test_cli import Cli
from tests.api.test_operation import TwoRoles
from tests.api.test_operation import two_roles as two_roles  # the fixture
from tests.helpers import bundle, case, event_count

RUNS = ("base", "cand")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path) -> Cli:
    c = Cli(capsys, store_url)
    for key in RUNS:
        data = bundle(key=key)
        data["cases"] = [case("a", 4)]
        path = tmp_path / f"{key}.json"
        path.write_bytes(orjson.dumps(data))
        assert c("import", str(path))[0] == 0
    return c


def test_share_list_and_revoke(cli: Cli) -> None:
    made = cli.json("share", "base", "--expires", "12h", "--base-url", "https://evals.example/")
    assert made["url"].startswith("https://evals.example/share/" + made["link_id"] + ".")
    assert made["page"] == "run" and made["expires_at"] is not None
    pair = cli.json("share", "compare", "base", "cand", "--expires", "never")
    assert pair["page"] == "compare" and len(pair["run_ids"]) == 2 and pair["expires_at"] is None
    code, out, err = cli("share", "base")
    assert code == 0 and out.startswith("http://127.0.0.1:8000/share/") and "read-only" in err
    listed = cli.json("share", "list")["data"]
    assert [s["state"] for s in listed] == ["active"] * 3
    assert all(s["created_by"] == "cli" for s in listed)
    assert not any(made["url"].rsplit(".", 1)[1] in str(s) for s in listed)  # no signature
    assert cli.json("share", "revoke", made["link_id"], "--reason", "oops") == {
        "revoked": made["link_id"]
    }
    after = {s["link_id"]: s for s in cli.json("share", "list")["data"]}
    assert after[made["link_id"]]["state"] == "revoked"
    assert after[made["link_id"]]["revoke_reason"] == "oops"
    assert cli("share", "list", "--project", "nobody", "--json")[1].count("link_id") == 0


def test_bad_share_commands_exit_2_and_store_nothing(cli: Cli) -> None:
    services = build_services(Settings(db=cli.db))
    try:
        before = event_count(services)
    finally:
        services.close()
    for args, named in (
        (("share", "base", "--expires", "3y"), "expires"),
        (("share", "nope"), "nope"),
        (("share", "compare", "base"), "BASELINE"),
        (("share", "base", "cand"), "one RUN"),
        (("share", "revoke"), "LINK_ID"),
        (("share", "revoke", "0123456789abcdef"), "no share link"),
        (("share", "list", "x"), "no argument"),
    ):
        code, _, err = cli(*args)
        assert code == 2 and named in err, (args, err)
    services = build_services(Settings(db=cli.db))
    try:
        assert event_count(services) == before
    finally:
        services.close()


@pytest.mark.postgres
def test_a_two_role_app_role_shares_after_migrate(
    two_roles: TwoRoles, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    owner = Cli(capsys, two_roles.migrator_url)
    assert owner("migrate", "--app-role", two_roles.app_role)[0] == 0
    app = Cli(capsys, two_roles.app_url)
    path = tmp_path / "run.json"
    path.write_bytes(orjson.dumps(bundle(key="shared")))
    assert app("import", str(path))[0] == 0
    made = app.json("share", "shared")
    again = app.json("share", "shared")  # the key made by the first share is read back
    assert made["link_id"] != again["link_id"]
    assert len(app.json("share", "list")["data"]) == 2
