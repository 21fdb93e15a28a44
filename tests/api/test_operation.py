"""Operation: the two-role PostgreSQL set-up, failing projections, pools sized per process."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Table

from evaledger.api.app import create_app
from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.api.migrate import migrate_store
from evaledger.domain.bundle import RunBundle
from evaledger.domain.errors import InfrastructureError
from evaledger.domain.events import JudgeVerdictRecorded, VerdictOverridden
from evaledger.domain.ledger import Context
from evaledger.domain.verify import verify
from evaledger.projections.decode import DecodedBatch
from evaledger.projections.projectors import all_projections
from evaledger.projections.runner import ProjectionRunner
from tests.api.test_cli import Cli
from tests.conftest import EXAMPLE_BUNDLE, PG_ADMIN_URL, drop_pg_database, require_postgres
from tests.helpers import bundle

EVALEDGER = Path(sys.executable).with_name("evaledger")


@dataclass
class TwoRoles:
    """A database owned by a migration role, used by an app role."""

    migrator_url: str
    app_url: str
    app_role: str


@pytest.fixture
def two_roles() -> Iterator[TwoRoles]:
    admin = require_postgres()
    suffix = uuid.uuid4().hex[:10]
    migrator, app, db = f"evl_migrator_{suffix}", f"evl_app_{suffix}", f"evaledger_t_{suffix}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{migrator}" LOGIN')
        conn.execute(f'CREATE ROLE "{app}" LOGIN')
        conn.execute(f'CREATE DATABASE "{db}" OWNER "{migrator}"')
    base = admin.rsplit("@", 1)[1].rsplit("/", 1)[0]
    try:
        yield TwoRoles(
            f"postgresql://{migrator}@{base}/{db}", f"postgresql://{app}@{base}/{db}", app
        )
    finally:
        drop_pg_database(db)
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{app}"')
            conn.execute(f'DROP ROLE IF EXISTS "{migrator}"')


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EVALEDGER), *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.postgres
@pytest.mark.reliability
def test_the_app_role_writes_events_but_cannot_alter_them_or_their_guard(
    two_roles: TwoRoles, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(capsys, two_roles.app_url)
    code, out, err = cli("import", str(EXAMPLE_BUNDLE))  # not migrated: no DDL for the app
    assert (code, out) == (3, "")
    assert err.startswith("evaledger: error: PostgreSQL at 127.0.0.1:5432/evaledger_t_")
    assert err.endswith(
        ": this role cannot create or repair the ledger's tables (permission denied for schema "
        "public); run `evaledger migrate` as the database owner\n"
    )
    done = cli("migrate", "--app-role", two_roles.app_role, db=two_roles.migrator_url)
    assert done == (
        0,
        f"migrated: postgresql store at position 0, append-only, granted to {two_roles.app_role}\n"
        "payloads: sealed\n",  # a new store seals (issue 34)
        "",
    )
    # The app role works: imports, projects, reads and verifies...
    assert cli("import", str(EXAMPLE_BUNDLE))[0] == 0
    assert cli.json("runs")["total"] == 1
    code, out, _ = cli("verify")
    assert (code, out.split(",")[0]) == (0, "ok: 13 events in 4 aggregates")
    # ...but can change neither the events, nor the chain, nor the guard.
    with psycopg.connect(two_roles.app_url, autocommit=True) as conn:
        for statement, error in (
            ("UPDATE evaledger_events SET topic = 'x'", "permission denied"),
            ("DELETE FROM evaledger_chain", "permission denied"),
            ("TRUNCATE evaledger_events", "permission denied"),
            ("ALTER TABLE evaledger_events DISABLE TRIGGER ALL", "must be owner"),
            ("DROP TABLE evaledger_events", "must be owner"),
            (
                "CREATE OR REPLACE FUNCTION evaledger_refuse_change() RETURNS trigger "
                "LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
                "permission denied for schema public",
            ),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=error):
                conn.execute(statement)
    # The owner itself is stopped by the trigger (an UPDATE needs an explicit DISABLE first).
    with psycopg.connect(two_roles.migrator_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.RaiseException, match="immutable: UPDATE refused"):
            conn.execute("UPDATE evaledger_events SET topic = 'x'")
        conn.execute("ALTER TABLE evaledger_events DISABLE TRIGGER evaledger_events_immutable_row")
    # A disabled trigger: the app refuses to start (exit 3, one line, no traceback).
    assert cli("runs") == (
        3,
        "",
        "evaledger: error: the events store is not append-only: trigger "
        "evaledger_events_immutable_row on evaledger_events is missing or disabled; refusing "
        "to serve (re-run `evaledger migrate` as the migration role)\n",
    )
    with pytest.raises(InfrastructureError, match="not append-only"):
        build_services(Settings(db=two_roles.app_url))
    # The migration role repairs it; the app serves again.
    migrate_store(Settings(db=two_roles.migrator_url), two_roles.app_role)
    assert cli("runs")[0] == 0


@pytest.mark.postgres
@pytest.mark.reliability
def test_health_answers_503_while_the_trigger_is_disabled(two_roles: TwoRoles) -> None:
    migrate_store(Settings(db=two_roles.migrator_url), two_roles.app_role)
    services = build_services(Settings(db=two_roles.app_url))
    try:
        with TestClient(create_app(services=services)) as client:
            assert client.get("/health").status_code == 200
            with psycopg.connect(two_roles.migrator_url, autocommit=True) as conn:
                conn.execute("ALTER TABLE evaledger_chain DISABLE TRIGGER ALL")
            response = client.get("/health")
            assert response.status_code == 503
            assert response.json() == {
                "detail": "the events store is not append-only: trigger "
                "evaledger_chain_immutable_row on evaledger_chain is missing or disabled; "
                "refusing to serve (re-run `evaledger migrate` as the migration role)",
                "code": "store_unavailable",
                "status": 503,
            }
    finally:
        services.close()


class ExplodingOnOverrides:
    """A read model with a bug: it cannot fold overrides."""

    name: str = "exploding_v1"
    tables: Sequence[Table] = ()

    def process(self, conn: Connection, batch: DecodedBatch) -> None:
        for _, event in batch:
            if event.cls is VerdictOverridden:
                raise ValueError(f"cannot fold {event.data['reason']!r}")

    def reset(self) -> None:
        pass


@pytest.mark.reliability
def test_a_projection_failing_on_one_event_is_reported_and_the_rest_serve(
    store_services: Services,
) -> None:
    s = store_services
    s.runner = ProjectionRunner(s.ledger, s.engine, [*all_projections(), ExplodingOnOverrides()])
    r = s.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("alice"))
    case_id = r.case_ids[0]
    verdict = s.ledger.events_of(case_id)[2]
    assert isinstance(verdict, JudgeVerdictRecorded)
    written = s.ledger.override_verdict(
        case_id, Context("bob"), verdict_id=verdict.verdict_id, passed=True, reason="misread"
    )
    assert written.position == 14
    later = s.ledger.import_bundle(RunBundle.model_validate(bundle(key="later")), Context("a"))
    assert later.position == 27
    with TestClient(create_app(services=s)) as client:
        runs = client.get("/runs").json()
        assert runs["count"] == 2  # the other projections went on past the failure
        health = client.get("/health").json()
    assert health["status"] == "degraded"
    assert health["projections"] == dict.fromkeys(
        (
            "runs_v4",
            "cases_v6",
            "metrics_v1",
            "judge_votes_v1",
            "search_v1",
            "case_times_v1",
            "datasets_v1",
        ),
        27,
    )
    failure = health["projection_failures"]
    assert [(f["name"], f["position"], f["event"], f["error"]) for f in failure] == [
        (
            "exploding_v1",
            14,
            f"VerdictOverridden of {case_id} v5",
            "ValueError: cannot fold 'misread'",
        )
    ]
    # The failed projection stays at the event before; a restart (a new runner) retries it.
    assert s.runner.positions() == dict.fromkeys(
        (
            "runs_v4",
            "cases_v6",
            "metrics_v1",
            "judge_votes_v1",
            "search_v1",
            "case_times_v1",
            "datasets_v1",
        ),
        27,
    )
    retry = ProjectionRunner(s.ledger, s.engine, [*all_projections(), ExplodingOnOverrides()])
    assert retry.failures() == []
    assert retry.positions()["exploding_v1"] == 13


@pytest.mark.postgres
@pytest.mark.reliability
def test_a_cli_process_holds_at_most_two_connections(pg_url: str) -> None:
    services = build_services(Settings(db=pg_url))
    try:
        services.ledger.import_bundle(RunBundle.model_validate(bundle()), Context("alice"))
        services.sync()
        assert verify(services.ledger).ok
        dbname = pg_url.rsplit("/", 1)[1]
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (dbname,)
            ).fetchone()
        assert row == (2,)  # one for the events, one for the read models
    finally:
        services.close()


@pytest.mark.reliability
@pytest.mark.parametrize("damaged", ["events.sqlite", "views.sqlite"])
def test_a_corrupt_sqlite_store_exits_3_with_one_line(tmp_path: Path, damaged: str) -> None:
    store = tmp_path / "store"
    build_services(Settings(db=f"sqlite:///{store}/")).close()
    (store / damaged).write_bytes(b"not a database" * 100)
    done = _cli("runs", "--db", f"sqlite:///{store}/")
    which = {
        "events.sqlite": f"store sqlite:///{store}/ is corrupt",
        "views.sqlite": f"the SQLite read models {store}/views.sqlite is unavailable",
    }[damaged]
    assert (done.returncode, done.stdout, done.stderr) == (
        3,
        "",
        f"evaledger: error: {which}: file is not a database\n",
    )
