"""The run use cases called directly (application/runs.py), on SQLite and PostgreSQL.

Import (a bundle, files), a run recorded case by case and closed, baselines, the one spec
resolution, and the rescore (stored by the use case; the read models write nothing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
from sqlalchemy import func, select

from evaledger.api.bootstrap import Services
from evaledger.application import runs
from evaledger.domain.bundle import BundleCase, BundleRun, RunBundle
from evaledger.domain.errors import (
    ConflictError,
    EvaledgerError,
    NotFoundError,
    ValidationError,
)
from evaledger.domain.ledger import Context
from evaledger.domain.metrics import MetricDefinition
from evaledger.domain.spec import RunConfig
from evaledger.domain.spec import resolve_spec as resolve_config
from evaledger.importers.base import Format
from evaledger.projections.queries import ReadModels
from evaledger.projections.tables import rescore_inputs, rescores
from tests.helpers import bundle, case, event_count

CTX = Context(actor="test")


def run_header(key: str = "live-run", **changes: Any) -> BundleRun:
    """The example bundle's run as a live client creates it: no status, no completion."""
    data = bundle(key=key, **changes)["run"]
    for closing in ("status", "completed_at", "reason"):
        data.pop(closing, None)
    return BundleRun.model_validate(data)


def rows(services: Services, table: Any) -> int:
    with services.engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(table)) or 0)


# -- import -----------------------------------------------------------------------------------


def test_import_run_twice_writes_once(store_services: Services) -> None:
    data = RunBundle.model_validate(bundle())
    first = runs.import_run(store_services, data, CTX)
    assert first.events > 0 and first.cases == first.new_cases == len(data.cases)
    again = runs.import_run(store_services, data, CTX)
    assert (again.run_id, again.events, again.new_cases) == (first.run_id, 0, 0)
    store_services.sync()
    assert store_services.reads.get_run(first.run_id).status == "completed"
    assert runs.find_run_id(store_services, "default", data.run.key) == first.run_id


def test_import_files_reads_each_format_and_a_bad_file_stores_nothing(
    store_services: Services, tmp_path: Path
) -> None:
    good = tmp_path / "run.json"
    good.write_bytes(orjson.dumps(bundle(key="from-file")))
    bad = tmp_path / "broken.json"
    bad.write_bytes(orjson.dumps({"format": "evaledger.run-bundle/1", "run": {"key": 3}}))
    with pytest.raises(EvaledgerError):
        runs.import_files(store_services, [good, bad], CTX)
    assert event_count(store_services) == 0
    seen: list[tuple[int, int]] = []
    done = runs.import_files(
        store_services, [good], CTX, run_key="renamed", progress=lambda d, t: seen.append((d, t))
    )
    [imported] = done
    assert (imported.file, imported.format) == (str(good), Format.BUNDLE)
    assert imported.run.run_key == "renamed" and imported.run.events > 0
    assert seen and seen[-1][0] == imported.run.cases
    [again] = runs.import_files(store_services, [good], CTX, run_key="renamed")
    assert (again.run.run_id, again.run.events) == (imported.run.run_id, 0)
    with pytest.raises(ValidationError) as refused:
        runs.import_files(store_services, [good], CTX, from_format="nope")
    assert refused.value.field == "from"


# -- a run recorded case by case --------------------------------------------------------------


def test_a_run_recorded_case_by_case_is_idempotent_and_closes(store_services: Services) -> None:
    s = store_services
    header = run_header()
    created = runs.create_run(s, header, Context(actor="test", idempotency_key="create"))
    assert created.events > 0
    assert runs.create_run(s, header, Context(actor="test", idempotency_key="create")).events == 0
    run_id = created.id
    assert runs.start_run(s, run_id, CTX).events == 1
    one = BundleCase.model_validate(case("one", score=5))
    key = Context(actor="test", idempotency_key="case-one")
    written = runs.record_case(s, run_id, one, key)
    assert written.events > 0
    assert runs.record_case(s, run_id, one, key) == type(written)(written.ids, written.position, 0)
    batch = [BundleCase.model_validate(case(k, score=2)) for k in ("two", "three")]
    assert runs.record_cases(s, run_id, batch, CTX).events > 0
    recorded = runs.recorded_run(s, run_id)
    assert recorded is not None
    assert [c.test_case.key for c in recorded.cases] == ["one", "two", "three"]
    runs.complete_run(s, run_id, CTX)
    s.sync()
    row = s.reads.get_run(run_id)
    assert (row.status, row.case_count) == ("completed", 3)
    # A closed run takes no case and no other close (ClosedRunError is a ConflictError).
    with pytest.raises(ConflictError):
        runs.record_case(s, run_id, BundleCase.model_validate(case("late")), CTX)
    with pytest.raises(ConflictError):
        runs.cancel_run(s, run_id, CTX, "too late")


def test_cancel_and_fail_close_a_run_with_why(store_services: Services) -> None:
    s = store_services
    canceled = runs.create_run(s, run_header("canceled"), CTX).id
    failed = runs.create_run(s, run_header("failed"), CTX).id
    runs.start_run(s, failed, CTX)
    runs.cancel_run(s, canceled, CTX, "Ctrl-C")
    runs.fail_run(s, failed, CTX, "the harness crashed")
    s.sync()
    assert (s.reads.get_run(canceled).status, s.reads.get_run(canceled).reason) == (
        "canceled",
        "Ctrl-C",
    )
    assert s.reads.get_run(failed).reason == "the harness crashed"
    with pytest.raises(NotFoundError):
        runs.fail_run(s, UUID(int=7), CTX, "no such run")
    assert runs.recorded_run(s, UUID(int=7)) is None
    assert runs.find_run_id(s, "default", "no-such-key") is None


def test_a_refused_case_stores_nothing(store_services: Services) -> None:
    s = store_services
    run_id = runs.create_run(s, run_header(), CTX).id
    before = event_count(s)
    bad = case("bad")
    bad["verdicts"][0]["metric_scores"][0]["metric"] = "charm"
    with pytest.raises(ValidationError):
        runs.record_cases(
            s, run_id, [BundleCase.model_validate(case("ok")), BundleCase.model_validate(bad)], CTX
        )
    assert event_count(s) == before


def test_baselines_need_a_reason(store_services: Services) -> None:
    s = store_services
    run_id = runs.import_run(s, RunBundle.model_validate(bundle()), CTX).run_id
    with pytest.raises(ValidationError):
        runs.approve_baseline(s, run_id, CTX)
    runs.approve_baseline(s, run_id, CTX, "the release candidate")
    s.sync()
    row = s.reads.get_run(run_id)
    assert row.baseline
    assert s.reads.baseline(row.agent["name"], row.suite["name"]).run_id == run_id
    runs.revoke_baseline(s, run_id, CTX, "superseded")
    s.sync()
    assert not s.reads.get_run(run_id).baseline


# -- the spec and the rescore -----------------------------------------------------------------


CHARM = MetricDefinition(
    name="charm",
    display_name="Charm",
    description="How charming the agent is.",
    tier="delivery",
    default_weight=1.0,
    score_type="scored",
    rubric="5: charming\n0: not",
    include_in_defaults=False,
)


def test_resolve_spec_reads_the_projects_catalogue(store_services: Services) -> None:
    s = store_services
    config = RunConfig.model_validate({"judge": {"metrics": [{"metric": "charm"}]}})
    with pytest.raises(ValidationError) as unknown:
        runs.resolve_spec(s, config, "acme")
    assert unknown.value.field == "config.judge.metrics[0].metric"
    s.ledger.register_metric(CHARM, CTX, "acme")
    s.sync()
    spec = runs.resolve_spec(s, config, "acme")
    assert [m.metric for m in spec.metrics] == ["charm"]
    with pytest.raises(ValidationError):
        runs.resolve_spec(s, config, "default")  # another project's catalogue
    # Built-in metrics resolve as the rule alone resolves them.
    assert runs.resolve_spec(s, RunConfig(), "acme") == resolve_config(RunConfig())


def test_rescore_run_stores_beside_the_run_and_writes_no_event(store_services: Services) -> None:
    s = store_services
    data = bundle()
    data["cases"] = [case(f"k{i}", score=3 + i % 3) for i in range(6)]
    run_id = runs.import_run(s, RunBundle.model_validate(data), CTX).run_id
    s.sync()
    events = event_count(s)
    config = RunConfig.model_validate({"judge": {"pass_threshold": 85}})
    # The read model alone derives it and writes nothing.
    read = s.reads.rescore(run_id, runs.resolve_spec(s, config))
    assert rows(s, rescores) == 0
    rescored = runs.rescore_run(s, run_id, config)
    assert rescored.to_json() == read.to_json()
    answer = rescored.to_json()
    assert list(answer) == [
        "run_id",
        "spec_id",
        "own_spec_id",
        "before",
        "after",
        "changed_cases",
        "judge_calls",
        "events_written",
    ]
    assert answer["run_id"] == str(run_id) and answer["spec_id"] == rescored.spec_id
    assert answer["changed_cases"], "the stricter threshold fails some case"
    assert rescored["after"]["aggregate"] == rescored.after.model_dump(mode="json")
    assert event_count(s) == events
    [stored] = s.reads.stored_rescores(run_id)
    assert (stored.spec_id, stored.aggregate) == (rescored.spec_id, rescored.after)
    assert s.reads.stored_spec(rescored.spec_id, "default") == rescored.spec
    # The same rescore again replaces its row.
    runs.rescore_run(s, run_id, config)
    assert rows(s, rescores) == 1
    with pytest.raises(NotFoundError):
        runs.rescore_run(s, UUID(int=9), config)
    bad = RunConfig.model_validate({"judge": {"metrics": [{"metric": "charm"}]}})
    with pytest.raises(ValidationError):
        runs.rescore_run(s, run_id, bad)
    assert rows(s, rescores) == 1


def test_the_inputs_a_rescore_builds_are_stored_by_the_use_case(services: Services) -> None:
    data = bundle()
    data["cases"] = [case(f"k{i}", score=2 + i % 4) for i in range(5)]
    run_id = runs.import_run(services, RunBundle.model_validate(data), CTX).run_id
    services.sync()
    with services.engine.begin() as conn:
        conn.execute(rescore_inputs.delete())
    spec = runs.resolve_spec(services, RunConfig.model_validate({"judge": {"pass_threshold": 90}}))
    # A new reader builds them from the facts, and only hands them on.
    read = ReadModels(services.engine).rescore(run_id, spec)
    assert read.built_inputs is not None and rows(services, rescore_inputs) == 0
    # The use case (its reader has no inputs in memory yet) builds them too, and keeps them.
    runs.rescore_under(services, run_id, spec)
    with services.engine.connect() as conn:
        stored = conn.execute(select(rescore_inputs.c.marker, rescore_inputs.c.inputs)).one()
    assert stored.marker == read.built_inputs.marker
    assert stored.inputs == read.built_inputs.inputs.to_bytes()
