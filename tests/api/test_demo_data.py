"""The demo data in `api/demo/` is source: the JSON files are held here, not rebuilt by a script.

Each demo file validates as a run bundle against the published schema, loads into a fresh store
with the figures the demo shows, and keeps the run keys, run ids and case keys that the README,
the web tests and people's bookmarks rely on. The one generated demo file (`governance.json`) is
rebuilt from `scripts/build_governance_demo.py` and compared byte for byte.
"""

from __future__ import annotations

import hashlib
import importlib.util
from importlib import resources
from pathlib import Path
from types import ModuleType
from uuid import UUID

import orjson

from evaledger.api.bootstrap import Services
from evaledger.api.demo import BUNDLES, REPLIES, demo_bundles
from evaledger.application.demo import DEMO_TRACES, send_demo_traces
from evaledger.domain.aggregates import run_id_for
from evaledger.domain.bundle import RunBundle
from evaledger.domain.events import TranscriptRecorded
from evaledger.domain.ledger import Context
from evaledger.judging.providers import REPLAY_FORMAT
from tests.conftest import FIXTURES
from tests.domain.test_schema import validate

DEMO = resources.files("evaledger.api.demo")
ROOT = Path(__file__).resolve().parents[2]
GOVERNANCE_SCRIPT = ROOT / "scripts" / "build_governance_demo.py"
PEERS = FIXTURES / "peers"
TAU_TASKS = {
    1: "airline-return-flight-change-or-cancel",
    12: "airline-cancel-basic-economy-refund",
    41: "airline-cancel-claimed-recent-booking",
}
"""tau-bench task → the demo case that replays its trials (repetition = trial)."""

# file → (run key, run id, cases, sha256 of the case keys `key#repetition` in file order)
RUNS = {
    "customer-service.baseline.json": (
        "cs-agent-v1-nightly-2026-09-14",
        "80188992-7196-5a5c-b6a6-40abc160876f",
        29,
        "70a21ee51f15a7a9",
    ),
    "customer-service.candidate.json": (
        "cs-agent-v2-pr-218-2026-09-15",
        "7f8409ac-89f3-5b9d-b470-592afad43e9e",
        30,
        "7d203b5df4b37109",
    ),
    "governance.json": (
        "governance-audit-2026-11-01",
        "cc564725-3013-546f-afa3-fb705ec44f4d",
        110,
        "f0cc7400dd90de6d",
    ),
}
BASELINE_KEYS = [
    "airline-cancel-basic-economy-refund",
    "airline-cancel-claimed-recent-booking",
    "airline-return-flight-change-or-cancel",
    "analytics-dashboard-no-data",
    "bulk-data-export-request",
    "dan-jailbreak",
    "duplicate-charge-refund",
    "edge-case-empty-context",
    "multi-turn-escalation",
    "normal-refund-request",
    "password-reset",
    "password-reset-first-reply",
    "payment-method-update",
    "plan-limits-upsell",
    "plan-upgrade-question",
    "prompt-injection-admin-password",
    "recurring-charge-escalation",
    "red-team-jailbreak-attempt",
    "subscription-cancel",
    "tool-heavy-order-management",
]


def case_keys(bundle: RunBundle) -> list[str]:
    return [f"{c.test_case.key}#{c.repetition}" for c in bundle.cases]


def load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_governance_demo", str(path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_ships_every_json_file_it_names() -> None:
    shipped = sorted(p.name for p in DEMO.iterdir() if p.name.endswith(".json"))
    assert shipped == sorted([*BUNDLES, REPLIES])
    assert list(RUNS) == list(BUNDLES)


def test_every_demo_bundle_validates_against_the_published_schema() -> None:
    for name in BUNDLES:
        data = orjson.loads(DEMO.joinpath(name).read_bytes())
        validate(data)
        assert RunBundle.model_validate(data).format == "evaledger.run-bundle/1"


def test_the_demo_runs_keep_their_keys_and_ids() -> None:
    for name, bundle in zip(BUNDLES, demo_bundles(), strict=True):
        key, run_id, cases, keys_digest = RUNS[name]
        assert bundle.run.key == key
        assert str(run_id_for(bundle.run.project, bundle.run.key)) == run_id
        assert len(bundle.cases) == cases
        assert hashlib.sha256("\n".join(case_keys(bundle)).encode()).hexdigest()[:16] == (
            keys_digest
        ), f"{name}: a case key or repetition changed"
    baseline, candidate, governance = demo_bundles()
    assert sorted({c.test_case.key for c in baseline.cases}) == BASELINE_KEYS
    assert sorted({c.test_case.key for c in candidate.cases}) == sorted(
        [*BASELINE_KEYS, "residential-duct-cleaning-happy-path"]
    )
    assert sorted({str(c.test_case.test_id) for c in governance.cases}) == [
        "B01", "B02", "B04", "B07", "B08", "B09", "B10", "B19", "B23", "B24", "B25",
    ]  # fmt: skip


def test_the_demo_loads_from_its_files_with_the_figures_it_shows(services: Services) -> None:
    loaded = [services.ledger.import_bundle(b, Context(actor="demo")) for b in demo_bundles()]
    assert [(r.cases, r.events) for r in loaded] == [(29, 108), (30, 114), (110, 333)]
    services.sync()
    baseline, candidate = (services.reads.summary(r.run_id).aggregate for r in loaded[:2])
    assert (baseline.passed_count, baseline.failed_count, baseline.error_count) == (14, 14, 1)
    assert (candidate.passed_count, candidate.failed_count, candidate.error_count) == (18, 11, 1)
    assert (baseline.pass_rate, candidate.pass_rate) == (14 / 29, 0.6)
    again = [services.ledger.import_bundle(b, Context(actor="demo")) for b in demo_bundles()]
    assert [r.events for r in again] == [0, 0, 0]


def test_the_replay_judge_has_one_reply_per_judged_baseline_case() -> None:
    replies = orjson.loads(DEMO.joinpath(REPLIES).read_bytes())
    assert replies["format"] == REPLAY_FORMAT
    assert replies["judge"] == "demo:synthetic-judge"
    baseline = demo_bundles()[0]
    judged = [c for c in baseline.cases if c.verdicts]
    assert list(replies["replies"]) == [f"{c.test_case.key}#{c.repetition}" for c in judged]
    for case in judged:
        reply = orjson.loads(replies["replies"][f"{case.test_case.key}#{case.repetition}"]["text"])
        metrics = [m.metric for m in case.verdicts[0].metric_scores]
        assert [k for k in reply if k != "expected_outcomes"] == metrics


def test_the_governance_demo_is_what_its_script_builds() -> None:
    built = load_script(GOVERNANCE_SCRIPT).render()
    assert DEMO.joinpath("governance.json").read_bytes() == built, (
        "api/demo/governance.json is stale: run `.venv/bin/python scripts/build_governance_demo.py`"
    )


def test_the_airline_verdicts_agree_with_tau_bench_rewards() -> None:
    records = orjson.loads((PEERS / "tau-bench" / "gpt-4o-airline.tasks-1-12-41.json").read_bytes())
    reward = {(TAU_TASKS[r["task_id"]], r["trial"]): r["reward"] for r in records}
    for bundle in demo_bundles()[:2]:
        airline = [c for c in bundle.cases if (c.test_case.key, c.repetition) in reward]
        judged = [c for c in airline if c.verdicts]
        assert len(airline) == 12 and len(judged) >= 11  # the candidate errs once
        for case in judged:
            outcomes = case.verdicts[0].expected_outcomes or []
            assert outcomes, case.test_case.key
            passed = all(o.passed for o in outcomes)
            assert passed == (reward[case.test_case.key, case.repetition] == 1.0), (
                f"{bundle.run.key}: {case.test_case.key}#{case.repetition} disagrees with the reward"
            )


def test_the_demo_sends_its_traces_through_the_opentelemetry_sdk_once(services: Services) -> None:
    first = send_demo_traces(services)
    assert (first.sent, first.spans_recorded, first.cases_recorded) == (4, 8, 4)
    assert first.run_key == "online/demo-support-bot/1.0.0/2025-11-24"
    again = send_demo_traces(services)
    assert (again.spans_recorded, again.cases_recorded, again.run_id) == (0, 0, first.run_id)
    run = services.ledger.get_run(UUID(first.run_id))
    transcripts = [
        [
            (t.role.value, t.content)
            for e in services.ledger.events_of(c)
            if isinstance(e, TranscriptRecorded)
            for t in e.turns
        ]
        for c in run.case_ids
    ]
    assert transcripts == [[("user", q), ("assistant", a)] for q, a in DEMO_TRACES]
