"""Issue 29: the holes a new audit found, attacked as an attacker would.

Raw SQL on the tables (sqlite3 / psycopg as a superuser with the triggers off, or the two-role
app role), then the product as its users meet it: `evaledger serve` over real HTTP and the CLI
as a subprocess. Every store is SQLite and PostgreSQL, with and without the checkpoint key
where the hole depends on it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from evaledger.api.bootstrap import Services, Settings, build_services
from evaledger.domain.aggregates import Meta
from evaledger.domain.events import TokenScope, TranscriptRecorded
from evaledger.domain.ledger import Context
from evaledger.domain.store.chain import KEY_ENV, link_of
from evaledger.domain.tokens import ApiToken, new_secret, secret_hash, split_token
from tests.api.test_serve import EVALEDGER, STARTUP_LIMIT_S, free_port
from tests.conftest import EXAMPLE_BUNDLE
from tests.integrity_helpers import RawBlock, RawStore

pytestmark = pytest.mark.reliability

KEY = "5a" * 32


@dataclass
class Store:
    """A store with one imported run and a real admin token, written by evaledger."""

    db: str
    key_file: Path | None
    token: str
    tmp: Path

    def env(self) -> dict[str, str]:
        """The environment of a process using this store (the key file when keyed)."""
        env = {k: v for k, v in os.environ.items() if k not in ("EVALEDGER_DB", KEY_ENV)}
        if self.key_file is not None:
            env[KEY_ENV] = str(self.key_file)
        return env

    def services(self) -> Services:
        """In-process services on the store (with the key when keyed)."""
        key = None if self.key_file is None else str(self.key_file)
        return build_services(Settings(db=self.db, checkpoint_key_file=key))

    def cli(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`evaledger ARGS --db DB` as a subprocess."""
        return subprocess.run(
            [str(EVALEDGER), *args, "--db", self.db],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=self.env() if env is None else env,
            cwd=self.tmp,
        )


@pytest.fixture(params=["keyed", "unkeyed"])
def store(request: pytest.FixtureRequest, store_url: str, tmp_path: Path) -> Store:
    key_file = None
    if request.param == "keyed":
        key_file = tmp_path / "checkpoint.key"
        key_file.write_text(KEY + "\n")
        key_file.chmod(0o600)
    s = Store(store_url, key_file, "", tmp_path)
    services = s.services()
    try:
        services.ledger.import_bundle(_example(), Context("alice"))
        s.token = services.ledger.issue_token(
            "default", TokenScope.ADMIN, "ci", Context("admin")
        ).token
    finally:
        services.close()
    return s


def _example() -> Any:
    from evaledger.domain.bundle import RunBundle

    return RunBundle.model_validate_json(EXAMPLE_BUNDLE.read_bytes())


@contextmanager
def raw(store: Store) -> Iterator[RawStore]:
    """The attacker's connection to the tables."""
    services = build_services(Settings(db=store.db))
    r = RawStore(services)
    try:
        yield r
    finally:
        r.close()
        services.close()


@contextmanager
def serving(store: Store) -> Iterator[str]:
    """`evaledger serve` on the store (its key in the environment); yields its base URL."""
    port = free_port()
    log = store.tmp / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(EVALEDGER), "serve", "--host", "127.0.0.1", "--port", str(port), "--db", store.db],
            cwd=store.tmp,
            env=store.env(),
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
                if request(base, "GET", "/health")[0] in (200, 503):
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"serve did not answer /health:\n{log.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def request(
    base: str, method: str, path: str, token: str | None = None, body: Any = None
) -> tuple[int, Any]:
    """One HTTP request; (status, decoded JSON body)."""
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        headers["content-type"] = "application/json"
        data = json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# -- 1. forged tokens ----------------------------------------------------------------------------


def forged_token_row(store: Store) -> tuple[str, Any, bytes, str]:
    """An admin token's `TokenIssued` as evaledger would store it: (token, id, state, topic)."""
    token_id, token = new_secret()
    parts = split_token(token)
    assert parts is not None
    agg = ApiToken.issue(
        token_id,
        Meta(timestamp=datetime.now(UTC), actor="mallory"),
        project="default",
        scope=TokenScope.ADMIN,
        name="forged",
        secret_sha256=secret_hash(parts[1]),
    )
    services = build_services(Settings(db=store.db))
    try:
        stored = services.ledger.app.mapper.to_stored_event(agg.collect_events()[0])
    finally:
        services.close()
    return token, agg.id, stored.state, stored.topic


def _forge(store: Store, where: str) -> str:
    token, oid, state, topic = forged_token_row(store)
    with raw(store) as r:
        if where == "head":
            r.insert_at(0, oid, 1, topic, state)
        elif where == "tail":
            r.insert(oid, 1, topic, state)
        elif where == "tail_with_block":
            # The tail row and a chain block over it, linked to the last block: only the key's
            # signature is missing (a keyed store), or nothing is (an unkeyed one: see below).
            position = r.insert(oid, 1, topic, state)
            last = r.blocks()[-1]
            row = r.row(position)
            from evaledger.domain.events import stored_hash

            link = link_of(last.link, [(position, oid, 1, stored_hash(topic, row.state))])
            blocks = [*r.blocks(), RawBlock(position, position, 1, link, "ab" * 32, False)]
            r.replace_blocks(blocks)
        else:  # an edited secret hash on the real token's own row
            real = split_token(store.token)
            assert real is not None
            row = next(x for x in r.rows() if b'"token_id":"' + real[0].encode() in x.state)
            r.update(row, replace(row, state=row.state.replace(
                secret_hash(real[1]).encode(), secret_hash(split_token(token)[1]).encode()  # type: ignore[index]
            )))  # fmt: skip
            token = f"evl_{real[0]}_{split_token(token)[1]}"  # type: ignore[index]
    return token


def test_a_token_forged_at_the_head_or_the_tail_does_not_authenticate(store: Store) -> None:
    at_head, at_tail = _forge(store, "head"), _forge(store, "tail")
    verified = store.cli("verify")
    assert verified.returncode == 1, verified.stdout  # verify flags them...
    token_id = split_token(store.token)[0]  # type: ignore[index]
    with serving(store) as base:
        # ...and the server refuses them on reads and writes alike.
        for forged in (at_head, at_tail):
            status, body = request(base, "GET", "/runs", forged)
            assert (status, body["status"]) == (401, 401), body
            assert request(base, "POST", "/runs", forged, {"project": "x"})[0] == 401
        # The real token passes (and is then remembered) until it is revoked.
        assert request(base, "GET", "/runs", store.token)[0] == 200
        assert request(base, "GET", "/runs", store.token)[0] == 200
        done = store.cli("token", "revoke", token_id, "--reason", "leaked")
        assert done.returncode == 0, done.stderr
        assert request(base, "GET", "/runs", store.token)[0] == 401


def test_an_edited_token_or_a_forged_signed_commit_does_not_authenticate(store: Store) -> None:
    edited = _forge(store, "edited_hash")
    # Unkeyed, a tail block with a correct link is a valid commit by design (verify passes it
    # too); keyed, it lacks the key's signature.
    signed = _forge(store, "tail_with_block") if store.key_file is not None else None
    verified = store.cli("verify")
    assert verified.returncode == 1, verified.stdout
    with serving(store) as base:
        assert request(base, "GET", "/runs", edited)[0] == 401
        if signed is not None:
            assert request(base, "GET", "/runs", signed)[0] == 401


# -- 2. re-adoption without the key --------------------------------------------------------------


KEYED = pytest.mark.parametrize("store", ["keyed"], indirect=True)
"""Unkeyed, anyone with the database can rebuild an unsigned chain: by design (README)."""


@KEYED
def test_a_chain_emptied_and_re_adopted_without_the_key_fails_a_keyed_verify(
    store: Store,
) -> None:
    with raw(store) as r:  # the attacker: database access, no key
        r.delete(max(row.position for row in r.rows()))  # the token, say
        r.empty_chain()
    keyless = {k: v for k, v in store.env().items() if k != KEY_ENV}
    refused = store.cli("chain", "adopt", "--reason", "legacy", env=keyless)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "evaledger: error: chain adopt: no checkpoint key (EVALEDGER_CHECKPOINT_KEY_FILE): on a "
        "keyed store the adoption must be signed with it; for a store never verified with a "
        "key, pass --unsigned\n"
    )
    adopted = store.cli("chain", "adopt", "--unsigned", "--reason", "legacy", env=keyless)
    assert adopted.returncode == 0, adopted.stderr
    # One legitimate keyed write signs on after it...
    written = store.cli("import", str(EXAMPLE_BUNDLE), "--run-key", "next")
    assert written.returncode == 0, written.stderr
    # ...and the keyed verify refuses the unsigned adoption.
    verified = store.cli("verify", "--full")
    assert verified.returncode == 1, verified.stdout
    assert verified.stdout.startswith(
        "BROKEN at position 1: positions 1–13 (one commit): an adoption without the checkpoint "
        "key's signature"
    ), verified.stdout


@KEYED
def test_a_keyed_adoption_is_signed_and_verifies(store: Store) -> None:
    with raw(store) as r:
        r.empty_chain()
    adopted = store.cli("chain", "adopt", "--reason", "legacy")
    assert adopted.returncode == 0, adopted.stderr
    with raw(store) as r:
        first = r.blocks()[0]
    assert first.adopted and first.mac is not None
    verified = store.cli("verify")
    assert verified.returncode == 0, verified.stdout


# -- 3. a plain verify is full -------------------------------------------------------------------


@KEYED
def test_a_plain_verify_checks_every_event_and_incremental_is_asked_for(store: Store) -> None:
    first = store.cli("verify")  # records its signed checkpoint
    assert first.returncode == 0, first.stdout
    with raw(store) as r:  # an edit before that checkpoint, which nothing later depends on
        row = next(x for x in r.rows() if x.topic == TranscriptRecorded.topic())
        r.update(row, replace(row, state=row.state + b" "))  # same JSON, other bytes
    resumed = store.cli("verify", "--incremental")
    assert resumed.returncode == 0, resumed.stdout
    assert "since the verified checkpoint" in resumed.stdout
    assert "(incremental: a plain `verify` re-checks every event)" in resumed.stdout
    plain = store.cli("verify")
    assert plain.returncode == 1, plain.stdout
    assert plain.stdout.startswith("BROKEN at position "), plain.stdout
    assert "chain link does not match" in plain.stdout, plain.stdout


# -- 4. a chain writers cannot extend --------------------------------------------------------------


def _unsigned_block_as_app_role(app_url: str) -> None:
    """As the two-role app role, without the key: an event and its unsigned chain block."""
    import psycopg

    with psycopg.connect(app_url, autocommit=True) as conn, conn.transaction():
        # In lane 0 at its next position, as the app role may (a row without a lane is refused).
        row = conn.execute(
            "INSERT INTO evaledger_events (originator_id, originator_version, topic, state, "
            "lane, lane_position) SELECT gen_random_uuid(), 1, 'x', '{}', 0, "
            "coalesce(max(lane_position), 0) + 1 FROM evaledger_events WHERE lane = 0 "
            "RETURNING notification_id"
        ).fetchone()
        assert row is not None
        conn.execute(
            "SELECT evaledger_chain_append(%s, %s, 1, %s, NULL, false)",
            (row[0], row[0], "0" * 64),
        )


@pytest.mark.postgres
def test_keyed_writers_exit_3_and_serve_503_after_the_app_role_appends_an_unsigned_block(
    two_roles: Any, tmp_path: Path
) -> None:
    key_file = tmp_path / "checkpoint.key"
    key_file.write_text(KEY)
    key_file.chmod(0o600)
    store = Store(two_roles.app_url, key_file, "", tmp_path)
    owner = Store(two_roles.migrator_url, key_file, "", tmp_path)
    migrated = owner.cli("migrate", "--app-role", two_roles.app_role)
    assert migrated.returncode == 0, migrated.stderr
    assert store.cli("import", str(EXAMPLE_BUNDLE)).returncode == 0
    _unsigned_block_as_app_role(two_roles.app_url)
    written = store.cli("import", str(EXAMPLE_BUNDLE), "--run-key", "next")
    assert (written.returncode, written.stdout) == (3, ""), written.stderr
    assert written.stderr == (
        "evaledger: error: the ledger chain cannot be extended: its last commit is unsigned "
        "although the ledger is signed (written without the checkpoint key), and only the "
        "migration role may sign after it; nothing was written. Run `evaledger verify`\n"
    )
    with serving(store) as base:
        status, body = request(base, "POST", "/runs", None, _example_run())
        assert (status, body["status"], body["code"]) == (503, 503, "store_unavailable"), body
        assert "the ledger chain cannot be extended" in body["detail"]


def _example_run() -> dict[str, Any]:
    data = json.loads(EXAMPLE_BUNDLE.read_bytes())
    run: dict[str, Any] = data["run"]
    return run | {"key": "over-http"}


def test_writers_exit_3_on_a_chain_row_ahead_of_the_log(store: Store) -> None:
    with raw(store) as r:  # a chain row past the log's head, written outside evaledger
        last = r.blocks()[-1]
        r.replace_blocks([*r.blocks(), RawBlock(100, 100, 1, last.link, last.mac, False)])
    written = store.cli("import", str(EXAMPLE_BUNDLE), "--run-key", "next")
    assert (written.returncode, written.stdout) == (3, ""), written.stderr
    assert written.stderr.startswith(
        "evaledger: error: the ledger chain cannot be extended: its last commit ends at "
        "position 100, past the events being written (from position 15): a chain row written "
        "outside evaledger; nothing was written. Run `evaledger verify`\n"
    ), written.stderr
    assert len(written.stderr.splitlines()) == 1


# -- 5. a signature the store cannot check -------------------------------------------------------


@pytest.mark.parametrize("store", ["unkeyed"], indirect=True)
def test_a_forged_signature_on_an_unkeyed_ledger_fails_verify_as_it_stops_writers(
    store: Store,
) -> None:
    with raw(store) as r:  # the attacker signs the last commit with a made-up key
        blocks = r.blocks()
        r.replace_blocks([*blocks[:-1], replace(blocks[-1], mac="ab" * 32)])
        last = blocks[-1]
    written = store.cli("import", str(EXAMPLE_BUNDLE), "--run-key", "next")
    assert (written.returncode, written.stdout) == (3, ""), written.stderr
    assert "the ledger's commits are signed but this process has no checkpoint key" in (
        written.stderr
    )
    verified = store.cli("verify")
    assert verified.returncode == 1, verified.stdout
    assert verified.stdout.startswith(
        f"BROKEN at position {last.first_position}: positions {last.first_position}–"
        f"{last.last_position} (one commit): carries a signature this verify cannot check (no "
        "checkpoint key: set EVALEDGER_CHECKPOINT_KEY_FILE)"
    ), verified.stdout


@pytest.mark.parametrize("store", ["keyed"], indirect=True)
def test_a_signed_ledger_verified_without_its_key_is_not_vouched_for(store: Store) -> None:
    keyless = {k: v for k, v in store.env().items() if k != KEY_ENV}
    assert store.cli("verify").returncode == 0
    verified = store.cli("verify", "--json", env=keyless)
    assert verified.returncode == 1
    report = json.loads(verified.stdout)
    assert (report["ok"], report["keyed"], report["first_broken_position"]) == (False, False, 1)
    assert "carries a signature this verify cannot check" in report["broken"][0]


# -- 7. two roles: migrate makes every table the app role uses ------------------------------------


def _http(
    base: str, method: str, path: str, headers: dict[str, str], body: bytes | None = None
) -> tuple[int, dict[str, str], str]:
    """One request without following redirects: (status, headers, body text)."""
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


@pytest.mark.postgres
def test_two_roles_the_app_role_signs_in_on_the_web_and_opens_the_job_queue(
    two_roles: Any, tmp_path: Path
) -> None:
    import re
    from urllib.parse import urlencode

    import psycopg

    owner = Store(two_roles.migrator_url, None, "", tmp_path)
    migrated = owner.cli("migrate", "--app-role", two_roles.app_role)
    assert migrated.returncode == 0, migrated.stderr
    app = Store(two_roles.app_url, None, "", tmp_path)
    with (
        psycopg.connect(two_roles.app_url, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("CREATE TABLE probe (x int)")  # the app role has no CREATE right
    created = app.cli("token", "create", "--project", "default", "--scope", "admin")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    with serving(app) as base:
        status, _, page = _http(base, "GET", "/ui/signin?next=/ui/", {})
        assert status == 200
        found = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert found is not None
        form = urlencode({"token": token, "csrf_token": found.group(1), "next": "/ui/"})
        status, headers, text = _http(
            base,
            "POST",
            "/ui/signin",
            {"content-type": "application/x-www-form-urlencoded", "origin": base},
            form.encode(),
        )
        assert status == 303, text[:500]
        cookie = headers["set-cookie"].split(";")[0]
        assert cookie.startswith("evaledger_session=")
        status, _, text = _http(base, "GET", "/ui/", {"cookie": cookie})
        assert status == 200, text[:500]
    # The judge-job queue's tables were made by migrate too: the app role opens the queue.
    from evaledger.api.routes.judging import job_queue

    services = build_services(Settings(db=two_roles.app_url))
    try:
        queue = job_queue(services)
        assert queue is not None
        queue.open()
    finally:
        services.close()
    with psycopg.connect(two_roles.app_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM procrastinate_jobs").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM evaledger_job_reports").fetchone() == (0,)
